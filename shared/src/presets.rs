//! Starting points: the default scenario of each model, a default workload of each kind, and the named
//! [`Preset`]s (the seed's profiles, the engine profiles of [`crate::engine::presets`], workload shapes, SLOs), each
//! with the basis of its numbers. The page's menus are these; every value is typed, so a preset that would not
//! validate is a failing unit test, not a silent `null`.

use crate::deploy::{Deployment, Dtype};
use crate::engine::{self, EngineProfile, EngineScenario};
use crate::ladder::Ladder;
use crate::metrics::Slo;
use crate::pyrand::PySeed;
use crate::scenario::{Scenario, ScenarioError};
use crate::seed_model::{self, BurstyWorkload, SeedProfile, SeedScenario, SeedWorkload};
use crate::workload::{
    ClosedLoopWorkload, GammaWorkload, LengthDist, PoissonWorkload, SessionDist, SessionWorkload, Workload,
};

/// The workload kinds (`kind` tags) of the engine model, in menu order.
pub const WORKLOAD_KINDS: [&str; 5] = ["sessions", "bursty", "poisson", "gamma", "closed_loop"];

/// The seed's trace: 80 bursty requests, seed 42, 8.5 req/s mean.
fn seed_trace(mean_rps: f64) -> BurstyWorkload {
    BurstyWorkload {
        num_requests: 80,
        seed: PySeed::new(42),
        mean_rps,
    }
}

/// Prompt and output lengths of the open-loop defaults: lognormal prompts around 2,048 tokens, 256-token outputs.
const OPEN_PROMPT: LengthDist = LengthDist::Lognormal {
    median: 2048,
    sigma: 0.6,
    max: None,
};
const FIXED_256: LengthDist = LengthDist::Fixed { tokens: 256 };

/// A session workload of `sessions` slots with the seed replay's shape (`agent_replay.py`'s defaults: 12 steps on
/// a 22,000-token base, replies of 700 and tool output of 2,020 tokens, 6 s think time, lognormal spread 0.5).
fn seed_sessions(sessions: u32, duration_s: f64) -> SessionWorkload {
    SessionWorkload {
        sessions,
        steps: 12,
        base_tokens: 22_000,
        gen_tokens: 700,
        tool_tokens: 2020,
        think_s: 6.0,
        dist: SessionDist::Lognormal,
        spread: 0.5,
        ladder: None,
        respawn: false,
        stagger_s: 4.0,
        duration_s,
        drain: false,
        drain_grace_s: 420.0,
        task_tokens: 16,
        think: None,
        compaction: None,
        reasoning: None,
        subagents: None,
    }
}

/// A default workload of each kind (the session defaults are the seed replay's, shortened to 20 minutes).
pub fn default_workload(kind: &str) -> Option<Workload> {
    Some(match kind {
        "sessions" => Workload::Sessions(seed_sessions(8, 1200.0)),
        "bursty" => Workload::Bursty(seed_trace(8.5)),
        "poisson" => Workload::Poisson(PoissonWorkload {
            num_requests: 500,
            rate_rps: 4.0,
            prompt: OPEN_PROMPT,
            output: FIXED_256,
            shared_prefix_tokens: 1024,
        }),
        "gamma" => Workload::Gamma(GammaWorkload {
            num_requests: 500,
            rate_rps: 4.0,
            cv: 2.0,
            prompt: OPEN_PROMPT,
            output: FIXED_256,
            shared_prefix_tokens: 1024,
        }),
        "closed_loop" => Workload::ClosedLoop(ClosedLoopWorkload {
            users: 8,
            num_requests: 400,
            think_s: 0.0,
            prompt: LengthDist::Fixed { tokens: 2048 },
            output: FIXED_256,
            shared_prefix_tokens: 1024,
        }),
        _ => return None,
    })
}

/// A default length distribution of each shape (`fixed`, `uniform`, `lognormal`), centred on `typical` tokens.
pub fn default_length(dist: &str, typical: f64) -> Option<LengthDist> {
    let t = typical.round().clamp(1.0, f64::from(u32::MAX)) as u32;
    Some(match dist {
        "fixed" => LengthDist::Fixed { tokens: t },
        "uniform" => LengthDist::Uniform {
            min: (t / 2).max(1),
            max: t.saturating_add(t / 2),
        },
        "lognormal" => LengthDist::Lognormal {
            median: t,
            sigma: 0.5,
            max: None,
        },
        _ => return None,
    })
}

