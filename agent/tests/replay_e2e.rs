//! `loadshape replay` end to end against `loadshape sim-server` (in-process, 127.0.0.1:0), running the real binary:
//! counts and records, the summary and `report`, a server that dies mid-run (abort, exit 2, records kept), and
//! SIGTERM mid-run (every started request has a record line). Each test is bounded to a few seconds. Every test runs
//! through both HTTP clients: `both!` makes a `hyper` and a `reqwest` test of each `async fn name(hc)`.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use loadshape::sim_server::{Config, Faults};
use shared::record::{FailureKind, FrameClock, RequestRecord};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

/// `name::hyper` and `name::reqwest` tests of each `async fn name(hc: &'static str)` (`--http-client hc`).
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn hyper() {
                super::$name("hyper").await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn reqwest() {
                super::$name("reqwest").await
            }
        }
    )*};
}

both!(
    sessions_against_sim_server_counts_records_and_summary,
    content_nonce_differs_per_run_unless_pinned,
    dead_server_aborts_with_exit_2_and_keeps_records,
    no_server_at_all_exits_2,
    sigterm_mid_run_keeps_a_record_for_every_started_request,
    report_names_malformed_lines,
    scenario_open_and_closed_loop_run_live,
    connection_dropped_mid_stream_is_a_failed_record,
    https_with_ca_cert_runs_and_without_it_fails,
    max_concurrency_bounds_an_open_loop_in_flight,
);

#[path = "common/sim_server.rs"]
mod sim_server_helper;

use sim_server_helper::Sim;

#[path = "common/files.rs"]
mod files;
#[path = "common/scratch.rs"]
mod scratch;
use files::records;
use scratch::Scratch;

async fn sim(config: Config) -> Sim {
    sim_server_helper::start(config).await
}

