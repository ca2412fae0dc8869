//! Versions defined once, shown by the page and the agent and checked at websocket connect.

/// The websocket protocol version. A page and an agent talk only when these are equal. Bump it with every change
/// of the wire (a message, a field, a meaning):
/// - 2: a run's records are paged (`fetch_records` / `run_records`; `run` no longer carries them), the limits
///   `max_concurrent_requests_per_run` and `max_rate_per_run`, run state `damaged`.
/// - 3: live capacity searches (`start_capacity`; `capacity_started`, `capacity_level`, `capacity_result`), a
///   run's `kind` (absent for a replay).
/// - 4: calibrating a target (`start_calibration`; `calibration_started`, `calibration_progress`,
///   `calibration_result`), run kind `calibration`, a target's kept `profile` in `targets`.
pub const PROTOCOL_VERSION: u32 = 4;

/// The loadshape release (the workspace version), used as the agent version in `hello`.
pub const LOADSHAPE_VERSION: &str = env!("CARGO_PKG_VERSION");
