//! The websocket link to the agent that served the page (`shared::protocol`).
//!
//! [`AgentConn`] holds the connection state as signals the components read (`status`, the agent's version and
//! protocol) and a sender for [`ClientMsg`]s. The connection is opened when the page URL carries a token
//! (`#token=...` or `?token=...`), starts with `hello`, and reconnects with backoff when it drops; every
//! reconnect sends `hello` again and lets the live panel resume its subscriptions (see [`AgentConn::on_message`]).

use std::sync::Arc;
use std::time::Duration;

use futures_channel::mpsc::{UnboundedSender, unbounded};
use futures_util::{SinkExt, StreamExt};
use gloo_net::websocket::{Message, futures::WebSocket};
use leptos::prelude::*;
use leptos::task::spawn_local;
use shared::protocol::{ClientMsg, PROTOCOL_VERSION, ServerMsg};

/// The connection's state, shown in the header as `data-status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The page URL has no token: the page works offline (simulation only).
    NoToken,
    /// First attempt in progress.
    Connecting,
    Connected,
    /// Was connected, lost the socket; reconnecting with backoff.
    Disconnected,
    /// The agent refused us (bad token, foreign origin, version mismatch) or cannot be reached.
    Error,
}

impl Status {
    /// The value of the `data-status` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::NoToken => "offline",
            Status::Connecting => "connecting",
            Status::Connected => "connected",
            Status::Disconnected => "disconnected",
            Status::Error => "error",
        }
    }

    /// Words for the user.
    pub fn label(self) -> &'static str {
        match self {
            Status::NoToken => "no agent",
            Status::Connecting => "connecting…",
            Status::Connected => "agent connected",
            Status::Disconnected => "reconnecting…",
            Status::Error => "agent unreachable",
        }
    }
}

/// Opens the connection. The socket and the decoding of the agent's messages load on demand (a split point, see
/// `crate::other_views`): a page without a token never fetches them.
#[cfg_attr(feature = "split", lazy)]
async fn open(conn: AgentConn) {
    conn.connect(0);
}

type Handler = Arc<dyn Fn(&ServerMsg) + Send + Sync>;
type ConnectHandler = Arc<dyn Fn() + Send + Sync>;

/// The page's side of the agent link. Cheap to copy (signals and stored values only).
#[derive(Clone, Copy)]
pub struct AgentConn {
    pub status: RwSignal<Status>,
    /// The last error or refusal the agent sent, for the user.
    pub message: RwSignal<Option<String>>,
    pub agent_version: RwSignal<Option<String>>,
    pub agent_protocol: RwSignal<Option<u32>>,
    next_id: StoredValue<u64>,
    outbox: StoredValue<Option<UnboundedSender<String>>>,
    handlers: StoredValue<Vec<Handler>>,
    on_connect: StoredValue<Vec<ConnectHandler>>,
    token: StoredValue<Option<String>>,
    /// A refusal that retrying cannot fix (protocol version mismatch).
    fatal: StoredValue<bool>,
}

impl AgentConn {
    /// A connection for the page's token; opens it once `after` resolves, when there is one.
    pub fn start(token: Option<String>, after: impl Future<Output = ()> + 'static) -> AgentConn {
        let conn = AgentConn {
            status: RwSignal::new(if token.is_some() {
                Status::Connecting
            } else {
                Status::NoToken
            }),
            message: RwSignal::new(None),
            agent_version: RwSignal::new(None),
            agent_protocol: RwSignal::new(None),
            next_id: StoredValue::new(1),
            outbox: StoredValue::new(None),
            handlers: StoredValue::new(Vec::new()),
            on_connect: StoredValue::new(Vec::new()),
            token: StoredValue::new(token),
            fatal: StoredValue::new(false),
        };
        if conn.token.get_value().is_some() {
            spawn_local(async move {
                after.await;
                open(conn).await;
            });
        }
        conn
    }

    /// A fresh request id.
    pub fn next_id(&self) -> u64 {
        let id = self.next_id.get_value();
        self.next_id.set_value(id + 1);
        id
    }

    /// Send a message if connected; returns false (and sends nothing) otherwise.
    pub fn send(&self, msg: &ClientMsg) -> bool {
        let Ok(text) = serde_json::to_string(msg) else {
            return false;
        };
        match self.outbox.get_value() {
            Some(tx) if self.status.get_untracked() == Status::Connected => tx.unbounded_send(text).is_ok(),
            _ => false,
        }
    }

    /// Call `f` for every message the agent sends (after `hello` is handled here).
    pub fn on_message(&self, f: impl Fn(&ServerMsg) + Send + Sync + 'static) {
        self.handlers.update_value(|h| h.push(Arc::new(f)));
    }

