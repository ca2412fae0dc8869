//! "Calibrate this target" (issue #41, item 1): the live panel asks the agent to probe the chosen target as the
//! command line's `calibrate --url` does (`start_calibration`), shows the probe's progress (`calibration_progress`),
//! and the fitted profile, which the agent keeps with the target (`calibration_result`, and `targets` after a
//! reload). The explorer's switch (`crate::explorer::target_profile`) and "Use in explorer" put that profile in the
//! explorer's scenario, so share links carry it like any profile.

use leptos::prelude::*;
use shared::engine::EngineProfile;
use shared::protocol::{ClientMsg, RunInfo, RunKind, RunState, ServerMsg, TargetProfile};
use shared::scenario::Scenario;

use crate::agent::ws::AgentConn;
use crate::model::state::Explorer;
use crate::ui::fmt::sig4;

/// The probe budget the page offers first, seconds.
pub const PAGE_BUDGET_S: f64 = 60.0;

/// Where a calibration stands (`calibration_progress`).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub phase: String,
    pub phase_index: u32,
    pub phases: u32,
    pub requests: u64,
    pub elapsed_s: f64,
    pub budget_s: f64,
}

/// The calibration state the live panel, the fit card and the explorer share (provided by the app).
#[derive(Clone, Copy)]
pub struct Calibration {
    /// Each target's kept profile, from `targets` and `calibration_result`.
    pub profiles: RwSignal<Vec<TargetProfile>>,
    /// The calibration run followed (the last one started here, or a running one found after a reload).
    pub run: RwSignal<Option<RunInfo>>,
    pub progress: RwSignal<Option<Progress>>,
    pub error: RwSignal<Option<String>>,
    pub budget_s: RwSignal<f64>,
    /// The id of the `start_calibration` in flight, to tell its refusal from other errors.
    pending: StoredValue<Option<u64>>,
    /// Whether the message handlers are in place (once per page).
    wired: StoredValue<bool>,
}

impl Calibration {
    pub fn new() -> Calibration {
        Calibration {
            profiles: RwSignal::new(Vec::new()),
            run: RwSignal::new(None),
            progress: RwSignal::new(None),
            error: RwSignal::new(None),
            budget_s: RwSignal::new(PAGE_BUDGET_S),
            pending: StoredValue::new(None),
            wired: StoredValue::new(false),
        }
    }

    /// The profile kept for `target`.
    pub fn profile_of(&self, target: &str) -> Option<TargetProfile> {
        self.profiles.with(|ps| ps.iter().find(|p| p.target == target).cloned())
    }

    /// Whether the reply `id` answers this card's `start_calibration` (its refusal is shown here, not twice).
    pub fn owns(&self, id: u64) -> bool {
        id != 0 && self.pending.get_value() == Some(id)
    }

    pub fn running(&self) -> bool {
        self.run
            .with(|r| r.as_ref().is_some_and(|r| r.state == RunState::Running))
    }

    /// Asks the agent to calibrate `target` with the budget shown; says why not when nothing went out.
    pub fn start(&self, conn: AgentConn, target: &str) {
        if target.is_empty() {
            self.error.set(Some("pick a target".into()));
            return;
        }
        let id = conn.next_id();
        self.pending.set_value(Some(id));
        self.error.set(None);
        let msg = ClientMsg::StartCalibration {
            id,
            target: target.to_string(),
            budget_s: Some(self.budget_s.get_untracked()),
        };
        if !conn.send(&msg) {
            self.error.set(Some("not connected to the agent".into()));
        }
    }

    /// Follows the agent's messages (once per page).
    pub fn wire(&self, conn: AgentConn) {
        if self.wired.get_value() {
            return;
        }
        self.wired.set_value(true);
        let this = *self;
        conn.on_message(move |msg| this.handle(conn, msg));
        conn.on_connect(move || {
            // A reconnect lost the stream: follow the calibration again (its last progress and result come first).
            if let Some(r) = this.run.get_untracked().filter(|r| r.state == RunState::Running) {
                this.subscribe(conn, &r.run_id);
            }
        });
    }

    fn subscribe(&self, conn: AgentConn, run_id: &str) {
        conn.send(&ClientMsg::Subscribe {
            id: conn.next_id(),
            run_id: run_id.to_string(),
            from_seq: 0,
        });
    }