/// The engine model's default scenario: the default agent sessions on the Llama-3-8B / H100 profile, SLOs of
/// TTFT 2 s and TPOT 50 ms, with the counterfactual runs.
pub fn default_engine_scenario() -> EngineScenario {
    EngineScenario {
        workload: Workload::Sessions(seed_sessions(8, 1200.0)),
        profile: engine::presets::llama3_8b_h100(),
        slo: Slo {
            ttft_ms: 2000.0,
            tpot_ms: 50.0,
            e2e_ms: None,
        },
        seed: 42,
        counterfactuals: true,
        fleet: None,
        deployment: None,
        disaggregation: None,
    }
}

/// The seed's scenario on `profile`: its bursty trace (80 requests, seed 42, 8.5 req/s), its SLOs (TTFT 500 ms,
/// TPOT 35 ms), open loop.
pub fn seed_scenario(profile: SeedProfile) -> SeedScenario {
    SeedScenario {
        workload: SeedWorkload::Bursty(seed_trace(8.5)),
        profile,
        slo: Slo::default(),
        closed_loop: false,
        workload_name: "agent-shared-prefix".to_string(),
    }
}

/// The scenario a fresh page opens with: the seed's scenario on its `baseline` profile.
pub fn default_scenario() -> Scenario {
    Scenario::Seed(seed_scenario(seed_model::SEED_PROFILES[0].clone()))
}

/// The default scenario of a model (`seed`, `engine`).
pub fn default_for_model(model: &str) -> Option<Scenario> {
    match model {
        "seed" => Some(default_scenario()),
        "engine" => Some(Scenario::Engine(default_engine_scenario())),
        _ => None,
    }
}

/// What a preset changes.
#[derive(Debug, Clone, PartialEq)]
pub enum PresetKind {
    /// Replaces the whole scenario.
    Scenario(Box<Scenario>),
    /// Replaces the engine profile (switching to the engine model's default scenario first if needed).
    EngineProfile(EngineProfile),
    /// Replaces the workload of an engine-model scenario (switching to the engine model if needed).
    Workload(Workload),
    /// Replaces the SLOs.
    Slo(Slo),
    /// Replaces the engine profile by a deployment of the catalog, a model on a GPU at a TP degree (switching to
    /// the engine model's default scenario first if needed; docs/simulator.md, "Deployments").
    Deployment(Box<Deployment>),
}

/// A named preset with where its numbers come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// `seed:baseline`, `engine:laptop-demo`, `workload:chat`, `slo:distserve`, ...
    pub id: String,
    pub label: String,
    pub basis: String,
    pub kind: PresetKind,
}

impl Preset {
    /// The scenario after applying this preset to `current`, validated: the error names the bad field.
    pub fn apply(&self, current: &Scenario) -> Result<Scenario, ScenarioError> {
        let engine_base = || match current {
            Scenario::Engine(e) => e.clone(),
            Scenario::Seed(_) => default_engine_scenario(),
        };
        let out = match &self.kind {
            PresetKind::Scenario(s) => (**s).clone(),
            PresetKind::EngineProfile(p) => Scenario::Engine(EngineScenario {
                profile: p.clone(),
                ..engine_base()
            }),
            PresetKind::Workload(w) => Scenario::Engine(EngineScenario {
                workload: w.clone(),
                ..engine_base()
            }),
            PresetKind::Deployment(d) => {
                let resolved = d.resolve().map_err(|e| e.within("deployment"))?;
                Scenario::Engine(EngineScenario {
                    profile: resolved.profile,
                    deployment: Some((**d).clone()),
                    ..engine_base()
                })
            }
            PresetKind::Slo(slo) => {
                let mut s = current.clone();
                match &mut s {
                    Scenario::Seed(s) => s.slo = *slo,
                    Scenario::Engine(e) => e.slo = *slo,
                }
                s
            }
        };
        out.validate()?;
        Ok(out)
    }

    /// The preset called `id`.
    pub fn by_id(id: &str) -> Option<Preset> {
        all().into_iter().find(|p| p.id == id)
    }
}

fn preset(id: String, label: impl Into<String>, basis: impl Into<String>, kind: PresetKind) -> Preset {
    Preset {
        id,
        label: label.into(),
        basis: basis.into(),
        kind,
    }
}