    /// Call `f` after every successful handshake (first connect and each reconnect), e.g. to resume; and at once when
    /// the handshake is already done: a view whose code loads on demand can register after it (the live view, which
    /// asks for the targets here, would otherwise never list them).
    pub fn on_connect(&self, f: impl Fn() + Send + Sync + 'static) {
        let f: ConnectHandler = Arc::new(f);
        self.on_connect.update_value(|h| h.push(f.clone()));
        if self.status.get_untracked() == Status::Connected {
            f();
        }
    }

    /// Runs every connect handler: after each handshake.
    fn run_connect_handlers(&self) {
        for f in self.on_connect.get_value() {
            f();
        }
    }

    fn connect(self, attempt: u32) {
        let Some(token) = self.token.get_value() else { return };
        let Some(url) = crate::model::url::ws_url(&token) else {
            self.fail("cannot work out the agent's address from this page's URL".to_string());
            return;
        };
        let ws = match WebSocket::open(&url) {
            Ok(ws) => ws,
            Err(e) => {
                self.status.set(Status::Error);
                self.message.set(Some(format!("cannot open the websocket: {e}")));
                self.retry(attempt + 1);
                return;
            }
        };
        let (mut write, mut read) = ws.split();
        let (tx, mut rx) = unbounded::<String>();
        // The write half lives in its own task for as long as the channel is open (dropping it closes the socket).
        spawn_local(async move {
            while let Some(text) = rx.next().await {
                if write.send(Message::Text(text)).await.is_err() {
                    break;
                }
            }
        });
        let hello = ClientMsg::Hello {
            id: self.next_id(),
            protocol: PROTOCOL_VERSION,
            client: format!("loadshape-page/{}", shared::version::LOADSHAPE_VERSION),
        };
        if let Ok(text) = serde_json::to_string(&hello) {
            let _ = tx.unbounded_send(text);
        }
        self.outbox.set_value(Some(tx));
        spawn_local(async move {
            let mut handshaken = false;
            while let Some(frame) = read.next().await {
                let text = match frame {
                    Ok(Message::Text(t)) => t,
                    Ok(Message::Bytes(b)) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => {
                        self.message.set(Some(format!("connection lost: {e}")));
                        break;
                    }
                };
                let msg = match crate::agent::server_msg::decode(&text) {
                    Ok(m) => m,
                    Err(e) => {
                        self.message.set(Some(format!(
                            "the agent sent a message this page does not understand: {e}"
                        )));
                        continue;
                    }
                };
                match &msg {
                    ServerMsg::Hello {
                        protocol,
                        agent_version,
                        ..
                    } => {
                        self.agent_protocol.set(Some(*protocol));
                        self.agent_version.set(Some(agent_version.clone()));
                        self.status.set(Status::Connected);
                        self.message.set(None);
                        handshaken = true;
                        self.run_connect_handlers();
                    }
                    ServerMsg::Error { message, .. } if !handshaken => {
                        self.fail(message.clone());
                        return;
                    }
                    _ => {}
                }
                for f in self.handlers.get_value() {
                    f(&msg);
                }
            }
            self.outbox.set_value(None);
            if self.fatal.get_value() {
                return;
            }
            if handshaken {
                self.status.set(Status::Disconnected);
                self.retry(0);
            } else {
                // A socket refused at the upgrade (bad token, foreign origin, wrong host) closes before any hello.
                self.status.set(Status::Error);
                self.message.set(Some(
                    "the agent did not accept the connection: is the token in the URL still valid? \
                     (retrying in the background)"
                        .to_string(),
                ));
                self.retry(attempt + 1);
            }
        });
    }

    fn retry(self, attempt: u32) {
        let delay_ms = (500u64 << attempt.min(5)).min(10_000);
        set_timeout(move || self.connect(attempt), Duration::from_millis(delay_ms));
    }

    fn fail(self, message: String) {
        self.fatal.set_value(true);
        self.status.set(Status::Error);
        self.message.set(Some(message));
        self.outbox.set_value(None);
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_connect_handler_registered_after_the_handshake_runs_at_once_and_on_every_reconnect() {
        let conn = AgentConn::start(None, async {});
        let before = Arc::new(AtomicUsize::new(0));
        let b = before.clone();
        conn.on_connect(move || {
            b.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(before.load(Ordering::SeqCst), 0, "not connected yet: nothing to run");

        conn.status.set(Status::Connected);
        let after = Arc::new(AtomicUsize::new(0));
        let a = after.clone();
        conn.on_connect(move || {
            a.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(
            after.load(Ordering::SeqCst),
            1,
            "registered after the handshake: runs at once"
        );
        assert_eq!(before.load(Ordering::SeqCst), 0, "the earlier handler is not run again");
        conn.run_connect_handlers();
        assert_eq!(
            (before.load(Ordering::SeqCst), after.load(Ordering::SeqCst)),
            (1, 2),
            "a reconnect runs both"
        );
    }
}
