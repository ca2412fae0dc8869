//! Session shapes beyond one linear conversation (issue #44) in the engine simulator: think times from a chosen
//! distribution, checked against the records' own timing.

use shared::engine::{EngineProfile, EngineScenario, simulate};
use shared::record::RequestRecord;
use shared::workload::{Compaction, Reasoning, SessionWorkload, Subagents, ThinkDist, Workload};

fn profile() -> EngineProfile {
    EngineProfile {
        basis: "test".into(),
        prefill_ctx_ms_per_ktok: 0.1,
        ..EngineProfile::linear("p", 100_000, 64, 8192, [5.0, 0.1, 0.0001, 20.0, 1.0])
    }
}

fn scenario(w: SessionWorkload) -> EngineScenario {
    EngineScenario::new(Workload::Sessions(w), profile(), 11)
}

fn sessions() -> SessionWorkload {
    SessionWorkload {
        sessions: 3,
        steps: 5,
        base_tokens: 4000,
        gen_tokens: 64,
        tool_tokens: 200,
        spread: 0.0,
        stagger_s: 0.5,
        duration_s: 600.0,
        ..Default::default()
    }
}

fn records(w: SessionWorkload) -> Vec<RequestRecord> {
    let r = simulate(&scenario(w)).expect("valid scenario");
    assert!(r.records.iter().all(|r| r.ok), "every step completes");
    r.records
}

/// The gaps between a session's steps (next submit − previous end), in step order, per session.
fn gaps(recs: &[RequestRecord]) -> Vec<Vec<f64>> {
    let n = recs.iter().map(|r| r.session).max().map_or(0, |m| m + 1);
    (0..n)
        .map(|s| {
            let mut steps: Vec<&RequestRecord> = recs.iter().filter(|r| r.session == s).collect();
            steps.sort_by_key(|r| r.step);
            steps
                .windows(2)
                .map(|w| w[1].t_submit - (w[0].t_submit + w[0].wall_s))
                .collect()
        })
        .collect()
}

#[test]
fn think_times_follow_the_chosen_distribution() {
    let w = SessionWorkload {
        think: Some(ThinkDist::Fixed { value_s: 2.5 }),
        ..sessions()
    };
    let recs = records(w.clone());
    for g in gaps(&recs).into_iter().flatten() {
        assert!((g - 2.5).abs() < 1e-6, "fixed gap {g}");
    }
    // The simulator waits exactly the plan's draws (the plan live replay sleeps too).
    let gaps_s = vec![0.25, 7.0, 40.0];
    let w = SessionWorkload {
        think: Some(ThinkDist::Empirical { gaps_s: gaps_s.clone() }),
        ..sessions()
    };
    let recs = records(w.clone());
    for (s, g) in gaps(&recs).into_iter().enumerate() {
        let plan = w.plan(s as u32, 0, 11);
        assert_eq!(g.len() + 1, plan.steps as usize);
        for (k, gap) in g.iter().enumerate() {
            assert!(
                (gap - plan.think_s[k]).abs() < 1e-6,
                "session {s} gap {k}: {gap} vs {}",
                plan.think_s[k]
            );
            assert!(gaps_s.contains(&plan.think_s[k]));
        }
    }
    // Absent, the seed's Gaussian; `normal` with only the mean is the same run.
    let a = simulate(&scenario(sessions())).expect("default");
    let b = simulate(&scenario(SessionWorkload {
        think: Some(ThinkDist::Normal {
            mean_s: 6.0,
            sd_s: None,
        }),
        ..sessions()
    }))
    .expect("normal");
    assert_eq!(format!("{:?}", a.records), format!("{:?}", b.records));
}

/// One session of a fixed shape (base 4,000, 8 steps), thinking 1 s, alone on a roomy engine: what each step
/// finds cached follows from the plan by hand.
fn one_session() -> SessionWorkload {
    SessionWorkload {
        ladder: Some("4000:8".parse().expect("ladder")),
        gen_tokens: 64,
        tool_tokens: 1000,
        think: Some(ThinkDist::Fixed { value_s: 1.0 }),
        duration_s: 600.0,
        ..Default::default()
    }
}

fn by_step(recs: &[RequestRecord]) -> Vec<&RequestRecord> {
    let mut v: Vec<&RequestRecord> = recs.iter().collect();
    v.sort_by_key(|r| r.step);
    v
}

/// Whole 16-token blocks of `n` tokens.
fn blocks(n: u64) -> u64 {
    n / 16 * 16
}

/// What a step finds cached of its previous prompt and reply: the whole blocks of the tokens whose KV was computed,
/// all but the reply's last token (generated, never fed back).
fn after_reply(prev_prompt: u64, reply: u64) -> u64 {
    blocks(prev_prompt + reply - 1)
}

