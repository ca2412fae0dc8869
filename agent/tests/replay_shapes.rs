//! Session shapes of issue #44 live: the request bodies a capture server receives (a tiny axum server on
//! 127.0.0.1:0 that keeps every body and streams a short reply), from the real binary running a scenario's
//! sessions. A compacted step starts a new conversation from a summary; every other step's messages extend the
//! previous step's exactly.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use loadshape::replay::records::read_records;
use serde_json::{Value, json};
use shared::record::RequestRecord;
use shared::workload::SessionWorkload;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_loadshape");

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

#[path = "common/sim_server.rs"]
mod sim_server_helper;

type Bodies = Arc<Mutex<Vec<Value>>>;

/// Keeps the body; streams `max_tokens` as one content frame of that many words and a final usage frame.
async fn capture(State(bodies): State<Bodies>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = v["max_tokens"].as_u64().unwrap_or(1);
    let k = {
        let mut b = bodies.lock().unwrap_or_else(|e| e.into_inner());
        b.push(v.clone());
        b.len()
    };
    // Asked to reason (`chat_template_kwargs`): that many tokens of reasoning first, in one frame.
    let budget = v["chat_template_kwargs"]["thinking_budget"]
        .as_u64()
        .unwrap_or(0)
        .min(n - 1);
    let words: String = (budget..n).map(|i| format!(" r{k}w{i}")).collect();
    let thoughts: String = (0..budget).map(|i| format!(" t{k}w{i}")).collect();
    let mut usage = json!({"prompt_tokens": 100, "completion_tokens": n, "total_tokens": 100 + n});
    let mut frames = Vec::new();
    if budget > 0 {
        frames
            .push(json!({"choices": [{"index": 0, "delta": {"reasoning_content": thoughts}, "finish_reason": null}]}));
        usage["completion_tokens_details"] = json!({"reasoning_tokens": budget});
    }
    frames.push(json!({"choices": [{"index": 0, "delta": {"content": words}, "finish_reason": "length"}]}));
    frames.push(json!({"choices": [], "usage": usage}));
    let mut out = String::new();
    for f in frames {
        out.push_str(&format!("data: {f}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(out))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`capture`], but a sub-agent's request (its messages hold a "Sub-agent" task) answers after a pause.
async fn capture_slow_children(state: State<Bodies>, body: Bytes) -> Response {
    if String::from_utf8_lossy(&body).contains("Sub-agent ") {
        tokio::time::sleep(CHILD_PAUSE).await;
    }
    capture(state, body).await
}

const CHILD_PAUSE: Duration = Duration::from_millis(2500);

async fn server() -> (String, Bodies) {
    serve_app(false).await
}

async fn serve_app(slow_children: bool) -> (String, Bodies) {
    let bodies: Bodies = Arc::default();
    let app = if slow_children {
        Router::new().route("/v1/chat/completions", post(capture_slow_children))
    } else {
        Router::new()
            .route("/v1/chat/completions", post(capture))
            .route("/v1/completions", post(capture))
    }
    .with_state(bodies.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), bodies)
}

const SEED: u64 = 5;

/// One session's scenario (a ladder of one rung: its base and steps are exact), with `extra` workload fields.
fn scenario(extra: Value) -> (Value, SessionWorkload) {
    let mut w = json!({"kind": "sessions", "ladder": "2000:8", "gen_tokens": 64, "tool_tokens": 1000,
        "think_s": 0.0, "stagger_s": 0.0, "duration_s": 60.0});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        w[k] = v;
    }
    let mut sessions = w.clone();
    sessions.as_object_mut().map(|o| o.remove("kind"));
    let parsed: SessionWorkload = serde_json::from_value(sessions).unwrap_or_else(|e| panic!("{e}"));
    let example = include_str!("../../examples/engine-sessions-10k.json");
    let mut sc: Value = serde_json::from_str(example).unwrap_or_else(|e| panic!("{e}"));
    sc["workload"] = w;
    sc["seed"] = json!(SEED);
    (sc, parsed)
}

/// Runs the scenario against the capture server; returns the bodies in the order they were sent, and the records.
async fn replay(dir: &Scratch, sc: &Value, endpoint: &str) -> (Vec<Value>, Vec<RequestRecord>) {
    let (url, bodies) = server().await;
    let (recs, _) = replay_at(dir, sc, endpoint, &url).await;
    let b = bodies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    (b, recs)
}

/// Runs the scenario against `url`; returns the records (by step) and the report printed.
async fn replay_at(dir: &Scratch, sc: &Value, endpoint: &str, url: &str) -> (Vec<RequestRecord>, String) {
    replay_fleet(dir, sc, endpoint, &[url], &[]).await
}

/// Runs the scenario against the replicas `urls` with `extra` flags; returns the records (by step) and the report.
async fn replay_fleet(
    dir: &Scratch,
    sc: &Value,
    endpoint: &str,
    urls: &[&str],
    extra: &[&str],
) -> (Vec<RequestRecord>, String) {
    let path = dir.join("scenario.json");
    std::fs::write(&path, sc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let out = dir.join(format!("{endpoint}.jsonl"));
    let mut args: Vec<String> = vec!["replay".into()];
    for u in urls {
        args.extend(["--url".into(), (*u).to_string()]);
    }
    args.extend(extra.iter().map(|a| (*a).to_string()));
    let rest = [
        "--model",
        "m",
        "--scenario",
        &path.to_string_lossy(),
        "--endpoint",
        endpoint,
        "--out",
        &out.to_string_lossy(),
        "--match-tokenizer",
        "off",
        "--metrics-url",
        "none",
        "--quiet",
    ];
    args.extend(rest.iter().map(|a| (*a).to_string()));
    let o = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(BIN).args(&args).stdin(Stdio::null()).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("replay did not finish in 60 s"))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let (mut recs, bad) = read_records(&out).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(bad.is_empty(), "{bad:?}");
    recs.sort_by_key(|r| r.step);
    (recs, String::from_utf8_lossy(&o.stdout).into_owned())
}

fn messages(body: &Value) -> &Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_step_starts_a_new_conversation_from_a_summary() {
    let dir = Scratch::new("shapes-compaction");
    let (sc, w) = scenario(json!({"compaction": {"at_tokens": 3300, "summary_tokens": 300}}));
    let plan = w.plan(0, 0, SEED);
    let compacted: Vec<u32> = (0..plan.steps).filter(|&k| plan.compacted(k)).collect();
    assert!(compacted.len() >= 2, "the plan compacts at least twice: {compacted:?}");
    let (bodies, recs) = replay(&dir, &sc, "chat").await;
    assert_eq!(bodies.len(), 8);
    for r in &recs {
        let designed = r.designed_cached_tokens.unwrap_or(u64::MAX);
        assert_eq!(designed == 0, r.step == 0 || compacted.contains(&r.step), "{r:?}");
        assert_eq!(r.designed_prompt_tokens, Some(plan.prompt_tokens(r.step)));
    }
    for k in 1..bodies.len() {
        let (prev, now) = (messages(&bodies[k - 1]), messages(&bodies[k]));
        let system = now[0]["content"].as_str().unwrap_or_default();
        if compacted.contains(&(k as u32)) {
            // A new conversation: the summary as the system prompt, then the task; nothing of the old one.
            assert_eq!(now.len(), 2, "step {k}: {now:?}");
            assert!(system.starts_with("[Summary of the conversation so far]\n"), "step {k}");
            assert_ne!(now[0], prev[0], "step {k}");
            assert_eq!(now[1], prev[1], "step {k}: the task goes on");
            let words = system.split_whitespace().count();
            assert!(
                (200..400).contains(&words),
                "a summary of about 300 tokens: {words} words"
            );
        } else {
            // The previous messages exactly, then the reply and the tool output.
            assert_eq!(&now[..prev.len()], &prev[..], "step {k} extends step {}", k - 1);
            assert_eq!(now.len(), prev.len() + 2, "step {k}");
            assert_eq!(now[prev.len()]["role"], "assistant");
        }
    }
}

/// Reasoning is asked for with the server's own control, recorded beside the reply, and sent back in the next
/// prompt only when echoed: as the assistant message's `reasoning_content`, else not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoed_reasoning_goes_back_and_stripped_reasoning_does_not() {
    let dir = Scratch::new("shapes-reasoning");
    for echo in [true, false] {
        let (sc, w) = scenario(json!({"ladder": "2000:3", "reasoning": {"tokens": 40, "echo": echo}}));
        let plan = w.plan(0, 0, SEED);
        let (bodies, recs) = replay(&dir, &sc, "chat").await;
        assert_eq!(bodies.len(), 3);
        for (k, b) in bodies.iter().enumerate() {
            assert_eq!(
                b["chat_template_kwargs"],
                json!({"enable_thinking": true, "thinking_budget": 40})
            );
            // The forced length counts the reasoning and the reply.
            assert_eq!(
                b["max_tokens"],
                json!(plan.output_tokens(k as u32)),
                "echo {echo} step {k}"
            );
        }
        for r in &recs {
            assert_eq!(r.reasoning_tokens, Some(40), "{r:?}");
            assert!(
                r.ttft_content_s.expect("ttft_content") >= r.ttft_s.expect("ttft"),
                "{r:?}"
            );
        }
        for k in 1..bodies.len() {
            let (prev, now) = (messages(&bodies[k - 1]), messages(&bodies[k]));
            assert_eq!(
                &now[..prev.len()],
                &prev[..],
                "echo {echo} step {k}: the prefix up to the reply"
            );
            let reply = &now[prev.len()];
            let content = reply["content"].as_str().unwrap_or_default();
            assert!(
                content.starts_with(&format!(" r{k}w40 ")),
                "echo {echo} step {k}: {content}"
            );
            assert!(
                !content.contains(&format!("t{k}w")),
                "the reply is content only: {content}"
            );
            if echo {
                let thoughts = reply["reasoning_content"].as_str().unwrap_or_default();
                assert!(thoughts.starts_with(&format!(" t{k}w0 ")), "echo step {k}: {reply}");
                assert_eq!(thoughts.split_whitespace().count(), 40);
            } else {
                assert!(reply.get("reasoning_content").is_none(), "stripped step {k}: {reply}");
            }
        }
        // The designed prefix: the previous prompt (as the server counted it: 100) and, echoed, the reasoning and
        // the reply; without echo it breaks at the reply.
        let want = if echo {
            100 + 40 + u64::from(plan.gen_tokens[0])
        } else {
            100
        };
        assert_eq!(recs[1].designed_cached_tokens, Some(want), "echo {echo}");
    }
}

/// Against sim-server, which streams the reasoning it is asked for (on chat and on Responses): the records carry it
/// (from usage), the report shows TTFT-content and the reasoning share, and the server's prefix cache reuses the reply
/// only when the reasoning is echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_against_sim_server_breaks_reuse_unless_echoed() {
    let dir = Scratch::new("shapes-reasoning-sim");
    let sim = sim_server_helper::start(loadshape::sim_server::Config {
        speed: 20.0,
        ..Default::default()
    })
    .await;
    for (endpoint, echo) in [
        ("chat", true),
        ("chat", false),
        ("responses", true),
        ("responses", false),
    ] {
        let (sc, w) = scenario(json!({"ladder": "2000:4", "gen_tokens": 200, "tool_tokens": 300,
            "reasoning": {"tokens": 300, "echo": echo}}));
        let plan = w.plan(0, 0, SEED);
        let (recs, stdout) = replay_at(&dir, &sc, endpoint, &sim.base).await;
        assert_eq!(recs.len(), 4, "{endpoint}: {recs:?}");
        for r in &recs {
            assert!(r.ok, "{endpoint}: {r:?}");
            assert_eq!(
                (r.reasoning_tokens, r.gen_tokens),
                (Some(300), u64::from(plan.output_tokens(r.step))),
                "{endpoint}"
            );
            assert!(
                r.ttft_content_s.expect("ttft_content") > r.ttft_s.expect("ttft"),
                "{r:?}"
            );
        }
        assert!(
            stdout.contains("Hidden reasoning") && stdout.contains("TTFT-content"),
            "{stdout}"
        );
        for r in recs.iter().filter(|r| r.step > 0) {
            let (cached, designed) = (r.cached_tokens.unwrap_or(0), r.designed_cached_tokens.unwrap_or(0));
            // Whole 16-token blocks of the designed prefix (the reply's last token is never computed).
            assert!(
                cached <= designed && cached + 32 >= designed,
                "{endpoint} echo {echo}: {cached} of {designed}: {r:?}"
            );
            let prev = &recs[r.step as usize - 1];
            let prev_prompt = prev.prompt_tokens.unwrap_or(0);
            if echo {
                assert!(
                    cached >= prev_prompt + 300 - 16,
                    "{endpoint} echoed: the reasoning and reply are reused: {cached}"
                );
            } else {
                assert!(
                    cached <= prev_prompt,
                    "{endpoint} stripped: nothing past the previous prompt: {cached}"
                );
            }
        }
    }
}

