//! `loadshape serve` as a real process on 127.0.0.1: SIGTERM or SIGINT during a live run on the built-in `sim`
//! target stops the run, writes its summary and `run.json`, and then exits, within the grace period. Before, the
//! process exited at once: `run.json` stayed `running` (read `interrupted` after a restart) and no summary was
//! written. Also: a live run's folder holds one summary (`summary.json`), and nothing is printed on stdout per run
//! (before, each run printed its full text report there and also wrote `records.jsonl.summary.json`).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use loadshape::replay::records::read_records;
use loadshape::serve::store::RunStore;
use shared::protocol::{ClientMsg, PROTOCOL_VERSION, RunState, ServerMsg};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");
// Strong enough for serve's token check (128 bits by its estimate).
const TOKEN: &str = "8f3c2a91d47e5b06c1f9a83e72d4b5c09e6a1f2d3b4c5d6e";

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("shutdown-{name}"))
}

/// Ends the serve process if a test fails before it does (by its PID only).
struct Serve {
    child: Child,
    addr: String,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `loadshape serve --port 0` with its data in `dir`; returns once it printed where it listens.
async fn serve(dir: &Path) -> Serve {
    let mut child = Command::new(BIN)
        .args(["serve", "--port", "0", "--token", TOKEN, "--data-dir"])
        .arg(dir)
        .arg("--dist")
        .arg(dir.join("no-dist"))
        .env("LOADSHAPE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut stdout = BufReader::new(child.stdout.take().unwrap_or_else(|| panic!("stdout"))).lines();
    // The start-up lines: the version, `open http://ADDR/#token=…`, where the page comes from, `runs stored in …`
    // (the last).
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        let mut addr = None;
        loop {
            let line = stdout
                .next_line()
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("serve ended before printing its address"));
            if let Some(rest) = line.trim().strip_prefix("open http://") {
                addr = rest.split('/').next().map(str::to_string);
            }
            if line.trim().starts_with("runs stored in") {
                return addr.unwrap_or_else(|| panic!("no address before {line:?}"));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("serve printed no address in 30 s"));
    Serve { child, addr, stdout }
}

async fn send(ws: &mut Ws, msg: ClientMsg) {
    let text = serde_json::to_string(&msg).unwrap_or_else(|e| panic!("{e}"));
    ws.send(Message::text(text)).await.unwrap_or_else(|e| panic!("{e}"));
}

async fn recv(ws: &mut Ws) -> ServerMsg {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no message in 10 s"))
            .unwrap_or_else(|| panic!("socket closed"))
            .unwrap_or_else(|e| panic!("{e}"));
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {t}"));
        }
    }
}

/// A session run on `sim` far longer than the test: 2 slots × 1,000 steps, 600 s.
fn long_scenario() -> serde_json::Value {
    sessions(1000)
}

/// 2 session slots of `steps` steps each on `sim`, at most 600 s.
fn sessions(steps: u32) -> serde_json::Value {
    serde_json::json!({
        "model": "engine",
        "workload": {"kind": "sessions", "sessions": 2, "steps": steps, "base_tokens": 2000, "gen_tokens": 32,
                     "tool_tokens": 32, "think_s": 0.0, "stagger_s": 0.05, "spread": 0.0, "duration_s": 600.0,
                     "drain": false},
        "profile": {"name": "toy", "block_size": 16, "num_kv_blocks": 4000, "max_num_seqs": 16,
                    "max_num_batched_tokens": 2048, "step_fixed_ms": 5.0, "per_seq_ms": 0.1,
                    "per_ctx_token_ms": 0.00001, "prefill_tokens_per_ms": 40.0, "prefill_fixed_ms": 1.0},
        "slo": {"ttft_ms": 2000.0, "tpot_ms": 100.0},
        "seed": 3,
        "counterfactuals": false
    })
}

