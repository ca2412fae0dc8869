//! Websocket integration tests for `loadshape serve`: access checks, the protocol, live runs with a scripted
//! driver, several viewers, resume after a disconnect, and the store across a restart. Loopback only.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use loadshape::serve::driver::ReplayDriver;
use loadshape::serve::page::Page;
use loadshape::serve::runs::{BoxFuture, Driver, RunSink};
use loadshape::serve::store::RunStore;
use loadshape::serve::{AppState, Runs, Target, allowed_hosts, app};
use shared::protocol::{CapacityOptions, ClientMsg, ErrorCode, Limits, PROTOCOL_VERSION, RunState, ServerMsg};
use shared::record::{RECORD_SCHEMA_VERSION, RequestRecord, UsageSource};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

const TOKEN: &str = "secret-token";

/// Emits `records` records, one every `every_ms`, stopping early when asked.
struct ScriptedDriver {
    records: u64,
    every_ms: u64,
}

fn record(i: u64) -> RequestRecord {
    RequestRecord {
        schema: RECORD_SCHEMA_VERSION,
        session: i % 3,
        inst: 0,
        step: (i / 3) as u32,
        steps_asked: 10,
        base_asked: 4000,
        ok: true,
        t_submit: i as f64 * 0.01,
        ttft_s: Some(0.05),
        wall_s: 0.5,
        gen_tokens: 64,
        asked_tokens: 64,
        prompt_tokens: Some(4000 + i),
        cached_tokens: Some(i),
        designed_cached_tokens: None,
        designed_prompt_tokens: None,
        sse_frames: 64,
        prompt_chars: 16000,
        queue_s: None,
        itl: None,
        finish_reason: Some("length".into()),
        usage_source: UsageSource::FinalFrame,
        rx_clock: None,
        retries: 0,
        retry_statuses: Vec::new(),
        failure: None,
        error: None,
        prompt_block_hashes: Vec::new(),
        replica: None,
        spec: None,
        kv_transfer_ms: None,
        reasoning_tokens: None,
        ttft_content_s: None,
        parent: None,
    }
}

impl Driver for ScriptedDriver {
    fn run(
        &self,
        _target: Target,
        _scenario: serde_json::Value,
        sink: RunSink,
        mut stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<()>> {
        let (n, every) = (self.records, self.every_ms);
        Box::pin(async move {
            for i in 0..n {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(every)) => sink.push(record(i)),
                    _ = stop.changed() => return Ok(()),
                }
            }
            Ok(())
        })
    }
    fn validate(&self, scenario: &serde_json::Value, _limits: &Limits) -> Result<(), String> {
        ReplayDriver::default().validate(scenario, _limits)
    }
    fn summarize(&self, _s: &serde_json::Value, records: &[RequestRecord]) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "completed": records.len() }))
    }
}