/// Sub-agents live: each child's first request is the parent's conversation exactly, then the parent's reply and
/// the child's task; its next step extends its own; the parent's next step (with `wait`) carries the children's
/// last replies after its tool output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_fork_from_the_parents_exact_conversation() {
    let dir = Scratch::new("shapes-subagents");
    for wait in [true, false] {
        let (sc, _) = scenario(
            json!({"ladder": "2000:4", "subagents": {"every_steps": 2, "count": 2, "steps": 2,
            "gen_tokens": 30, "tool_tokens": 200, "wait": wait}}),
        );
        let (bodies, recs) = replay(&dir, &sc, "chat").await;
        // 4 parent steps; one fan-out (after step 1) of 2 children of 2 steps.
        assert_eq!(bodies.len(), 8, "wait {wait}");
        assert_eq!(recs.len(), 8);
        let is_child = |b: &Value| {
            messages(b)
                .get(5)
                .and_then(|m| m["content"].as_str())
                .is_some_and(|c| c.starts_with("Sub-agent "))
        };
        let parent: Vec<&Value> = bodies.iter().filter(|b| !is_child(b)).collect();
        assert_eq!(parent.len(), 4, "wait {wait}");
        let p1 = messages(parent[1]);
        let p2 = messages(parent[2]);
        let mut child_replies = Vec::new();
        for (idx, b) in bodies.iter().enumerate().filter(|(_, b)| is_child(b)) {
            let m = messages(b);
            if m.len() == p1.len() + 2 {
                // Step 0: the parent's step-1 messages exactly, the reply the parent got, the child's task.
                assert_eq!(
                    &m[..p1.len()],
                    &p1[..],
                    "wait {wait}: a child forks the parent's exact prefix"
                );
                assert_eq!(m[p1.len()]["content"], p2[p1.len()]["content"], "the parent's reply");
                assert_eq!(m[p1.len()]["role"], "assistant");
                assert_eq!(b["max_tokens"], 30);
            } else {
                // Step 1: its own step 0 and reply, then a tool output.
                assert_eq!(m.len(), p1.len() + 4, "wait {wait}: {m:?}");
                let step0 = bodies
                    .iter()
                    .find(|o| is_child(o) && messages(o).len() == p1.len() + 2 && messages(o)[5] == m[5])
                    .expect("its step 0");
                assert_eq!(&m[..p1.len() + 2], &messages(step0)[..], "wait {wait}");
                // The capture server's reply to this request (body `idx + 1`): the child's result.
                child_replies.push((0..30).map(|i| format!(" r{}w{i}", idx + 1)).collect::<String>());
            }
        }
        assert_eq!(child_replies.len(), 2);
        let tool = p2[p1.len() + 1]["content"].as_str().unwrap_or_default();
        for reply in &child_replies {
            assert_eq!(
                tool.contains(reply.as_str()),
                wait,
                "wait {wait}: results in the parent's next prompt"
            );
        }
        assert_eq!(tool.contains("[sub-agent results]"), wait);
        // Records: the children are sessions 1 and 2 (1 slot), instance 0, two steps each.
        for j in [1u64, 2] {
            let steps: Vec<u32> = recs.iter().filter(|r| r.session == j).map(|r| r.step).collect();
            assert_eq!(steps.len(), 2, "child {j}: {recs:?}");
            assert!(
                recs.iter()
                    .filter(|r| r.session == j)
                    .all(|r| r.inst == 0 && r.steps_asked == 2 && r.parent == Some(0))
            );
        }
        // A child's step 0 forks a cached prefix: the cold-start check counts the parent's step 0 only.
        assert!(recs.iter().any(|r| r.step == 0 && r.parent.is_some()));
    }
}

