//! An in-process `loadshape sim-server` on 127.0.0.1:0 for the end-to-end tests (included with
//! `#[path = "common/sim_server.rs"] mod sim_server_helper;`); it stops when the handle is dropped.
// Each test file reads the part it needs (`base`, `origin`).
#![allow(dead_code)]

use loadshape::sim_server::{self, Config};

pub struct Sim {
    /// The OpenAI base URL (`http://ADDR/v1`).
    pub base: String,
    /// `http://ADDR` (for `/metrics` and the like).
    pub origin: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Start a sim-server with `config` on the current tokio runtime.
pub async fn start(config: Config) -> Sim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(sim_server::serve(listener, config, async {
        let _ = rx.await;
    }));
    Sim {
        base: format!("http://{addr}/v1"),
        origin: format!("http://{addr}"),
        stop: Some(tx),
    }
}

/// The server's `/metrics` text (`origin` is `http://ADDR`).
pub async fn metrics_text(origin: &str) -> String {
    reqwest::get(format!("{origin}/metrics"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
