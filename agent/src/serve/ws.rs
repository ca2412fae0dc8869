//! One websocket session: parse [`ClientMsg`]s, answer each with its id, forward subscribed runs' events.
//!
//! Written over a `Stream` of incoming texts and a `Sink` of outgoing texts, so tests can drive it with channels
//! (axum's `testing-websockets` example). Outgoing messages go through one bounded queue drained by a writer;
//! a subscription's forwarder blocks only itself when this page is slow, never the run.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{Sink, SinkExt, Stream, StreamExt};
use shared::protocol::{ClientMsg, ErrorCode, ServerMsg};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::runs::{Runs, Subscription};

/// Runs one session until the incoming stream ends or the sink fails.
pub async fn session<I, O>(mut incoming: I, mut outgoing: O, runs: Arc<Runs>)
where
    I: Stream<Item = String> + Unpin,
    O: Sink<String> + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<ServerMsg>(512);
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let Ok(text) = serde_json::to_string(&msg) else {
                continue;
            };
            if outgoing.send(text).await.is_err() {
                break;
            }
        }
    });
    let mut greeted = false;
    let mut subscriptions: HashMap<String, JoinHandle<()>> = HashMap::new();
    while let Some(text) = incoming.next().await {
        if text.len() as u64 > runs.limits.max_message_bytes {
            let message = format!(
                "message of {} bytes exceeds the limit of {} bytes",
                text.len(),
                runs.limits.max_message_bytes
            );
            if tx
                .send(ServerMsg::error(0, ErrorCode::LimitExceeded, message))
                .await
                .is_err()
            {
                break;
            }
            continue;
        }
        let msg = match serde_json::from_str::<ClientMsg>(&text) {
            Ok(m) => m,
            Err(e) => {
                let id = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("data")?.get("id")?.as_u64())
                    .unwrap_or(0);
                let reply = ServerMsg::error(id, ErrorCode::BadMessage, format!("cannot parse message: {e}"));
                if tx.send(reply).await.is_err() {
                    break;
                }
                continue;
            }
        };
        let id = msg.id();
        let reply = match msg {
            ClientMsg::Hello { protocol, .. } => {
                let reply = ServerMsg::answer_hello(id, protocol, runs.limits.clone());
                greeted = matches!(reply, ServerMsg::Hello { .. });
                reply
            }
            _ if !greeted => ServerMsg::error(id, ErrorCode::HelloFirst, "send `hello` first"),
            ClientMsg::ListTargets { .. } => ServerMsg::Targets {
                id,
                targets: runs.target_infos(),
            },
            ClientMsg::ValidateScenario { scenario, .. } => match runs.validate(&scenario) {
                Ok(()) => ServerMsg::Validated {
                    id,
                    valid: true,
                    error: None,
                },
                Err(e) => ServerMsg::Validated {
                    id,
                    valid: false,
                    error: Some(e),
                },
            },
            ClientMsg::StartRun { scenario, target, .. } => match runs.start(&target, scenario) {
                Ok(run) => ServerMsg::RunStarted { id, run },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::StopRun { run_id, .. } => match runs.stop(&run_id) {
                Ok(()) => ServerMsg::StopRequested { id, run_id },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::ListRuns { .. } => match runs.list() {
                Ok(list) => ServerMsg::Runs { id, runs: list },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::FetchRun { run_id, .. } => match runs.fetch(&run_id) {
                Ok(s) => ServerMsg::Run {
                    id,
                    run: s.info,
                    scenario: s.scenario,
                    summary: s.summary,
                    records: s.records,
                },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::DeleteRun { run_id, .. } => match runs.delete(&run_id) {
                Ok(()) => ServerMsg::RunDeleted { id, run_id },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::Subscribe { run_id, from_seq, .. } => match runs.subscribe(&run_id, from_seq) {
                Ok(sub) => {
                    if tx
                        .send(ServerMsg::Subscribed {
                            id,
                            run_id: run_id.clone(),
                            from_seq,
                        })
                        .await
                        .is_err()
                    {
                        break;
                    }
                    let task = tokio::spawn(forward(run_id.clone(), from_seq, sub, tx.clone()));
                    if let Some(old) = subscriptions.insert(run_id, task) {
                        old.abort();
                    }
                    continue;
                }
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::Unsubscribe { run_id, .. } => {
                if let Some(task) = subscriptions.remove(&run_id) {
                    task.abort();
                }
                ServerMsg::Unsubscribed { id, run_id }
            }
        };
        if tx.send(reply).await.is_err() {
            break;
        }
    }
    for task in subscriptions.into_values() {
        task.abort();
    }
    drop(tx);
    let _ = writer.await;
}

/// Sends a subscription's backlog, then its live events, each record exactly once and in order.
async fn forward(run_id: String, from_seq: u64, sub: Subscription, tx: mpsc::Sender<ServerMsg>) {
    let mut next = from_seq;
    match sub {
        Subscription::Stored(run) => {
            for (seq, record) in run.records.into_iter().enumerate().skip(from_seq as usize) {
                let msg = ServerMsg::Record {
                    run_id: run_id.clone(),
                    seq: seq as u64,
                    record,
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
            }
            let _ = tx
                .send(ServerMsg::RunState {
                    run_id,
                    run: run.info,
                    summary: run.summary,
                })
                .await;
        }
        Subscription::Live { backlog, mut events } => {
            for (seq, record) in backlog {
                if tx
                    .send(ServerMsg::Record {
                        run_id: run_id.clone(),
                        seq,
                        record,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
                next = seq + 1;
            }
            loop {
                match events.recv().await {
                    Ok(msg) => {
                        if let ServerMsg::Record { seq, .. } = &*msg {
                            if *seq < next {
                                continue;
                            }
                            next = seq + 1;
                        }
                        let ended = matches!(&*msg, ServerMsg::RunState { run, .. }
                            if run.state != shared::protocol::RunState::Running);
                        if tx.send((*msg).clone()).await.is_err() || ended {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx.send(ServerMsg::Resync { run_id, next_seq: next }).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }
}
