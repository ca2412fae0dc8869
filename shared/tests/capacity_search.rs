//! The capacity search (`shared::capacity`): the state machine against known monotone answers, the simulated
//! search on workloads with a sharp knee (a `max_num_seqs` limit), and the errors for bad goals and knobs.

use shared::capacity::{
    self, Bounds, CapacitySpec, EngineSide, Goal, Knob, Level, LevelRun, LiveLevel, Per, Saturation, Search, Strategy,
    Window,
};
use shared::engine::EngineScenario;
use shared::scenario::Scenario;
use shared::workload::Workload;

/// Runs a search against "passes iff load <= cap" and returns (capacity, levels run).
fn drive(strategy: Strategy, bounds: Bounds, count: bool, cap: f64) -> (Option<f64>, usize) {
    let mut s = Search::new(strategy, bounds, count);
    while let Some(l) = s.next_level() {
        s.record(l, l <= cap);
    }
    (s.capacity(), s.levels_run())
}

fn counts() -> Bounds {
    Bounds {
        min: 1.0,
        max: 4096.0,
        resolution: 1.0,
        max_levels: 64,
    }
}

#[test]
fn doubling_finds_every_count_capacity_exactly() {
    for cap in [1.0, 2.0, 3.0, 7.0, 8.0, 9.0, 100.0, 1000.0] {
        for start in [1.0, 5.0, 64.0] {
            let (found, _) = drive(Strategy::Doubling { start }, counts(), true, cap);
            assert_eq!(found, Some(cap), "cap {cap} from {start}");
        }
    }
}

#[test]
fn a_right_guess_needs_two_levels_and_a_wrong_one_still_converges() {
    for cap in [1.0, 4.0, 37.0, 500.0] {
        let (found, n) = drive(Strategy::Bracket { guess: cap }, counts(), true, cap);
        assert_eq!((found, n), (Some(cap), 2), "cap {cap}");
        let (unguided_cap, unguided_n) = drive(Strategy::Doubling { start: 3.0 }, counts(), true, cap);
        assert_eq!(unguided_cap, Some(cap));
        if cap > 1.0 {
            assert!(unguided_n > 2, "cap {cap}: unguided {unguided_n} levels");
        }
        for guess in [cap * 0.5, cap * 2.0 + 3.0] {
            let (found, _) = drive(Strategy::Bracket { guess }, counts(), true, cap);
            assert_eq!(found, Some(cap), "cap {cap} guess {guess}");
        }
    }
}

#[test]
fn real_loads_converge_to_the_resolution() {
    let bounds = Bounds {
        min: 0.1,
        max: 1000.0,
        resolution: 0.25,
        max_levels: 64,
    };
    for cap in [0.3, 3.3, 17.0, 400.0] {
        for strategy in [
            Strategy::Doubling { start: 5.0 },
            Strategy::Bracket { guess: cap * 1.3 },
        ] {
            let (found, _) = drive(strategy, bounds, false, cap);
            let found = found.unwrap_or_else(|| panic!("cap {cap}: none"));
            assert!(found <= cap && cap - found <= 0.25, "cap {cap}: {found} ({strategy:?})");
        }
    }
}

#[test]
fn bounds_end_the_search_with_a_note() {
    let mut s = Search::new(Strategy::Doubling { start: 4.0 }, counts(), true);
    while let Some(l) = s.next_level() {
        s.record(l, false);
    }
    assert_eq!(s.capacity(), None);
    assert_eq!(s.levels_run(), 3, "4, 2, 1");
    assert!(
        s.notes().iter().any(|n| n.contains("even the lowest")),
        "{:?}",
        s.notes()
    );
    let small = Bounds { max: 10.0, ..counts() };
    let mut s = Search::new(Strategy::Doubling { start: 4.0 }, small, true);
    while let Some(l) = s.next_level() {
        s.record(l, true);
    }
    assert_eq!(s.capacity(), Some(10.0));
    assert!(
        s.notes().iter().any(|n| n.contains("no failing load")),
        "{:?}",
        s.notes()
    );
}

