//! An engine scenario as a deployment (issue #40, item 5): the switch between raw coefficients and a deployment
//! (model, GPU, TP, precision), the deployment's derived numbers beside the result, and A/B of two deployments one
//! click from it (another GPU; TP2 against two replicas), pinned into the Compare view.
//!
//! The derived numbers are `shared::deploy::Deployment::resolve`'s [`Derived`], the same numbers `loadshape
//! simulate` prints above its table: the page formats them and computes nothing of its own.

use std::sync::Arc;

use leptos::prelude::*;
use serde_json::Value;
use shared::deploy::{Deployment, Derived, Dtype};
use shared::scenario::Scenario;

use crate::model::state::{Explorer, Pinned};

/// How an engine scenario describes its engine: `profile` (raw coefficients) or `deployment`; `None` for a scenario
/// of another model.
pub fn engine_source(j: &Value) -> Option<&'static str> {
    if j.get("model").and_then(Value::as_str) != Some("engine") {
        return None;
    }
    if j.get("deployment").is_some() {
        Some("deployment")
    } else {
        Some("profile")
    }
}

/// A deployment standing for a profile: the catalog model and GPU its name mentions (`llama-3-70b-4xh100-tp4`:
/// Llama-3.1-70B on four H100s), else Llama-3.1-8B on one H100, with the profile's engine limits (`max_num_seqs`,
/// `max_num_batched_tokens`, `block_size`) where they give a valid deployment.
pub fn deployment_for(profile: &Value) -> Deployment {
    let name = profile.get("name").and_then(Value::as_str).unwrap_or("").to_lowercase();
    let catalog_model = shared::deploy::catalog::MODELS
        .iter()
        .map(|m| m.name)
        .filter(|m| name.contains(m))
        .max_by_key(|m| m.len());
    let model = catalog_model.unwrap_or(if name.contains("70b") {
        "llama-3.1-70b"
    } else {
        "llama-3.1-8b"
    });
    let gpus = shared::deploy::catalog::gpus();
    let gpu = gpus
        .iter()
        .map(|g| g.name.as_str())
        .find(|g| name.contains(g.split('-').next().unwrap_or(g)))
        .unwrap_or("h100-sxm");
    // `tp4`, or `4xh100`: the GPUs of a replica.
    let digits_before = |at: usize| {
        let head = &name[..at];
        let start = head.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
        head[start..].parse::<u32>().ok()
    };
    let tp = name
        .find("tp")
        .and_then(|i| {
            let rest = &name[i + 2..];
            let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            rest[..end].parse::<u32>().ok()
        })
        .or_else(|| {
            name.find(&format!("x{}", gpu.split('-').next().unwrap_or(gpu)))
                .and_then(digits_before)
        })
        .filter(|t| (1..=64).contains(t))
        .unwrap_or(if model == "llama-3.1-70b" { 4 } else { 1 });
    let base = Deployment {
        weight_dtype: name.contains("fp8").then_some(Dtype::Fp8),
        ..Deployment::named(model, gpu, tp)
    };
    let limit = |k: &str| {
        profile
            .get(k)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    let with_limits = Deployment {
        max_num_seqs: limit("max_num_seqs"),
        max_num_batched_tokens: limit("max_num_batched_tokens"),
        block_size: limit("block_size"),
        ..base.clone()
    };
    if with_limits.resolve().is_ok() {
        with_limits
    } else if base.resolve().is_ok() {
        base
    } else {
        Deployment::named("llama-3.1-8b", "h100-sxm", 1)
    }
}

/// The decisions a deployment's controls open on and that a deployment may leave out (tensor parallelism, the
/// weights' and the KV cache's precision).
pub const DECISIONS: [&str; 3] = ["tp", "weight_dtype", "kv_dtype"];

/// The scenario with its deployment's left-out decisions written in as the values they default to (TP 1, the
/// model's published weight precision, bf16 KV), so each has its control; `None` when nothing is left out (or
/// the deployment does not resolve: its error is shown instead). The scenario computes the same either way.
pub fn with_decisions(j: &Value) -> Option<Value> {
    if engine_source(j) != Some("deployment") {
        return None;
    }
    let dep = j.get("deployment")?.as_object()?;
    if DECISIONS.iter().all(|k| dep.contains_key(*k)) {
        return None;
    }
    let d = derived_of(j)?;
    let mut out = j.clone();
    let map = out.get_mut("deployment")?.as_object_mut()?;
    for (k, v) in [
        ("tp", Value::from(d.tp)),
        ("weight_dtype", Value::from(d.weight_dtype.name())),
        ("kv_dtype", Value::from(d.kv_dtype.name())),
    ] {
        map.entry(k).or_insert(v);
    }
    Some(out)
}

/// The two descriptions of one engine the switch moves between: the profile the user had and the deployment it
/// became (or the deployment and the coefficients it resolves to). Switching back returns the other one as long
/// as the side shown is unchanged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwitchMemory {
    pub pair: Option<(Value, Value)>,
}

