//! The websocket protocol between the page and the agent, defined once for both sides.
//!
//! Every message is JSON `{"type": "...", "data": {...}}` (serde `tag`/`content`). The page sends
//! [`ClientMsg`]s, each with a request id `id` that the agent echoes in its reply; the agent sends [`ServerMsg`]s.
//! The first exchange is `hello`: a page whose [`PROTOCOL_VERSION`] differs from the agent's is told so and
//! the socket is closed. See `docs/protocol.md` for an example of every message.

use serde::{Deserialize, Serialize};

pub use crate::version::{LOADSHAPE_VERSION, PROTOCOL_VERSION};

/// Messages from the page to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum ClientMsg {
    /// First message on a socket: the page's protocol version.
    Hello { id: u64, protocol: u32, client: String },
}

/// Messages from the agent to the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum ServerMsg {
    /// Reply to `hello`: the agent's protocol and release.
    Hello {
        id: u64,
        protocol: u32,
        agent_version: String,
    },
    /// A request could not be served; `id` is the request's id (0 when the message could not be parsed).
    Error { id: u64, code: ErrorCode, message: String },
}

/// Machine-readable error kinds; the `message` says what exactly was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadMessage,
    VersionMismatch,
    UnknownTarget,
    UnknownRun,
    InvalidScenario,
    LimitExceeded,
    Internal,
}

impl ServerMsg {
    /// The reply to a `hello` with protocol `client_protocol`: a hello, or a version-mismatch error.
    pub fn answer_hello(id: u64, client_protocol: u32) -> ServerMsg {
        if client_protocol == PROTOCOL_VERSION {
            ServerMsg::Hello {
                id,
                protocol: PROTOCOL_VERSION,
                agent_version: LOADSHAPE_VERSION.to_string(),
            }
        } else {
            ServerMsg::Error {
                id,
                code: ErrorCode::VersionMismatch,
                message: format!(
                    "protocol version mismatch: page speaks {client_protocol}, agent speaks {PROTOCOL_VERSION}; \
                     reload the page the agent serves"
                ),
            }
        }
    }
}