/// Starts `scenario` on `sim` over the websocket; returns the socket and the run's id.
async fn start_run(addr: &str, scenario: serde_json::Value) -> (Ws, String) {
    let mut req = format!("ws://{addr}/ws?token={TOKEN}")
        .into_client_request()
        .unwrap_or_else(|e| panic!("{e}"));
    let origin = format!("http://{addr}").parse().unwrap_or_else(|e| panic!("{e}"));
    req.headers_mut().insert("Origin", origin);
    let (mut ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    send(
        &mut ws,
        ClientMsg::Hello {
            id: 1,
            protocol: PROTOCOL_VERSION,
            client: "shutdown-test".into(),
        },
    )
    .await;
    assert!(matches!(recv(&mut ws).await, ServerMsg::Hello { .. }));
    send(
        &mut ws,
        ClientMsg::StartRun {
            name: None,
            id: 2,
            scenario,
            target: "sim".into(),
        },
    )
    .await;
    match recv(&mut ws).await {
        ServerMsg::RunStarted { run, .. } => (ws, run.run_id),
        other => panic!("{other:?}"),
    }
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// After the start-up lines, nothing on stdout (serve used to print each live run's full text report there).
async fn assert_nothing_more_on_stdout(agent: &mut Serve) {
    let mut rest = Vec::new();
    while let Ok(Some(line)) = agent.stdout.next_line().await {
        rest.push(line);
    }
    assert!(rest.is_empty(), "{rest:?}");
}

/// The run's folder holds one summary, the store's `summary.json` (there used to be `records.jsonl.summary.json`
/// too).
fn assert_one_summary(run_dir: &Path) {
    let mut files: Vec<String> = std::fs::read_dir(run_dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{e}"))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    assert_eq!(
        files.iter().filter(|f| f.contains("summary")).collect::<Vec<_>>(),
        ["summary.json"],
        "{files:?}"
    );
}

/// Start a long run, wait for records, send `signal` to the serve process, and check what it left.
async fn signal_during_a_live_run(name: &str, signal: &str, keep_viewer: bool) {
    let dir = tempdir(name);
    let mut agent = serve(&dir).await;
    let (ws, run_id) = start_run(&agent.addr, long_scenario()).await;
    let run_dir = dir.join("runs").join(&run_id);
    let records = run_dir.join("records.jsonl");
    let t0 = Instant::now();
    while line_count(&records) < 2 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no records in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let viewer = if keep_viewer {
        Some(ws)
    } else {
        drop(ws);
        None
    };
    let pid = agent.child.id().unwrap_or_else(|| panic!("serve has a pid"));
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    // The bound is the grace period plus room for a loaded test machine; the run's own stop takes milliseconds.
    let bound = loadshape::cmd::serve::SHUTDOWN_GRACE + Duration::from_secs(15);
    let exit = tokio::time::timeout(bound, agent.child.wait())
        .await
        .unwrap_or_else(|_| panic!("serve did not exit within {bound:?} of {signal}"))
        .unwrap_or_else(|e| panic!("{e}"));
    drop(viewer);
    assert!(exit.success(), "{exit:?}");
    // Nothing but the start-up lines on stdout: no per-run report.
    let mut rest = Vec::new();
    while let Ok(Some(line)) = agent.stdout.next_line().await {
        rest.push(line);
    }
    assert!(rest.iter().all(|l| !l.contains("loadshape replay result")), "{rest:?}");

    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info["state"], "stopped", "{info}");
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(run_dir.join("summary.json")).unwrap_or_else(|e| panic!("summary.json: {e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (recs, bad) = read_records(&records).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty(), "every record line parses: {bad:?}");
    assert!(recs.len() >= 2);
    assert_eq!(info["records"], recs.len(), "{info}");
    assert_eq!(summary["completed"], recs.iter().filter(|r| r.ok).count(), "{summary}");
    // In-flight requests were cut, and recorded.
    assert!(
        recs.iter()
            .any(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:"))),
        "{recs:?}"
    );
    // One summary in the run's folder.
    let mut files: Vec<String> = std::fs::read_dir(&run_dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{e}"))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    assert_eq!(
        files.iter().filter(|f| f.contains("summary")).collect::<Vec<_>>(),
        ["summary.json"],
        "{files:?}"
    );
    // After a restart the run still reads as stopped, not interrupted.
    let store = RunStore::open(&dir).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        store.load(&run_id).unwrap_or_else(|e| panic!("{e:#}")).info.state,
        RunState::Stopped
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_live_run_stops_it_writes_its_summary_then_exits() {
    signal_during_a_live_run("term", "-TERM", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_a_live_run_stops_it_writes_its_summary_then_exits() {
    signal_during_a_live_run("int", "-INT", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_live_run_prints_nothing_and_keeps_one_summary() {
    let dir = tempdir("finished");
    let mut agent = serve(&dir).await;
    let (ws, run_id) = start_run(&agent.addr, sessions(2)).await;
    let run_dir = dir.join("runs").join(&run_id);
    let t0 = Instant::now();
    let info = loop {
        let info: Option<serde_json::Value> = std::fs::read(run_dir.join("run.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(info) = info
            && info["state"] != "running"
        {
            break info;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the run did not end in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(info["state"], "finished", "{info}");
    assert_eq!(info["records"], 4, "{info}");
    drop(ws);
    assert_one_summary(&run_dir);
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(run_dir.join("summary.json")).unwrap_or_else(|e| panic!("summary.json: {e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary["completed"], 4, "{summary}");
    let pid = agent.child.id().unwrap_or_else(|| panic!("serve has a pid"));
    let status = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let bound = loadshape::cmd::serve::SHUTDOWN_GRACE + Duration::from_secs(15);
    let exit = tokio::time::timeout(bound, agent.child.wait())
        .await
        .unwrap_or_else(|_| panic!("serve did not exit within {bound:?}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(exit.success(), "{exit:?}");
    assert_nothing_more_on_stdout(&mut agent).await;
}
