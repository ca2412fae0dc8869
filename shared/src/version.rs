//! Versions defined once, shown by the page and the agent and checked at websocket connect.

/// The websocket protocol version. A page and an agent talk only when these are equal.
pub const PROTOCOL_VERSION: u32 = 1;

/// The loadshape release (the workspace version), used as the agent version in `hello`.
pub const LOADSHAPE_VERSION: &str = env!("CARGO_PKG_VERSION");