/// Without `wait` the parent goes on: its slot's next instance starts while the children of the previous one are
/// still running (as the simulator has it), and the run ends when they have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_not_waited_for_do_not_hold_the_slots_next_instance() {
    let dir = Scratch::new("shapes-subagents-nowait");
    let (url, _) = serve_app(true).await;
    let (sc, _) = scenario(json!({"ladder": "2000:2", "respawn": true, "duration_s": 1.5,
        "subagents": {"every_steps": 1, "count": 1, "steps": 1, "gen_tokens": 10, "tool_tokens": 50,
        "wait": false}}));
    let (recs, _) = replay_at(&dir, &sc, "chat", &url).await;
    let child = recs
        .iter()
        .find(|r| r.parent == Some(0) && r.inst == 0)
        .unwrap_or_else(|| panic!("the first instance's child: {recs:?}"));
    assert!(child.ok && child.wall_s >= CHILD_PAUSE.as_secs_f64() * 0.9, "{child:?}");
    let next = recs
        .iter()
        .find(|r| r.session == 0 && r.inst == 1 && r.step == 0)
        .unwrap_or_else(|| panic!("the slot's second instance: {recs:?}"));
    assert!(
        next.t_submit < child.t_submit + child.wall_s,
        "the next instance ({:.2} s) waited for the child ({:.2}–{:.2} s)",
        next.t_submit,
        child.t_submit,
        child.t_submit + child.wall_s
    );
    // Every child the run started was recorded (the run waited for them before ending).
    let fanned = recs.iter().filter(|r| r.parent.is_none() && r.step == 0).count();
    assert_eq!(recs.iter().filter(|r| r.parent.is_some()).count(), fanned, "{recs:?}");
}