    fn is_followed(&self, run_id: &str) -> bool {
        self.run
            .with_untracked(|r| r.as_ref().is_some_and(|r| r.run_id == run_id))
    }

    fn handle(&self, conn: AgentConn, msg: &ServerMsg) {
        match msg {
            ServerMsg::Targets { targets, .. } => self
                .profiles
                .set(targets.iter().filter_map(|t| t.profile.as_deref().cloned()).collect()),
            // A page (re)loaded while a calibration runs follows it.
            ServerMsg::Runs { runs, .. } if self.run.with_untracked(Option::is_none) => {
                if let Some(r) = runs
                    .iter()
                    .filter(|r| r.kind == RunKind::Calibration && r.state == RunState::Running)
                    .max_by_key(|r| r.started_ms)
                {
                    self.run.set(Some(r.clone()));
                    self.subscribe(conn, &r.run_id);
                }
            }
            ServerMsg::CalibrationStarted { run, budget_s, .. } => {
                self.pending.set_value(None);
                self.error.set(None);
                self.progress.set(Some(Progress {
                    phase: "starting".into(),
                    phase_index: 0,
                    phases: 0,
                    requests: 0,
                    elapsed_s: 0.0,
                    budget_s: *budget_s,
                }));
                self.run.set(Some(run.clone()));
                self.subscribe(conn, &run.run_id);
            }
            ServerMsg::CalibrationProgress {
                run_id,
                phase,
                phase_index,
                phases,
                requests,
                elapsed_s,
                budget_s,
            } if self.is_followed(run_id) => self.progress.set(Some(Progress {
                phase: phase.clone(),
                phase_index: *phase_index,
                phases: *phases,
                requests: *requests,
                elapsed_s: *elapsed_s,
                budget_s: *budget_s,
            })),
            ServerMsg::CalibrationResult { calibration, .. } => {
                let c = (**calibration).clone();
                self.profiles.update(|ps| {
                    ps.retain(|p| p.target != c.target);
                    ps.push(c);
                });
            }
            ServerMsg::RunState { run, .. } if run.kind == RunKind::Calibration && self.is_followed(&run.run_id) => {
                match run.state {
                    RunState::Failed | RunState::Interrupted | RunState::Damaged => self.error.set(Some(format!(
                        "The calibration failed: {}",
                        run.error.clone().unwrap_or_else(|| "no reason given".into())
                    ))),
                    RunState::Stopped => self.error.set(Some(
                        "The calibration was stopped; the target keeps the profile it had.".into(),
                    )),
                    RunState::Finished | RunState::Running => {}
                }
                self.run.set(Some(run.clone()));
            }
            ServerMsg::Error { id, message, .. } if *id != 0 && self.pending.get_value() == Some(*id) => {
                self.pending.set_value(None);
                self.error.set(Some(message.clone()));
            }
            _ => {}
        }
    }
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration::new()
    }
}

/// The progress line: `phase 3 of 7 (decode) · 84 requests · 21 s of about 60 s`.
pub fn progress_text(p: &Progress) -> String {
    if p.phases == 0 {
        return format!("starting (about {:.0} s of probing, then the fit)", p.budget_s);
    }
    let what = if p.phase == "fit" {
        "fitting the profile".to_string()
    } else {
        format!("probing: {}", p.phase.replace('_', " "))
    };
    format!(
        "step {} of {} ({what}) · {} requests · {:.0} s of about {:.0} s",
        p.phase_index, p.phases, p.requests, p.elapsed_s, p.budget_s
    )
}

/// The fitted profile's key numbers in words: the decode step alone and at 8 in a batch (1,024 tokens of context
/// each), the prefill speed and fixed cost, and how well the fit describes the probe.
pub fn key_numbers(c: &TargetProfile) -> Vec<(&'static str, String)> {
    let p = &c.profile;
    vec![
        (
            "Time per output token",
            format!(
                "{} ms alone, {} ms with 8 in a batch (1k tokens of context each)",
                sig4(p.decode_step_ms(1.0, 1024.0)),
                sig4(p.decode_step_ms(8.0, 1024.0))
            ),
        ),
        (
            "Prefill",
            format!(
                "{} tokens/ms, plus {} ms per prefill",
                sig4(p.prefill_tokens_per_ms),
                sig4(p.prefill_fixed_ms)
            ),
        ),
        (
            "Fit",
            format!(
                "predicts a decode step within ±{:.1} % ({} requests), a prefill within ±{:.1} % ({}); R² {:.3} and \
                 {:.3}",
                c.fit.decode_spread * 100.0,
                c.fit.decode_requests,
                c.fit.prefill_spread * 100.0,
                c.fit.prefill_requests,
                c.fit.decode_r2,
                c.fit.prefill_r2
            ),
        ),
    ]
}