/// A closed-loop workload on an engine that runs at most 4 sequences: a 5th user always waits a whole request
/// (≈ 0.3 s) for a slot, so TTFT ≤ 150 ms holds for 4 users and fails for 5.
fn knee_scenario(workload: serde_json::Value) -> EngineScenario {
    let v = serde_json::json!({
        "model": "engine",
        "workload": workload,
        "profile": {
            "name": "knee", "basis": "test", "block_size": 16, "num_kv_blocks": 20000, "max_num_seqs": 4,
            "max_num_batched_tokens": 8192, "step_fixed_ms": 15.0, "per_seq_ms": 0.5,
            "per_ctx_token_ms": 0.0, "prefill_tokens_per_ms": 20.0, "prefill_fixed_ms": 5.0
        },
        "slo": {"ttft_ms": 150.0, "tpot_ms": 35.0},
        "seed": 3,
        "counterfactuals": false
    });
    match Scenario::from_value(v).unwrap_or_else(|e| panic!("{e}")) {
        Scenario::Engine(e) => e,
        other => panic!("{other:?}"),
    }
}

fn closed_loop(users: u32) -> EngineScenario {
    knee_scenario(serde_json::json!({
        "kind": "closed_loop", "users": users, "num_requests": 200,
        "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 20}
    }))
}

#[test]
fn simulated_closed_loop_capacity_is_the_slot_limit() {
    let s = closed_loop(2);
    let spec = CapacitySpec::for_scenario(&s);
    let report = capacity::search_simulated(&s, &spec, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.knob, Knob::Users);
    assert_eq!(
        report.capacity,
        Some(4.0),
        "{:#?}",
        report.levels.iter().map(|l| (l.load, l.pass)).collect::<Vec<_>>()
    );
    // From 2: 2 and 4 pass, 8 fails, 6 and 5 fail.
    let loads: Vec<f64> = report.levels.iter().map(|l| l.load).collect();
    assert_eq!(loads, vec![2.0, 4.0, 8.0, 6.0, 5.0]);
    for l in &report.levels {
        assert_eq!(l.pass, l.load <= 4.0, "load {}", l.load);
        assert!(l.scored > 0 && l.excluded > 0, "the warm-up is left out: {l:?}");
        assert_eq!(l.saturation, Saturation::Stable, "a closed loop cannot backlog: {l:?}");
    }
    let guided =
        capacity::search_simulated(&s, &spec, Some(Strategy::Bracket { guess: 4.0 })).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((guided.capacity, guided.levels.len()), (Some(4.0), 2));
    // Deterministic.
    assert_eq!(capacity::search_simulated(&s, &spec, None).ok(), Some(report));
}

/// A level reads back as it was written: the engine side's fields flat among the others (as `capacity.json` and the
/// protocol's `capacity_level` carry them), a live level's records and runs beside them; a missing field is named,
/// an absent engine side reads as none.
#[test]
fn levels_read_back_as_written() {
    let s = closed_loop(2);
    let report =
        capacity::search_simulated(&s, &CapacitySpec::for_scenario(&s), None).unwrap_or_else(|e| panic!("{e}"));
    for l in &report.levels {
        let mut l = l.clone();
        let v = serde_json::to_value(&l).unwrap_or_else(|e| panic!("{e}"));
        assert!(v.get("kv_peak_use").is_some() && v.get("engine").is_none(), "flat: {v}");
        let mut without = v.clone();
        let o = without.as_object_mut().unwrap_or_else(|| panic!("{v}"));
        o.remove("kv_peak_use");
        o.remove("preemptions");
        o.insert("unknown".into(), 1.into());
        l.engine = EngineSide::default();
        assert_eq!(serde_json::from_value::<Level>(without).ok().as_ref(), Some(&l));
        l.engine = EngineSide {
            kv_peak_use: Some(0.5),
            preemptions: Some(3),
        };
        let v = serde_json::to_value(&l).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (v["kv_peak_use"].as_f64(), v["preemptions"].as_u64()),
            (Some(0.5), Some(3))
        );
        assert_eq!(serde_json::from_value::<Level>(v).ok().as_ref(), Some(&l));
        let live = LiveLevel {
            records: vec!["level-00.jsonl".into()],
            runs: vec![LevelRun::of("level-00.jsonl", &l)],
            level: l,
        };
        let lv = serde_json::to_value(&live).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::from_value::<LiveLevel>(lv.clone()).ok().as_ref(),
            Some(&live)
        );
        for field in ["runs", "records", "scored"] {
            let mut missing = lv.clone();
            missing.as_object_mut().map(|o| o.remove(field));
            let e = serde_json::from_value::<LiveLevel>(missing)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("missing field `{field}`")), "{e}");
        }
    }
}