/// In a fleet with `session_affinity`, a child goes to its parent's replica, where the prefix it forks is cached (as
/// in the simulator), not wherever its own session id would be placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_follow_their_parent_to_its_replica() {
    let dir = Scratch::new("shapes-subagents-fleet");
    let (a, _) = server().await;
    let (b, _) = server().await;
    let (sc, _) = scenario(
        json!({"ladder": "2000:3", "subagents": {"every_steps": 1, "count": 2, "steps": 2,
        "gen_tokens": 10, "tool_tokens": 50, "wait": true}}),
    );
    let (recs, _) = replay_fleet(&dir, &sc, "chat", &[&a, &b], &["--router", "session_affinity"]).await;
    let parent: Vec<&RequestRecord> = recs.iter().filter(|r| r.parent.is_none()).collect();
    let kids: Vec<&RequestRecord> = recs.iter().filter(|r| r.parent.is_some()).collect();
    assert_eq!((parent.len(), kids.len()), (3, 8), "{recs:?}");
    let home = parent[0]
        .replica
        .unwrap_or_else(|| panic!("no replica: {:?}", parent[0]));
    assert!(parent.iter().all(|r| r.replica == Some(home)), "{parent:?}");
    for k in kids {
        assert_eq!(k.replica, Some(home), "a child left its parent's replica: {k:?}");
    }
}

