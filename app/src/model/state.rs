//! The explorer's state: the scenario being edited (as JSON, so every field of every model is editable), the
//! last computed [`Outcome`], the rate sweep, and the pinned scenario A for comparison.
//!
//! Edits go into [`Explorer::json`]; an effect debounces them ([`DEBOUNCE_MS`]), validates with
//! `Scenario::from_value`, stores the share link in the URL fragment, and hands the computation to
//! [`crate::worker::offload`] (a Web Worker, so the page never freezes), then the goodput-vs-rate sweep one point per job.
//! Every edit is a new generation: results of older generations are dropped, and their queued jobs never run.

use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use serde_json::Value;
use shared::scenario::Scenario;

use crate::model::compute::{self, Outcome, SweepPoint};
use crate::worker::offload::{self, Lane, now_ms};
use crate::worker::wire::{Done, Job};

/// The longest [`Explorer::settled`] waits for the first result.
pub const SETTLE_GRACE: Duration = Duration::from_secs(2);

/// Quiet time after the last edit before recomputing, milliseconds.
pub const DEBOUNCE_MS: u64 = 90;

/// Without the worker (the main-thread fallback, where a run freezes the page), scenarios larger than this
/// (requests or session steps, counterfactual runs included: [`compute::size_of`]) compute only when the user
/// asks. With the worker every scenario up to [`MAX_RECORDS`] computes on its own: the page stays usable and a
/// newer edit supersedes a running one.
pub const AUTO_RUN_LIMIT: f64 = 200_000.0;

/// The largest scenario the page computes: requests or session steps of its own run ([`compute::records_of`];
/// the counterfactual runs keep no records). Above it the page says so instead of trying: a run keeps every
/// record in the tab's wasm memory, which is at most 4 GiB ([`offload::WASM_MEMORY_LIMIT`]). Measured: 2,000,000
/// overloaded Poisson requests (`examples/engine-10k.json`, whose queue holds most of them) took 1,345 MB and
/// 49 s in the worker; 1,000,000 with both counterfactual runs 1,014 MB and 21–27 s (docs/page.md).
pub const MAX_RECORDS: f64 = 2_000_000.0;

/// A scenario pinned as "A" for the compare view.
#[derive(Debug, Clone)]
pub struct Pinned {
    pub json: Value,
    pub outcome: Arc<Outcome>,
    /// A's seed band when it had one when pinned (Compare greys B's changes inside it).
    pub band: Option<Arc<crate::explorer::seed_band::SeedBand>>,
}

/// The explorer's signals. Copy: share it by value or through context.
#[derive(Clone, Copy)]
pub struct Explorer {
    /// The scenario as edited, possibly invalid.
    pub json: RwSignal<Value>,
    /// Why `json` is not a valid scenario (names the field).
    pub error: RwSignal<Option<String>>,
    /// The control (its JSON pointer) edited since the scenario was last validated.
    pub last_edit: RwSignal<Option<String>>,
    /// The control whose edit made `error` (its box is marked, and the banner names it); `None` when the error
    /// came another way (a link, the JSON box, a preset).
    pub error_at: RwSignal<Option<String>>,
    /// A problem with the link the page was opened with (shown once, dismissible).
    pub link_message: RwSignal<Option<String>>,
    pub outcome: RwSignal<Option<Arc<Outcome>>>,
    pub computing: RwSignal<bool>,
    /// `performance.now()` when the running computation was asked for.
    pub computing_since: RwSignal<Option<f64>>,
    /// Where the last result was computed: `worker` or `main` (the main thread).
    pub computed_in: RwSignal<Option<&'static str>>,
    /// Milliseconds the last computation took in this browser.
    pub compute_ms: RwSignal<Option<f64>>,
    /// Wasm memory (bytes) where the last computation ran, after it.
    pub memory_bytes: RwSignal<Option<f64>>,
    /// Why the last computation gave no result (the worker failed, the scenario is too large for a tab, the
    /// model refused it). Cleared by the next result.
    pub compute_error: RwSignal<Option<String>>,
    /// The scenario is too large to recompute on every edit; waiting for "Run".
    pub needs_run: RwSignal<bool>,
    pub sweep: RwSignal<Vec<SweepPoint>>,
    /// (done, total) of the running sweep.
    pub sweep_progress: RwSignal<(usize, usize)>,
    pub pinned: RwSignal<Option<Pinned>>,
    /// The seed band of the current result (engine scenarios), once the worker has computed it.
    pub band: RwSignal<Option<Arc<crate::explorer::seed_band::SeedBand>>>,
    /// `performance.now()` when the first result was shown (time to an interactive page), milliseconds.
    pub first_result_ms: RwSignal<Option<f64>>,
    generation: StoredValue<u64>,
    debounce: StoredValue<Option<TimeoutHandle>>,
    /// Whether the scenario has changed since the page opened: until then the address already says it (the link
    /// it was opened with, or none for the default), so the first computation writes no link.
    edited: StoredValue<bool>,
    /// The last link write asked for ([`Explorer::write_link`]): an older one that finishes later is dropped.
    link_seq: StoredValue<u64>,
}