struct Agent {
    addr: std::net::SocketAddr,
    data_dir: PathBuf,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn limits() -> Limits {
    Limits {
        max_message_bytes: 64 * 1024,
        max_concurrent_runs: 2,
        max_sessions_per_run: 64,
        max_concurrent_requests_per_run: 64,
        max_rate_per_run: 50.0,
        max_run_seconds: 60.0,
    }
}

async fn start_agent(data_dir: PathBuf, driver: Arc<dyn Driver>) -> Agent {
    start_agent_with(data_dir, Target::sim("builtin"), driver).await
}

/// An agent whose one target is `sim`.
async fn start_agent_with(data_dir: PathBuf, sim: Target, driver: Arc<dyn Driver>) -> Agent {
    start_agent_full(data_dir, sim, driver, &[], loadshape::serve::WS_WRITE_TIMEOUT).await
}

async fn start_agent_full(
    data_dir: PathBuf,
    sim: Target,
    driver: Arc<dyn Driver>,
    extra_hosts: &[String],
    ws_write_timeout: Duration,
) -> Agent {
    start_agent_targets(data_dir, vec![sim], driver, extra_hosts, ws_write_timeout).await
}

/// An agent with these configured targets.
async fn start_agent_targets(
    data_dir: PathBuf,
    targets: Vec<Target>,
    driver: Arc<dyn Driver>,
    extra_hosts: &[String],
    ws_write_timeout: Duration,
) -> Agent {
    start_agent_limited(data_dir, targets, driver, extra_hosts, ws_write_timeout, limits()).await
}

/// An agent with these targets and limits.
async fn start_agent_limited(
    data_dir: PathBuf,
    targets: Vec<Target>,
    driver: Arc<dyn Driver>,
    extra_hosts: &[String],
    ws_write_timeout: Duration,
    limits: Limits,
) -> Agent {
    let store = RunStore::open(&data_dir).unwrap();
    let runs = Arc::new(Runs::new(store, targets, limits, driver));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(AppState {
        token: TOKEN.into(),
        allowed_hosts: allowed_hosts(addr, extra_hosts),
        runs,
        ws_write_timeout,
    });
    let router = app(state, &Page::Dir(data_dir.join("no-dist")));
    let server = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Agent { addr, data_dir, server }
}

fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("ws-{name}"))
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn connect_with(
    addr: std::net::SocketAddr,
    query: &str,
    origin: Option<&str>,
    host: Option<&str>,
) -> Result<Ws, u16> {
    let mut req = format!("ws://{addr}/ws{query}").into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    if let Some(h) = host {
        req.headers_mut().insert("Host", h.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("unexpected websocket error: {e}"),
    }
}

async fn connect(agent: &Agent) -> Ws {
    let origin = format!("http://{}", agent.addr);
    let mut ws = connect_with(agent.addr, &format!("?token={TOKEN}"), Some(&origin), None)
        .await
        .unwrap();
    send(
        &mut ws,
        ClientMsg::Hello {
            id: 1,
            protocol: PROTOCOL_VERSION,
            client: "test".into(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Hello { id: 1, protocol, .. } => assert_eq!(protocol, PROTOCOL_VERSION),
        other => panic!("expected hello, got {other:?}"),
    }
    ws
}

async fn send(ws: &mut Ws, msg: ClientMsg) {
    ws.send(Message::text(serde_json::to_string(&msg).unwrap()))
        .await
        .unwrap();
}

async fn recv(ws: &mut Ws) -> ServerMsg {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("no message in 10 s");
        match msg.expect("socket closed").expect("socket error") {
            Message::Text(t) => return serde_json::from_str(&t).expect("agent sent a message the protocol lacks"),
            Message::Close(_) => panic!("socket closed"),
            _ => continue,
        }
    }
}

async fn start_run(ws: &mut Ws, id: u64) -> String {
    send(
        ws,
        ClientMsg::StartRun {
            name: None,
            id,
            scenario: serde_json::from_str(include_str!("../../examples/seed-baseline.json")).unwrap(),
            target: "sim".into(),
        },
    )
    .await;
    match recv(ws).await {
        ServerMsg::RunStarted { id: got, run } if got == id => run.run_id,
        other => panic!("expected run_started, got {other:?}"),
    }
}

/// Every record of a run, page by page (`fetch_records` until `next_seq` is `None`), checking the seqs.
async fn fetch_records(ws: &mut Ws, run_id: &str) -> Vec<RequestRecord> {
    let mut all = Vec::new();
    let mut from = Some(0);
    let mut id = 1000;
    while let Some(from_seq) = from {
        id += 1;
        send(
            ws,
            ClientMsg::FetchRecords {
                id,
                run_id: run_id.into(),
                from_seq,
            },
        )
        .await;
        match recv(ws).await {
            ServerMsg::RunRecords {
                id: got,
                from_seq: got_from,
                records,
                next_seq,
                ..
            } if got == id => {
                assert_eq!(got_from, all.len() as u64, "pages follow each other");
                assert!(records.len() <= shared::protocol::PAGE_RECORDS);
                all.extend(records);
                from = next_seq;
            }
            other => panic!("expected run_records, got {other:?}"),
        }
    }
    all
}

/// Collects `record` events (asserting contiguous seqs) until the run's final `run_state`.
async fn collect_until_end(ws: &mut Ws, mut next: u64) -> (u64, RunState) {
    loop {
        match recv(ws).await {
            ServerMsg::Record { seq, .. } => {
                assert_eq!(seq, next, "records must arrive once each, in order");
                next += 1;
            }
            ServerMsg::RunState { run, .. } if run.state != RunState::Running => return (next, run.state),
            ServerMsg::Subscribed { .. } | ServerMsg::StopRequested { .. } | ServerMsg::RunState { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Starts `scenario` on `target` (message ids 2 and 3), follows it from its first record to its end: the run's id,
/// the records streamed and its final state.
async fn run_to_end(ws: &mut Ws, scenario: serde_json::Value, target: &str) -> (String, u64, RunState) {
    send(
        ws,
        ClientMsg::StartRun {
            name: None,
            id: 2,
            scenario,
            target: target.into(),
        },
    )
    .await;
    let run_id = match recv(ws).await {
        ServerMsg::RunStarted { run, .. } => run.run_id,
        other => panic!("{other:?}"),
    };
    send(
        ws,
        ClientMsg::Subscribe {
            id: 3,
            run_id: run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    let (n, state) = collect_until_end(ws, 0).await;
    (run_id, n, state)
}

#[tokio::test]
async fn upgrade_is_refused_without_token_with_foreign_origin_or_host() {
    let data_dir = tempdir("refuse");
    let agent = start_agent(data_dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let own = format!("http://{}", agent.addr);
    assert_eq!(connect_with(agent.addr, "", Some(&own), None).await.err(), Some(401));
    assert_eq!(
        connect_with(agent.addr, "?token=nope", Some(&own), None).await.err(),
        Some(401)
    );
    let evil = Some("http://evil.example");
    assert_eq!(
        connect_with(agent.addr, &format!("?token={TOKEN}"), evil, None)
            .await
            .err(),
        Some(403)
    );
    let rebound = Some("attacker.example:8080");
    assert_eq!(
        connect_with(agent.addr, &format!("?token={TOKEN}"), Some(&own), rebound)
            .await
            .err(),
        Some(403)
    );
    assert!(
        connect_with(agent.addr, &format!("?token={TOKEN}"), Some(&own), None)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn hello_first_version_check_and_clear_errors() {
    let data_dir = tempdir("hello");
    let agent = start_agent(data_dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let own = format!("http://{}", agent.addr);
    let mut ws = connect_with(agent.addr, &format!("?token={TOKEN}"), Some(&own), None)
        .await
        .unwrap();
    send(&mut ws, ClientMsg::ListRuns { id: 7 }).await;
    assert!(matches!(
        recv(&mut ws).await,
        ServerMsg::Error {
            id: 7,
            code: ErrorCode::HelloFirst,
            ..
        }
    ));
    send(
        &mut ws,
        ClientMsg::Hello {
            id: 8,
            protocol: PROTOCOL_VERSION + 1,
            client: "future".into(),
        },
    )
    .await;
    assert!(matches!(
        recv(&mut ws).await,
        ServerMsg::Error {
            id: 8,
            code: ErrorCode::VersionMismatch,
            ..
        }
    ));
    ws.send(Message::text("{not json")).await.unwrap();
    assert!(matches!(
        recv(&mut ws).await,
        ServerMsg::Error {
            code: ErrorCode::BadMessage,
            ..
        }
    ));
    ws.send(Message::text("x".repeat(100 * 1024))).await.unwrap();
    assert!(matches!(
        recv(&mut ws).await,
        ServerMsg::Error {
            code: ErrorCode::LimitExceeded,
            ..
        }
    ));

    let mut ws = connect(&agent).await;
    send(&mut ws, ClientMsg::ListTargets { id: 2 }).await;
    match recv(&mut ws).await {
        ServerMsg::Targets { id: 2, targets } => assert_eq!(targets[0].name, "sim"),
        other => panic!("{other:?}"),
    }
    let scenario = serde_json::json!({});
    send(
        &mut ws,
        ClientMsg::StartRun {
            name: None,
            id: 3,
            scenario,
            target: "http://evil.example/v1".into(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Error {
            id: 3,
            code: ErrorCode::UnknownTarget,
            message,
        } => assert!(message.contains("sim")),
        other => panic!("{other:?}"),
    }
    send(
        &mut ws,
        ClientMsg::FetchRun {
            id: 4,
            run_id: "../../etc".into(),
        },
    )
    .await;
    assert!(matches!(
        recv(&mut ws).await,
        ServerMsg::Error {
            id: 4,
            code: ErrorCode::UnknownRun,
            ..
        }
    ));
}

#[tokio::test]
async fn start_stop_two_viewers_and_export() {
    let data_dir = tempdir("two");
    let agent = start_agent(
        data_dir.to_path_buf(),
        Arc::new(ScriptedDriver {
            records: 10_000,
            every_ms: 2,
        }),
    )
    .await;
    let mut a = connect(&agent).await;
    let mut b = connect(&agent).await;
    let run_id = start_run(&mut a, 10).await;
    for ws in [&mut a, &mut b] {
        send(
            ws,
            ClientMsg::Subscribe {
                id: 11,
                run_id: run_id.clone(),
                from_seq: 0,
            },
        )
        .await;
    }
    // Let some records flow, then stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    send(
        &mut a,
        ClientMsg::StopRun {
            id: 12,
            run_id: run_id.clone(),
        },
    )
    .await;
    let (na, state_a) = collect_until_end(&mut a, 0).await;
    let (nb, state_b) = collect_until_end(&mut b, 0).await;
    assert_eq!((state_a, state_b), (RunState::Stopped, RunState::Stopped));
    assert!(na > 0 && na < 10_000, "stopped early with records ({na})");
    assert_eq!(na, nb, "both viewers saw every record");

    // The export endpoint needs the token too, and returns every record line.
    let url = format!("http://{}/api/runs/{run_id}/records.jsonl", agent.addr);
    let client = reqwest::Client::new();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let body = client
        .get(format!("{url}?token={TOKEN}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body.lines().count() as u64, na);
}

#[tokio::test]
async fn disconnect_and_resume_loses_and_duplicates_nothing() {
    let data_dir = tempdir("resume");
    let agent = start_agent(
        data_dir.to_path_buf(),
        Arc::new(ScriptedDriver {
            records: 300,
            every_ms: 3,
        }),
    )
    .await;
    let mut ws = connect(&agent).await;
    let run_id = start_run(&mut ws, 1).await;
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 2,
            run_id: run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    let mut next = 0;
    while next < 40 {
        if let ServerMsg::Record { seq, .. } = recv(&mut ws).await {
            assert_eq!(seq, next);
            next += 1;
        }
    }
    drop(ws); // the tab closes mid-run
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ws = connect(&agent).await;
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 3,
            run_id: run_id.clone(),
            from_seq: next,
        },
    )
    .await;
    let (total, state) = collect_until_end(&mut ws, next).await;
    assert_eq!((total, state), (300, RunState::Finished));

    send(
        &mut ws,
        ClientMsg::FetchRun {
            id: 4,
            run_id: run_id.clone(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Run { run, summary, .. } => {
            assert_eq!(run.records, 300);
            assert_eq!(summary.unwrap()["completed"], 300);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fetch_records(&mut ws, &run_id).await.len(), 300);
}

#[tokio::test]
async fn store_survives_restart_and_runs_can_be_deleted() {
    let dir = tempdir("restart");
    let run_id = {
        let agent = start_agent(
            dir.to_path_buf(),
            Arc::new(ScriptedDriver {
                records: 5,
                every_ms: 1,
            }),
        )
        .await;
        let mut ws = connect(&agent).await;
        let run_id = start_run(&mut ws, 1).await;
        send(
            &mut ws,
            ClientMsg::Subscribe {
                id: 2,
                run_id: run_id.clone(),
                from_seq: 0,
            },
        )
        .await;
        collect_until_end(&mut ws, 0).await;
        run_id
    };
    let agent = start_agent(dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let mut ws = connect(&agent).await;
    send(&mut ws, ClientMsg::ListRuns { id: 3 }).await;
    match recv(&mut ws).await {
        ServerMsg::Runs { runs, .. } => {
            assert_eq!(runs.len(), 1);
            assert_eq!(
                (runs[0].run_id.as_str(), runs[0].state, runs[0].records),
                (run_id.as_str(), RunState::Finished, 5)
            );
        }
        other => panic!("{other:?}"),
    }
    // A finished run can be re-watched from any seq.
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 4,
            run_id: run_id.clone(),
            from_seq: 3,
        },
    )
    .await;
    assert_eq!(collect_until_end(&mut ws, 3).await, (5, RunState::Finished));
    send(
        &mut ws,
        ClientMsg::DeleteRun {
            id: 5,
            run_id: run_id.clone(),
        },
    )
    .await;
    assert!(matches!(recv(&mut ws).await, ServerMsg::RunDeleted { id: 5, .. }));
    assert!(!agent.data_dir.join("runs").join(&run_id).exists());
}

/// The real driver against the real emulated engine: a small session scenario from start to summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_run_against_the_sim_target_from_start_to_summary() {
    let data_dir = tempdir("live");
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim_url = format!("http://{}/v1", sim_listener.local_addr().unwrap());
    let config = loadshape::sim_server::Config {
        speed: 20.0,
        ..Default::default()
    };
    tokio::spawn(loadshape::sim_server::serve(
        sim_listener,
        config,
        std::future::pending(),
    ));

    let driver = Arc::new(ReplayDriver {
        max_run_seconds: Some(30.0),
        max_in_flight: None,
    });
    let agent = start_agent_with(data_dir.to_path_buf(), Target::sim(sim_url), driver).await;

    let scenario = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "sessions", "sessions": 2, "steps": 3, "base_tokens": 4000, "gen_tokens": 32,
                     "tool_tokens": 64, "think_s": 0.05, "stagger_s": 0.05, "spread": 0.0, "duration_s": 20.0,
                     "drain": true},
        "profile": toy_profile(),
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 100.0},
        "seed": 3,
        "counterfactuals": false
    });
    let mut ws = connect(&agent).await;
    send(
        &mut ws,
        ClientMsg::ValidateScenario {
            id: 1,
            scenario: scenario.clone(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Validated { valid: true, .. } => {}
        other => panic!("scenario should be valid: {other:?}"),
    }
    let (run_id, n, state) = run_to_end(&mut ws, scenario, "sim").await;
    assert_eq!(state, RunState::Finished);
    assert_eq!(n, 6, "2 sessions × 3 steps, each recorded once");
    send(
        &mut ws,
        ClientMsg::FetchRun {
            id: 4,
            run_id: run_id.clone(),
        },
    )
    .await;
    let summary = match recv(&mut ws).await {
        ServerMsg::Run { summary, .. } => summary,
        other => panic!("{other:?}"),
    };
    let records = fetch_records(&mut ws, &run_id).await;
    assert_eq!(records.len(), 6);
    assert!(
        records.iter().all(|r| r.ok && r.gen_tokens == r.asked_tokens),
        "{records:?}"
    );
    // Steps after the first hit the emulated prefix cache.
    assert!(
        records
            .iter()
            .filter(|r| r.step > 0)
            .all(|r| r.cached_tokens.unwrap_or(0) > 0)
    );
    assert_eq!(summary.expect("summary")["completed"], 6);
    let lines = std::fs::read_to_string(agent.data_dir.join("runs").join(&run_id).join("records.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 6, "records.jsonl holds each record exactly once");
}

/// Waits 300 ms (for a viewer to subscribe), pushes 3,000 records at once, waits 300 ms more.
struct BurstDriver;

impl Driver for BurstDriver {
    fn run(
        &self,
        _target: Target,
        _scenario: serde_json::Value,
        sink: RunSink,
        _stop: watch::Receiver<bool>,
    ) -> BoxFuture<anyhow::Result<()>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            for i in 0..3000 {
                sink.push(record(i));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(())
        })
    }
    fn validate(&self, _scenario: &serde_json::Value, _limits: &Limits) -> Result<(), String> {
        Ok(())
    }
    fn summarize(&self, _s: &serde_json::Value, _records: &[RequestRecord]) -> Option<serde_json::Value> {
        None
    }
}

/// A page that stops reading is told to resync; the run itself never waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_viewer_gets_resync_and_never_stalls_the_run() {
    use loadshape::serve::ws;
    let dir = tempdir("slow");
    let sim = Target::sim("builtin");
    let runs = Arc::new(Runs::new(
        RunStore::open(&dir).unwrap(),
        vec![sim],
        limits(),
        Arc::new(BurstDriver),
    ));

    let (in_tx, in_rx) = tokio::sync::mpsc::channel::<String>(16);
    let incoming = Box::pin(futures_util::stream::unfold(in_rx, |mut rx| async move {
        rx.recv().await.map(|m| (m, rx))
    }));
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<String>(1);
    let outgoing = Box::pin(tokio_util::sync::PollSender::new(out_tx));
    tokio::spawn(ws::session(
        incoming,
        outgoing,
        runs.clone(),
        loadshape::serve::WS_WRITE_TIMEOUT,
    ));

    let msg = |m: ClientMsg| serde_json::to_string(&m).unwrap();
    in_tx
        .send(msg(ClientMsg::Hello {
            id: 1,
            protocol: PROTOCOL_VERSION,
            client: "slow".into(),
        }))
        .await
        .unwrap();
    let scenario = serde_json::from_str(include_str!("../../examples/seed-baseline.json")).unwrap();
    in_tx
        .send(msg(ClientMsg::StartRun {
            name: None,
            id: 2,
            scenario,
            target: "sim".into(),
        }))
        .await
        .unwrap();
    let mut run_id = String::new();
    while run_id.is_empty() {
        if let ServerMsg::RunStarted { run, .. } = serde_json::from_str(&out_rx.recv().await.unwrap()).unwrap() {
            run_id = run.run_id;
        }
    }
    in_tx
        .send(msg(ClientMsg::Subscribe {
            id: 3,
            run_id: run_id.clone(),
            from_seq: 0,
        }))
        .await
        .unwrap();
    // The page stalls while the run produces far more than the socket's buffers hold.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut next = 0;
    let resync_at = loop {
        let text = tokio::time::timeout(Duration::from_secs(10), out_rx.recv())
            .await
            .unwrap()
            .unwrap();
        match serde_json::from_str::<ServerMsg>(&text).unwrap() {
            ServerMsg::Record { seq, .. } => {
                assert_eq!(seq, next);
                next += 1;
            }
            ServerMsg::Resync { next_seq, .. } => break next_seq,
            ServerMsg::Subscribed { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(resync_at, next, "resync points at the first record this page missed");
    // The run went on at full speed meanwhile and ends with every record in the store.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runs.active_count() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the run stalled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut stored = 0;
    let (mut from, mut cursor) = (Some(0), None);
    while let Some(seq) = from {
        let (page, next) = runs.records_page(&run_id, seq, cursor).map_err(|e| e.1).unwrap();
        stored += page.records.len();
        (from, cursor) = (page.next_seq, next);
    }
    assert_eq!(stored, 3000);
    assert!(resync_at < 3000);
}

/// Writes a finished run of `n` records straight into the store (as a previous agent would have left it), with
/// a last line torn inside a multi-byte character.
fn stored_run(data_dir: &std::path::Path, run_id: &str, n: u64) {
    let dir = data_dir.join("runs").join(run_id);
    std::fs::create_dir_all(&dir).unwrap();
    let info = format!(
        r#"{{"run_id":"{run_id}","target":"sim","state":"finished","started_ms":1,"ended_ms":2,"records":{n}}}"#
    );
    std::fs::write(dir.join("run.json"), info).unwrap();
    std::fs::write(dir.join("scenario.json"), "{}").unwrap();
    let mut lines = Vec::new();
    for i in 0..n {
        lines.extend(serde_json::to_vec(&record(i)).unwrap());
        lines.push(b'\n');
    }
    lines.extend_from_slice(b"{\"error\":\"caf\xc3");
    std::fs::write(dir.join("records.jsonl"), lines).unwrap();
}

/// A raw HTTP/1.1 websocket upgrade with the given extra header lines; returns the status line.
async fn raw_upgrade(addr: std::net::SocketAddr, headers: &str) -> String {
    raw_request(
        addr,
        &format!(
            "GET /ws?token={TOKEN} HTTP/1.1\r\n{headers}Connection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        ),
    )
    .await
}

/// The status line the agent answers `req` (a whole HTTP/1.1 request) with.
async fn raw_request(addr: std::net::SocketAddr, req: &str) -> String {
    raw_head(addr, req).await.lines().next().unwrap_or("").to_string()
}

/// Only the first Host and Origin used to be checked: a second one rode along (101).
#[tokio::test]
async fn a_request_with_two_host_or_two_origin_headers_is_refused() {
    let data_dir = tempdir("twohost");
    let agent = start_agent(data_dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let own = agent.addr;
    let ok = raw_upgrade(agent.addr, &format!("Host: {own}\r\nOrigin: http://{own}\r\n")).await;
    assert!(ok.contains(" 101 "), "{ok}");
    let two_hosts = format!("Host: {own}\r\nHost: attacker.example\r\nOrigin: http://{own}\r\n");
    let status = raw_upgrade(agent.addr, &two_hosts).await;
    assert!(status.contains(" 400 "), "{status}");
    let two_origins = format!("Host: {own}\r\nOrigin: http://{own}\r\nOrigin: http://evil.example\r\n");
    let status = raw_upgrade(agent.addr, &two_origins).await;
    assert!(status.contains(" 400 "), "{status}");
}

/// The page's own files answer only to the agent's names too: a rebinding name gets 403, not the page (the token
/// is not needed for them: the page reads it from the URL's fragment). This agent has no `dist`, so its own
/// name gets the 404 of a missing file.
#[tokio::test]
async fn the_page_is_refused_to_a_foreign_host_or_origin() {
    let data_dir = tempdir("pagehost");
    let agent = start_agent(data_dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let own = agent.addr;
    let get =
        |headers: String| async move { raw_request(own, &format!("GET /index.html HTTP/1.1\r\n{headers}\r\n")).await };
    let status = get(format!("Host: {own}\r\n")).await;
    assert!(status.contains(" 404 "), "{status}");
    let status = get(format!("Host: {own}\r\nOrigin: http://{own}\r\n")).await;
    assert!(status.contains(" 404 "), "{status}");
    let status = get("Host: attacker.example:8080\r\n".into()).await;
    assert!(status.contains(" 403 "), "{status}");
    let status = get(format!("Host: {own}\r\nOrigin: http://evil.example\r\n")).await;
    assert!(status.contains(" 403 "), "{status}");
    let status = get(format!("Host: {own}\r\nHost: attacker.example\r\n")).await;
    assert!(status.contains(" 400 "), "{status}");
    let status = get(String::new()).await;
    assert!(status.contains(" 403 "), "no Host at all: {status}");
}

/// The page's files are served with `Cache-Control: no-cache`: a browser revalidates each one (a 304 when it is
/// unchanged) and never pairs a cached index.html with the modules of another build (the page loads some of its
/// modules on demand: docs/page.md, "Modules loaded on demand").
#[tokio::test]
async fn the_page_is_revalidated_on_every_load() {
    let dir = tempdir("pagecache");
    let dist = dir.join("no-dist"); // the dist `start_agent` serves
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("index.html"), "<!DOCTYPE html><title>page</title>").unwrap();
    std::fs::write(dist.join("page_bg.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let agent = start_agent(dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let own = agent.addr;
    for path in ["/", "/index.html", "/page_bg.wasm"] {
        let head = raw_head(own, &format!("GET {path} HTTP/1.1\r\nHost: {own}\r\n\r\n")).await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{path}: {head}");
        assert_eq!(
            header_of(&head, "cache-control").as_deref(),
            Some("no-cache"),
            "{path}: {head}"
        );
        let modified = header_of(&head, "last-modified").unwrap_or_else(|| panic!("{path}: no Last-Modified: {head}"));
        let again = raw_head(
            own,
            &format!("GET {path} HTTP/1.1\r\nHost: {own}\r\nIf-Modified-Since: {modified}\r\n\r\n"),
        )
        .await;
        assert!(again.starts_with("HTTP/1.1 304 "), "{path}: {again}");
    }
}

/// The head of the answer to one raw HTTP/1.1 request (status line and headers).
async fn raw_head(addr: std::net::SocketAddr, req: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
            .await
            .expect("no answer in 10 s")
            .unwrap();
        assert!(
            n > 0,
            "the connection closed before the head ended: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    text[..text.find("\r\n\r\n").unwrap()].to_string()
}

/// A header's value in a response head, by case-insensitive name.
fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// `--allowed-host` names reach the agent (Host and Origin); other names are still refused.
#[tokio::test]
async fn an_allowed_host_name_is_accepted_and_other_names_refused() {
    let data_dir = tempdir("allowed");
    let agent = start_agent_full(
        data_dir.to_path_buf(),
        Target::sim("builtin"),
        Arc::new(ReplayDriver::default()),
        &["lab-box.local".into(), "localhost:9000".into()],
        loadshape::serve::WS_WRITE_TIMEOUT,
    )
    .await;
    let port = agent.addr.port();
    // A tunnel's name and port (`ssh -L 9000:127.0.0.1:PORT`, `--allowed-host localhost:9000`) ...
    let q = format!("?token={TOKEN}");
    let tunnel = Some("localhost:9000");
    assert!(
        connect_with(agent.addr, &q, Some("http://localhost:9000"), tunnel)
            .await
            .is_ok()
    );
    // ... at that port only.
    assert_eq!(
        connect_with(agent.addr, &q, Some("http://localhost:9001"), Some("localhost:9001"))
            .await
            .err(),
        Some(403)
    );
    let (name, origin) = (format!("lab-box.local:{port}"), format!("http://lab-box.local:{port}"));
    let q = format!("?token={TOKEN}");
    assert!(connect_with(agent.addr, &q, Some(&origin), Some(&name)).await.is_ok());
    let other = format!("other-box.local:{port}");
    assert_eq!(
        connect_with(agent.addr, &q, Some(&origin), Some(&other)).await.err(),
        Some(403)
    );
    let other_origin = format!("http://other-box.local:{port}");
    assert_eq!(
        connect_with(agent.addr, &q, Some(&other_origin), Some(&name))
            .await
            .err(),
        Some(403)
    );
}

/// `fetch_run` used to send a whole run as one message (and a torn last line failed it): now the records come
/// in pages of at most PAGE_RECORDS, each message bounded, and the torn line costs that line only.
#[tokio::test]
async fn a_large_run_is_fetched_in_bounded_pages() {
    let dir = tempdir("pages");
    stored_run(&dir, "big", 4500);
    let agent = start_agent(dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let mut ws = connect(&agent).await;
    send(
        &mut ws,
        ClientMsg::FetchRun {
            id: 2,
            run_id: "big".into(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Run { run, .. } => assert_eq!((run.run_id.as_str(), run.records), ("big", 4500)),
        other => panic!("{other:?}"),
    }
    let mut all = Vec::new();
    let mut from = Some(0);
    let mut pages = 0;
    while let Some(from_seq) = from {
        send(
            &mut ws,
            ClientMsg::FetchRecords {
                id: 3,
                run_id: "big".into(),
                from_seq,
            },
        )
        .await;
        let text = loop {
            match ws.next().await.unwrap().unwrap() {
                Message::Text(t) => break t.to_string(),
                _ => continue,
            }
        };
        let one_record = serde_json::to_string(&record(0)).unwrap().len();
        assert!(
            text.len() <= shared::protocol::PAGE_BYTES + 2 * one_record + 1024,
            "a page of {} bytes",
            text.len()
        );
        match serde_json::from_str::<ServerMsg>(&text).unwrap() {
            ServerMsg::RunRecords {
                from_seq: got,
                records,
                next_seq,
                ..
            } => {
                assert_eq!(got, all.len() as u64);
                assert!(!records.is_empty() && records.len() <= shared::protocol::PAGE_RECORDS);
                all.extend(records);
                from = next_seq;
                pages += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(all.len(), 4500);
    assert!(pages >= 5, "{pages} pages");
    // In order, each once (compared by an integer field: serde_json's float parsing may differ in the last ulp).
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, r)| r.prompt_tokens == Some(4000 + i as u64))
    );
    // A page asked out of order is read from that seq too.
    send(
        &mut ws,
        ClientMsg::FetchRecords {
            id: 4,
            run_id: "big".into(),
            from_seq: 4499,
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::RunRecords { records, next_seq, .. } => {
            assert_eq!((records.len(), next_seq), (1, None));
            assert_eq!(records[0].prompt_tokens, Some(4000 + 4499));
        }
        other => panic!("{other:?}"),
    }
}

/// A page that sends but never reads used to hold its connection (and its buffers) forever; now the first
/// write that waits longer than the write timeout ends the session and closes the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_is_dropped() {
    let dir = tempdir("noread");
    // Far more than the socket buffers hold (about 14 MB of records).
    stored_run(&dir, "huge", 40_000);
    let agent = start_agent_full(
        dir.to_path_buf(),
        Target::sim("builtin"),
        Arc::new(ReplayDriver::default()),
        &[],
        Duration::from_secs(1),
    )
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(agent.addr).await.unwrap();
    let mut req = format!("ws://{}/ws?token={TOKEN}", agent.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("Origin", format!("http://{}", agent.addr).parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    let hello = ClientMsg::Hello {
        id: 1,
        protocol: PROTOCOL_VERSION,
        client: "never-reads".into(),
    };
    ws.send(Message::text(serde_json::to_string(&hello).unwrap()))
        .await
        .unwrap();
    let subscribe = ClientMsg::Subscribe {
        id: 2,
        run_id: "huge".into(),
        from_seq: 0,
    };
    ws.send(Message::text(serde_json::to_string(&subscribe).unwrap()))
        .await
        .unwrap();
    // From here on this peer only writes. A write that fails means the agent closed the connection.
    let list = serde_json::to_string(&ClientMsg::ListRuns { id: 3 }).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent still holds a peer that has read nothing for 60 s"
        );
        match tokio::time::timeout(Duration::from_millis(500), ws.send(Message::text(list.clone()))).await {
            Ok(Err(_)) => break,
            Ok(Ok(())) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn toy_profile() -> serde_json::Value {
    serde_json::json!({"name": "toy", "block_size": 16, "num_kv_blocks": 4000, "max_num_seqs": 16,
        "max_num_batched_tokens": 2048, "step_fixed_ms": 5.0, "per_seq_ms": 0.1, "per_ctx_token_ms": 0.00001,
        "prefill_tokens_per_ms": 40.0, "prefill_fixed_ms": 1.0})
}

fn poisson(num_requests: u64, rate_rps: f64, output_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "model": "engine",
        "profile": toy_profile(),
        "workload": {"kind": "poisson", "num_requests": num_requests, "rate_rps": rate_rps,
                     "prompt": {"dist": "fixed", "tokens": 100}, "output": {"dist": "fixed", "tokens": output_tokens}},
        "slo": {"ttft_ms": 500.0, "tpot_ms": 35.0},
        "seed": 1,
        "counterfactuals": false
    })
}

async fn validate(ws: &mut Ws, scenario: serde_json::Value) -> Option<String> {
    send(ws, ClientMsg::ValidateScenario { id: 5, scenario }).await;
    match recv(ws).await {
        ServerMsg::Validated { valid, error, .. } => {
            assert_eq!(valid, error.is_none());
            error
        }
        other => panic!("{other:?}"),
    }
}

/// The limits counted sessions and closed-loop users only: a Poisson run at 1e7 rps went straight through.
/// Now an open-loop rate and the requests a plan has in flight at once are bounded too (limits(): 50 rps, 64).
#[tokio::test]
async fn open_loop_workloads_are_bounded_by_rate_and_requests_in_flight() {
    let data_dir = tempdir("bounds");
    let agent = start_agent(data_dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let mut ws = connect(&agent).await;
    let e = validate(&mut ws, poisson(20_000, 1e7, 64)).await.expect("refused");
    assert!(
        e.contains("workload.rate_rps")
            && e.contains("10000000")
            && e.contains("--max-rate-per-run")
            && e.contains("50"),
        "{e}"
    );
    // Within the rate, but 40 rps of requests that each take ~70 s under the SLO: ~2800 in flight.
    let e = validate(&mut ws, poisson(5_000, 40.0, 2000)).await.expect("refused");
    assert!(
        e.contains("in flight") && e.contains("--max-concurrent-requests-per-run") && e.contains("64"),
        "{e}"
    );
    assert_eq!(validate(&mut ws, poisson(200, 5.0, 64)).await, None);
    // start_run refuses the same way, before anything runs.
    send(
        &mut ws,
        ClientMsg::StartRun {
            name: None,
            id: 6,
            scenario: poisson(20_000, 1e7, 64),
            target: "sim".into(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::InvalidScenario);
            assert!(message.contains("--max-rate-per-run"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let closed = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "closed_loop", "users": 64, "num_requests": 1000},
        "profile": toy_profile(),
        "seed": 1, "counterfactuals": false
    });
    assert_eq!(validate(&mut ws, closed).await, None);
}

/// The engine of `capacity_cli.rs`: at most 4 sequences, ≈ 0.65 s a request, so with a 300 ms TTFT target a 5th
/// concurrent user waits about a whole request for a slot: the capacity is 4 users, live and simulated.
fn knee_profile() -> serde_json::Value {
    serde_json::json!({
        "name": "knee", "basis": "test", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 4,
        "max_num_batched_tokens": 8192, "step_fixed_ms": 15.0, "per_seq_ms": 0.5,
        "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 20.0, "prefill_fixed_ms": 5.0
    })
}

/// A sim-server emulating [`knee_profile`] in real time on 127.0.0.1 (it runs until the test ends): its base URL.
async fn knee_sim_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let config = loadshape::sim_server::Config {
        engine: loadshape::sim_server::EngineChoice::Profile(Box::new(serde_json::from_value(knee_profile()).unwrap())),
        ..Default::default()
    };
    tokio::spawn(loadshape::sim_server::serve(listener, config, std::future::pending()));
    url
}

/// A closed-loop scenario on [`knee_profile`] long enough (400 requests) that a capacity search on it is stopped,
/// not finished.
fn long_knee_search() -> serde_json::Value {
    serde_json::json!({
        "model": "engine",
        "workload": {"kind": "closed_loop", "users": 2, "num_requests": 400,
                     "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 40}},
        "profile": knee_profile(),
        "slo": {"ttft_ms": 300.0, "tpot_ms": 35.0},
        "seed": 3,
        "counterfactuals": false
    })
}

/// The page's "find capacity live": `start_capacity` on the configured `sim` target (a sim-server emulating the
/// scenario's own profile in real time), levels streamed as `capacity_level` events, the report as
/// `capacity_result`, then the final `run_state`; the run folder holds a record file per level and
/// `capacity.json`, as `loadshape capacity --out` writes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_capacity_search_streams_its_levels_and_its_result() {
    let data_dir = tempdir("capacity");
    let sim_url = knee_sim_server().await;
    let driver = Arc::new(ReplayDriver {
        max_run_seconds: Some(60.0),
        max_in_flight: None,
    });
    let agent = start_agent_with(data_dir.to_path_buf(), Target::sim(sim_url), driver).await;
    let scenario = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "closed_loop", "users": 2, "num_requests": 40,
                     "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 40}},
        "profile": knee_profile(),
        "slo": {"ttft_ms": 300.0, "tpot_ms": 35.0},
        "seed": 3,
        "counterfactuals": false
    });
    let mut ws = connect(&agent).await;

    // Refusals: a target the operator did not configure, a seed scenario, a knob the workload lacks.
    let start =
        |id: u64, scenario: serde_json::Value, target: &str, options: CapacityOptions| ClientMsg::StartCapacity {
            name: None,
            id,
            scenario,
            target: target.into(),
            options,
        };
    send(&mut ws, start(1, scenario.clone(), "gpu1", CapacityOptions::default())).await;
    assert!(
        matches!(
            recv(&mut ws).await,
            ServerMsg::Error {
                id: 1,
                code: ErrorCode::UnknownTarget,
                ..
            }
        ),
        "only configured targets"
    );
    let seed: serde_json::Value = serde_json::from_str(include_str!("../../examples/seed-baseline.json")).unwrap();
    send(&mut ws, start(2, seed, "sim", CapacityOptions::default())).await;
    match recv(&mut ws).await {
        ServerMsg::Error {
            id: 2,
            code: ErrorCode::InvalidScenario,
            message,
        } => assert!(message.contains("engine"), "{message}"),
        other => panic!("{other:?}"),
    }
    let sessions = CapacityOptions {
        knob: Some(shared::capacity::Knob::Sessions),
        ..CapacityOptions::default()
    };
    send(&mut ws, start(3, scenario.clone(), "sim", sessions)).await;
    match recv(&mut ws).await {
        ServerMsg::Error {
            id: 3,
            code: ErrorCode::InvalidScenario,
            message,
        } => assert!(
            message.starts_with("knob") && message.contains("\"users\""),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }

    let began = std::time::Instant::now();
    send(&mut ws, start(4, scenario, "sim", CapacityOptions::default())).await;
    let (run, simulated, guided) = match recv(&mut ws).await {
        ServerMsg::CapacityStarted {
            id: 4,
            run,
            simulated,
            guided,
        } => (run, simulated, guided),
        other => panic!("expected capacity_started, got {other:?}"),
    };
    assert_eq!(run.kind, shared::protocol::RunKind::Capacity);
    assert_eq!(run.state, RunState::Running);
    assert_eq!(simulated.capacity, Some(4.0), "the simulated knee");
    assert!(guided);
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 5,
            run_id: run.run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    let mut levels = Vec::new();
    let mut report = None;
    // The records so far, as the running search tells them (a `run_state` while running, as records arrive).
    let mut counts = Vec::new();
    let state = loop {
        match recv(&mut ws).await {
            ServerMsg::CapacityLevel { run_id, index, level } => {
                assert_eq!(run_id, run.run_id);
                assert_eq!(index as usize, levels.len(), "levels arrive once each, in order");
                assert!(report.is_none(), "levels come before the result");
                levels.push(level);
            }
            ServerMsg::CapacityResult { run_id, report: r } => {
                assert_eq!(run_id, run.run_id);
                report = Some(r);
            }
            ServerMsg::RunState { run: info, .. } if info.state != RunState::Running => break info,
            ServerMsg::RunState { run: info, .. } => counts.push((levels.len(), info.records)),
            ServerMsg::Subscribed { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(state.state, RunState::Finished, "{:?}", state.error);
    assert!(
        counts.windows(2).all(|w| w[0].1 <= w[1].1) && counts.last().is_some_and(|c| c.1 <= state.records),
        "the count only grows: {counts:?}"
    );
    assert!(
        counts.iter().any(|&(done, n)| done == 0 && n > 0),
        "records counted while the first level ran, before any level ended: {counts:?}"
    );
    // The figure docs/capacity.md quotes (printed, never asserted: `-- --nocapture`).
    println!(
        "live capacity search through serve: {} levels ({}) in {:.1} s; KV peak {:?}; preemptions {:?}",
        levels.len(),
        levels
            .iter()
            .map(|l| format!("{} {}", l.level.load, if l.level.pass { "pass" } else { "fail" }))
            .collect::<Vec<_>>()
            .join(", "),
        began.elapsed().as_secs_f64(),
        levels.iter().map(|l| l.level.engine.kv_peak_use).collect::<Vec<_>>(),
        levels.iter().map(|l| l.level.engine.preemptions).collect::<Vec<_>>(),
    );
    let report = report.expect("a capacity_result before the final run_state");
    let capacity = report["capacity"].as_f64().expect("a capacity");
    assert!(
        (capacity - 4.0).abs() <= 1.0,
        "live {capacity} vs simulated 4: {report:#}"
    );
    assert_eq!(report["levels_run"].as_u64(), Some(levels.len() as u64));
    assert!(
        levels.len() >= 2,
        "a guided search runs at least the guess and one step: {levels:?}"
    );
    assert_eq!(levels[0].level.load, 4.0, "guided: starts at the simulated capacity");
    assert_eq!(report["simulated_capacity"].as_f64(), Some(4.0));
    // The agent's per-run limit bounds the search: the report says so, for "≥ max (the agent's per-run limit)".
    assert_eq!(report["max_load_reason"], "the agent's per-run limit", "{report:#}");
    assert!(
        report["max_load"].as_f64().is_some_and(|m| m >= capacity && m < 4096.0),
        "{report:#}"
    );
    // Every level's records were counted on the run, and kept in the run folder, a file per level.
    let dir = agent.data_dir.join("runs").join(&run.run_id);
    let mut counted = 0;
    for l in &levels {
        assert_eq!(l.records.len(), 1);
        let lines = std::fs::read_to_string(dir.join(&l.records[0])).unwrap();
        counted += lines.lines().count() as u64;
        assert!(l.level.scored > 0, "{l:?}");
        // The sim target reports KV use and preemptions on /metrics: every live level carries them.
        assert!(
            l.level.engine.kv_peak_use.is_some_and(|u| u > 0.0 && u <= 1.0),
            "{:?}",
            l.level.engine
        );
        assert_eq!(
            l.level.engine.preemptions,
            Some(0),
            "20,000 KV blocks: nothing is preempted"
        );
    }
    assert_eq!(state.records, counted);
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("capacity.json")).unwrap()).unwrap();
    assert_eq!(stored, report);
    // Reopened after it ended: the stored report, then the final state.
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 6,
            run_id: run.run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    assert!(matches!(recv(&mut ws).await, ServerMsg::Subscribed { id: 6, .. }));
    match recv(&mut ws).await {
        ServerMsg::CapacityResult { report: r, .. } => assert_eq!(r, report),
        other => panic!("expected the stored capacity_result, got {other:?}"),
    }
    match recv(&mut ws).await {
        ServerMsg::RunState { run: info, .. } => assert_eq!(info.kind, shared::protocol::RunKind::Capacity),
        other => panic!("{other:?}"),
    }
}

/// `stop_run` ends a capacity search: the running level is cut (its records kept), the report notes it, the run
/// ends `stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_search_can_be_stopped() {
    let data_dir = tempdir("capacity-stop");
    let sim_url = knee_sim_server().await;
    let driver = Arc::new(ReplayDriver {
        max_run_seconds: Some(60.0),
        max_in_flight: None,
    });
    let agent = start_agent_with(data_dir.to_path_buf(), Target::sim(sim_url), driver).await;
    let scenario = long_knee_search();
    let mut ws = connect(&agent).await;
    send(
        &mut ws,
        ClientMsg::StartCapacity {
            name: None,
            id: 1,
            scenario,
            target: "sim".into(),
            options: CapacityOptions::default(),
        },
    )
    .await;
    let run = match recv(&mut ws).await {
        ServerMsg::CapacityStarted { run, .. } => run,
        other => panic!("{other:?}"),
    };
    send(
        &mut ws,
        ClientMsg::StopRun {
            id: 2,
            run_id: run.run_id.clone(),
        },
    )
    .await;
    assert!(matches!(recv(&mut ws).await, ServerMsg::StopRequested { id: 2, .. }));
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 3,
            run_id: run.run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    let mut report = None;
    let state = loop {
        match recv(&mut ws).await {
            ServerMsg::CapacityResult { report: r, .. } => report = Some(r),
            ServerMsg::RunState { run: info, .. } if info.state != RunState::Running => break info.state,
            ServerMsg::Subscribed { .. } | ServerMsg::RunState { .. } | ServerMsg::CapacityLevel { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(state, RunState::Stopped);
    let report = report.expect("a report");
    let notes = report["notes"].to_string();
    assert!(notes.contains("interrupted"), "{notes}");
    assert_eq!(report["levels_run"].as_u64(), Some(0), "the cut level does not count");
}

/// A capacity search is one run: its levels and repeats together stop at the agent's `max_run_seconds` (here 2 s,
/// each level also capped at 2 s), with the levels measured kept and the limit named; before, the cap applied to
/// each level only, and `repeat: 100, max_levels: 32` could hold a run slot for hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_search_is_bounded_as_a_whole() {
    let data_dir = tempdir("capacity-bound");
    let sim_url = knee_sim_server().await;
    let driver = Arc::new(ReplayDriver {
        max_run_seconds: Some(2.0),
        max_in_flight: None,
    });
    let agent = start_agent_limited(
        data_dir.to_path_buf(),
        vec![Target::sim(sim_url)],
        driver,
        &[],
        loadshape::serve::WS_WRITE_TIMEOUT,
        Limits {
            max_run_seconds: 2.0,
            ..limits()
        },
    )
    .await;
    let scenario = long_knee_search();
    let mut ws = connect(&agent).await;
    let t0 = std::time::Instant::now();
    send(
        &mut ws,
        ClientMsg::StartCapacity {
            name: None,
            id: 1,
            scenario,
            target: "sim".into(),
            options: CapacityOptions {
                repeat: Some(100),
                max_levels: Some(32),
                no_guide: true,
                ..CapacityOptions::default()
            },
        },
    )
    .await;
    let run = match recv(&mut ws).await {
        ServerMsg::CapacityStarted { run, .. } => run,
        other => panic!("{other:?}"),
    };
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 2,
            run_id: run.run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    let info = loop {
        match recv(&mut ws).await {
            ServerMsg::RunState { run: info, .. } if info.state != RunState::Running => break info,
            ServerMsg::Subscribed { .. }
            | ServerMsg::RunState { .. }
            | ServerMsg::CapacityLevel { .. }
            | ServerMsg::CapacityResult { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(info.state, RunState::Stopped, "{info:?}");
    let e = info.error.unwrap_or_default();
    assert!(
        e.contains("limit of 2 s for a whole run") && e.contains("--max-run-seconds"),
        "{e}"
    );
    // Generous for a loaded machine, and far below the 100 × 32 levels of 2 s the options asked for.
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}

/// A page cannot name a file on the agent's machine: a trace workload that names a `path` without its requests is
/// refused, saying what to do, by `validate_scenario`, `start_run` and `start_capacity` alike (before, the run
/// started and failed with "no request completed", and the capacity search ran 11 levels to a `null` capacity).
#[tokio::test]
async fn a_trace_that_names_a_path_is_refused() {
    let data_dir = tempdir("trace-path");
    let agent = start_agent(data_dir.to_path_buf(), Arc::new(ReplayDriver::default())).await;
    let mut ws = connect(&agent).await;
    let scenario = serde_json::json!({
        "model": "engine",
        "profile": toy_profile(),
        "workload": {"kind": "trace", "path": "conversation_trace.jsonl"},
        "seed": 1,
        "counterfactuals": false
    });
    let e = validate(&mut ws, scenario.clone()).await.expect("refused");
    assert!(
        e.contains("workload.path") && e.contains("load the trace into the page"),
        "{e}"
    );
    for (id, msg) in [
        (
            7,
            ClientMsg::StartRun {
                name: None,
                id: 7,
                scenario: scenario.clone(),
                target: "sim".into(),
            },
        ),
        (
            8,
            ClientMsg::StartCapacity {
                name: None,
                id: 8,
                scenario: scenario.clone(),
                target: "sim".into(),
                options: CapacityOptions::default(),
            },
        ),
    ] {
        send(&mut ws, msg).await;
        match recv(&mut ws).await {
            ServerMsg::Error { id: got, code, message } => {
                assert_eq!((got, code), (id, ErrorCode::InvalidScenario));
                assert!(message.contains("workload.path"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[path = "common/sim_server.rs"]
mod sim_server_helper;

/// A configured fleet target (`--target fleet=URL0,url=URL1,router=session_affinity`): `list_targets` shows its
/// replicas and router, a live run spreads its sessions over the two in-process sim-servers by that router (every
/// record names its replica, each session stays on one, both replicas get sessions), every replica's `/metrics`
/// is scraped into the run's `server.json`, and the live capacity search, which runs against one URL, refuses the
/// fleet by name. Only the configured URLs are contacted: the page names the target, never a URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_target_spreads_a_live_run_over_its_replicas() {
    let data_dir = tempdir("fleet");
    let config = || loadshape::sim_server::Config {
        speed: 20.0,
        ..Default::default()
    };
    let sims = [
        sim_server_helper::start(config()).await,
        sim_server_helper::start(config()).await,
    ];
    let spec = format!("fleet={},url={},router=session_affinity", sims[0].base, sims[1].base);
    let fleet = loadshape::cmd::serve::parse_target(&spec).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(fleet.fleet.as_ref().map(|f| f.urls.len()), Some(2));
    let driver = Arc::new(ReplayDriver {
        max_run_seconds: Some(30.0),
        max_in_flight: None,
    });
    let agent = start_agent_targets(
        data_dir.to_path_buf(),
        vec![Target::sim("builtin"), fleet],
        driver,
        &[],
        loadshape::serve::WS_WRITE_TIMEOUT,
    )
    .await;
    let mut ws = connect(&agent).await;
    send(&mut ws, ClientMsg::ListTargets { id: 1 }).await;
    match recv(&mut ws).await {
        ServerMsg::Targets { targets, .. } => {
            assert!(targets[0].fleet.is_none(), "sim is one URL");
            let f = targets[1].fleet.as_ref().expect("the fleet target says it is one");
            assert_eq!(f.urls, [sims[0].base.clone(), sims[1].base.clone()]);
            assert_eq!(f.router, Some(shared::engine::Router::SessionAffinity));
            assert_eq!(targets[1].url, sims[0].base);
        }
        other => panic!("{other:?}"),
    }
    let scenario = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "sessions", "sessions": 4, "steps": 3, "base_tokens": 2000, "gen_tokens": 16,
                     "tool_tokens": 200, "think_s": 0.05, "stagger_s": 0.0, "spread": 0.0, "duration_s": 20.0,
                     "drain": true},
        "profile": toy_profile(),
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 100.0},
        "seed": 5,
        "counterfactuals": false
    });
    let (run_id, n, state) = run_to_end(&mut ws, scenario.clone(), "fleet").await;
    assert_eq!((n, state), (12, RunState::Finished), "4 sessions x 3 steps");
    let records = fetch_records(&mut ws, &run_id).await;
    assert!(records.iter().all(|r| r.ok), "{records:?}");
    let on = |i: u32| records.iter().filter(|r| r.replica == Some(i)).count();
    assert_eq!(on(0) + on(1), 12, "every record names replica 0 or 1");
    assert!(
        on(0) > 0 && on(1) > 0,
        "both replicas got sessions: {} and {}",
        on(0),
        on(1)
    );
    assert_eq!(
        shared::metrics::replicas::sessions_on_several_replicas(&records),
        0,
        "session affinity keeps each session on one replica"
    );
    // Steps after the first hit their replica's prefix cache (the session stayed where its prefix is).
    assert!(
        records
            .iter()
            .filter(|r| r.step > 0)
            .all(|r| r.cached_tokens.unwrap_or(0) > 0)
    );
    // Each replica's /metrics, scraped at its own origin.
    let dir = agent.data_dir.join("runs").join(&run_id);
    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("records.jsonl.server.json")).unwrap()).unwrap();
    let reps = server["replicas"].as_array().expect("server.json replicas");
    for (i, r) in reps.iter().enumerate() {
        assert_eq!(r["metrics_url"], format!("{}/metrics", sims[i].origin));
        let prompt: u64 = records
            .iter()
            .filter(|x| x.replica == Some(i as u32))
            .map(|x| x.prompt_tokens.unwrap_or(0))
            .sum();
        assert_eq!(
            r["report"]["prompt_tokens"].as_f64(),
            Some(prompt as f64),
            "replica {i}"
        );
    }

    // The capacity search runs against one URL: a fleet target is refused up front, by name, before it counts
    // against the agent's run limit.
    send(
        &mut ws,
        ClientMsg::StartCapacity {
            name: None,
            id: 4,
            scenario,
            target: "fleet".into(),
            options: CapacityOptions::default(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::InvalidScenario);
            assert!(message.contains("target `fleet` is a fleet of 2 replicas"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A sim-server emulating the `sim` target's profile (`llama-3-8b-1xh100`, as `loadshape serve` runs it) in real
/// time on 127.0.0.1: its base URL.
async fn default_sim_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(loadshape::sim_server::serve(
        listener,
        loadshape::sim_server::Config::default(),
        std::future::pending(),
    ));
    url
}

/// The page's "Calibrate this target": `start_calibration` on the `sim` target probes it as `calibrate --url`
/// does, streams `calibration_progress` (phase by phase, requests counted up), then `calibration_result` with the
/// fitted profile and the final `run_state`; the profile is kept with the target (`targets` carries it, after a
/// restart too). Meanwhile the target refuses other runs; an unconfigured target or a bad budget is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calibration_streams_its_progress_and_keeps_the_profile_with_the_target() {
    let data_dir = tempdir("calibrate");
    let sim_url = default_sim_server().await;
    let driver = Arc::new(ReplayDriver::default());
    let agent = start_agent_with(data_dir.to_path_buf(), Target::sim(sim_url.clone()), driver.clone()).await;
    let mut ws = connect(&agent).await;
    // Refusals first: a target the operator did not configure, a budget too small or over the run limit.
    for (id, target, budget_s, code, needle) in [
        (2, "gpu", Some(20.0), ErrorCode::UnknownTarget, "unknown target `gpu`"),
        (
            3,
            "sim",
            Some(1.0),
            ErrorCode::InvalidScenario,
            "budget_s must be at least 5",
        ),
        (4, "sim", Some(600.0), ErrorCode::LimitExceeded, "--max-run-seconds"),
    ] {
        send(
            &mut ws,
            ClientMsg::StartCalibration {
                id,
                target: target.into(),
                budget_s,
            },
        )
        .await;
        match recv(&mut ws).await {
            ServerMsg::Error {
                id: got,
                code: c,
                message,
            } if got == id => {
                assert_eq!(c, code, "{message}");
                assert!(message.contains(needle), "{message}");
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
    // A small budget: the sim target answers in real time, 30 s of probe fits its step terms (docs/calibration.md).
    send(
        &mut ws,
        ClientMsg::StartCalibration {
            id: 5,
            target: "sim".into(),
            budget_s: Some(30.0),
        },
    )
    .await;
    let run = match recv(&mut ws).await {
        ServerMsg::CalibrationStarted { id: 5, run, budget_s } => {
            assert_eq!(budget_s, 30.0);
            assert_eq!(run.kind, shared::protocol::RunKind::Calibration);
            run
        }
        other => panic!("expected calibration_started, got {other:?}"),
    };
    // The target calibrates: a live run on it is refused until the calibration ends.
    send(
        &mut ws,
        ClientMsg::StartRun {
            name: None,
            id: 6,
            scenario: serde_json::from_str(include_str!("../../examples/seed-baseline.json")).unwrap(),
            target: "sim".into(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::Error { id: 6, code, message } => {
            assert_eq!(code, ErrorCode::RunActive, "{message}");
            assert!(message.contains("is being calibrated"), "{message}");
        }
        other => panic!("expected run_active, got {other:?}"),
    }
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 7,
            run_id: run.run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    let (mut phases_seen, mut last_requests, mut result) = (Vec::<String>::new(), 0, None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let state = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the calibration did not end in 60 s"
        );
        match recv(&mut ws).await {
            ServerMsg::CalibrationProgress {
                run_id,
                phase,
                phase_index,
                phases,
                requests,
                elapsed_s,
                budget_s,
            } => {
                assert_eq!(run_id, run.run_id);
                assert!(result.is_none(), "progress after the result");
                assert!(requests >= last_requests, "requests count up");
                assert!((1..=phases).contains(&phase_index) && elapsed_s >= 0.0 && budget_s == 30.0);
                last_requests = requests;
                if phases_seen.last() != Some(&phase) {
                    phases_seen.push(phase);
                }
            }
            ServerMsg::CalibrationResult { run_id, calibration } => {
                assert_eq!(run_id, run.run_id);
                result = Some(calibration);
            }
            ServerMsg::RunState { run: r, .. } if r.state != RunState::Running => break r,
            ServerMsg::Subscribed { .. } | ServerMsg::RunState { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(state.state, RunState::Finished, "{:?}", state.error);
    assert!(last_requests > 20, "only {last_requests} probe requests counted");
    assert!(phases_seen.len() >= 3, "phases seen: {phases_seen:?}");
    assert_eq!(phases_seen.last().map(String::as_str), Some("fit"), "{phases_seen:?}");
    let c = result.expect("a calibration_result before the final run_state");
    assert_eq!((c.target.as_str(), c.run_id.as_str()), ("sim", run.run_id.as_str()));
    // The fitted profile is the sim target's (`llama-3-8b-1xh100`): its decode step and prefill speed within 15 %
    // (a loose bound for a 30 s probe on a shared machine; the browser test and calibrate_sim.rs check tighter).
    let truth = shared::engine::presets::llama3_8b_h100();
    for (batch, context) in [(1.0, 512.0), (8.0, 1024.0)] {
        let (got, want) = (
            c.profile.decode_step_ms(batch, context),
            truth.decode_step_ms(batch, context),
        );
        assert!(
            (got / want - 1.0).abs() < 0.15,
            "decode step at batch {batch}: {got} vs {want}"
        );
    }
    let rate = c.profile.prefill_tokens_per_ms / truth.prefill_tokens_per_ms;
    assert!(
        (rate - 1.0).abs() < 0.15,
        "prefill rate {}",
        c.profile.prefill_tokens_per_ms
    );
    assert!(c.fit.decode_requests > 0 && c.fit.prefill_requests > 0, "{:?}", c.fit);
    // Kept with the target: in `targets`, in the run's folder, and across a restart of the agent.
    let run_dir = data_dir.join("runs").join(&run.run_id);
    for f in ["calibration.json", "calibration/profile.json", "calibration/fit.json"] {
        assert!(run_dir.join(f).is_file(), "{f} missing");
    }
    assert!(data_dir.join("profiles.json").is_file());
    drop(ws);
    drop(agent);
    let agent = start_agent_with(data_dir.to_path_buf(), Target::sim(sim_url), driver).await;
    let mut ws = connect(&agent).await;
    send(&mut ws, ClientMsg::ListTargets { id: 8 }).await;
    match recv(&mut ws).await {
        ServerMsg::Targets { targets, .. } => {
            let kept = targets[0].profile.as_deref().expect("the sim target keeps its profile");
            assert_eq!(kept, &*c);
        }
        other => panic!("{other:?}"),
    }
    // A reopened calibration run replays its result to a late viewer.
    send(
        &mut ws,
        ClientMsg::Subscribe {
            id: 9,
            run_id: run.run_id.clone(),
            from_seq: 0,
        },
    )
    .await;
    loop {
        match recv(&mut ws).await {
            ServerMsg::CalibrationResult { calibration, .. } => {
                assert_eq!(calibration, c);
                break;
            }
            ServerMsg::Subscribed { .. } => {}
            other => panic!("expected calibration_result, got {other:?}"),
        }
    }
}

/// A run named at launch keeps its name and a few words of what it sends (`about`) in its metadata: in the reply,
/// the history and after a restart; a run stored before names existed still lists (unnamed); a name too long is
/// refused naming the field; a blank one is no name.
#[tokio::test]
async fn a_run_is_named_at_launch_and_says_what_it_sends() {
    let data_dir = tempdir("named");
    stored_run(&data_dir, "old-run", 2);
    let driver = Arc::new(ScriptedDriver {
        records: 2,
        every_ms: 5,
    });
    let agent = start_agent(data_dir.to_path_buf(), driver.clone()).await;
    let mut ws = connect(&agent).await;
    let scenario: serde_json::Value = serde_json::from_str(include_str!("../../examples/seed-baseline.json")).unwrap();
    let about = shared::protocol::scenario_about(&shared::scenario::Scenario::from_value(scenario.clone()).unwrap());
    let start = |id: u64, name: Option<String>| ClientMsg::StartRun {
        id,
        scenario: scenario.clone(),
        target: "sim".into(),
        name,
    };
    send(&mut ws, start(2, Some("x".repeat(101)))).await;
    match recv(&mut ws).await {
        ServerMsg::Error { id: 2, code, message } => {
            assert_eq!(code, ErrorCode::InvalidScenario);
            assert!(message.starts_with("name is 101 characters"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    send(&mut ws, start(3, Some("  baseline, before the upgrade ".into()))).await;
    let named = match recv(&mut ws).await {
        ServerMsg::RunStarted { id: 3, run } => run,
        other => panic!("{other:?}"),
    };
    assert_eq!(named.name.as_deref(), Some("baseline, before the upgrade"));
    assert_eq!(named.about.as_deref(), Some(about.as_str()));
    assert!(about.contains("requests at"), "{about}");
    // The first run ends before the second starts (the limit on concurrent runs is not what this test is about).
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(&mut ws, start(4, Some("   ".into()))).await;
    let blank = match recv(&mut ws).await {
        ServerMsg::RunStarted { id: 4, run } => run,
        other => panic!("{other:?}"),
    };
    assert_eq!(blank.name, None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(ws);
    drop(agent);
    let agent = start_agent(data_dir.to_path_buf(), driver).await;
    let mut ws = connect(&agent).await;
    send(&mut ws, ClientMsg::ListRuns { id: 5 }).await;
    let runs = match recv(&mut ws).await {
        ServerMsg::Runs { runs, .. } => runs,
        other => panic!("{other:?}"),
    };
    let find = |id: &str| {
        runs.iter()
            .find(|r| r.run_id == id)
            .unwrap_or_else(|| panic!("{id} listed"))
    };
    assert_eq!(find(&named.run_id).name, named.name);
    assert_eq!(find(&named.run_id).about, named.about);
    assert_eq!(
        (find("old-run").name.as_deref(), find("old-run").about.as_deref()),
        (None, None)
    );
    let text = std::fs::read_to_string(data_dir.join("runs").join(&named.run_id).join("run.json")).unwrap();
    assert!(text.contains("\"name\": \"baseline, before the upgrade\""), "{text}");
}

/// The agent asks each target what it says of its limits (vLLM's `/v1/models` `max_model_len`, which sim-server
/// serves for its profile) and `targets` carries the answer; a target that answers nothing has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_carry_the_limits_they_report() {
    let dir = tempdir("limits");
    let url = knee_sim_server().await;
    let mut quiet = Target::sim("http://127.0.0.1:9/v1");
    quiet.name = "quiet".into();
    quiet.builtin = false;
    let store = RunStore::open(&dir).unwrap();
    let runs = Arc::new(Runs::new(
        store,
        vec![Target::sim(url), quiet],
        limits(),
        Arc::new(ReplayDriver::default()),
    ));
    assert!(
        runs.target_infos().iter().all(|t| t.limits.is_none()),
        "nothing before asking"
    );
    runs.discover_limits();
    let want: shared::engine::EngineProfile = serde_json::from_value(knee_profile()).unwrap();
    let t0 = std::time::Instant::now();
    let sim = loop {
        let infos = runs.target_infos();
        if let Some(l) = infos[0].limits.clone() {
            assert!(infos[1].limits.is_none(), "a closed port says nothing: {:?}", infos[1]);
            break l;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no limits from sim-server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(sim.max_model_len, Some(want.model_len()), "{sim:?}");
    assert!(sim.sources.iter().any(|s| s.contains("max_model_len")), "{sim:?}");
}

/// A fleet `scenario` run live to its end on the `sim` target of a fresh agent (no shared sim-server behind `sim`:
/// a fleet scenario gets its own): its `requests` records, every one completed.
async fn fleet_run_on_sim(name: &str, scenario: &serde_json::Value, requests: u64) -> Vec<RequestRecord> {
    let data_dir = tempdir(name);
    let driver = Arc::new(ReplayDriver {
        max_run_seconds: Some(60.0),
        max_in_flight: None,
    });
    let agent = start_agent(data_dir.to_path_buf(), driver).await;
    let mut ws = connect(&agent).await;
    let (run_id, n, state) = run_to_end(&mut ws, scenario.clone(), "sim").await;
    assert_eq!((n, state), (requests, RunState::Finished), "{scenario}");
    let live = fetch_records(&mut ws, &run_id).await;
    assert!(live.iter().all(|r| r.ok), "{live:?}");
    live
}

/// `simulate` of an engine `scenario`: its records.
fn simulated_records(scenario: serde_json::Value) -> Vec<RequestRecord> {
    let sc = shared::scenario::Scenario::from_value(scenario).unwrap_or_else(|e| panic!("{e}"));
    let shared::scenario::Scenario::Engine(sc) = sc else {
        panic!("an engine scenario")
    };
    shared::engine::simulate_with(&sc, shared::engine::SimOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .records
}

/// The `sim` target with a prefill/decode fleet scenario: the run is served by that fleet (the scenario's profile on
/// 2 prefill and 1 decode instances behind one endpoint, as `sim-server --fleet` serves it), so its records carry
/// the KV transfer and the prefill instance each request went to, as `simulate` of the same scenario does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_target_runs_a_fleet_scenario_on_that_fleet() {
    let (latency_ms, bytes_per_s, kv_per_token) = (20.0, 2e9, 131_072.0);
    let scenario = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "sessions", "sessions": 4, "steps": 3, "base_tokens": 2000, "gen_tokens": 16,
                     "tool_tokens": 200, "think_s": 0.05, "stagger_s": 0.0, "spread": 0.0, "duration_s": 30.0,
                     "drain": true},
        "profile": toy_profile(),
        "fleet": {"replicas": 3, "router": "round_robin",
                  "disaggregation": {"prefill_instances": 2, "decode_instances": 1,
                                     "link_bytes_per_s": bytes_per_s, "link_latency_ms": latency_ms,
                                     "kv_bytes_per_token": kv_per_token}},
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 100.0},
        "seed": 5,
        "counterfactuals": false
    });
    let live = fleet_run_on_sim("sim-fleet", &scenario, 12).await;
    // Each record's transfer is the link's time for the prompt the server counted, and part of its TTFT.
    for r in &live {
        let prompt = r.prompt_tokens.unwrap_or_else(|| panic!("usage: {r:?}")) as f64;
        let ms = r.kv_transfer_ms.unwrap_or_else(|| panic!("x-kv-transfer-ms: {r:?}"));
        let want = latency_ms + prompt * kv_per_token / bytes_per_s * 1000.0;
        assert!((ms - want).abs() < 1e-6, "{ms} vs {want}: {r:?}");
        assert!(r.ttft_s.unwrap_or(0.0) * 1000.0 >= ms, "{r:?}");
    }

    // `simulate` of the same scenario: the same split over the prefill instances, transfers alike.
    let sim = simulated_records(scenario);
    assert_eq!(sim.len(), live.len());
    let on = |recs: &[RequestRecord], i: u32| recs.iter().filter(|r| r.replica == Some(i)).count();
    for i in 0..3 {
        assert_eq!(on(&live, i), on(&sim, i), "replica {i}: {live:?}");
    }
    assert_eq!(
        (on(&live, 0), on(&live, 1), on(&live, 2)),
        (6, 6, 0),
        "round robin over the prefill instances"
    );
    let split_live = shared::metrics::replicas::replica_split(&live);
    let split_sim = shared::metrics::replicas::replica_split(&sim);
    assert_eq!(
        split_live.iter().map(|s| (s.replica, s.requests)).collect::<Vec<_>>(),
        split_sim.iter().map(|s| (s.replica, s.requests)).collect::<Vec<_>>()
    );
    let mean = |recs: &[RequestRecord]| {
        let t = shared::metrics::replicas::kv_transfer_summary(recs).unwrap_or_else(|| panic!("transfers"));
        assert_eq!(t.transfers as usize, recs.len(), "every record crossed the link");
        t.mean_ms
    };
    let (m_live, m_sim) = (mean(&live), mean(&sim));
    assert!(
        (m_live / m_sim - 1.0).abs() < 0.10,
        "mean transfer live {m_live} ms, simulated {m_sim} ms"
    );
}

/// `session_affinity` live on `sim`: replay names each session step's session (`x-session-id`), the fleet engine
/// keeps a session on the prefill instance of its first step, as `simulate` does: the same requests per replica,
/// no session split over replicas, and each replica's cached share close to the simulation's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sim_target_routes_a_fleet_by_session_like_simulate() {
    // Three sessions over two prefill instances: the first steps go 0, 1, 0 by least outstanding, so affinity
    // gives 8 and 4 requests; routing each request on its own would move sessions between the instances.
    let scenario = serde_json::json!({
        "model": "engine",
        "workload": {"kind": "sessions", "sessions": 3, "steps": 4, "base_tokens": 2000, "gen_tokens": 16,
                     "tool_tokens": 200, "think_s": 0.05, "stagger_s": 0.0, "spread": 0.0, "duration_s": 30.0,
                     "drain": true},
        "profile": toy_profile(),
        "fleet": {"replicas": 3, "router": "session_affinity",
                  "disaggregation": {"prefill_instances": 2, "decode_instances": 1,
                                     "link_bytes_per_s": 2e9, "link_latency_ms": 5.0,
                                     "kv_bytes_per_token": 131_072.0}},
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 100.0},
        "seed": 5,
        "counterfactuals": false
    });
    let live = fleet_run_on_sim("sim-fleet-affinity", &scenario, 12).await;
    let sim = simulated_records(scenario);
    use shared::metrics::replicas::{fleet_figures, sessions_on_several_replicas};
    assert_eq!(sessions_on_several_replicas(&sim), 0);
    assert_eq!(
        sessions_on_several_replicas(&live),
        0,
        "live: every session on one replica: {live:?}"
    );
    let (fl, fs) = (
        fleet_figures(&live).unwrap_or_else(|| panic!("live fleet figures")),
        fleet_figures(&sim).unwrap_or_else(|| panic!("simulated fleet figures")),
    );
    let counts = |f: &shared::metrics::replicas::FleetFigures| {
        f.replicas.iter().map(|r| (r.replica, r.requests)).collect::<Vec<_>>()
    };
    assert_eq!(counts(&fl), counts(&fs), "requests per replica, live vs simulated");
    assert_eq!(counts(&fl), vec![(0, 8), (1, 4)]);
    for (l, s) in fl.replicas.iter().zip(&fs.replicas) {
        assert!(
            (l.cached_share - s.cached_share).abs() < 0.05,
            "replica {}: cached share live {} vs simulated {}",
            l.replica,
            l.cached_share,
            s.cached_share
        );
        assert!(l.cached_share > 0.5, "affinity keeps the conversation cached: {l:?}");
    }
    let (tl, ts) = (
        fl.kv_transfer.unwrap_or_else(|| panic!("live transfers")),
        fs.kv_transfer.unwrap_or_else(|| panic!("simulated transfers")),
    );
    assert_eq!((tl.transfers, ts.transfers), (12, 12));
    assert!((tl.mean_ms / ts.mean_ms - 1.0).abs() < 0.10, "{tl:?} vs {ts:?}");
}