#[test]
fn simulated_sessions_capacity_with_a_ladder_cycles_its_rungs() {
    let s = knee_scenario(serde_json::json!({
        "kind": "sessions", "ladder": "800:6,1200:6", "gen_tokens": 20, "tool_tokens": 50, "think_s": 0.0,
        "stagger_s": 0.1, "duration_s": 20.0, "drain": true, "drain_grace_s": 10.0
    }));
    let w = Knob::Sessions.set(&s.workload, 5.0).unwrap_or_else(|e| panic!("{e}"));
    let Workload::Sessions(sw) = &w else { panic!("{w:?}") };
    assert_eq!(sw.slot_count(), 5);
    assert_eq!(Knob::Sessions.get(&w).ok(), Some(5.0));
    let mut spec = CapacitySpec::for_scenario(&s);
    spec.goal.ttft_ms = Some(400.0);
    let report = capacity::search_simulated(&s, &spec, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.knob, Knob::Sessions);
    assert_eq!(
        report.capacity,
        Some(4.0),
        "{:?}",
        report
            .levels
            .iter()
            .map(|l| (l.load, l.pass, l.attainment))
            .collect::<Vec<_>>()
    );
}

#[test]
fn simulated_rate_capacity_brackets_the_knee_and_classes_the_overload() {
    let s = knee_scenario(serde_json::json!({
        "kind": "poisson", "num_requests": 400, "rate_rps": 4.0,
        "prompt": {"dist": "fixed", "tokens": 256}, "output": {"dist": "fixed", "tokens": 20}
    }));
    let mut spec = CapacitySpec::for_scenario(&s);
    spec.goal.ttft_ms = Some(300.0);
    spec.bounds = Some(Bounds {
        min: 0.5,
        max: 200.0,
        resolution: 0.5,
        max_levels: 32,
    });
    let report = capacity::search_simulated(&s, &spec, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.knob, Knob::RateRps);
    let cap = report.capacity.unwrap_or_else(|| panic!("{:?}", report.notes));
    // 4 slots of ≈ 0.33 s requests serve at most ≈ 12 rps.
    assert!(cap > 2.0 && cap < 13.0, "capacity {cap}");
    let fail_above = report
        .levels
        .iter()
        .filter(|l| !l.pass)
        .map(|l| l.load)
        .fold(f64::INFINITY, f64::min);
    assert!(fail_above - cap <= 0.5 + 1e-9, "{cap} vs {fail_above}");
    // Far above the service rate the queue grows through the window.
    let over =
        capacity::simulate_level(&s, Knob::RateRps, 40.0, &spec.goal, &spec.window).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (over.pass, over.saturation),
        (false, Saturation::Backlogged),
        "{over:?}"
    );
    assert_eq!(
        report.levels.iter().find(|l| l.load == 4.0).map(|l| l.saturation),
        Some(Saturation::Stable)
    );
}

#[test]
fn bad_goals_and_knobs_name_the_field() {
    let s = closed_loop(2);
    let err = |spec: CapacitySpec| {
        capacity::search_simulated(&s, &spec, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("accepted {spec:?}"))
    };
    let base = CapacitySpec::for_scenario(&s);
    let none = Goal {
        ttft_ms: None,
        tpot_ms: None,
        e2e_ms: None,
        attainment: 0.95,
        per: Per::Request,
    };
    let e = err(CapacitySpec { goal: none, ..base });
    assert!(e.starts_with("goal.constraints") && e.contains("ttft_ms"), "{e}");
    for a in [0.0, -0.1, 1.01, f64::NAN] {
        let e = err(CapacitySpec {
            goal: Goal {
                attainment: a,
                ..base.goal
            },
            ..base
        });
        assert!(e.starts_with("goal.attainment must be in (0, 1]"), "{e}");
    }
    let e = err(CapacitySpec {
        goal: Goal {
            ttft_ms: Some(-1.0),
            ..base.goal
        },
        ..base
    });
    assert!(e.starts_with("goal.ttft_ms"), "{e}");
    let e = err(CapacitySpec {
        knob: Some(Knob::Sessions),
        ..base
    });
    assert!(
        e.starts_with("knob") && e.contains("closed_loop") && e.contains("\"users\""),
        "{e}"
    );
    assert!(
        Knob::parse("time_scale")
            .err()
            .is_some_and(|e| e.to_string().starts_with("knob"))
    );
    let e = err(CapacitySpec {
        window: Window {
            warmup_fraction: 1.5,
            end_s: None,
        },
        ..base
    });
    assert!(e.starts_with("window.warmup_fraction"), "{e}");
    let e = err(CapacitySpec {
        bounds: Some(Bounds {
            min: 8.0,
            max: 2.0,
            ..counts()
        }),
        ..base
    });
    assert!(e.starts_with("bounds.max"), "{e}");
}