#[test]
fn a_plain_session_caches_its_previous_prompt_and_reply() {
    let w = one_session();
    let plan = w.plan(0, 0, 11);
    let report = simulate(&scenario(w)).expect("valid");
    let recs = by_step(&report.records);
    assert_eq!(recs.len(), 8);
    let mut prompt = 4016u64;
    for (k, r) in recs.iter().enumerate() {
        assert_eq!(r.prompt_tokens, Some(prompt), "step {k}");
        let want = if k == 0 {
            0
        } else {
            let prev = prompt - u64::from(plan.gen_tokens[k - 1]) - 1000;
            assert_eq!(r.designed_cached_tokens, Some(prev + u64::from(plan.gen_tokens[k - 1])));
            after_reply(prev, u64::from(plan.gen_tokens[k - 1]))
        };
        assert_eq!(r.cached_tokens, Some(want), "step {k}");
        prompt += u64::from(plan.gen_tokens[k]) + 1000;
    }
}

#[test]
fn a_compacted_step_starts_a_cold_prefix() {
    let w = SessionWorkload {
        compaction: Some(Compaction {
            at_tokens: 5500,
            summary_tokens: 500,
        }),
        ..one_session()
    };
    let plan = w.plan(0, 0, 11);
    let report = simulate(&scenario(w)).expect("valid");
    let recs = by_step(&report.records);
    assert_eq!(recs.len(), 8);
    // By hand: grow by reply + 1,000 of tool output; past 5,500 tokens go on from the summary and the task (516).
    let (mut prompt, mut compacted_prompts, mut compactions) = (4016u64, 0u64, 0);
    for (k, r) in recs.iter().enumerate() {
        assert_eq!(r.prompt_tokens, Some(prompt), "step {k}");
        assert_eq!(r.gen_tokens, u64::from(plan.gen_tokens[k]));
        let fresh = k > 0 && prompt == 516;
        let want = if k == 0 || fresh {
            0
        } else {
            let prev = prompt - u64::from(plan.gen_tokens[k - 1]) - 1000;
            after_reply(prev, u64::from(plan.gen_tokens[k - 1]))
        };
        assert_eq!(r.cached_tokens, Some(want), "step {k}");
        if fresh {
            assert_eq!(r.designed_cached_tokens, Some(0), "step {k}");
            compacted_prompts += prompt;
            compactions += 1;
        }
        assert_eq!(plan.compacted(k as u32), fresh, "step {k}");
        let grown = prompt + u64::from(plan.gen_tokens[k]) + 1000;
        prompt = if grown > 5500 { 516 } else { grown };
    }
    assert!(compactions >= 2, "{compactions}");
    // Every token of a compacted step's prompt is a miss of its own cause.
    let m = &report.diagnostics.cache_misses;
    assert_eq!(m.compacted_tokens, compacted_prompts);
    assert_eq!(m.reasoning_not_echoed_tokens, 0);
    assert_eq!(
        m.missed_tokens,
        m.cold_first_step_tokens
            + m.new_content_tokens
            + m.compacted_tokens
            + m.evicted_think_tokens
            + m.capacity_tokens
            + m.other_tokens
    );
    let text = serde_json::to_string(m).expect("json");
    assert!(text.contains("\"compacted_tokens\":"), "{text}");
    assert!(
        !text.contains("reasoning_not_echoed_tokens"),
        "absent when zero: {text}"
    );
}