/// The scenario with its profile described as a deployment: the remembered one when the profile is the one it was
/// switched from, else [`deployment_for`]. `None` when `j` is not an engine scenario with a profile.
pub fn as_deployment(j: &Value, memory: &mut SwitchMemory) -> Option<Value> {
    if engine_source(j) != Some("profile") {
        return None;
    }
    let profile = j.get("profile")?.clone();
    let remembered = match &memory.pair {
        Some((p, d)) if *p == profile => Some(d.clone()),
        _ => None,
    };
    let fresh = remembered.is_none();
    let deployment = match remembered {
        Some(d) => d,
        None => {
            // Through the scenario's own JSON reader and writer (no serde code of the page's own: docs/page.md,
            // "Budget").
            let Scenario::Engine(mut e) = Scenario::from_value(j.clone()).ok()? else {
                return None;
            };
            let d = deployment_for(&profile);
            e.profile = d.resolve().ok()?.profile;
            e.deployment = Some(d);
            Scenario::Engine(e).to_value().get("deployment")?.clone()
        }
    };
    let mut out = j.clone();
    let map = out.as_object_mut()?;
    map.remove("profile");
    map.insert("deployment".into(), deployment);
    // A new deployment opens with all its decisions as controls.
    if fresh && let Some(filled) = with_decisions(&out) {
        out = filled;
    }
    memory.pair = Some((profile, out.get("deployment")?.clone()));
    Some(out)
}

/// The scenario with its deployment as raw coefficients: the remembered profile when the deployment is the one it
/// was switched to, else the profile the deployment resolves to (the same numbers, so the same result). `None` when
/// `j` has no deployment or it does not resolve.
pub fn as_profile(j: &Value, memory: &mut SwitchMemory) -> Option<Value> {
    let deployment = j.get("deployment")?.clone();
    let profile = match &memory.pair {
        Some((p, d)) if *d == deployment => p.clone(),
        _ => {
            let Scenario::Engine(mut e) = Scenario::from_value(j.clone()).ok()? else {
                return None;
            };
            e.deployment = None;
            Scenario::Engine(e).to_value().get("profile")?.clone()
        }
    };
    let mut out = j.clone();
    let map = out.as_object_mut()?;
    map.remove("deployment");
    map.insert("profile".into(), profile.clone());
    memory.pair = Some((profile, deployment));
    Some(out)
}

/// The derived numbers of the scenario's deployment; `None` without one or when it does not resolve (the
/// scenario's error says why).
pub fn derived_of(j: &Value) -> Option<Derived> {
    j.get("deployment")?;
    let Scenario::Engine(e) = Scenario::from_value(j.clone()).ok()? else {
        return None;
    };
    Some(e.deployment?.resolve().ok()?.derived)
}

/// The scenario on another GPU of the catalog.
pub fn on_gpu(j: &Value, gpu: &str) -> Value {
    let mut out = j.clone();
    if let Some(d) = out.get_mut("deployment").and_then(Value::as_object_mut) {
        d.insert("gpu".into(), Value::from(gpu));
    }
    out
}