impl Explorer {
    /// Resolves once the explorer has settled its first scenario (shown a result, or said why it shows none), or
    /// after [`SETTLE_GRACE`] if it is still computing (a large scenario, in the worker). What the page loads on
    /// demand waits for this, so it never competes with the first result for the main thread.
    pub fn settled(self) -> impl Future<Output = ()> + Send + 'static {
        let (tx, rx) = futures_channel::oneshot::channel::<()>();
        let tx = StoredValue::new(Some(tx));
        let fire = move || {
            if let Some(tx) = tx.try_update_value(Option::take).flatten() {
                let _ = tx.send(());
            }
        };
        Effect::new(move || {
            if self.first_result_ms.get().is_some()
                || self.compute_error.get().is_some()
                || self.error.get().is_some()
                || self.needs_run.get()
            {
                fire();
            }
        });
        set_timeout(fire, SETTLE_GRACE);
        async move {
            let _ = rx.await;
        }
    }

    /// State for the page URL: the scenario from `#s=...` when it decodes, else the default with a message.
    pub fn from_url() -> Explorer {
        let (hash, search) = crate::model::url::location_parts();
        let (json, message) = match crate::model::url::param(&hash, &search, shared::link::FRAGMENT_KEY) {
            None => (compute::default_scenario(), None),
            Some(payload) => match shared::link::decode(&payload) {
                Ok(sc) => (sc.to_value(), None),
                Err(e) => (
                    compute::default_scenario(),
                    Some(format!("{e}. Showing the default scenario instead.")),
                ),
            },
        };
        let ex = Explorer {
            json: RwSignal::new(json),
            error: RwSignal::new(None),
            last_edit: RwSignal::new(None),
            error_at: RwSignal::new(None),
            link_message: RwSignal::new(message),
            outcome: RwSignal::new(None),
            computing: RwSignal::new(false),
            computing_since: RwSignal::new(None),
            computed_in: RwSignal::new(None),
            compute_ms: RwSignal::new(None),
            memory_bytes: RwSignal::new(None),
            compute_error: RwSignal::new(None),
            needs_run: RwSignal::new(false),
            sweep: RwSignal::new(Vec::new()),
            sweep_progress: RwSignal::new((0, 0)),
            pinned: RwSignal::new(None),
            band: RwSignal::new(None),
            first_result_ms: RwSignal::new(None),
            generation: StoredValue::new(0),
            debounce: StoredValue::new(None),
            edited: StoredValue::new(false),
            link_seq: StoredValue::new(0),
        };
        Effect::new(move |prev: Option<()>| {
            let json = ex.json.get();
            if prev.is_some() {
                ex.edited.set_value(true);
            }
            // The first computation runs at once; later edits are debounced.
            ex.schedule(json, if prev.is_none() { 0 } else { DEBOUNCE_MS }, false);
        });
        ex
    }

    /// The current scenario, when valid.
    pub fn scenario(&self) -> Option<Scenario> {
        Scenario::from_value(self.json.get_untracked()).ok()
    }

    /// Replace the whole scenario (presets, model switch, "use in scenario", imported files).
    pub fn set_scenario(&self, sc: &Scenario) {
        self.json.set(sc.to_value());
    }

    /// Set the value at a JSON pointer (`/profile/base_tpot_ms`).
    pub fn set_at(&self, pointer: &str, value: Value) {
        set_at(self.json, pointer, value);
    }

    /// Compute now even if the scenario is large.
    pub fn run_now(&self) {
        self.schedule(self.json.get_untracked(), 0, true);
    }

    fn schedule(self, json: Value, delay_ms: u64, force: bool) {
        if let Some(h) = self.debounce.get_value() {
            h.clear();
        }
        let handle = set_timeout_with_handle(
            move || self.validate_and_run(json, force),
            Duration::from_millis(delay_ms),
        );
        self.debounce.set_value(handle.ok());
    }

    fn validate_and_run(self, json: Value, force: bool) {
        // The explorer may be gone (unmounted) by the time a timer or a result arrives: then do nothing.
        if self.generation.try_get_value().is_none() {
            return;
        }
        let generation = offload::new_generation();
        self.generation.set_value(generation);
        // Whatever the old edits asked for is outdated now (their results are never shown).
        offload::supersede(Lane::Explorer, generation);
        let edited = self.last_edit.get_untracked();
        self.last_edit.set(None);
        let sc = match Scenario::from_value(json) {
            Ok(sc) => sc,
            Err(e) => {
                let e = e.to_string();
                // A new error is the last edit's; the same one still is the edit's that made it.
                if self.error.get_untracked().as_deref() != Some(e.as_str()) {
                    self.error_at.set(edited);
                }
                self.error.set(Some(e));
                self.computing.set(false);
                return;
            }
        };
        self.error.set(None);
        self.error_at.set(None);
        if self.edited.get_value() {
            self.write_link(sc.clone());
        }
        let size = compute::size_of(&sc);
        let records = compute::records_of(&sc);
        if records > MAX_RECORDS {
            self.needs_run.set(false);
            self.computing.set(false);
            self.compute_error.set(Some(too_large(records)));
            return;
        }
        self.compute_error.set(None);
        if !force && size > AUTO_RUN_LIMIT && offload::mode() == "main" {
            self.needs_run.set(true);
            self.computing.set(false);
            return;
        }
        self.needs_run.set(false);
        self.computing.set(true);
        self.computing_since.set(Some(now_ms()));
        offload::submit(
            Lane::Explorer,
            generation,
            size,
            Job::Compute(sc.to_value()),
            move |f| {
                if self.generation.try_get_value() != Some(generation) {
                    return;
                }
                self.compute_ms.set(Some(f.ms));
                self.computed_in.set(Some(if f.in_worker { "worker" } else { "main" }));
                self.memory_bytes.set((f.memory_bytes > 0.0).then_some(f.memory_bytes));
                self.computing.set(false);
                self.computing_since.set(None);
                match f.done {
                    Done::Outcome(Ok(outcome)) => {
                        self.compute_error.set(None);
                        self.outcome.set(Some(Arc::new(outcome)));
                        if self.first_result_ms.get_untracked().is_none() {
                            self.first_result_ms.set(Some(now_ms()));
                        }
                        self.start_sweep(sc, generation);
                    }
                    Done::Outcome(Err(e)) => self.compute_error.set(Some(e)),
                    Done::Point(_) | Done::Band(_) | Done::Bytes(_) => {}
                }
            },
        );
    }

    /// Puts the scenario's link (`s=`) into the page's address, so a reload or a copied address opens it. The
    /// encoding (compact JSON, deflate, base64) is code loaded on demand ([`crate::link_payload`]): it is not
    /// needed for the first result.
    fn write_link(self, sc: Scenario) {
        let seq = self.link_seq.get_value() + 1;
        self.link_seq.set_value(seq);
        leptos::task::spawn_local(async move {
            let payload = crate::link_payload(sc).await;
            if self.link_seq.try_get_value() == Some(seq) {
                let hash = crate::model::url::location_parts().0;
                crate::model::url::replace_hash(&crate::model::url::with_param(
                    &hash,
                    shared::link::FRAGMENT_KEY,
                    Some(&payload),
                ));
            }
        });
    }

    fn start_sweep(self, sc: Scenario, generation: u64) {
        let plan = compute::sweep_plan(&sc);
        self.sweep.set(Vec::new());
        self.sweep_progress.set((0, plan.len()));
        // One point per job: a newer edit overtakes the rest of the sweep after at most one point.
        fn step(ex: Explorer, plan: Arc<Vec<(f64, Value)>>, i: usize, generation: u64) {
            if ex.generation.try_get_value() != Some(generation) || i >= plan.len() {
                return;
            }
            let (size, json) = plan[i].clone();
            offload::submit(Lane::Explorer, generation, size, Job::SweepPoint(json), move |f| {
                if ex.generation.try_get_value() != Some(generation) {
                    return;
                }
                // The worker died on this point: say so and stop the sweep (never a bar stuck half-way).
                if let Some(why) = f.failure {
                    ex.compute_error.set(Some(format!("The goodput sweep stopped: {why}")));
                    ex.sweep_progress.set((0, 0));
                    return;
                }
                if let Done::Point(Some(point)) = f.done {
                    ex.sweep.update(|s| s.push(point));
                }
                ex.sweep_progress.set((i + 1, plan.len()));
                step(ex, plan, i + 1, generation);
            });
        }
        let plan: Vec<(f64, Value)> = plan.iter().map(|s| (compute::size_of(s), s.to_value())).collect();
        step(self, Arc::new(plan), 0, generation);
    }
}

/// The message for a scenario of `records` requests or session steps, above [`MAX_RECORDS`].
pub fn too_large(records: f64) -> String {
    format!(
        "This scenario is too large to compute in a browser tab: {} requests or session steps, above the page's \
         limit of {}. Every record is kept in the tab's WebAssembly memory, which is at most {} GiB. Use \
         the command line's simulator for this size, or fewer requests here.",
        crate::ui::fmt::num(records),
        crate::ui::fmt::num(MAX_RECORDS),
        offload::WASM_MEMORY_LIMIT / f64::from(1u32 << 30)
    )
}

/// Set the value at a JSON pointer (`/profile/base_tpot_ms`) of `json`; a missing last key is added.
pub fn set_at(json: RwSignal<Value>, pointer: &str, value: Value) {
    json.update(|j| {
        if let Some(slot) = j.pointer_mut(pointer) {
            *slot = value;
        } else if let Some((parent, key)) = pointer.rsplit_once('/')
            && let Some(Value::Object(map)) = j.pointer_mut(parent)
        {
            map.insert(key.to_string(), value);
        }
    });
}