#[test]
fn reasoning_costs_decode_time_and_breaks_the_prefix_unless_echoed() {
    let r = 300u64;
    let plain = simulate(&scenario(one_session())).expect("valid");
    // Without reasoning, none of its fields: records and summary as before.
    assert!(
        plain
            .records
            .iter()
            .all(|r| r.reasoning_tokens.is_none() && r.ttft_content_s.is_none())
    );
    let text = serde_json::to_string(&plain.summary).expect("json");
    assert!(
        !text.contains("ttft_content") && !text.contains("reasoning_share"),
        "{text}"
    );
    for echo in [false, true] {
        let w = SessionWorkload {
            reasoning: Some(Reasoning { tokens: r as i64, echo }),
            ..one_session()
        };
        let plan = w.plan(0, 0, 11);
        let report = simulate(&scenario(w)).expect("valid");
        let recs = by_step(&report.records);
        assert_eq!(recs.len(), 8);
        let (mut prompt, mut not_echoed) = (4016u64, 0u64);
        for (k, rec) in recs.iter().enumerate() {
            let reply = u64::from(plan.gen_tokens[k]);
            assert_eq!(rec.prompt_tokens, Some(prompt), "echo {echo} step {k}");
            // The reasoning is decoded with the reply; the first content token follows it.
            assert_eq!(rec.gen_tokens, reply + r, "echo {echo} step {k}");
            assert_eq!(rec.reasoning_tokens, Some(r));
            let (ttft, content) = (rec.ttft_s.expect("ttft"), rec.ttft_content_s.expect("ttft_content"));
            let gap = (rec.wall_s - ttft) / (rec.gen_tokens - 1) as f64;
            assert!((content - (ttft + r as f64 * gap)).abs() < 1e-9, "echo {echo} step {k}");
            assert!(content > ttft && content < rec.wall_s);
            if k > 0 {
                let g = u64::from(plan.gen_tokens[k - 1]);
                let prev = prompt - g - 1000 - if echo { r } else { 0 };
                let (want, designed) = if echo {
                    (after_reply(prev, r + g), prev + r + g)
                } else {
                    // The prefix breaks where the reply began: the previous prompt's whole blocks.
                    not_echoed += g;
                    (blocks(prev), prev)
                };
                assert_eq!(rec.cached_tokens, Some(want), "echo {echo} step {k}");
                assert_eq!(rec.designed_cached_tokens, Some(designed), "echo {echo} step {k}");
            }
            prompt += reply + 1000 + if echo { r } else { 0 };
        }
        let m = &report.diagnostics.cache_misses;
        assert_eq!(m.reasoning_not_echoed_tokens, not_echoed, "echo {echo}");
        let sm = &report.summary;
        let out: u64 = recs.iter().map(|r| r.gen_tokens).sum();
        assert_eq!(sm.reasoning_share, Some((8 * r) as f64 / out as f64));
        assert!(sm.ttft_content_p50_ms.expect("p50") > sm.ttft_p50_ms);
        // 300 more tokens a reply: each step takes longer than without reasoning.
        let wall = |rs: &[RequestRecord]| rs.iter().map(|r| r.wall_s).sum::<f64>();
        assert!(wall(&report.records) > wall(&plain.records) * 1.5, "echo {echo}");
    }
}

#[test]
fn sub_agents_fork_the_parents_prefix_and_the_parent_waits_for_them() {
    for wait in [true, false] {
        let w = SessionWorkload {
            ladder: Some("4000:6".parse().expect("ladder")),
            subagents: Some(Subagents {
                every_steps: 2,
                count: 2,
                steps: 2,
                gen_tokens: 50,
                tool_tokens: 300,
                wait,
            }),
            ..one_session()
        };
        let plan = w.plan(0, 0, 11);
        let report = simulate(&scenario(w)).expect("valid");
        // 6 parent steps; fan-outs after steps 1 and 3 (not after the last), 2 children of 2 steps each.
        assert_eq!(report.records.len(), 6 + 2 * 2 * 2, "wait {wait}");
        assert!(report.records.iter().all(|r| r.ok));
        // Step 0 of a child forks a cached prefix: the cold-start share is the parent's step 0 alone (0), and the
        // cold first-step misses are the parent's step 0 prompt alone.
        assert_eq!(report.summary.step0_cached_share, Some(0.0), "wait {wait}");
        assert_eq!(
            report.diagnostics.cache_misses.cold_first_step_tokens, 4016,
            "wait {wait}"
        );
        let parent = by_step(&report.records)
            .into_iter()
            .filter(|r| r.session == 0)
            .collect::<Vec<_>>();
        assert_eq!(parent.len(), 6);
        // By hand: the parent grows by reply + 1,000 of tool output, and with `wait` by the children's results
        // (2 × 50) after a fan-out.
        let g = |k: usize| u64::from(plan.gen_tokens[k]);
        let mut prompts = vec![4016u64];
        for k in 0..5 {
            let results = if wait && (k == 1 || k == 3) { 100 } else { 0 };
            prompts.push(prompts[k] + g(k) + 1000 + results);
        }
        for (k, r) in parent.iter().enumerate() {
            assert_eq!(r.prompt_tokens, Some(prompts[k]), "wait {wait} step {k}");
            if k > 0 {
                assert_eq!(
                    r.cached_tokens,
                    Some(after_reply(prompts[k - 1], g(k - 1))),
                    "wait {wait} step {k}"
                );
            }
        }
        for (fanout, after) in [(0u32, 1usize), (1, 3)] {
            // Each child: step 0 is the parent's prompt and reply plus the task line (16), and finds that prefix
            // cached; step 1 adds its reply and tool output and finds its own step 0 and reply.
            let fork = prompts[after] + g(after);
            let mut last_end: f64 = 0.0;
            for j in 0..2u64 {
                let kid = by_step(&report.records)
                    .into_iter()
                    .filter(|r| r.session == 1 + j && r.inst == fanout)
                    .collect::<Vec<_>>();
                assert_eq!(kid.len(), 2, "wait {wait} fan-out {fanout} child {j}");
                assert!(
                    kid.iter().all(|r| r.parent == Some(0)),
                    "a child names its parent session"
                );
                assert_eq!(kid[0].prompt_tokens, Some(fork + 16));
                assert_eq!(kid[0].cached_tokens, Some(after_reply(prompts[after], g(after))));
                assert_eq!(kid[0].designed_cached_tokens, Some(fork));
                assert_eq!(kid[1].prompt_tokens, Some(fork + 16 + 50 + 300));
                assert_eq!(kid[1].cached_tokens, Some(after_reply(fork + 16, 50)));
                // They start when the parent's step ends, in parallel.
                let parent_end = parent[after].t_submit + parent[after].wall_s;
                assert!((kid[0].t_submit - parent_end).abs() < 1e-9, "wait {wait}");
                last_end = last_end.max(kid[1].t_submit + kid[1].wall_s);
            }
            // The parent's next step: after its 1 s of thought, and with `wait` not before its last child ends.
            let next = parent[after + 1].t_submit;
            let own = parent[after].t_submit + parent[after].wall_s + 1.0;
            let want = if wait { own.max(last_end) } else { own };
            assert!(
                (next - want).abs() < 1e-9,
                "wait {wait}: next step at {next}, want {want}"
            );
            if wait {
                assert!(
                    last_end > own,
                    "the children outlast the think time here: {last_end} vs {own}"
                );
            }
        }
    }
}