/// "TP against replicas" with the same GPUs: A splits each replica over twice the GPUs (TP 2t, r replicas), B runs
/// twice the replicas at the current TP (t, 2r). `(A, B, label)`, or why not (the doubled TP does not divide the
/// heads, say).
pub fn tp_vs_replicas(j: &Value) -> Result<(Value, Value, String), String> {
    let d = j.get("deployment").ok_or("no deployment")?;
    let tp = d.get("tp").and_then(Value::as_u64).unwrap_or(1);
    let replicas = j.pointer("/fleet/replicas").and_then(Value::as_u64).unwrap_or(1);
    let mut a = j.clone();
    a["deployment"]["tp"] = Value::from(tp * 2);
    let mut b = j.clone();
    match b.get_mut("fleet").and_then(Value::as_object_mut) {
        Some(f) => {
            f.insert("replicas".into(), Value::from(replicas * 2));
        }
        None => {
            let mut f = crate::model::compute::default_fleet();
            f["replicas"] = Value::from(2);
            b["fleet"] = f;
        }
    }
    for (side, v) in [("A", &a), ("B", &b)] {
        Scenario::from_value(v.clone()).map_err(|e| format!("{side} is not a valid scenario: {e}"))?;
    }
    let label = if replicas == 1 && tp == 1 {
        "TP2 vs 2 replicas".to_string()
    } else {
        format!("TP{} × {replicas} vs TP{tp} × {} replicas", tp * 2, replicas * 2)
    };
    Ok((a, b, label))
}

/// The switch between raw coefficients and a deployment, shown with the controls of an engine scenario.
#[component]
pub fn EngineSource(json: RwSignal<Value>, memory: StoredValue<SwitchMemory>) -> impl IntoView {
    let source = Memo::new(move |_| json.with(engine_source));
    // A deployment opens on all its decisions: those it leaves out (a link, a pasted file) are written in as their
    // defaults, so each has its control.
    Effect::new(move |_| {
        if let Some(filled) = json.with(with_decisions) {
            json.set(filled);
        }
    });
    let switch = move |to: &'static str| {
        let next = json.with_untracked(|j| {
            memory
                .try_update_value(|m| match to {
                    "deployment" => as_deployment(j, m),
                    _ => as_profile(j, m),
                })
                .flatten()
        });
        if let Some(next) = next {
            json.set(next);
        }
    };
    view! {
        <fieldset class="group engine-source" data-group="engine-source">
            <legend>"Engine"</legend>
            <div class="segmented" role="group" aria-label="Engine described as">
                <button
                    data-action="to-deployment"
                    class:active=move || source.get() == Some("deployment")
                    title="Describe the engine as a model on a GPU at a TP degree and precision; the step time comes from a roofline"
                    on:click=move |_| {
                        if source.get_untracked() != Some("deployment") {
                            switch("deployment");
                        }
                    }
                >
                    "Describe as a deployment"
                </button>
                <button
                    data-action="to-profile"
                    class:active=move || source.get() == Some("profile")
                    title="The engine's raw coefficients (step floor, per-sequence and context costs, prefill speed, KV blocks)"
                    on:click=move |_| {
                        if source.get_untracked() != Some("profile") {
                            switch("profile");
                        }
                    }
                >
                    "Raw coefficients"
                </button>
            </div>
            {move || (source.get() == Some("profile")).then(|| view! {
                <p class="faint small">"Raw coefficients: under Advanced, “Engine profile”. A calibrated profile loads here too."</p>
            })}
            // A deployment derives its profile and has no `speculative` field: say so rather than drop it unseen.
            {move || (source.get() == Some("deployment")).then(|| view! {
                <p class="faint small" data-note="speculative">
                    "Speculative decoding is set on raw coefficients (“Engine profile” under Advanced); a deployment cannot carry it, so it is off here."
                </p>
            })}
        </fieldset>
    }
}