/// A session workload of the `PRESETS.md` shapes: `uniform` spread, no respawn, 30 minutes.
#[allow(clippy::too_many_arguments)]
fn preset_sessions(
    sessions: u32,
    steps: u32,
    base_tokens: u64,
    gen_tokens: u32,
    tool_tokens: u32,
    think_s: f64,
    spread: f64,
    stagger_s: f64,
) -> Workload {
    Workload::Sessions(SessionWorkload {
        sessions,
        steps,
        base_tokens,
        gen_tokens,
        tool_tokens,
        think_s,
        dist: SessionDist::Uniform,
        spread,
        ladder: None,
        respawn: false,
        stagger_s,
        duration_s: 1800.0,
        drain: false,
        drain_grace_s: 60.0,
        task_tokens: 16,
        think: None,
        compaction: None,
        reasoning: None,
        subagents: None,
    })
}

/// Poisson arrivals of fixed-length requests.
fn preset_poisson(num_requests: u64, rate_rps: f64, prompt_tokens: u32, output_tokens: u32) -> Workload {
    Workload::Poisson(PoissonWorkload {
        num_requests,
        rate_rps,
        prompt: LengthDist::Fixed { tokens: prompt_tokens },
        output: LengthDist::Fixed { tokens: output_tokens },
        shared_prefix_tokens: 0,
    })
}

/// The deployment presets: common models on common GPUs, each a deployment of the catalog with every default
/// but the ones named, TP and precisions written in (id, label, basis, deployment).
fn deployments() -> Vec<(&'static str, &'static str, &'static str, Deployment)> {
    // TP and both precisions written in (the page shows a control for each field given); a deployment that does
    // not resolve stays as it is and fails the presets' test.
    let with = |model: &str, gpu: &str, tp: u32, weights: Option<Dtype>, kv: Option<Dtype>| {
        let d = Deployment {
            weight_dtype: weights,
            kv_dtype: kv,
            ..Deployment::named(model, gpu, tp)
        };
        match d.resolve() {
            Ok(r) => Deployment {
                tp: Some(r.derived.tp),
                weight_dtype: Some(r.derived.weight_dtype),
                kv_dtype: Some(r.derived.kv_dtype),
                ..d
            },
            Err(_) => d,
        }
    };
    vec![
        (
            "llama-3.1-8b-1xh100",
            "Deployment · Llama-3.1-8B on 1×H100",
            "the catalog's llama-3.1-8b (bf16) on one h100-sxm, vLLM's defaults; the roofline's default efficiencies",
            with("llama-3.1-8b", "h100-sxm", 1, None, None),
        ),
        (
            "llama-3.1-70b-fp8-4xh100",
            "Deployment · Llama-3.1-70B FP8, TP4 on H100",
            "the catalog's llama-3.1-70b with FP8 weights (FP8 tensor cores), tensor parallel over four h100-sxm; \
             the roofline's default efficiencies",
            with("llama-3.1-70b", "h100-sxm", 4, Some(Dtype::Fp8), None),
        ),
        (
            "qwen3-30b-a3b-1xh200",
            "Deployment · Qwen3-30B-A3B (Qwen3-Coder's shape) on 1×H200",
            "the catalog's qwen3-30b-a3b (bf16; 128 experts, 8 active: Qwen3-Coder-30B-A3B has the same layers) on \
             one h200; the roofline's default efficiencies",
            with("qwen3-30b-a3b", "h200", 1, None, None),
        ),
        (
            "qwen3-32b-2xh100",
            "Deployment · Qwen3-32B, TP2 on H100",
            "the catalog's qwen3-32b (bf16) tensor parallel over two h100-sxm; the roofline's default efficiencies",
            with("qwen3-32b", "h100-sxm", 2, None, None),
        ),
        (
            "gpt-oss-120b-1xh200",
            "Deployment · gpt-oss-120b on 1×H200",
            "the catalog's gpt-oss-120b in its published MXFP4 weights (bf16 compute: the H200 has no FP4 tensor \
             path) on one h200; the roofline's default efficiencies",
            with("gpt-oss-120b", "h200", 1, None, None),
        ),
        (
            "deepseek-v3-fp8-8xh200",
            "Deployment · DeepSeek-V3 FP8, TP8 on H200",
            "the catalog's deepseek-v3 (MLA, 256 experts, 8 active) in its published FP8 weights, tensor parallel \
             over eight h200; the roofline's default efficiencies",
            with("deepseek-v3", "h200", 8, None, None),
        ),
    ]
}