#[test]
fn sub_agents_count_toward_the_session_limit() {
    let w = SessionWorkload {
        sessions: 400_000,
        subagents: Some(Subagents {
            every_steps: 2,
            count: 2,
            steps: 2,
            gen_tokens: 50,
            tool_tokens: 300,
            wait: true,
        }),
        ..Default::default()
    };
    let e = w.validate().expect_err("1.2M sessions").to_string();
    assert!(e.starts_with("workload.subagents.count"), "{e}");
    assert!(e.contains("1200000 concurrent sessions"), "{e}");
    let ok = SessionWorkload { sessions: 300_000, ..w };
    ok.validate().expect("900,000 sessions");
    assert_eq!(Workload::Sessions(ok).concurrency(), Some(900_000));
    // The size estimates count the children's requests: 2 children of 2 steps every 2 parent steps triple them.
    let plain = SessionWorkload {
        sessions: 3,
        ..Default::default()
    };
    let fanned = SessionWorkload {
        subagents: w.subagents,
        ..plain.clone()
    };
    let (a, b) = (Workload::Sessions(plain), Workload::Sessions(fanned));
    let ratio = b.expected_requests() as f64 / a.expected_requests() as f64;
    assert!((ratio - 3.0).abs() < 0.01, "{ratio}");
    assert!((b.size().requests / a.size().requests - 3.0).abs() < 1e-9);
}

/// The agentic Mooncake fields in the simulator: a branch is sent once the row it branches off completes, and a
/// `prefix_reset` row was designed to reuse nothing, its misses counted as compacted.
#[test]
fn agentic_trace_branches_wait_and_prefix_resets_are_compacted() {
    let text = r#"{"request_id": "p", "timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 3], "branches": ["k"]}
{"request_id": "k", "timestamp": 0, "input_length": 1200, "output_length": 20, "hash_ids": [1, 2, 4]}
{"request_id": "n", "wait_for": ["k"], "prefix_reset": true, "input_length": 900, "output_length": 20, "hash_ids": [7, 8]}"#;
    let mut t = shared::workload::TraceWorkload {
        path: Some("t.jsonl".into()),
        block_size: Some(512),
        ..shared::workload::TraceWorkload::inline(Vec::new())
    };
    t.load_text(text).expect("trace");
    let sc = EngineScenario {
        workload: Workload::Trace(Box::new(t)),
        ..scenario(sessions())
    };
    let r = simulate(&sc).expect("valid");
    let by_prompt = |n: u64| r.records.iter().find(|x| x.prompt_tokens == Some(n)).expect("record");
    let (p, k, n) = (by_prompt(1100), by_prompt(1200), by_prompt(900));
    // Both rows have timestamp 0, but the branch goes when the row it branches off is done.
    assert!(
        (k.t_submit - (p.t_submit + p.wall_s)).abs() < 1e-9,
        "{} vs {}",
        k.t_submit,
        p.t_submit + p.wall_s
    );
    // It finds the two shared hash blocks (1,024 tokens) cached.
    assert_eq!(k.cached_tokens, Some(1024));
    assert_eq!(n.designed_cached_tokens, Some(0));
    assert_eq!(n.cached_tokens, Some(0));
    let m = &r.diagnostics.cache_misses;
    assert_eq!(m.compacted_tokens, 900);
}