/// An A/B waiting for A's result: A's scenario is computing; once its outcome arrives it is pinned and B is set.
#[derive(Clone)]
struct PendingAb {
    a: Value,
    b: Value,
    /// The outcome shown when A was asked for: A's is the next different one.
    before: Option<Arc<crate::model::compute::Outcome>>,
}

/// The deployment's derived numbers and the A/B buttons, with the result (engine scenarios with a deployment).
#[component]
pub fn DeploymentCard(ex: Explorer) -> impl IntoView {
    let derived = Memo::new(move |_| ex.json.with(derived_of));
    let view_tab = use_context::<RwSignal<crate::View>>();
    let pending = RwSignal::new(None::<PendingAb>);
    let ab_error = RwSignal::new(None::<String>);
    // A's result arrived: pin it, switch the explorer to B, and show Compare.
    Effect::new(move |_| {
        let outcome = ex.outcome.get();
        let Some(p) = pending.get() else { return };
        if let Some(e) = ex.compute_error.get() {
            pending.set(None);
            ab_error.set(Some(format!("A gave no result: {e}")));
            return;
        }
        let (Some(o), false) = (outcome, ex.computing.get()) else {
            return;
        };
        let fresh = p.before.as_ref().is_none_or(|b| !Arc::ptr_eq(b, &o));
        if !fresh || ex.json.with_untracked(|j| *j != p.a) {
            return;
        }
        pending.set(None);
        ex.pinned.set(Some(Pinned {
            json: p.a.clone(),
            outcome: o,
            band: None,
        }));
        ex.json.set(p.b);
        if let Some(t) = view_tab {
            t.set(crate::View::Compare);
            if let Some(w) = web_sys::window() {
                w.scroll_to_with_x_and_y(0.0, 0.0);
            }
        }
    });
    let start = move |a: Value, b: Value| {
        ab_error.set(None);
        pending.set(Some(PendingAb {
            a: a.clone(),
            b,
            before: ex.outcome.get_untracked(),
        }));
        // Setting A (even when it is the scenario shown) recomputes it, so the pinned result is A's own.
        ex.json.set(a);
    };
    let other_gpu = move |gpu: String| {
        let a = ex.json.get_untracked();
        let b = on_gpu(&a, &gpu);
        match Scenario::from_value(b.clone()) {
            Ok(_) => start(a, b),
            Err(e) => ab_error.set(Some(format!("B on {gpu}: {e}"))),
        }
    };
    let tp_replicas = move |_| match ex.json.with_untracked(tp_vs_replicas) {
        Ok((a, b, _)) => start(a, b),
        Err(e) => ab_error.set(Some(e)),
    };
    let pd_colocated = move |_| match ex.json.with_untracked(crate::compare::pd::pd_vs_colocated) {
        Ok((a, b, _)) => start(a, b),
        Err(e) => ab_error.set(Some(e)),
    };
    let pd_label = move || {
        ex.json
            .with(crate::compare::pd::pd_vs_colocated)
            .map_or_else(|_| "co-located vs P/D".to_string(), |(_, _, l)| l)
    };
    let tp_label = move || {
        ex.json
            .with(tp_vs_replicas)
            .map_or_else(|_| "TP2 vs 2 replicas".to_string(), |(_, _, l)| l)
    };
    view! {
        {move || derived.get().map(|d| {
            let current_gpu = d.gpu.clone();
            let gpus: Vec<String> = crate::explorer::fields::choices("gpu")
                .unwrap_or_default()
                .into_iter()
                .filter(|g| *g != current_gpu)
                .collect();
            view! {
                <div class="card deployment-card" data-derived="">
                    <div class="card-head">
                        <h2>"Deployment"</h2>
                        <span class="muted" data-derived-title="">{title(&d)}</span>
                    </div>
                    <DerivedNumbers d=d/>
                    <div class="ab-row" data-ab="">
                        <span class="muted">"A/B: pin this result as A and compare with"</span>
                        <select
                            aria-label="Compare with another GPU"
                            data-control="ab-gpu"
                            prop:value=""
                            on:change=move |ev| {
                                let g = event_target_value(&ev);
                                if !g.is_empty() {
                                    other_gpu(g);
                                }
                            }
                        >
                            <option value="">"another GPU…"</option>
                            {gpus.into_iter().map(|g| view! { <option value=g.clone()>{g.clone()}</option> }).collect_view()}
                        </select>
                        <button class="btn small" data-action="ab-tp-replicas" on:click=tp_replicas title="The same GPUs as tensor parallelism (A) or as replicas behind a router (B)">
                            {tp_label}
                        </button>
                        <button class="btn small" data-action="ab-pd" on:click=pd_colocated title="The same GPUs co-located (A: every replica prefills and decodes) or split into prefill and decode instances (B: each prompt's KV crosses a 50 GB/s link)">
                            {pd_label}
                        </button>
                        {move || pending.with(Option::is_some).then(|| view! { <span class="faint" data-ab-pending="">"computing A…"</span> })}
                    </div>
                    {move || ab_error.get().map(|e| view! { <p class="callout bad" data-ab-error="">{e}</p> })}
                </div>
            }
        })}
    }
}