/// Every preset, in menu order: the seed's profiles and its over-batched diagnostic, the engine profiles, the
/// workload shapes, the SLOs.
// `#[inline]` on this file's cold serde entry points (not for speed): their code, with the serde code they
// instantiate, is compiled in the calling crate, so the page builds it at its size-optimized opt-level while
// the engine stays at `shared`'s opt-level 3 (docs/page.md, "Budget": -39 KB gzip).
#[inline]
pub fn all() -> Vec<Preset> {
    let mut out = Vec::new();
    for p in seed_model::SEED_PROFILES.iter() {
        out.push(preset(
            format!("seed:{}", p.name),
            format!("Seed · {}", p.name),
            "the seed's profile (scenario_sim.py): assumed coefficients, not measurements; trace of 80 bursty \
             requests at 8.5 rps, seed 42",
            PresetKind::Scenario(Box::new(Scenario::Seed(seed_scenario(p.clone())))),
        ));
    }
    let overbatched = SeedScenario {
        workload: SeedWorkload::Bursty(seed_trace(15.0)),
        workload_name: "overbatched-tail-violation".to_string(),
        ..seed_scenario(seed_model::OVERBATCHED_PROFILE.clone())
    };
    out.push(preset(
        "seed:overbatched_unbounded".to_string(),
        "Seed · overbatched (48 slots, 15 rps)",
        "the seed's over-batched diagnostic: 48 slots keep TTFT low but push TPOT past its SLO",
        PresetKind::Scenario(Box::new(Scenario::Seed(overbatched))),
    ));
    for p in engine::presets::all() {
        out.push(preset(
            format!("engine:{}", p.name),
            format!("Engine · {}", p.name),
            p.basis.clone(),
            PresetKind::EngineProfile(p),
        ));
    }
    for (id, label, basis, d) in deployments() {
        out.push(preset(
            format!("deployment:{id}"),
            label,
            basis,
            PresetKind::Deployment(Box::new(d)),
        ));
    }
    let prod_ladder = Workload::Sessions(SessionWorkload {
        ladder: Some(Ladder::prod()),
        respawn: true,
        drain: true,
        ..seed_sessions(10, 1800.0)
    });
    let workloads = [
        (
            "prod-ladder",
            "Workload · production ladder (seed 002)",
            "the seed's LADDER_PROD, solved for production (median 26,032 / p90 64,648 prompt tokens, 97 % cached): \
             10 respawning slots, reply 700 + tool output 2,020 tokens per step",
            prod_ladder,
        ),
        (
            "agentic-coding",
            "Workload · agentic coding (SWE-bench-like)",
            "PRESETS.md: sessions of 8–15 calls, 1–3k-token inputs, 50–300 ms tool gaps",
            preset_sessions(16, 12, 2000, 300, 1200, 0.175, 0.25, 0.5),
        ),
        (
            "chat",
            "Workload · chat 256/256",
            "PRESETS.md: the classic benchmark shape, 256 prompt / 256 output tokens, Poisson arrivals",
            preset_poisson(1000, 10.0, 256, 256),
        ),
        (
            "summarization",
            "Workload · summarization 4,096/512",
            "PRESETS.md: long prompts, medium outputs, Poisson arrivals",
            preset_poisson(500, 2.0, 4096, 512),
        ),
        (
            "long-prefix",
            "Workload · long shared prefix",
            "PRESETS.md: 5 turns on a 6.5–10k-token prefix, 128-token turns and outputs",
            preset_sessions(16, 5, 8000, 128, 128, 2.0, 0.2, 1.0),
        ),
    ];
    for (id, label, basis, w) in workloads {
        out.push(preset(format!("workload:{id}"), label, basis, PresetKind::Workload(w)));
    }
    for (id, label, basis, ttft_ms, tpot_ms) in [
        (
            "seed",
            "SLO · seed (TTFT 500 ms, TPOT 35 ms)",
            "the seed's SLOs",
            500.0,
            35.0,
        ),
        (
            "distserve",
            "SLO · DistServe (TTFT 200 ms, TPOT 100 ms)",
            "DistServe's example SLOs (judged at 90 % attainment)",
            200.0,
            100.0,
        ),
        (
            "vidur",
            "SLO · Vidur search (TTFT 2 s, TPOT 200 ms)",
            "Vidur's search constraints (TTFT p90 < 2 s, TBT p99 < 200 ms)",
            2000.0,
            200.0,
        ),
    ] {
        let slo = Slo {
            ttft_ms,
            tpot_ms,
            e2e_ms: None,
        };
        out.push(preset(format!("slo:{id}"), label, basis, PresetKind::Slo(slo)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_validates() {
        for kind in WORKLOAD_KINDS {
            let w = default_workload(kind).expect(kind);
            assert_eq!(w.kind(), kind);
            Scenario::Engine(EngineScenario {
                workload: w,
                ..default_engine_scenario()
            })
            .validate()
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
        assert!(default_workload("nope").is_none());
        for model in ["seed", "engine"] {
            let sc = default_for_model(model).expect(model);
            sc.validate().unwrap_or_else(|e| panic!("{model}: {e}"));
            // The JSON form reads back as the same scenario (what a share link or the CLI sees).
            assert_eq!(Scenario::from_value(sc.to_value()), Ok(sc));
        }
        for dist in ["fixed", "uniform", "lognormal"] {
            for typical in [0.0, 1.0, 300.4, 6e6] {
                let d = default_length(dist, typical).expect(dist);
                d.validate().unwrap_or_else(|e| panic!("{dist} {typical}: {e}"));
            }
        }
        assert!(default_length("zipf", 10.0).is_none());
    }

    #[test]
    fn every_preset_applies_to_either_model_and_names_its_basis() {
        let presets = all();
        let mut ids: Vec<&str> = presets.iter().map(|p| p.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), presets.len(), "preset ids are unique");
        for current in [default_scenario(), Scenario::Engine(default_engine_scenario())] {
            for p in &presets {
                assert!(!p.basis.is_empty() && !p.label.is_empty(), "{}", p.id);
                let sc = p.apply(&current).unwrap_or_else(|e| panic!("{}: {e}", p.id));
                match &p.kind {
                    PresetKind::Scenario(s) => assert_eq!(&sc, &**s),
                    PresetKind::EngineProfile(prof) => {
                        let Scenario::Engine(e) = &sc else {
                            panic!("{}: not the engine model", p.id)
                        };
                        assert_eq!(&e.profile, prof);
                    }
                    PresetKind::Workload(w) => {
                        let Scenario::Engine(e) = &sc else {
                            panic!("{}: not the engine model", p.id)
                        };
                        assert_eq!(&e.workload, w);
                    }
                    PresetKind::Deployment(d) => {
                        let Scenario::Engine(e) = &sc else {
                            panic!("{}: not the engine model", p.id)
                        };
                        assert_eq!(e.deployment.as_ref(), Some(&**d));
                        assert_eq!(e.profile, d.resolve().expect("resolves").profile);
                        // Its JSON (a share link) carries the deployment, not the profile it resolves to.
                        let j = sc.to_value();
                        assert!(j.get("deployment").is_some() && j.get("profile").is_none(), "{}", p.id);
                        assert_eq!(Scenario::from_value(j).as_ref(), Ok(&sc), "{}", p.id);
                    }
                    PresetKind::Slo(slo) => {
                        assert_eq!(&sc.slo(), slo);
                        assert_eq!(std::mem::discriminant(&sc), std::mem::discriminant(&current));
                    }
                }
                assert_eq!(Preset::by_id(&p.id).as_ref(), Some(p));
            }
        }
    }

    #[test]
    fn the_seed_presets_are_the_seed_report_scenarios() {
        for p in seed_model::SEED_PROFILES.iter() {
            let Some(PresetKind::Scenario(sc)) = Preset::by_id(&format!("seed:{}", p.name)).map(|p| p.kind) else {
                panic!("seed:{} is a scenario preset", p.name)
            };
            let Scenario::Seed(s) = *sc else { panic!("seed model") };
            let report = seed_model::seed_report();
            let summary = serde_json::to_value(seed_model::evaluate(&s).expect("evaluates")).unwrap();
            assert_eq!(summary, report["scenario_comparisons"][&*p.name], "{}", p.name);
        }
    }

    #[test]
    fn an_invalid_preset_is_an_error_naming_the_field() {
        let mut bad = engine::presets::laptop_demo();
        bad.max_num_seqs = 0;
        let p = preset("test".into(), "bad", "a test", PresetKind::EngineProfile(bad));
        let err = p.apply(&default_scenario()).expect_err("max_num_seqs 0 is refused");
        assert!(err.to_string().contains("profile.max_num_seqs"), "{err}");
    }
}