/// The explorer's scenario with `profile` in place of its own: an engine scenario keeps everything else (a
/// deployment is dropped: the measured profile replaces what it computed); anything else becomes the default
/// engine scenario with that profile.
pub fn with_profile(current: Option<Scenario>, profile: &EngineProfile) -> Scenario {
    let mut e = match current {
        Some(Scenario::Engine(e)) => e,
        _ => shared::presets::default_engine_scenario(),
    };
    e.profile = profile.clone();
    e.deployment = None;
    Scenario::Engine(e)
}

/// Whether the explorer's scenario runs `profile` (what the switch and the card show as in use).
pub fn uses_profile(current: Option<&Scenario>, profile: &EngineProfile) -> bool {
    matches!(current, Some(Scenario::Engine(e)) if &e.profile == profile)
}

/// The live panel's "Calibrate this target" section.
#[component]
pub fn CalibrateCard(target: RwSignal<String>, conn: AgentConn, ex: Explorer) -> impl IntoView {
    let cal = expect_context::<Calibration>();
    cal.wire(conn);
    let view_sig = use_context::<RwSignal<crate::View>>();
    let kept = Memo::new(move |_| {
        let t = target.get();
        cal.profiles.with(|ps| ps.iter().find(|p| p.target == t).cloned())
    });
    let in_use = Memo::new(move |_| {
        let sc = Scenario::from_value(ex.json.get()).ok();
        kept.with(|k| k.as_ref().is_some_and(|k| uses_profile(sc.as_ref(), &k.profile)))
    });
    let start = move |_| cal.start(conn, &target.get_untracked());
    let stop = move |_| {
        if let Some(r) = cal.run.get_untracked() {
            conn.send(&ClientMsg::StopRun {
                id: conn.next_id(),
                run_id: r.run_id,
            });
        }
    };
    let use_it = move |_| {
        let Some(k) = kept.get_untracked() else { return };
        ex.set_scenario(&with_profile(ex.scenario(), &k.profile));
        if let Some(v) = view_sig {
            v.set(crate::View::Explorer);
        }
    };
    let running = move || cal.running();
    view! {
        <div class="calibrate" data-calibrate="" data-calibration-state=move || cal.run.get().map(|r| format!("{:?}", r.state).to_lowercase())>
            <h3 class="section">"Calibrate this target"</h3>
            <p class="faint small">
                "Probes the target with designed requests (alone, then in batches, prompts of many lengths) for about \
                 the budget, then fits its engine profile, as the command line's calibration does. Nothing else runs \
                 on the target meanwhile. The profile is kept with the target for the explorer to use."
            </p>
            <label class="stack">
                <span class="field-label">"Probe budget (seconds)"</span>
                <input
                    type="number"
                    min="5"
                    step="5"
                    data-control="calibration-budget"
                    aria-label="Calibration probe budget, seconds"
                    prop:value=move || cal.budget_s.get().to_string()
                    on:change=move |ev| {
                        if let Ok(v) = event_target_value(&ev).trim().parse::<f64>()
                            && v.is_finite()
                        {
                            cal.budget_s.set(v);
                        }
                    }
                />
            </label>
            <div class="actions">
                <button class="btn" data-action="calibrate" on:click=start disabled=running>"Calibrate this target"</button>
                <button class="btn danger" data-action="stop-calibration" on:click=stop disabled=move || !running()>"Stop"</button>
            </div>
            {move || cal.progress.get().filter(|_| running()).map(|p| view! {
                <p class="small" data-calibration-progress="" data-phase=p.phase.clone() data-requests=p.requests>
                    {progress_text(&p)}
                </p>
            })}
            {move || cal.error.get().map(|e| view! { <p class="callout bad" data-calibration-error="">{e}</p> })}
            {move || kept.get().map(|k| {
                let numbers = key_numbers(&k);
                let when = crate::ui::fmt::local_clock(k.calibrated_ms);
                let profile_json = serde_json::to_string(&k.profile).unwrap_or_default();
                view! {
                    <div class="calibration-result" data-calibration-result="" data-target=k.target.clone() data-run=k.run_id.clone() data-profile-json=profile_json>
                        <p class="small">
                            <strong>{format!("{}'s profile", k.target)}</strong>
                            {format!(" · calibrated {when} with a {:.0} s probe", k.budget_s)}
                        </p>
                        <dl class="key-numbers small">
                            {numbers.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> }).collect_view()}
                        </dl>
                        <div class="actions">
                            <button class="btn" data-action="use-target-profile" on:click=use_it disabled=move || in_use.get()>
                                {move || if in_use.get() { "In use in the explorer" } else { "Use in explorer" }}
                            </button>
                        </div>
                    </div>
                }
            })}
        </div>
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn calibrated() -> TargetProfile {
        let mut profile = shared::engine::presets::llama3_8b_h100();
        profile.name = "sim (calibrated)".into();
        profile.step_fixed_ms = 6.996;
        profile.prefill_tokens_per_ms = 29.78;
        TargetProfile {
            target: "sim".into(),
            run_id: "r1-0001".into(),
            calibrated_ms: 1_764_499_262_000,
            budget_s: 60.0,
            profile,
            fit: shared::protocol::FitSummary {
                decode_r2: 0.999,
                decode_requests: 51,
                prefill_r2: 0.99,
                prefill_requests: 179,
                decode_spread: 0.012,
                prefill_spread: 0.021,
                unused: 35,
                notes: Vec::new(),
            },
        }
    }

    #[test]
    fn progress_says_the_step_the_requests_and_the_time() {
        let mut p = Progress {
            phase: "decode_batch".into(),
            phase_index: 3,
            phases: 7,
            requests: 84,
            elapsed_s: 21.4,
            budget_s: 60.0,
        };
        assert_eq!(
            progress_text(&p),
            "step 3 of 7 (probing: decode batch) · 84 requests · 21 s of about 60 s"
        );
        p.phase = "fit".into();
        assert!(progress_text(&p).contains("fitting the profile"));
        p.phases = 0;
        assert!(progress_text(&p).starts_with("starting"));
    }

    #[test]
    fn key_numbers_come_from_the_fitted_profile() {
        let c = calibrated();
        let n = key_numbers(&c);
        let alone = c.profile.decode_step_ms(1.0, 1024.0);
        let batch = c.profile.decode_step_ms(8.0, 1024.0);
        assert!(
            n[0].1
                .starts_with(&format!("{} ms alone, {} ms with 8", sig4(alone), sig4(batch))),
            "{:?}",
            n[0]
        );
        assert!(n[1].1.starts_with("29.78 tokens/ms"), "{:?}", n[1]);
        assert!(
            n[2].1.contains("±1.2 % (51 requests)") && n[2].1.contains("±2.1 % (179)"),
            "{:?}",
            n[2]
        );
    }

    /// The target's profile replaces the explorer's (the rest of an engine scenario kept, a deployment dropped), and
    /// a share link of the result carries it exactly.
    #[test]
    fn the_target_profile_goes_into_the_scenario_and_its_share_link() {
        let c = calibrated();
        let mut base = shared::presets::default_engine_scenario();
        base.seed = 17;
        let sc = with_profile(Some(Scenario::Engine(base)), &c.profile);
        assert!(uses_profile(Some(&sc), &c.profile));
        let Scenario::Engine(e) = &sc else {
            panic!("an engine scenario")
        };
        assert_eq!((e.seed, e.deployment.is_none()), (17, true));
        let link = shared::link::encode(&sc);
        let back = shared::link::decode(&link).expect("the link decodes");
        assert!(
            uses_profile(Some(&back), &c.profile),
            "the link lost the calibrated profile"
        );
        // A seed scenario becomes the default engine scenario with the profile.
        let seed = Some(shared::presets::default_scenario());
        assert!(uses_profile(Some(&with_profile(seed, &c.profile)), &c.profile));
        assert!(!uses_profile(Some(&shared::presets::default_scenario()), &c.profile));
    }
}
