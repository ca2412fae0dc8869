//! One websocket session: parse [`ClientMsg`]s, answer each with its id, forward subscribed runs' events.
//!
//! Written over a `Stream` of incoming texts and a `Sink` of outgoing texts, so tests can drive it with channels
//! (axum's `testing-websockets` example). Outgoing messages go through one bounded queue drained by a writer;
//! a subscription's forwarder blocks only itself when this page is slow, never the run. A write the peer does
//! not take within the session's write timeout ends the session: a page that sends but never reads cannot hold
//! its connection and its buffers forever.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Sink, SinkExt, Stream, StreamExt};
use serde::Deserialize;
use shared::protocol::{ClientMsg, ErrorCode, ServerMsg};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::runs::{Runs, Subscription};
use super::store::RecordCursor;

/// Why an incoming text is not a [`ClientMsg`]: the error reply's id, code and message.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub id: u64,
    pub code: ErrorCode,
    pub message: String,
}

/// Parses one incoming text as a [`ClientMsg`]. `Err` says why not: `limit_exceeded` for a text over `max_bytes`,
/// else `bad_message` with serde's account of what is wrong (field, expected type or variant, line and column)
/// and the request's id when one can be read (0 otherwise). The id is looked for with a struct that skips every
/// other value, so a bad message costs no tree of its contents.
pub fn parse_client_msg(text: &str, max_bytes: u64) -> Result<ClientMsg, Refused> {
    if text.len() as u64 > max_bytes {
        return Err(Refused {
            id: 0,
            code: ErrorCode::LimitExceeded,
            message: format!("message of {} bytes exceeds the limit of {max_bytes} bytes", text.len()),
        });
    }
    serde_json::from_str::<ClientMsg>(text).map_err(|e| {
        #[derive(Deserialize)]
        struct Envelope {
            data: Option<Data>,
        }
        #[derive(Deserialize)]
        struct Data {
            id: Option<u64>,
        }
        let id = serde_json::from_str::<Envelope>(text)
            .ok()
            .and_then(|v| v.data?.id)
            .unwrap_or(0);
        Refused {
            id,
            code: ErrorCode::BadMessage,
            message: format!("cannot parse message: {e}"),
        }
    })
}

/// Runs one session until the incoming stream ends, the sink fails, or a write waits longer than
/// `write_timeout` for the peer.
pub async fn session<I, O>(mut incoming: I, mut outgoing: O, runs: Arc<Runs>, write_timeout: Duration)
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
            match tokio::time::timeout(write_timeout, outgoing.send(text)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    tracing::warn!(
                        "dropping a websocket peer that took no data for {:.0} s",
                        write_timeout.as_secs_f64()
                    );
                    break;
                }
            }
        }
    });
    let mut greeted = false;
    let mut subscriptions: HashMap<String, JoinHandle<()>> = HashMap::new();
    // The stored run this page is reading page by page, where it stands.
    let mut cursor: Option<RecordCursor> = None;
    loop {
        let text = tokio::select! {
            next = incoming.next() => match next {
                Some(text) => text,
                None => break,
            },
            // The writer gave up on the peer: end the session (and with it the connection) now.
            () = tx.closed() => break,
        };
        let msg = match parse_client_msg(&text, runs.limits.max_message_bytes) {
            Ok(m) => m,
            Err(r) => {
                if tx.send(ServerMsg::error(r.id, r.code, r.message)).await.is_err() {
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
            ClientMsg::StartRun {
                scenario, target, name, ..
            } => match runs.start(&target, scenario, name.as_deref()) {
                Ok(run) => ServerMsg::RunStarted { id, run },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::StartCapacity {
                scenario,
                target,
                options,
                name,
                ..
            } => {
                // The simulated search runs first (CPU-bound): off the async threads.
                let r = runs.clone();
                let started = tokio::task::spawn_blocking(move || {
                    r.start_capacity_named(&target, scenario, &options, name.as_deref())
                })
                .await;
                match started {
                    Ok(Ok((run, simulated, guided))) => ServerMsg::CapacityStarted {
                        id,
                        run,
                        simulated,
                        guided,
                    },
                    Ok(Err((code, message))) => ServerMsg::error(id, code, message),
                    Err(e) => ServerMsg::error(id, ErrorCode::Internal, format!("starting the search: {e}")),
                }
            }
            ClientMsg::StartCalibration { target, budget_s, .. } => match runs.start_calibration(&target, budget_s) {
                Ok((run, budget_s)) => ServerMsg::CalibrationStarted { id, run, budget_s },
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
                },
                Err((code, message)) => ServerMsg::error(id, code, message),
            },
            ClientMsg::FetchRecords { run_id, from_seq, .. } => {
                let (r, kept) = (runs.clone(), cursor.take());
                let id_for_page = run_id.clone();
                let page = tokio::task::spawn_blocking(move || r.records_page(&id_for_page, from_seq, kept)).await;
                match page {
                    Ok(Ok((page, next_cursor))) => {
                        cursor = next_cursor;
                        ServerMsg::RunRecords {
                            id,
                            run_id,
                            from_seq: page.from_seq,
                            records: page.records,
                            next_seq: page.next_seq,
                        }
                    }
                    Ok(Err((code, message))) => ServerMsg::error(id, code, message),
                    Err(e) => ServerMsg::error(id, ErrorCode::Internal, format!("reading records: {e}")),
                }
            }
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
        Subscription::Stored { run, records } => {
            // Read from disk a page at a time, off the async threads; the bounded queue paces the reading.
            let mut cursor = Some(records);
            while let Some(mut c) = cursor.take() {
                let read = tokio::task::spawn_blocking(move || {
                    let page = c.page(shared::protocol::PAGE_RECORDS, shared::protocol::PAGE_BYTES);
                    (c, page)
                })
                .await;
                let Ok((c, Ok((page, at_end)))) = read else {
                    break;
                };
                let first = c.next_seq() - page.len() as u64;
                for (seq, record) in (first..).zip(page) {
                    let msg = ServerMsg::Record {
                        run_id: run_id.clone(),
                        seq,
                        record,
                    };
                    if tx.send(msg).await.is_err() {
                        return;
                    }
                }
                if !at_end {
                    cursor = Some(c);
                }
            }
            if let Some(calibration) = run.calibration {
                let msg = ServerMsg::CalibrationResult {
                    run_id: run_id.clone(),
                    calibration: Box::new(calibration),
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
            }
            if let Some(report) = run.capacity {
                let msg = ServerMsg::CapacityResult {
                    run_id: run_id.clone(),
                    report,
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
        Subscription::Live {
            backlog,
            backlog_events,
            mut events,
        } => {
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
            for msg in backlog_events {
                if tx.send((*msg).clone()).await.is_err() {
                    return;
                }
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