/// `--endpoint responses` end to end against sim-server: sessions whose `input` grows as the chat list does, the
/// usage mapped (prompt, cached, output tokens), the prefix reused as designed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sessions_run_against_sim_server() {
    let dir = Scratch::new("shapes-responses");
    let sim = sim_server_helper::start(loadshape::sim_server::Config {
        speed: 20.0,
        ..Default::default()
    })
    .await;
    let (sc, _) = scenario(json!({"ladder": "2000:4"}));
    let (recs, stdout) = replay_at(&dir, &sc, "responses", &sim.base).await;
    assert_eq!(recs.len(), 4, "{stdout}");
    for r in &recs {
        assert!(r.ok, "{r:?}");
        assert_eq!(r.gen_tokens, r.asked_tokens, "forced length: {r:?}");
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        let (cached, designed) = (
            r.cached_tokens.expect("cached"),
            r.designed_cached_tokens.expect("designed"),
        );
        if r.step == 0 {
            assert_eq!(cached, 0);
        } else {
            assert!(
                cached <= designed && cached + 32 >= designed,
                "{cached} of {designed}: {r:?}"
            );
        }
    }
    assert!(stdout.contains("Successful requests:"), "{stdout}");
}

/// An agentic Mooncake trace live: a row named in another's `branches` is sent once that row completes (though its
/// own timestamp is earlier), and a `prefix_reset` row's designed reuse is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentic_trace_branches_and_prefix_reset_live() {
    let dir = Scratch::new("shapes-agentic");
    let sim = sim_server_helper::start(loadshape::sim_server::Config {
        speed: 20.0,
        ..Default::default()
    })
    .await;
    let trace = dir.join("agentic.jsonl");
    std::fs::write(
        &trace,
        r#"{"request_id": "p", "timestamp": 0, "input_length": 1100, "output_length": 40, "hash_ids": [1, 2, 3], "branches": ["k"]}
{"request_id": "k", "timestamp": 0, "input_length": 1200, "output_length": 20, "hash_ids": [1, 2, 4]}
{"request_id": "n", "wait_for": ["k"], "prefix_reset": true, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 6]}
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let example = include_str!("../../examples/engine-sessions-10k.json");
    let mut sc: Value = serde_json::from_str(example).unwrap_or_else(|e| panic!("{e}"));
    sc["workload"] = json!({"kind": "trace", "path": trace.to_string_lossy(), "block_size": 512});
    let (recs, stdout) = replay_at(&dir, &sc, "completions", &sim.base).await;
    assert_eq!(recs.len(), 3, "{stdout}");
    assert!(recs.iter().all(|r| r.ok), "{recs:?}");
    let by_size = |n: u64| {
        recs.iter()
            .find(|r| r.designed_prompt_tokens == Some(n))
            .expect("record")
    };
    let (p, k) = (by_size(1100), by_size(1200));
    let n = recs
        .iter()
        .find(|r| r.designed_prompt_tokens == Some(1100) && r.t_submit > k.t_submit)
        .expect("n");
    assert!(
        k.t_submit >= p.t_submit + p.wall_s,
        "the branch waits: {} < {}",
        k.t_submit,
        p.t_submit + p.wall_s
    );
    assert_eq!(k.designed_cached_tokens, Some(1024));
    assert_eq!(n.designed_cached_tokens, Some(0), "a prefix reset designs no reuse");
}