fn title(d: &Derived) -> String {
    format!(
        "{} on {} × {} · weights {}, KV {}, compute {} · attention {}",
        d.model,
        d.tp,
        d.gpu,
        d.weight_dtype.name(),
        d.kv_dtype.name(),
        d.compute_dtype.name(),
        d.attention
    )
}

/// Memory, KV capacity and the step at a few shapes with its bound: [`Derived`] as `loadshape simulate` prints it.
#[component]
fn DerivedNumbers(d: Derived) -> impl IntoView {
    use crate::ui::fmt::num;
    let gb = |b: f64| format!("{:.2} GB", b / 1e9);
    let rows = d
        .samples
        .iter()
        .map(|x| {
            let (id, label) = if x.kind == "decode" {
                (
                    format!("decode-{}", x.seqs),
                    format!("decode, batch {} at {} context", x.seqs, num(x.context as f64)),
                )
            } else {
                (
                    format!("prefill-{}", x.tokens),
                    format!("prefill {} tokens", num(x.tokens as f64)),
                )
            };
            let bound = match x.cost.bound {
                shared::deploy::roofline::Bound::Compute => "compute",
                shared::deploy::roofline::Bound::Memory => "memory",
            };
            let c = x.cost;
            view! {
                <tr data-sample=id data-step-ms=c.step_ms.to_string() data-bound=bound>
                    <td>{label}</td>
                    <td class="num">{format!("{:.2}", c.step_ms)}</td>
                    <td class="num">{format!("{:.2}", c.compute_ms)}</td>
                    <td class="num">{format!("{:.2}", c.memory_ms)}</td>
                    <td class="num">{format!("{:.2}", c.comm_ms)}</td>
                    <td><span class=format!("bound {bound}")>{bound}</span></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="stat-grid derived-stats">
            <div class="stat">
                <div class="label">"Parameters"</div>
                <div class="value">{format!("{:.1}B", d.total_params / 1e9)}<span class="unit">{format!("{:.1}B active", d.active_params / 1e9)}</span></div>
            </div>
            <div class="stat">
                <div class="label">"Weights per GPU"</div>
                <div class="value" data-weight-bytes=d.weight_bytes_per_gpu.to_string()>{gb(d.weight_bytes_per_gpu)}</div>
                <div class="faint small">{format!("of {} usable, {} reserved", gb(d.usable_bytes_per_gpu), gb(d.reserve_bytes_per_gpu))}</div>
            </div>
            <div class="stat">
                <div class="label">"KV cache"</div>
                <div class="value" data-kv-tokens=d.kv_tokens.to_string()>{num(d.kv_tokens as f64)}<span class="unit">"tokens"</span></div>
                <div class="faint small" data-kv-blocks=d.kv_blocks.to_string()>{format!("{} blocks × {} · {} bytes a token per GPU", num(d.kv_blocks as f64), d.block_size, num(d.kv_bytes_per_token))}</div>
            </div>
        </div>
        <div class="table-scroll">
            <table class="data derived-steps">
                <thead><tr><th>"Step"</th><th>"ms"</th><th>"compute"</th><th>"memory"</th><th>"comm"</th><th>"bound"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn engine_default() -> Value {
        Scenario::Engine(shared::presets::default_engine_scenario()).to_value()
    }

    /// Switching the default engine scenario (the Llama-3-8B / H100 profile) to a deployment gives a valid scenario
    /// on Llama-3.1-8B and one H100 with the profile's limits; switching back gives the profile itself.
    #[test]
    fn a_profile_becomes_a_deployment_and_back() {
        let j = engine_default();
        assert_eq!(engine_source(&j), Some("profile"));
        let mut m = SwitchMemory::default();
        let d = as_deployment(&j, &mut m).expect("has a profile");
        assert_eq!(engine_source(&d), Some("deployment"));
        assert!(d.get("profile").is_none());
        assert_eq!(d["deployment"]["model"], "llama-3.1-8b");
        assert_eq!(d["deployment"]["gpu"], "h100-sxm");
        assert_eq!(d["deployment"]["max_num_seqs"], j["profile"]["max_num_seqs"]);
        // Its decisions are written in, each with its control.
        assert_eq!(d["deployment"]["tp"], 1);
        assert_eq!(d["deployment"]["weight_dtype"], "bf16");
        assert_eq!(d["deployment"]["kv_dtype"], "bf16");
        let sc = Scenario::from_value(d.clone()).expect("a valid scenario");
        let Scenario::Engine(e) = &sc else { panic!("engine") };
        assert!(e.profile.roofline.is_some(), "priced by the roofline");
        // Back: the same profile, so the same result as before the switch.
        let back = as_profile(&d, &mut m).expect("has a deployment");
        assert_eq!(back, j);
        // Forth again: the same deployment.
        assert_eq!(as_deployment(&back, &mut m), Some(d.clone()));
        // A deployment edited after the switch goes back as the coefficients it resolves to.
        let edited = on_gpu(&d, "h200");
        let raw = as_profile(&edited, &mut m).expect("resolves");
        let Scenario::Engine(from_raw) = Scenario::from_value(raw).expect("valid") else {
            panic!("engine")
        };
        let Scenario::Engine(from_dep) = Scenario::from_value(edited).expect("valid") else {
            panic!("engine")
        };
        assert_eq!(from_raw.profile, from_dep.profile);
        // A seed scenario has neither.
        let seed = shared::presets::default_scenario().to_value();
        assert_eq!(engine_source(&seed), None);
        assert!(as_deployment(&seed, &mut SwitchMemory::default()).is_none());
    }

    /// Each engine preset's profile becomes the deployment its name says, and each is a valid scenario.
    #[test]
    fn profile_names_pick_the_deployment() {
        let cases = [
            ("llama-3-8b-1xh100", "llama-3.1-8b", "h100-sxm", None, None),
            ("llama-3-70b-4xh100-tp4", "llama-3.1-70b", "h100-sxm", Some(4), None),
            (
                "llama-3.3-70b-fp8-2xh100-tp2",
                "llama-3.1-70b",
                "h100-sxm",
                Some(2),
                Some(Dtype::Fp8),
            ),
            ("laptop-demo", "llama-3.1-8b", "h100-sxm", None, None),
            ("qwen3-32b-on-h200", "qwen3-32b", "h200", None, None),
        ];
        for (name, model, gpu, tp, w) in cases {
            let p = serde_json::json!({"name": name, "max_num_seqs": 64, "block_size": 16});
            let d = deployment_for(&p);
            assert_eq!(d.model, model, "{name}");
            assert_eq!(d.gpu, gpu, "{name}");
            assert_eq!(d.tp, tp, "{name}");
            assert_eq!(d.weight_dtype, w, "{name}");
            assert!(d.resolve().is_ok(), "{name}");
        }
        for p in shared::engine::presets::all() {
            let mut j = engine_default();
            j["profile"] = serde_json::to_value(&p).expect("json");
            let d = as_deployment(&j, &mut SwitchMemory::default()).expect("a profile");
            Scenario::from_value(d).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }

    /// The derived numbers are the resolve's, the ones `loadshape simulate` prints.
    #[test]
    fn derived_numbers_are_the_deployments() {
        let j: Value = serde_json::from_str(include_str!("../../../examples/deployment-h100-llama8b.json")).unwrap();
        let d = derived_of(&j).expect("a deployment");
        let dep: Deployment = serde_json::from_value(j["deployment"].clone()).unwrap();
        assert_eq!(d, dep.resolve().unwrap().derived);
        assert!(d.kv_blocks > 0 && d.samples.len() >= 4);
        assert!(title(&d).contains("llama-3.1-8b on 1 × h100-sxm"));
        assert!(derived_of(&engine_default()).is_none());
    }

    /// A deployment that leaves its decisions out gets them written in as their defaults (the published weight
    /// precision: MXFP4 for gpt-oss), and computes the same.
    #[test]
    fn left_out_decisions_are_written_in() {
        let mut j = engine_default();
        j.as_object_mut().unwrap().remove("profile");
        j["deployment"] = serde_json::json!({"model": "gpt-oss-120b", "gpu": "h200"});
        let filled = with_decisions(&j).expect("decisions left out");
        assert_eq!(filled["deployment"]["tp"], 1);
        assert_eq!(filled["deployment"]["weight_dtype"], "fp4");
        assert_eq!(filled["deployment"]["kv_dtype"], "bf16");
        assert_eq!(with_decisions(&filled), None, "nothing left out");
        let profile = |v: &Value| match Scenario::from_value(v.clone()).expect("valid") {
            Scenario::Engine(e) => e.profile,
            Scenario::Seed(_) => panic!("engine"),
        };
        assert_eq!(profile(&filled), profile(&j));
        assert_eq!(with_decisions(&engine_default()), None, "a profile has none");
        for name in ["weight_dtype", "kv_dtype"] {
            let menu = crate::explorer::fields::choices(name).expect("a menu");
            assert!(
                menu.iter().any(|v| v == "fp4") && menu.iter().any(|v| v == "bf16"),
                "{name}: {menu:?}"
            );
        }
    }

    /// A/B: another GPU changes only the GPU; TP2 against two replicas uses the same GPUs both ways.
    #[test]
    fn ab_scenarios() {
        let j: Value = serde_json::from_str(include_str!("../../../examples/deployment-h100-llama8b.json")).unwrap();
        let b = on_gpu(&j, "h200");
        let changes = crate::compare::changed_fields(&j, &b);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].0, "deployment.gpu");
        let (a, b, label) = tp_vs_replicas(&j).expect("tp 2 divides the heads");
        assert_eq!(label, "TP2 vs 2 replicas");
        assert_eq!(a["deployment"]["tp"], 2);
        assert!(a.get("fleet").is_none());
        assert_eq!(b["deployment"]["tp"], 1);
        assert_eq!(b["fleet"]["replicas"], 2);
        let gpus = |v: &Value| {
            let sc = Scenario::from_value(v.clone()).expect("valid");
            let Scenario::Engine(e) = sc else { panic!("engine") };
            shared::replicas::gpus_per_replica(&e).expect("a deployment") * e.fleet.map_or(1, |f| f.replicas)
        };
        assert_eq!(gpus(&a), 2);
        assert_eq!(gpus(&b), 2);
        // From there, the next doubling says so in its label.
        let (_, _, label) = tp_vs_replicas(&b).expect("valid");
        assert_eq!(label, "TP2 × 2 vs TP1 × 4 replicas");
        // A TP that does not divide the heads is refused with the reason.
        let mut odd = j.clone();
        odd["deployment"]["tp"] = Value::from(32);
        assert!(tp_vs_replicas(&odd).is_err());
    }
}