#[test]
fn clearly_failing_needs_enough_requests_and_many_misses() {
    let g = Goal::from_slo(&shared::metrics::Slo::default());
    assert!(!g.clearly_failing(19, 19));
    assert!(g.clearly_failing(20, 10));
    assert!(!g.clearly_failing(20, 9));
    let strict = Goal { attainment: 0.5, ..g };
    assert!(!strict.clearly_failing(100, 99));
    assert!(strict.clearly_failing(100, 100));
}

#[test]
fn preemptions_make_a_level_overloaded() {
    let mut s = closed_loop(4);
    // Four 276-token requests need 72 blocks of 16; 50 make the engine preempt.
    s.profile.num_kv_blocks = 50;
    let goal = Goal::from_slo(&s.slo);
    let l = capacity::simulate_level(&s, Knob::Users, 4.0, &goal, &Window::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(l.engine.preemptions.is_some_and(|p| p > 0), "{l:?}");
    assert_eq!(l.saturation, Saturation::Overloaded);
    assert!(l.engine.kv_peak_use.is_some_and(|u| u > 0.5 && u <= 1.0), "{l:?}");
}

fn record(t_submit: f64, ttft_s: f64, outcome: &str) -> shared::record::RequestRecord {
    let mut v = serde_json::json!({
        "schema": 1, "session": (t_submit * 1000.0) as u64, "inst": 0, "step": 0, "steps_asked": 1,
        "base_asked": 100, "ok": outcome == "ok", "t_submit": t_submit, "ttft_s": ttft_s, "wall_s": ttft_s + 0.2,
        "gen_tokens": 11, "asked_tokens": 11, "prompt_tokens": 100, "cached_tokens": 0, "sse_frames": 11,
        "prompt_chars": 400
    });
    match outcome {
        "cut" => v["error"] = "cut: the run ended".into(),
        "failed" => v["error"] = "http 500".into(),
        _ => {}
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_window_leaves_out_warm_up_drain_and_cut_records() {
    let goal = Goal::from_slo(&shared::metrics::Slo::default());
    let side = capacity::EngineSide::default();
    let mut recs: Vec<_> = (0..100).map(|i| record(f64::from(i), 0.1, "ok")).collect();
    recs.extend((0..5).map(|_| record(50.0, 0.1, "cut")));
    // Span 0..99 s: the first 20 % (19.8 s) is warm-up.
    let l = capacity::score_level(7.0, &recs, &goal, &Window::default(), 0.0, side);
    assert_eq!((l.scored, l.excluded), (80, 25));
    assert_eq!(l.summary.completed, 80);
    assert!(l.pass && l.saturation == Saturation::Stable, "{l:?}");
    // A level of 50 s: nothing submitted after it is scored.
    let w = Window {
        warmup_fraction: 0.2,
        end_s: Some(50.0),
    };
    let l = capacity::score_level(7.0, &recs, &goal, &w, 0.0, side);
    assert_eq!(l.scored, 41, "10..=50");
    // A ramp longer than the fraction sets the warm-up, capped at half the span.
    let l = capacity::score_level(7.0, &recs, &goal, &Window::default(), 40.0, side);
    assert_eq!(l.scored, 60, "40..=99");
    let l = capacity::score_level(7.0, &recs, &goal, &Window::default(), 80.0, side);
    assert_eq!(l.scored, 50, "49.5..=99");
    // A failure in the window: overloaded; a growing TTFT: backlogged.
    let mut failing = recs.clone();
    failing.push(record(60.0, 0.1, "failed"));
    let l = capacity::score_level(7.0, &failing, &goal, &Window::default(), 0.0, side);
    assert_eq!((l.saturation, l.summary.failed), (Saturation::Overloaded, 1));
    let growing: Vec<_> = (0..100)
        .map(|i| record(f64::from(i), 0.05 + 0.01 * f64::from(i), "ok"))
        .collect();
    let l = capacity::score_level(7.0, &growing, &goal, &Window::default(), 0.0, side);
    assert_eq!(l.saturation, Saturation::Backlogged, "{l:?}");
}

/// A trace of `n` requests arriving every `gap_ms` (`time_scale` as given): 256-token prompts, 20-token outputs.
fn trace(n: u32, gap_ms: f64, time_scale: Option<f64>) -> EngineScenario {
    let requests: Vec<serde_json::Value> = (0..n)
        .map(|i| serde_json::json!({"arrival_ms": f64::from(i) * gap_ms, "unique_prompt_tokens": 256, "output_tokens": 20}))
        .collect();
    let mut w = serde_json::json!({"kind": "trace", "requests": requests});
    if let Some(t) = time_scale {
        w["time_scale"] = serde_json::json!(t);
    }
    knee_scenario(w)
}

#[test]
fn a_trace_is_searched_by_its_speedup_the_inverse_of_time_scale() {
    // 4 requests/s at the trace's own speed.
    let s = trace(300, 250.0, None);
    assert_eq!(Knob::of(&s.workload), Some(Knob::Speedup));
    assert_eq!(Knob::Speedup.get(&s.workload).ok(), Some(1.0));
    // Speed-up 2 replays the trace twice as fast: arrivals halved, time_scale 0.5; load grows with the knob.
    let fast = Knob::Speedup.set(&s.workload, 2.0).unwrap_or_else(|e| panic!("{e}"));
    let Workload::Trace(t) = &fast else { panic!("{fast:?}") };
    assert_eq!(t.time_scale, Some(0.5));
    assert_eq!(t.requests[4].arrival_ms, 500.0);
    assert!(
        (t.rate_rps() - 300.0 / (299.0 * 0.125)).abs() < 1e-9,
        "{}",
        t.rate_rps()
    );
    assert_eq!(Knob::Speedup.get(&fast).ok(), Some(2.0));
    // A trace already stretched (time_scale 2: requests read from a file are scaled at load) starts at 0.5; its
    // own speed-up leaves it unchanged, and speed-ups rescale relative to it.
    let slow = trace(300, 500.0, Some(2.0));
    assert_eq!(Knob::Speedup.get(&slow.workload).ok(), Some(0.5));
    assert_eq!(Knob::Speedup.set(&slow.workload, 0.5).ok(), Some(slow.workload.clone()));
    let Ok(Workload::Trace(t)) = Knob::Speedup.set(&slow.workload, 1.0) else {
        panic!()
    };
    assert_eq!((t.time_scale, t.requests[4].arrival_ms), (Some(1.0), 1000.0));

    let mut spec = CapacitySpec::for_scenario(&s);
    spec.goal.ttft_ms = Some(300.0);
    let report = capacity::search_simulated(&s, &spec, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.knob, Knob::Speedup);
    let cap = report.capacity.unwrap_or_else(|| panic!("{:?}", report.notes));
    // 4 slots of ≈ 0.33 s requests serve at most ≈ 12 rps: the trace's 4 rps sped up at most ≈ 3 times.
    assert!(cap * 4.0 > 2.0 && cap * 4.0 < 13.0, "speed-up capacity {cap}");
    for l in &report.levels {
        assert_eq!(
            l.pass,
            l.load <= cap,
            "{} passes iff at most the capacity {cap}",
            l.load
        );
    }
    // Deterministic: the same search gives the same report.
    assert_eq!(capacity::search_simulated(&s, &spec, None).ok(), Some(report));
}

#[test]
fn a_knob_that_does_not_fit_the_workload_is_named() {
    let err = |s: &EngineScenario, knob: Knob| {
        let spec = CapacitySpec {
            knob: Some(knob),
            ..CapacitySpec::for_scenario(s)
        };
        capacity::search_simulated(s, &spec, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("{knob:?} accepted"))
    };
    let e = err(&closed_loop(2), Knob::Speedup);
    assert!(
        e.starts_with("knob") && e.contains("\"speedup\"") && e.contains("closed_loop") && e.contains("\"users\""),
        "{e}"
    );
    let e = err(&trace(10, 100.0, None), Knob::RateRps);
    assert!(
        e.starts_with("knob") && e.contains("trace") && e.contains("its knob: \"speedup\""),
        "{e}"
    );
    let e = Knob::parse("time_scale")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.starts_with("knob") && e.contains("speedup") && e.contains("1 / time_scale"),
        "{e}"
    );
    let e = Knob::Speedup
        .set(&trace(10, 100.0, None).workload, 0.0)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.starts_with("knob") && e.contains("speedup"), "{e}");
}
