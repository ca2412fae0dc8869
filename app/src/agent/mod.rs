//! The link to the agent: the websocket ([`ws`]) and the reader of its messages ([`server_msg`]).

pub mod server_msg;
pub mod ws;