/// A metric's value from the sim-server's /metrics.
async fn metric(origin: &str, name: &str) -> f64 {
    let text = sim_server_helper::metrics_text(origin).await;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// A sidecar `replay` writes beside `--out`: `<out>.summary.json` or `<out>.server.json`.
fn sidecar(out: &str, kind: &str) -> serde_json::Value {
    let path = format!("{out}.{kind}.json");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `loadshape replay ARGS --http-client HC`.
async fn replay(hc: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        Command::new(BIN)
            .arg("replay")
            .args(args)
            .args(["--http-client", hc])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("replay did not finish in 30 s"))
    .unwrap_or_else(|e| panic!("{e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `replay` flags: `--url URL --out OUT` and `more`, whitespace-separated (no value here has a space).
fn flags<'a>(url: &'a str, out: &'a str, more: &'a str) -> Vec<&'a str> {
    let mut v = vec!["--url", url, "--out", out];
    v.extend(more.split_whitespace());
    v
}

/// `loadshape report ARGS`, run to its end.
async fn report(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("report")
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn fast() -> Config {
    Config {
        speed: 20.0,
        ..Config::default()
    }
}

async fn sessions_against_sim_server_counts_records_and_summary(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let s = sim(fast()).await;
    let out = dir.join("sessions.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, stdout, stderr) = replay(
        hc,
        &flags(&s.base, &out_s, "--model sim --sessions 3 --steps 3 --spread 0 --base 4000 --gen 64 --tool 50 --think 0.05 --stagger 0.05 --max-seconds 20 --seed 7 --quiet --scrape-interval 0.2"),
    )
    .await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let recs = records(&out);
    assert_eq!(recs.len(), 9, "3 sessions x 3 steps");
    for r in &recs {
        assert!(r.ok, "{r:?}");
        assert_eq!(r.gen_tokens, r.asked_tokens, "forced length honoured: {r:?}");
        assert!(r.asked_tokens >= 64);
        assert_eq!(r.sse_frames, r.gen_tokens);
        let cached = r.cached_tokens.unwrap_or_else(|| panic!("sim reports cached tokens"));
        if r.step == 0 {
            assert_eq!(cached, 0, "cold start must not hit: {r:?}");
        } else {
            let prompt = r.prompt_tokens.unwrap_or(0);
            assert!(cached * 10 > prompt * 8, "a resent conversation hits the cache: {r:?}");
        }
        assert!(r.designed_cached_tokens.is_some());
    }
    assert!(
        stdout.contains("Successful requests:") && stdout.contains("Server side (/metrics: vllm)"),
        "{stdout}"
    );
    assert_eq!(
        metric(&s.origin, "loadshape_sim:requests_received_total").await as usize,
        recs.len()
    );
    // Sidecars beside --out.
    let server = sidecar(&out_s, "server");
    assert_eq!(server["report"]["family"], "vllm");
    assert!(server["snapshots"].as_array().map_or(0, Vec::len) >= 2);
    // What the server said of its limits, for `calibrate --from`: the sim-server's vLLM-style cache_config_info.
    assert!(
        server["limits"]["cache_config_info"]
            .as_str()
            .is_some_and(|l| l.starts_with("vllm:cache_config_info{") && l.contains("num_gpu_blocks=")),
        "{}",
        server["limits"]
    );
    let meta = sidecar(&out_s, "summary");
    assert_eq!(meta["http_client"], hc);
    if hc == "hyper" {
        // One connection per session slot, opened before the first request and reused after each [DONE].
        assert_eq!(meta["connections_opened"], 3, "{meta}");
    }
    // Frames are timed by the kernel's receive time on the hyper path (Linux), by the user-space clock elsewhere.
    let kernel = hc == "hyper" && cfg!(target_os = "linux");
    assert_eq!(meta["rx_clock"], if kernel { "kernel" } else { "user" }, "{meta}");
    assert_eq!(
        meta["rx_clock_requests"][if kernel { "kernel" } else { "user" }],
        9,
        "{meta}"
    );
    // ... and each record says which clock timed it.
    let clock = if kernel { FrameClock::Kernel } else { FrameClock::User };
    assert!(recs.iter().all(|r| r.rx_clock == Some(clock)), "{recs:?}");
    // The hyper path notes when each request's write returned: t_submit -> write, for every request.
    if hc == "hyper" {
        let d = &meta["send_delay_us"];
        assert_eq!(d["n"], 9, "{meta}");
        let (p50, max) = (d["p50"].as_f64().unwrap_or(-1.0), d["max"].as_f64().unwrap_or(-1.0));
        assert!(p50 >= 0.0 && p50 <= max, "{meta}");
    } else {
        assert!(meta["send_delay_us"].is_null(), "{meta}");
    }
    // `report` reads the same file and scores it with the same module.
    let rep = report(&[&out_s, "--json"]).await;
    assert!(rep.status.success());
    let v: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["summary"]["completed"], 9);
    assert_eq!(v["records"], 9);
    // Retention across tool calls, from the live records: the 6 steps after a session's first, each sent about
    // 0.05 s after the previous one ended, nearly all cached.
    let retention = &v["summary"]["retention"];
    assert_eq!(retention.as_array().map(Vec::len), Some(1), "{retention}");
    assert_eq!(
        (&retention[0]["think_s_min"], &retention[0]["steps"]),
        (&serde_json::json!(0.0), &serde_json::json!(6))
    );
    assert!(
        retention[0]["cached_share"].as_f64().is_some_and(|s| s > 0.8),
        "{retention}"
    );
    assert!(stdout.contains("Cached share by think time (steps):"), "{stdout}");
    let (k, u) = if kernel { (9, 0) } else { (0, 9) };
    assert_eq!(v["checks"]["rx_clock_kernel"], k, "{v}");
    assert_eq!(v["checks"]["rx_clock_user"], u, "{v}");
}

async fn content_nonce_differs_per_run_unless_pinned(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let s = sim(fast()).await;
    let mut step0_cached = Vec::new();
    for (i, nonce) in [Some("5"), Some("5"), None].into_iter().enumerate() {
        let out = dir.join(format!("nonce{i}.jsonl"));
        let out_s = out.to_string_lossy().to_string();
        let mut args = flags(
            &s.base,
            &out_s,
            "--model sim --sessions 1 --steps 2 --spread 0 --base 4000 --gen 64 --tool 20 --think 0 --stagger 0 --seed 3 --quiet --metrics-url none",
        );
        if let Some(n) = nonce {
            args.extend(["--nonce", n]);
        }
        let (code, _, stderr) = replay(hc, &args).await;
        assert_eq!(code, 0, "{stderr}");
        let recs = records(&out);
        let r0 = recs
            .iter()
            .find(|r| r.step == 0)
            .unwrap_or_else(|| panic!("step 0 record"));
        step0_cached.push(r0.cached_tokens.unwrap_or(0));
    }
    // Run 2 repeats run 1's pinned nonce: its step 0 is served from the cache. Run 3 has a fresh nonce: cold.
    assert_eq!(step0_cached[0], 0);
    assert!(
        step0_cached[1] > 3000,
        "same --seed and --nonce resend the same text: {step0_cached:?}"
    );
    assert_eq!(
        step0_cached[2], 0,
        "a new run's content is unique even with the same --seed: {step0_cached:?}"
    );
}

async fn dead_server_aborts_with_exit_2_and_keeps_records(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let s = sim(Config {
        faults: Faults {
            fail_after: Some(2),
            ..Faults::default()
        },
        ..fast()
    })
    .await;
    let out = dir.join("dead.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let t0 = Instant::now();
    let (code, _stdout, stderr) = replay(
        hc,
        &flags(&s.base, &out_s, "--model sim --sessions 2 --steps 3 --spread 0 --base 4000 --gen 64 --tool 20 --think 0 --stagger 0 --respawn --max-fail-streak 2 --max-seconds 20 --quiet --metrics-url none"),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("did not measure anything"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(15));
    let recs = records(&out);
    let received = metric(&s.origin, "loadshape_sim:requests_received_total").await as usize;
    assert_eq!(recs.iter().filter(|r| r.ok).count(), 2);
    // Failures are the server's 503s, or requests the abort cut (some before they reached the server).
    let cut = recs
        .iter()
        .filter(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:")))
        .count();
    for r in recs.iter().filter(|r| !r.ok) {
        let e = r.error.as_deref().unwrap_or_default();
        assert!(e.starts_with("HTTP 503") || e.starts_with("cut:"), "{e}");
        // The record names the kind of its failure, as its text does.
        let kind = if e.starts_with("cut:") {
            FailureKind::Cut
        } else {
            FailureKind::HttpStatus
        };
        assert_eq!(r.failure, Some(kind), "{e}");
    }
    assert!(
        recs.len() >= received && recs.len() - received <= cut,
        "{} records, {received} seen by the server",
        recs.len()
    );
}

async fn no_server_at_all_exits_2(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let out = dir.join("refused.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, _, stderr) = replay(
        hc,
        &flags(
            "http://127.0.0.1:9/v1",
            &out_s,
            "--model m --sessions 2 --steps 2 --stagger 0 --quiet --metrics-url none",
        ),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(records(&out).len(), 2);
}

/// A TLS front for a plain server: accepts `https://` on 127.0.0.1 with the test certificate (`localhost`,
/// `127.0.0.1`, signed by tests/fixtures/tls/ca.pem) and pipes each connection to `plain` (host:port).
async fn tls_front(plain: String) -> (String, tokio::sync::oneshot::Sender<()>) {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let certs = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|e| panic!("{e}"));
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap_or_else(|e| panic!("{e}"));
    let config =
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("{e}"))
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap_or_else(|e| panic!("{e}"));
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                r = listener.accept() => match r { Ok(x) => x, Err(_) => return },
                _ = &mut rx => return,
            };
            let (acceptor, plain) = (acceptor.clone(), plain.clone());
            tokio::spawn(async move {
                // A handshake the client refuses (an unknown issuer) just ends here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(plain).await else {
                    return;
                };
                let _ = upstream.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    (format!("127.0.0.1:{}", addr.port()), tx)
}

async fn https_with_ca_cert_runs_and_without_it_fails(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let s = sim(fast()).await;
    let plain = s.origin.trim_start_matches("http://").to_string();
    let (front, _stop) = tls_front(plain).await;
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/ca.pem");
    let ca_s = ca.to_string_lossy().to_string();
    let base = format!("https://{front}/v1");
    let out = dir.join("https.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let args = flags(
        &base,
        &out_s,
        "--model sim --sessions 2 --steps 3 --spread 0 --base 4000 --gen 64 --tool 20 --think 0 --stagger 0 --seed 3 --quiet --scrape-interval 0.2",
    );
    // Trusting the test CA: the run completes, through TLS, with the dialect detected and /metrics scraped over
    // https (reqwest with the same roots).
    let mut with_ca = args.to_vec();
    with_ca.extend(["--ca-cert", &ca_s]);
    let (code, stdout, stderr) = replay(hc, &with_ca).await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let recs = records(&out);
    assert_eq!(recs.len(), 6);
    // (Each step's output length is drawn around --gen, at least 64 tokens; forced, so all of it arrives.)
    assert!(
        recs.iter()
            .all(|r| r.ok && r.gen_tokens == r.asked_tokens && r.gen_tokens >= 64),
        "{recs:?}"
    );
    // The kernel still times the frames under TLS on the hyper path.
    let clock = if hc == "hyper" && cfg!(target_os = "linux") {
        FrameClock::Kernel
    } else {
        FrameClock::User
    };
    assert!(recs.iter().all(|r| r.rx_clock == Some(clock)), "{recs:?}");
    let meta = sidecar(&out_s, "summary");
    assert_eq!(meta["http_client"], hc, "{meta}");
    let server = sidecar(&out_s, "server");
    assert_eq!(server["report"]["family"], "vllm", "{server}");

    // Without it the certificate is refused: nothing is measured (exit 2), and each record says why.
    let (code, _, stderr) = replay(hc, &args).await;
    assert_eq!(code, 2, "{stderr}");
    let recs = records(&out);
    assert!(!recs.is_empty() && recs.iter().all(|r| !r.ok), "{recs:?}");
    for r in &recs {
        let e = r.error.as_deref().unwrap_or_default().to_ascii_lowercase();
        assert!(e.contains("certificate"), "{e}");
    }
    // A --ca-cert that is not a certificate file is refused by name before anything is sent.
    let bogus = dir.join("not-a-cert.pem");
    std::fs::write(&bogus, "hello\n").unwrap_or_else(|e| panic!("{e}"));
    let bogus_s = bogus.to_string_lossy().to_string();
    let out2 = dir.join("https-bogus.jsonl");
    let out2_s = out2.to_string_lossy().to_string();
    let (code, _, stderr) = replay(
        hc,
        &[
            "--url",
            &base,
            "--model",
            "sim",
            "--out",
            &out2_s,
            "--ca-cert",
            &bogus_s,
            "--quiet",
        ],
    )
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("not-a-cert.pem"), "{stderr}");
    assert!(!out2.exists(), "no record file: nothing was sent");
}

async fn sigterm_mid_run_keeps_a_record_for_every_started_request(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    // Real time, long outputs: requests are in flight when the signal lands.
    let s = sim(Config::default()).await;
    let out = dir.join("sigterm.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let mut child = Command::new(BIN)
        .arg("replay")
        .args(flags(&s.base, &out_s, "--model sim --sessions 4 --steps 50 --spread 0 --base 4000 --gen 150 --tool 20 --think 0 --stagger 0.1 --quiet --metrics-url none"))
        .args(["--http-client", hc])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id().unwrap_or_else(|| panic!("child has a pid"));
    // Wait for at least one finished request, then signal this child only.
    let t0 = Instant::now();
    while std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < 2 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let done = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| panic!("replay did not exit within 10 s of SIGTERM"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.code(), Some(143));
    let recs = records(&out);
    let received = metric(&s.origin, "loadshape_sim:requests_received_total").await as usize;
    let cut = recs
        .iter()
        .filter(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:")))
        .count();
    assert_eq!(
        recs.iter().filter(|r| r.failure == Some(FailureKind::Cut)).count(),
        cut,
        "every cut record says so in `failure`"
    );
    // One record per request the server saw, plus cut requests that had not reached it yet.
    assert!(
        recs.len() >= received && recs.len() - received <= cut,
        "{} records, {received} seen by the server",
        recs.len()
    );
    assert!(recs.iter().any(|r| r.ok), "some requests finished before the signal");
    assert!(
        recs.iter()
            .any(|r| r.error.as_deref().is_some_and(|e| e.starts_with("cut:"))),
        "in-flight requests were cut and recorded"
    );
    let meta = sidecar(&out_s, "summary");
    assert_eq!(meta["requests_started"], meta["records_written"]);
    assert_eq!(meta["interrupted"], "SIGTERM");
}

async fn report_names_malformed_lines(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let s = sim(fast()).await;
    let out = dir.join("bad.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, _, stderr) = replay(
        hc,
        &flags(&s.base, &out_s, "--model sim --sessions 1 --steps 2 --spread 0 --base 4000 --gen 64 --tool 20 --think 0 --quiet --metrics-url none --endpoint chat"),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let mut text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    text.push_str("{\"schema\": 1, \"truncated\n");
    std::fs::write(&out, text).unwrap_or_else(|e| panic!("{e}"));
    let rep = report(&[&out_s]).await;
    assert!(rep.status.success());
    let err = String::from_utf8_lossy(&rep.stderr);
    assert!(err.contains("bad.jsonl:3: malformed record"), "{err}");
    assert!(String::from_utf8_lossy(&rep.stdout).contains("Successful requests:                        2"));

    // A last line cut inside a multi-byte character (`printf '{"error":"caf\xc3' >> bad.jsonl`) costs that line
    // only, and is named as torn. Before, the whole file failed: "stream did not contain valid UTF-8".
    let mut bytes = std::fs::read(&out).unwrap_or_else(|e| panic!("{e}"));
    bytes.extend_from_slice(b"{\"error\":\"caf\xc3");
    std::fs::write(&out, bytes).unwrap_or_else(|e| panic!("{e}"));
    let rep = report(&[&out_s]).await;
    let err = String::from_utf8_lossy(&rep.stderr);
    assert!(rep.status.success(), "{err}");
    assert!(err.contains("bad.jsonl:3: malformed record"), "{err}");
    assert!(err.contains("bad.jsonl:4: skipped a torn last line"), "{err}");
    assert!(
        err.contains("skipped 2 line(s) (1 malformed, 1 torn last line)"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&rep.stdout).contains("Successful requests:                        2"));
    let rep = report(&[&out_s, "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["records"], 2);
    assert_eq!(v["malformed_lines"], serde_json::json!([3, 4]));
    assert_eq!(v["torn_last_line"], 4);
}

fn engine_scenario(workload: serde_json::Value) -> String {
    serde_json::json!({
        "model": "engine", "seed": 11, "counterfactuals": false, "workload": workload,
        "profile": {"name": "p", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 64,
                    "max_num_batched_tokens": 8192, "step_fixed_ms": 5.0, "per_seq_ms": 0.01,
                    "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 30.0},
        "slo": {"ttft_ms": 800.0, "tpot_ms": 50.0}
    })
    .to_string()
}

async fn scenario_open_and_closed_loop_run_live(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    let s = sim(fast()).await;
    let cases = [
        (
            "poisson",
            serde_json::json!({"kind": "poisson", "num_requests": 12, "rate_rps": 20.0,
                "prompt": {"dist": "fixed", "tokens": 300}, "output": {"dist": "uniform", "min": 8, "max": 24},
                "shared_prefix_tokens": 256}),
        ),
        (
            "closed",
            serde_json::json!({"kind": "closed_loop", "users": 3, "num_requests": 9, "think_s": 0.01,
                "prompt": {"dist": "fixed", "tokens": 100}, "output": {"dist": "fixed", "tokens": 16},
                "shared_prefix_tokens": 0}),
        ),
    ];
    for (name, workload) in cases {
        let scen = dir.join(format!("{name}.json"));
        std::fs::write(&scen, engine_scenario(workload)).unwrap_or_else(|e| panic!("{e}"));
        let out = dir.join(format!("{name}.jsonl"));
        let out_s = out.to_string_lossy().to_string();
        let scen_s = scen.to_string_lossy().to_string();
        let (code, stdout, stderr) = replay(
            hc,
            &[
                "--url",
                &s.base,
                "--out",
                &out_s,
                "--scenario",
                &scen_s,
                "--quiet",
                "--metrics-url",
                "none",
            ],
        )
        .await;
        assert_eq!(code, 0, "{name}: {stderr}");
        let recs = records(&out);
        let n = if name == "poisson" { 12 } else { 9 };
        assert_eq!(recs.len(), n, "{name}");
        assert!(recs.iter().all(|r| r.ok && r.gen_tokens == r.asked_tokens), "{name}");
        assert!(
            stdout.contains("TTFT <= 800 ms"),
            "the scenario's SLO is used: {stdout}"
        );
        if name == "poisson" {
            // Requests share the run's 256-token prefix: after the first, they hit the cache.
            let hits = recs.iter().filter(|r| r.cached_tokens.unwrap_or(0) >= 200).count();
            assert!(hits >= n - 2, "shared prefix cached: {hits} of {n}");
            assert!(recs.windows(2).any(|w| w[0].t_submit != w[1].t_submit));
        }
    }
}

async fn connection_dropped_mid_stream_is_a_failed_record(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    // The server drops every connection after 5 tokens: each request gets a record with the transport's error and
    // the tokens that arrived, none hangs, and the next request opens a new connection.
    let s = sim(Config {
        faults: Faults {
            drop_after_tokens: Some(5),
            ..Faults::default()
        },
        ..fast()
    })
    .await;
    let scen = dir.join("drop.json");
    let workload = serde_json::json!({"kind": "closed_loop", "users": 2, "num_requests": 6, "think_s": 0.0,
        "prompt": {"dist": "fixed", "tokens": 50}, "output": {"dist": "fixed", "tokens": 32},
        "shared_prefix_tokens": 0});
    std::fs::write(&scen, engine_scenario(workload)).unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join("drop.jsonl");
    let (out_s, scen_s) = (out.to_string_lossy().to_string(), scen.to_string_lossy().to_string());
    let (code, _, stderr) = replay(
        hc,
        &[
            "--url",
            &s.base,
            "--out",
            &out_s,
            "--scenario",
            &scen_s,
            "--quiet",
            "--metrics-url",
            "none",
            "--max-fail-streak",
            "5",
        ],
    )
    .await;
    // Nothing completed: the run says it measured nothing.
    assert_eq!(code, 2, "{stderr}");
    let recs = records(&out);
    assert_eq!(recs.len(), 6, "every request has its record");
    assert_eq!(
        metric(&s.origin, "loadshape_sim:requests_received_total").await as usize,
        6
    );
    for r in &recs {
        assert!(!r.ok);
        let e = r.error.as_deref().unwrap_or_default();
        assert!(e.starts_with("stream error"), "{hc}: {e}");
        // The server sends exactly 5 tokens, then drops: the record keeps what arrived.
        assert_eq!(r.gen_tokens, 5, "{r:?}");
        assert!((1..=5).contains(&r.sse_frames), "{r:?}");
    }
    let meta = sidecar(&out_s, "summary");
    assert_eq!(meta["http_client"], hc);
    if hc == "hyper" {
        // 2 warmed connections, each lost with its request: one per request in the end.
        assert_eq!(meta["connections_opened"], 6, "{meta}");
    }
}

/// The most records whose `[t_submit, t_submit + wall_s]` overlap at one moment.
fn peak_in_flight(recs: &[RequestRecord]) -> usize {
    let mut edges: Vec<(f64, i32)> = recs
        .iter()
        .flat_map(|r| [(r.t_submit, 1), (r.t_submit + r.wall_s, -1)])
        .collect();
    // Ends before starts at the same instant: a request that ended frees its permit for the next.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

async fn max_concurrency_bounds_an_open_loop_in_flight(hc: &'static str) {
    let dir = Scratch::new(&format!("e2e-{hc}"));
    // 24 requests arriving at 400 rps, each streaming 40 tokens at the sim-server's pace: far more than 2 would be
    // in flight at once. With --max-concurrency 2 a due request waits for one to end (issue #16 item 2).
    let s = sim(fast()).await;
    let workload = serde_json::json!({"kind": "poisson", "num_requests": 24, "rate_rps": 400.0,
        "prompt": {"dist": "fixed", "tokens": 200}, "output": {"dist": "fixed", "tokens": 40},
        "shared_prefix_tokens": 0});
    let scen = dir.join("capped.json");
    std::fs::write(&scen, engine_scenario(workload)).unwrap_or_else(|e| panic!("{e}"));
    let scen_s = scen.to_string_lossy().to_string();
    let mut peaks = Vec::new();
    for cap in [None, Some("2")] {
        let out = dir.join(format!("capped-{}.jsonl", cap.unwrap_or("none")));
        let out_s = out.to_string_lossy().to_string();
        let mut args = vec!["--url", &s.base, "--out", &out_s, "--scenario", &scen_s, "--quiet"];
        args.extend(["--metrics-url", "none"]);
        if let Some(c) = cap {
            args.extend(["--max-concurrency", c]);
        }
        let (code, _, stderr) = replay(hc, &args).await;
        assert_eq!(code, 0, "{stderr}");
        let recs = records(&out);
        assert_eq!(recs.len(), 24, "every planned request is sent and recorded");
        assert!(recs.iter().all(|r| r.ok), "{stderr}");
        peaks.push(peak_in_flight(&recs));
    }
    assert!(
        peaks[0] > 2,
        "without the cap the open loop overlaps: peak {}",
        peaks[0]
    );
    assert!(
        peaks[1] <= 2,
        "--max-concurrency 2 held {} requests in flight at once",
        peaks[1]
    );
    let (code, _, stderr) = replay(hc, &["--url", &s.base, "--out", "/dev/null", "--max-concurrency", "0"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("--max-concurrency"), "{stderr}");
}

/// A `--scenario` file of 16 Poisson requests of exactly `tokens` designed prompt tokens (no shared prefix).
fn fixed_prompt_scenario(dir: &Path, name: &str, tokens: u32) -> String {
    let scen = dir.join(name);
    let workload = serde_json::json!({"kind": "poisson", "num_requests": 16, "rate_rps": 40.0,
        "prompt": {"dist": "fixed", "tokens": tokens}, "output": {"dist": "fixed", "tokens": 4},
        "shared_prefix_tokens": 0});
    std::fs::write(&scen, engine_scenario(workload)).unwrap_or_else(|e| panic!("{e}"));
    scen.to_string_lossy().to_string()
}

/// Median of `prompt_tokens / designed_prompt_tokens` over a run's records (each must carry both).
fn median_ratio(recs: &[RequestRecord]) -> f64 {
    let mut r: Vec<f64> = recs
        .iter()
        .map(|r| {
            let d = r
                .designed_prompt_tokens
                .unwrap_or_else(|| panic!("no designed_prompt_tokens: {r:?}"));
            let p = r.prompt_tokens.unwrap_or_else(|| panic!("no prompt_tokens: {r:?}"));
            p as f64 / d as f64
        })
        .collect();
    r.sort_by(f64::total_cmp);
    r[r.len().div_ceil(2) - 1] // nearest rank, as shared::metrics
}

/// A sim-server whose tokenizer counts every piece twice (about 2 tokens per designed prose token): without
/// matching the realized prompts miss the designed ones; with it (the default) they land within 1 % on the median,
/// every record carries both sizes, and summary.json reports the measurement and both medians.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenizer_matching_makes_realized_prompts_the_designed_ones() {
    let dir = Scratch::new("e2e-tok");
    let s = sim(Config {
        tokens_per_piece: 2,
        ..fast()
    })
    .await;
    let scen = fixed_prompt_scenario(&dir, "fixed2000.json", 2000);
    let mut ratios = Vec::new();
    for mode in ["off", "auto"] {
        let out = dir.join(format!("match-{mode}.jsonl"));
        let out_s = out.to_string_lossy().to_string();
        let (code, stdout, stderr) = replay(
            "hyper",
            &[
                "--url",
                &s.base,
                "--out",
                &out_s,
                "--scenario",
                &scen,
                // Pinned content: the ratio a sample measures depends on the filler's words (docs/replay.md).
                "--nonce",
                "7",
                "--quiet",
                "--metrics-url",
                "none",
                "--match-tokenizer",
                mode,
            ],
        )
        .await;
        assert_eq!(code, 0, "{mode}: {stdout}\n{stderr}");
        let recs = records(&out);
        assert_eq!(recs.len(), 16);
        assert!(
            recs.iter().all(|r| r.ok && r.designed_prompt_tokens == Some(2000)),
            "{recs:?}"
        );
        let summary = sidecar(&out_s, "summary");
        let tok = &summary["tokenizer"];
        let ratio = median_ratio(&recs);
        if mode == "auto" {
            assert_eq!(tok["source"], "tokenize", "{summary}");
            assert!(
                tok["endpoint"].as_str().is_some_and(|e| e.ends_with("/tokenize")),
                "{tok}"
            );
            let prose = tok["prose_ratio"].as_f64().unwrap_or(0.0);
            let code_r = tok["code_ratio"].as_f64().unwrap_or(0.0);
            assert!((1.9..2.2).contains(&prose) && code_r > prose, "{tok}");
            assert!((ratio - 1.0).abs() < 0.01, "matched: realized/designed median {ratio}");
            assert!(stderr.contains("tokenizer (tokenize)"), "{stderr}");
        } else {
            assert_eq!(tok["source"], "off", "{summary}");
            assert!(
                (ratio - 1.0).abs() > 0.02,
                "unmatched: realized/designed median {ratio}"
            );
        }
        let sm = &summary["summary"];
        assert_eq!(sm["designed_prompt_tokens_p50"], 2000.0, "{sm}");
        assert!(sm["realized_prompt_tokens_p50"].as_f64().is_some(), "{sm}");
        let r50 = sm["realized_to_designed_prompt_ratio_p50"].as_f64().unwrap_or(0.0);
        assert!((r50 - ratio).abs() < 1e-9, "{r50} vs {ratio}");
        ratios.push(ratio);
    }
    assert!(ratios[0] > 1.8 && (ratios[1] - 1.0).abs() < 0.01, "{ratios:?}");
}

/// Sessions' base context (code on odd slots, prose on even) and tool output are sized for the tokenizer too (the
/// sim-server's own rule: about 1.02 server tokens per designed prose token, a third more for code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenizer_matching_sizes_session_filler() {
    let dir = Scratch::new("e2e-tok");
    let s = sim(fast()).await;
    for mode in ["off", "auto"] {
        let out = dir.join(format!("sessions-{mode}.jsonl"));
        let out_s = out.to_string_lossy().to_string();
        let (code, stdout, stderr) = replay(
            "hyper",
            // Pinned content (--nonce): the ratio a sample measures depends on the filler's words (docs/replay.md).
            &[
                flags(&s.base, &out_s, "--model sim --sessions 2 --steps 2 --spread 0 --base 3000 --gen 16 --tool 200 --think 0 --stagger 0 --max-seconds 20 --seed 3 --nonce 7 --quiet --metrics-url none --match-tokenizer"),
                vec![mode],
            ]
            .concat(),
        )
        .await;
        assert_eq!(code, 0, "{mode}: {stdout}\n{stderr}");
        let recs = records(&out);
        assert_eq!(recs.len(), 4);
        // Slot 1's base is code: 1.33 server tokens per designed token unscaled.
        let worst = recs
            .iter()
            .map(|r| {
                let d = r.designed_prompt_tokens.unwrap_or(0) as f64;
                (r.prompt_tokens.unwrap_or(0) as f64 / d - 1.0).abs()
            })
            .fold(0.0, f64::max);
        if mode == "auto" {
            // Each prompt is one draw of words (code words are 1 to 6 tokens), so single prompts scatter by a
            // percent or two around the matched size.
            assert!(worst < 0.05, "every step within 5 % when matched: {worst}");
        } else {
            assert!(worst > 0.1, "the code session misses unmatched: {worst}");
        }
    }
}

/// A server without `/tokenize` is measured through `usage.prompt_tokens` of probe requests (not recorded); a
/// target that answers neither runs unscaled with `auto` and is refused, naming `/tokenize`, with `on`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenizer_falls_back_to_usage_probes_and_on_refuses_when_nothing_answers() {
    let dir = Scratch::new("e2e-tok");
    let s = sim(Config {
        faults: Faults {
            no_tokenize: true,
            ..Faults::default()
        },
        tokens_per_piece: 2,
        ..fast()
    })
    .await;
    let scen = fixed_prompt_scenario(&dir, "fixed1500.json", 1500);
    let out = dir.join("probes.jsonl");
    let out_s = out.to_string_lossy().to_string();
    let (code, stdout, stderr) = replay(
        "hyper",
        &[
            "--url",
            &s.base,
            "--out",
            &out_s,
            "--scenario",
            &scen,
            // Pinned content: the ratio a sample measures depends on the filler's words (docs/replay.md).
            "--nonce",
            "7",
            "--quiet",
            "--metrics-url",
            "none",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary = sidecar(&out_s, "summary");
    assert_eq!(summary["tokenizer"]["source"], "usage", "{summary}");
    let recs = records(&out);
    assert_eq!(recs.len(), 16, "the probes are not recorded");
    let ratio = median_ratio(&recs);
    assert!((ratio - 1.0).abs() < 0.01, "matched through probes: {ratio}");
    assert!(stderr.contains("/tokenize did not count tokens"), "{stderr}");

    // Nothing listens here: neither /tokenize nor a probe answers.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        l.local_addr().unwrap_or_else(|e| panic!("{e}")).port()
    };
    let url = format!("http://127.0.0.1:{dead}/v1");
    let out2 = dir.join("refused.jsonl").to_string_lossy().to_string();
    let args = [
        "--url",
        &url,
        "--model",
        "m",
        "--dialect",
        "vllm",
        "--out",
        &out2,
        "--scenario",
        &scen,
        "--quiet",
    ];
    let (code, _, stderr) = replay(
        "hyper",
        &[&args[..], &["--metrics-url", "none", "--match-tokenizer", "on"]].concat(),
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("127.0.0.1:{dead}/tokenize")) && stderr.contains("--match-tokenizer on"),
        "{stderr}"
    );
}
