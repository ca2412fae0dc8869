//! Scenario controls generated from the scenario's JSON: every number a slider plus a number input with its
//! unit, every boolean a switch, every string a text box (or a menu when the page knows its values).
//!
//! The set of controls depends only on the scenario's *shape* (paths and kinds of its fields), kept in a memo,
//! so dragging a slider updates values in place and never rebuilds the form under the user's pointer.

use leptos::prelude::*;
use serde_json::{Number, Value};

use crate::explorer::fields::{self, FieldSpec};
use crate::model::compute::default_fleet;
use crate::model::state::set_at;

/// Keys never shown as controls: tags the page edits elsewhere (model switch, workload menu) or not at all.
const HIDDEN: [&str; 4] = ["model", "version", "kind", "basis"];

/// What kind of control a field gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Integer,
    Float,
    Bool,
    Text,
    /// Absent optional value (`null`).
    Unset,
}

/// One editable leaf: its JSON pointer, its name and kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaf {
    pub pointer: String,
    pub name: String,
    pub kind: Kind,
}

/// A titled group of leaves (one per top-level object of the scenario, plus "General" for top-level scalars).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub key: String,
    pub title: String,
    pub leaves: Vec<Leaf>,
}

/// The shape of a scenario: its groups and leaves, in document order.
pub fn shape(json: &Value) -> Vec<Group> {
    let mut general = Group {
        key: "general".into(),
        title: "General".into(),
        leaves: Vec::new(),
    };
    let mut groups = Vec::new();
    if let Value::Object(map) = json {
        for (key, value) in map {
            if HIDDEN.contains(&key.as_str()) {
                continue;
            }
            match value {
                Value::Object(_) => {
                    let mut g = Group {
                        key: key.clone(),
                        title: fields::group_title(key),
                        leaves: Vec::new(),
                    };
                    collect(value, &format!("/{key}"), &mut g.leaves);
                    groups.push(g);
                }
                _ => collect_leaf(key, value, &format!("/{key}"), &mut general.leaves),
            }
        }
    }
    if !general.leaves.is_empty() {
        groups.push(general);
    }
    // An engine scenario without a fleet offers one (replicas behind a router), as an unset optional field.
    if let Value::Object(map) = json
        && map.get("model").and_then(Value::as_str) == Some("engine")
        && !map.contains_key("fleet")
    {
        groups.push(Group {
            key: "fleet".into(),
            title: fields::group_title("fleet"),
            leaves: vec![Leaf {
                pointer: "/fleet".into(),
                name: "fleet".into(),
                kind: Kind::Unset,
            }],
        });
    }
    // An engine profile without speculative decoding offers it, as an unset optional field of the "Engine profile"
    // group: "set" puts [`default_speculative`] there, and its knobs (method, draft tokens, acceptance, draft cost)
    // appear in its place. A deployment has no such field (its profile is derived), so it is offered only here.
    if let Some(Value::Object(p)) = json.get("profile")
        && json.get("model").and_then(Value::as_str) == Some("engine")
        && !p.contains_key("speculative")
        && let Some(g) = groups.iter_mut().find(|g| g.key == "profile")
    {
        g.leaves.push(Leaf {
            pointer: "/profile/speculative".into(),
            name: "speculative".into(),
            kind: Kind::Unset,
        });
    }
    // A fleet without prefill/decode disaggregation offers it, as an unset optional field of the "Fleet" group:
    // "set" puts [`default_disaggregation`] there.
    if let Some(Value::Object(f)) = json.get("fleet")
        && json.get("model").and_then(Value::as_str) == Some("engine")
        && !f.contains_key("disaggregation")
        && let Some(g) = groups.iter_mut().find(|g| g.key == "fleet")
    {
        g.leaves.push(Leaf {
            pointer: "/fleet/disaggregation".into(),
            name: "disaggregation".into(),
            kind: Kind::Unset,
        });
    }
    // Speculation and disaggregation get their own groups after their parent's, so that "Acceptance" or "Link
    // latency" never sits unexplained among the profile's or the fleet's own fields.
    for (parent, key) in NESTED_GROUPS {
        let prefix = format!("/{parent}/{key}");
        let Some(g) = groups.iter_mut().find(|g| g.key == parent) else {
            continue;
        };
        let (mine, rest): (Vec<Leaf>, Vec<Leaf>) = std::mem::take(&mut g.leaves)
            .into_iter()
            .partition(|l| l.pointer == prefix || l.pointer.starts_with(&format!("{prefix}/")));
        g.leaves = rest;
        if !mine.is_empty() {
            groups.push(Group {
                key: key.into(),
                title: fields::group_title(key),
                leaves: mine,
            });
        }
    }
    // A session workload offers the agent shapes it does not use yet (issue #44), as unset optional fields: "set"
    // puts [`default_agent_shape`] there, and its knobs appear under the workload's advanced controls.
    if let Some(Value::Object(w)) = json.get("workload")
        && w.get("kind").and_then(Value::as_str) == Some("sessions")
        && let Some(g) = groups.iter_mut().find(|g| g.key == "workload")
    {
        for key in AGENT_SHAPES {
            if !w.contains_key(key) {
                g.leaves.push(Leaf {
                    pointer: format!("/workload/{key}"),
                    name: key.to_string(),
                    kind: Kind::Unset,
                });
            }
        }
    }
    // Workload first, then the engine, the SLOs, the rest; within a group names and menus first, switches last.
    let rank = |k: &str| {
        [
            "workload",
            "deployment",
            "profile",
            "speculative",
            "fleet",
            "disaggregation",
            "slo",
            "general",
            "shape",
        ]
        .iter()
        .position(|x| *x == k)
        .unwrap_or(9)
    };
    shared::order::sort_by_u64_key(&mut groups, |g| rank(&g.key) as u64);
    for g in &mut groups {
        // In "General" (the solver's targets, a scenario's seed) numbers lead; elsewhere names and menus do.
        let text_first = g.key != "general";
        // Within a kind, a group with a reading order keeps it (JSON objects come sorted by name: "decode" before
        // "prefill" otherwise); the rest stay in document order.
        let reading = FIELD_ORDER
            .iter()
            .find(|(k, _)| *k == g.key)
            .map_or(&[][..], |(_, o)| *o);
        let at = |name: &str| reading.iter().position(|n| *n == name).unwrap_or(reading.len()) as u64;
        shared::order::sort_by_u64_key(&mut g.leaves, |l| {
            let kind = match l.kind {
                Kind::Text if text_first => 0,
                Kind::Text => 1,
                Kind::Bool => 2,
                _ if text_first => 1,
                _ => 0,
            };
            kind * 100 + at(&l.name)
        });
    }
    groups
}

/// The order a group's fields read in, where it is not the alphabetical one: prefill before decode, then the link
/// between them; the draft's size before its acceptance and cost (docs/page.md's order).
const FIELD_ORDER: [(&str, &[&str]); 2] = [
    (
        "disaggregation",
        &[
            "prefill_instances",
            "decode_instances",
            "link_bytes_per_s",
            "link_latency_ms",
            "kv_bytes_per_token",
        ],
    ),
    (
        "speculative",
        &["method", "draft_tokens", "acceptance", "draft_cost_ms"],
    ),
];

/// Optional objects shown as groups of their own: (parent group, key).
const NESTED_GROUPS: [(&str, &str); 2] = [("profile", "speculative"), ("fleet", "disaggregation")];

/// A group of an optional object that is set (speculative decoding, prefill/decode disaggregation): its (parent,
/// key), for the group's "Turn off", which removes the field from the scenario; `None` for any other group, and
/// for one whose field is not set (it offers "set" instead).
pub fn turn_off(g: &Group) -> Option<(&'static str, &'static str)> {
    let (parent, key) = NESTED_GROUPS.into_iter().find(|(_, k)| *k == g.key)?;
    let unset = format!("/{parent}/{key}");
    (!g.leaves.is_empty() && !g.leaves.iter().any(|l| l.pointer == unset)).then_some((parent, key))
}

/// A workload's primary knobs, in the order the controls show them (what people change first).
pub const PRIMARY: [&str; 11] = [
    "sessions",
    "users",
    "rate_rps",
    "mean_rps",
    "think_s",
    "steps",
    "base_tokens",
    "tool_tokens",
    "gen_tokens",
    "num_requests",
    "cv",
];

/// A scenario's groups split for the controls: the workload's primary knobs and the SLOs first; the rest of the
/// workload, the engine, the fleet and the general fields under "advanced". A document without a workload (the
/// ladder solver's options) is all first.
pub fn layout(groups: Vec<Group>) -> (Vec<Group>, Vec<Group>) {
    if !groups.iter().any(|g| g.key == "workload") {
        return (groups, Vec::new());
    }
    let (mut first, mut advanced) = (Vec::new(), Vec::new());
    let mut slo = None;
    for g in groups {
        match g.key.as_str() {
            "workload" => {
                let (mut primary, rest): (Vec<Leaf>, Vec<Leaf>) = g
                    .leaves
                    .into_iter()
                    .partition(|l| PRIMARY.contains(&l.name.as_str()) && l.pointer == format!("/workload/{}", l.name));
                shared::order::sort_by_u64_key(&mut primary, |l| {
                    PRIMARY.iter().position(|n| *n == l.name).unwrap_or(PRIMARY.len()) as u64
                });
                if !primary.is_empty() {
                    first.push(Group {
                        key: "workload".into(),
                        title: g.title.clone(),
                        leaves: primary,
                    });
                }
                if !rest.is_empty() {
                    advanced.insert(
                        0,
                        Group {
                            key: "workload-more".into(),
                            title: format!("{} (more)", g.title),
                            leaves: rest,
                        },
                    );
                }
            }
            "slo" => {
                let mut g = g;
                let order = |n: &str| {
                    ["ttft_ms", "tpot_ms", "e2e_ms"]
                        .iter()
                        .position(|x| *x == n)
                        .unwrap_or(3)
                };
                shared::order::sort_by_u64_key(&mut g.leaves, |l| order(&l.name) as u64);
                slo = Some(g);
            }
            // A deployment opens on what people decide between: model, GPU, tensor parallelism and precision.
            "deployment" => {
                const DECISIONS: [&str; 5] = ["model", "gpu", "tp", "weight_dtype", "kv_dtype"];
                let (mut main, rest): (Vec<Leaf>, Vec<Leaf>) =
                    g.leaves.into_iter().partition(|l| DECISIONS.contains(&l.name.as_str()));
                shared::order::sort_by_u64_key(&mut main, |l| {
                    DECISIONS.iter().position(|n| *n == l.name).unwrap_or(DECISIONS.len()) as u64
                });
                first.push(Group {
                    key: "deployment".into(),
                    title: g.title.clone(),
                    leaves: main,
                });
                if !rest.is_empty() {
                    advanced.push(Group {
                        key: "deployment-more".into(),
                        title: format!("{} (more)", g.title),
                        leaves: rest,
                    });
                }
            }
            _ => advanced.push(g),
        }
    }
    first.extend(slo);
    (first, advanced)
}

fn collect(value: &Value, pointer: &str, out: &mut Vec<Leaf>) {
    if let Value::Object(map) = value {
        for (key, v) in map {
            // A deployment's `model` is its model (a menu of the catalog), not the scenario's simulator model.
            if HIDDEN.contains(&key.as_str()) && !(pointer == "/deployment" && key == "model") {
                continue;
            }
            let p = format!("{pointer}/{key}");
            match v {
                Value::Object(_) => collect(v, &p, out),
                _ => collect_leaf(key, v, &p, out),
            }
        }
    }
}

fn collect_leaf(key: &str, v: &Value, pointer: &str, out: &mut Vec<Leaf>) {
    let kind = match v {
        Value::Number(n) if n.is_u64() || n.is_i64() => Kind::Integer,
        Value::Number(_) => Kind::Float,
        Value::Bool(_) => Kind::Bool,
        Value::String(_) => Kind::Text,
        Value::Null => Kind::Unset,
        // Arrays and nested structures are edited through the JSON box.
        _ => return,
    };
    out.push(Leaf {
        pointer: pointer.to_string(),
        name: key.to_string(),
        kind,
    });
}

/// A JSON number of the leaf's kind.
pub fn number_value(kind: &Kind, v: f64) -> Option<Value> {
    match kind {
        Kind::Integer if v >= 0.0 => Some(Value::Number(Number::from(v.round() as u64))),
        Kind::Integer => Some(Value::Number(Number::from(v.round() as i64))),
        _ => Number::from_f64(v).map(Value::Number),
    }
}

/// The optional shapes of a session workload the controls can add: think times from a distribution, context
/// compaction, hidden reasoning, sub-agents (docs/simulator.md, "sessions").
pub const AGENT_SHAPES: [&str; 4] = ["think", "compaction", "reasoning", "subagents"];

/// What "set" puts at an absent agent shape of a session workload: a typical value of each (log-normal think times
/// around 6 s, compaction at 100k tokens to a 2k summary, 500 reasoning tokens not echoed, two sub-agents of
/// three steps every fourth step, waited for).
pub fn default_agent_shape(key: &str) -> Option<Value> {
    Some(match key {
        "think" => serde_json::json!({"dist": "lognormal", "median_s": 6.0, "sigma": 0.8}),
        "compaction" => serde_json::json!({"at_tokens": 100_000, "summary_tokens": 2000}),
        "reasoning" => serde_json::json!({"tokens": 500, "echo": false}),
        "subagents" => serde_json::json!({
            "every_steps": 4, "count": 2, "steps": 3, "gen_tokens": 300, "tool_tokens": 800, "wait": true
        }),
        _ => return None,
    })
}

/// What "set" puts at an engine profile's absent `speculative`: MTP with one draft token accepted 72 % of the time
/// (the production report issue #43 starts from: "acceptance 72 % MTP"), drafting free (MTP heads run inside the
/// model's own step; `draft_cost_ms` is there to raise).
pub fn default_speculative() -> Value {
    serde_json::json!({"method": "mtp", "draft_tokens": 1, "acceptance": 0.72, "draft_cost_ms": 0.0})
}

/// What "set" puts at a fleet's absent `disaggregation`: its replicas split ⌊n/2⌋ prefill + ⌈n/2⌉ decode (at least
/// two replicas: the fleet grows to two when it has one) over the link "P/D vs co-located" assumes (50 GB/s, 0.5 ms
/// per transfer, `compare::pd`); a profile without a deployment's roofline gets Llama-3-8B's KV size in bf16
/// (131,072 bytes per token, docs/simulator.md) to say what crosses the link.
pub fn default_disaggregation(j: &Value) -> Value {
    let n = j.pointer("/fleet/replicas").and_then(Value::as_u64).unwrap_or(1).max(2);
    let mut d = serde_json::json!({
        "prefill_instances": n / 2,
        "decode_instances": n - n / 2,
        "link_bytes_per_s": crate::compare::pd::LINK_BYTES_PER_S,
        "link_latency_ms": crate::compare::pd::LINK_LATENCY_MS,
    });
    if j.get("deployment").is_none() {
        d["kv_bytes_per_token"] = Value::from(131_072);
    }
    d
}

/// What "set" puts at the absent optional field `pointer` (named `name`) of the scenario `j`: `(where, value)`, the
/// field itself, or for disaggregation the whole fleet (P + D is the fleet's replicas: one replica grows to the two
/// the split needs). `None` when there is nothing to put.
pub fn set_default(j: &Value, pointer: &str, name: &str) -> Option<(String, Value)> {
    let v = match pointer {
        "/fleet" => default_fleet(),
        "/profile/speculative" => default_speculative(),
        "/fleet/disaggregation" => {
            let d = default_disaggregation(j);
            let n = d["prefill_instances"].as_u64().unwrap_or(1) + d["decode_instances"].as_u64().unwrap_or(1);
            let mut fleet = j.get("fleet").cloned().unwrap_or_else(default_fleet);
            fleet["replicas"] = Value::from(n);
            fleet["disaggregation"] = d;
            return Some(("/fleet".into(), fleet));
        }
        _ => match pointer.strip_prefix("/workload/").and_then(default_agent_shape) {
            Some(shape) => shape,
            None => Value::Number(Number::from_f64(fields::unset_default(name))?),
        },
    };
    Some((pointer.to_string(), v))
}

/// All the controls of a JSON document (a scenario, solver options), grouped: for a scenario the workload's primary
/// knobs and the SLOs, then the rest under "Advanced" ([`layout`]).
#[component]
pub fn Controls(json: RwSignal<Value>) -> impl IntoView {
    let shape = Memo::new(move |_| json.with(shape));
    // An engine scenario offers the switch between raw coefficients and a deployment; what it switched from is
    // kept across the rebuild the switch causes.
    let engine = Memo::new(move |_| json.with(|j| crate::explorer::deployment::engine_source(j).is_some()));
    let memory = StoredValue::new(crate::explorer::deployment::SwitchMemory::default());
    // Kept across shape changes (a new workload kind rebuilds the groups, not the user's choice to see them).
    let advanced_open = RwSignal::new(false);
    let group = move |g: Group| {
        let off = turn_off(&g).map(|(parent, key)| {
            view! {
                <button
                    class="btn small"
                    data-turn-off=key
                    aria-label=format!("Turn off {}", g.title)
                    on:click=move |_| {
                        json.update(|j| {
                            if let Some(o) = j.get_mut(parent).and_then(Value::as_object_mut) {
                                o.remove(key);
                            }
                        })
                    }
                >
                    "Turn off"
                </button>
            }
        });
        view! {
            <fieldset class="group" data-group=g.key.clone()>
                <legend>{g.title.clone()}</legend>
                {off}
                {g.leaves.into_iter().map(|leaf| view! { <Control json=json leaf=leaf/> }).collect_view()}
            </fieldset>
        }
    };
    view! {
        <div class="controls-groups">
            {move || {
                let (first, advanced) = layout(shape.get());
                let more = (!advanced.is_empty()).then(|| {
                    view! {
                        <details
                            class="advanced"
                            data-advanced=""
                            prop:open=move || advanced_open.get()
                            on:toggle=move |ev| {
                                use wasm_bindgen::JsCast;
                                if let Some(d) = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) {
                                    advanced_open.set(d.has_attribute("open"));
                                }
                            }
                        >
                            <summary>"Advanced: engine, fleet and the rest of the workload"</summary>
                            {advanced.into_iter().map(group).collect_view()}
                        </details>
                    }
                });
                let mut shown = Vec::new();
                for g in first {
                    let workload = g.key == "workload";
                    shown.push(group(g).into_any());
                    if workload && engine.get() {
                        shown.push(
                            crate::later(std::future::ready(()), move || crate::engine_source(json, memory)).into_any(),
                        );
                    }
                }
                view! { {shown} {more} }
            }}
        </div>
    }
}

/// One field's control.
#[component]
fn Control(json: RwSignal<Value>, leaf: Leaf) -> impl IntoView {
    let pointer = leaf.pointer.clone();
    let ptr = pointer.clone();
    let current = Memo::new(move |_| json.with(|j| j.pointer(&ptr).cloned().unwrap_or(Value::Null)));
    let known = fields::spec(&leaf.name);
    let label = known
        .map(|s| s.label.to_string())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| fields::humanize(&leaf.name));
    let help = known.map(|s| s.help).unwrap_or("");
    let id = format!("f{}", pointer.replace('/', "-"));
    let ex = use_context::<crate::model::state::Explorer>();
    match leaf.kind.clone() {
        Kind::Integer | Kind::Float => {
            // This box's value made the scenario invalid: marked, as the banner over the results says.
            let p3 = pointer.clone();
            let invalid = move || ex.is_some_and(|ex| ex.error_at.with(|at| at.as_deref() == Some(p3.as_str())));
            let p4 = pointer.clone();
            let note_edit = move || {
                if let Some(ex) = ex {
                    ex.last_edit.set(Some(p4.clone()));
                }
            };
            let note_edit2 = note_edit.clone();
            let integer = leaf.kind == Kind::Integer;
            let start = current.get_untracked().as_f64().unwrap_or(0.0);
            let spec: FieldSpec = known.unwrap_or_else(|| fields::fallback(&leaf.name, start, integer));
            let step = if integer { spec.step.max(1.0).round() } else { spec.step };
            // The box shows the value in its unit (GB/s for bytes per second); the slider moves the stored value.
            let power = fields::unit_power(spec.unit);
            let value = move || current.get().as_f64().unwrap_or(0.0);
            let max = move || spec.max.max(value());
            let min = move || spec.min.min(value());
            // Counts and token sizes slide on a log scale (the track's position, 0..=LOG_STEPS); the number box
            // beside it always holds the value itself.
            let log = fields::log_scale(&spec);
            let kind = leaf.kind.clone();
            let kind2 = leaf.kind.clone();
            let p1 = pointer.clone();
            let p2 = pointer.clone();
            let slider_min = move || if log { 0.0 } else { min() };
            let slider_max = move || if log { fields::LOG_STEPS } else { max() };
            let slider_step = if log { 1.0 } else { step };
            let slider_value = move || {
                if log {
                    fields::log_position(value(), min(), max()).round().to_string()
                } else {
                    value().to_string()
                }
            };
            view! {
                <div class="field" data-field=pointer.clone() title=help>
                    <label for=id.clone()>
                        <span class="field-label">{label.clone()}</span>
                        <span class="field-unit">{spec.unit}</span>
                    </label>
                    <div class="field-inputs">
                        <input
                            type="range"
                            id=id.clone()
                            class="slider"
                            class:hidden=spec.no_slider
                            data-pointer=pointer.clone()
                            data-scale=if log { "log" } else { "linear" }
                            min=slider_min
                            max=slider_max
                            step=slider_step
                            prop:value=slider_value
                            on:input=move |ev| {
                                note_edit();
                                if let Ok(v) = event_target_value(&ev).parse::<f64>() {
                                    let v = if log { fields::log_value(v, min(), max(), step, integer) } else { v };
                                    if let Some(j) = number_value(&kind, v) {
                                        set_at(json, &p1, j);
                                    }
                                }
                            }
                        />
                        <input
                            type="number"
                            class="num"
                            class:wide=spec.no_slider
                            aria-label=format!("{label} ({})", if spec.unit.is_empty() { "value" } else { spec.unit })
                            data-pointer=pointer.clone()
                            step="any"
                            class:invalid=invalid.clone()
                            aria-invalid=move || invalid().then_some("true")
                            prop:value=move || if power == 0 { current.get().to_string() } else { fields::shift_decimal(value(), -power) }
                            on:change=move |ev| {
                                note_edit2();
                                let text = event_target_value(&ev);
                                let text = text.trim();
                                // Integers (seeds up to 2^64) parse exactly; everything else as a float; a value shown
                                // in a larger unit (GB/s) from its exact decimal.
                                let exact = (kind2 == Kind::Integer && power == 0)
                                    .then(|| text.parse::<u64>().ok().map(Value::from))
                                    .flatten();
                                let typed = if power == 0 {
                                    text.parse::<f64>().ok().and_then(|v| number_value(&kind2, v))
                                } else {
                                    fields::parse_shifted(text, power).and_then(Number::from_f64).map(Value::Number)
                                };
                                if let Some(j) = exact.or(typed) {
                                    set_at(json, &p2, j);
                                }
                            }
                        />
                    </div>
                </div>
            }
            .into_any()
        }
        Kind::Bool => {
            let p = pointer.clone();
            view! {
                <div class="field field-bool" data-field=pointer.clone() title=help>
                    <label class="switch">
                        <input
                            type="checkbox"
                            data-pointer=pointer.clone()
                            prop:checked=move || current.get().as_bool().unwrap_or(false)
                            on:change=move |ev| set_at(json, &p, Value::Bool(event_target_checked(&ev)))
                        />
                        <span class="field-label">{label}</span>
                    </label>
                </div>
            }
            .into_any()
        }
        Kind::Text if leaf.name == "dist" && !leaf.pointer.starts_with("/workload/dist") => {
            // A length distribution's shape: switching it replaces the distribution with one of the new shape
            // around the current typical value.
            let parent = pointer.rsplit_once('/').map(|(p, _)| p.to_string()).unwrap_or_default();
            let text = move || current.get().as_str().unwrap_or_default().to_string();
            let shape_label = format!("{} shape", fields::humanize(parent.rsplit('/').next().unwrap_or("")));
            view! {
                <div class="field field-text" data-field=pointer.clone() title="shape of the length distribution">
                    <label for=id.clone()><span class="field-label">{shape_label}</span></label>
                    <select
                        id=id.clone()
                        data-pointer=pointer.clone()
                        prop:value=text
                        on:change=move |ev| {
                            let typical = json.with(|j| {
                                let d = j.pointer(&parent);
                                ["tokens", "median", "max"]
                                    .iter()
                                    .find_map(|k| d.and_then(|d| d.get(*k)).and_then(Value::as_f64))
                                    .unwrap_or(256.0)
                            });
                            if let Some(v) = crate::model::compute::default_length(&event_target_value(&ev), typical) {
                                set_at(json, &parent, v);
                            }
                        }
                    >
                        {["fixed", "uniform", "lognormal"].map(|o| view! { <option value=o>{o}</option> }).into_iter().collect_view()}
                    </select>
                </div>
            }
            .into_any()
        }
        Kind::Text => {
            let p = pointer.clone();
            let text = move || current.get().as_str().unwrap_or_default().to_string();
            let input = match fields::choices(&leaf.name) {
                Some(options) => view! {
                    <select
                        id=id.clone()
                        data-pointer=pointer.clone()
                        prop:value=text
                        on:change=move |ev| set_at(json, &p, Value::String(event_target_value(&ev)))
                    >
                        {options.into_iter().map(|o| { let v = o.clone(); view! { <option value=v>{o}</option> } }).collect_view()}
                    </select>
                }
                .into_any(),
                None => view! {
                    <input
                        type="text"
                        id=id.clone()
                        data-pointer=pointer.clone()
                        prop:value=text
                        on:change=move |ev| set_at(json, &p, Value::String(event_target_value(&ev)))
                    />
                }
                .into_any(),
            };
            view! {
                <div class="field field-text" data-field=pointer.clone() title=help>
                    <label for=id.clone()><span class="field-label">{label}</span></label>
                    {input}
                </div>
            }
            .into_any()
        }
        Kind::Unset => {
            let p = pointer.clone();
            let name = leaf.name.clone();
            view! {
                <div class="field field-unset" data-field=pointer.clone() title=help>
                    <span class="field-label">{label.clone()}</span>
                    <span class="faint">"not set"</span>
                    <button
                        class="btn small"
                        aria-label=format!("Set {label}")
                        on:click=move |_| {
                            // What "set" puts there is code loaded on demand (`crate::unset_value`).
                            let (p, name) = (p.clone(), name.clone());
                            leptos::task::spawn_local(async move {
                                if let Some((at, v)) = crate::unset_value(json.get_untracked(), p, name).await
                                    && !json.is_disposed()
                                {
                                    set_at(json, &at, v);
                                }
                            });
                        }
                    >
                        "set"
                    </button>
                </div>
            }
            .into_any()
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn an_engine_scenario_offers_a_fleet_with_replicas_and_router_controls() {
        let mut j: Value = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "poisson", "num_requests": 10, "rate_rps": 1.0},
            "profile": {"name": "p", "num_kv_blocks": 100}
        });
        let s = shape(&j);
        let fleet = s.iter().find(|g| g.key == "fleet").expect("a fleet group");
        assert_eq!(fleet.title, "Fleet");
        assert_eq!(fleet.leaves[0].pointer, "/fleet");
        assert_eq!(fleet.leaves[0].kind, Kind::Unset);
        j["fleet"] = default_fleet();
        let s = shape(&j);
        let fleet = s.iter().find(|g| g.key == "fleet").expect("a fleet group");
        let kind = |p: &str| fleet.leaves.iter().find(|l| l.pointer == p).map(|l| l.kind.clone());
        assert_eq!(kind("/fleet/router"), Some(Kind::Text));
        assert_eq!(kind("/fleet/replicas"), Some(Kind::Integer));
        assert_eq!(kind("/fleet/load_cap"), Some(Kind::Float));
        assert!(crate::explorer::fields::choices("router").is_some_and(|c| c.len() == 4));
        assert!(crate::explorer::fields::spec("replicas").is_some());
        // The default fleet is a valid scenario field; a seed scenario gets no fleet group.
        j["profile"] =
            serde_json::to_value(shared::engine::presets::by_name("laptop-demo").expect("preset")).expect("json");
        shared::scenario::Scenario::from_value(j).expect("a fleet scenario is valid");
        let seed = serde_json::json!({"model": "seed", "workload": {"kind": "bursty"}});
        assert!(shape(&seed).iter().all(|g| g.key != "fleet"));
    }

    /// What "set" puts at each absent optional field: the defaults, and for disaggregation the fleet grown to P + D.
    #[test]
    fn set_puts_the_defaults_and_grows_a_fleet_for_disaggregation() {
        let mut j: Value = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "sessions", "sessions": 2},
            "profile": {"name": "p", "num_kv_blocks": 100},
            "fleet": {"replicas": 1, "router": "round_robin", "load_cap": 1.5}
        });
        assert_eq!(
            set_default(&j, "/fleet", "fleet"),
            Some(("/fleet".into(), default_fleet()))
        );
        assert_eq!(
            set_default(&j, "/profile/speculative", "speculative"),
            Some(("/profile/speculative".into(), default_speculative()))
        );
        assert_eq!(
            set_default(&j, "/workload/think", "think"),
            Some(("/workload/think".into(), default_agent_shape("think").expect("a shape")))
        );
        assert_eq!(
            set_default(&j, "/slo/e2e_ms", "e2e_ms"),
            Some(("/slo/e2e_ms".into(), Value::from(30_000.0)))
        );
        let (at, fleet) = set_default(&j, "/fleet/disaggregation", "disaggregation").expect("a fleet");
        assert_eq!(at, "/fleet");
        assert_eq!(fleet["replicas"], Value::from(2u64));
        assert_eq!(fleet["router"], "round_robin");
        j["fleet"]["replicas"] = Value::from(2u64);
        assert_eq!(fleet["disaggregation"], default_disaggregation(&j));
    }

    /// "Turn off" is offered by the speculation and disaggregation groups when their field is set, and by no other.
    #[test]
    fn set_speculation_and_disaggregation_groups_offer_turn_off() {
        let mut j: Value = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "poisson", "num_requests": 10, "rate_rps": 1.0},
            "profile": serde_json::to_value(shared::engine::presets::by_name("laptop-demo").expect("preset"))
                .expect("json"),
            "fleet": default_fleet()
        });
        let offers =
            |j: &Value| -> Vec<(&'static str, &'static str)> { shape(j).iter().filter_map(turn_off).collect() };
        assert_eq!(offers(&j), Vec::new(), "unset: each offers \"set\" instead");
        j["profile"]["speculative"] = default_speculative();
        assert_eq!(offers(&j), vec![("profile", "speculative")]);
        j["fleet"]["disaggregation"] = default_disaggregation(&j);
        assert_eq!(
            offers(&j),
            vec![("profile", "speculative"), ("fleet", "disaggregation")]
        );
    }

    #[test]
    fn an_engine_profile_offers_speculative_decoding_and_its_default_is_a_valid_scenario() {
        let mut j: Value = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "poisson", "num_requests": 10, "rate_rps": 1.0},
            "profile": serde_json::to_value(shared::engine::presets::by_name("laptop-demo").expect("preset"))
                .expect("json")
        });
        let profile = |j: &Value| {
            shape(j)
                .into_iter()
                .find(|g| g.key == "speculative")
                .expect("its group")
        };
        let g = profile(&j);
        assert_eq!(g.title, "Speculative decoding");
        // Its group follows the engine profile's.
        let keys: Vec<String> = shape(&j).into_iter().map(|g| g.key).collect();
        let at = |k: &str| keys.iter().position(|x| x == k);
        assert_eq!(at("speculative"), at("profile").map(|p| p + 1));
        let offered = g
            .leaves
            .iter()
            .find(|l| l.pointer == "/profile/speculative")
            .expect("offered");
        assert_eq!(offered.kind, Kind::Unset);
        // Under "Advanced", with the rest of the engine.
        let (first, advanced) = layout(shape(&j));
        assert!(first.iter().all(|g| g.key != "profile"));
        assert!(
            advanced
                .iter()
                .any(|g| g.leaves.iter().any(|l| l.pointer == "/profile/speculative"))
        );

        // Set: the default's knobs replace the offer, each with its kind, label and range.
        j["profile"]["speculative"] = default_speculative();
        let g = profile(&j);
        assert!(
            g.leaves
                .iter()
                .all(|l| l.kind != Kind::Unset || l.name != "speculative")
        );
        let kind = |p: &str| g.leaves.iter().find(|l| l.pointer == p).map(|l| l.kind.clone());
        assert_eq!(kind("/profile/speculative/method"), Some(Kind::Text));
        assert_eq!(kind("/profile/speculative/draft_tokens"), Some(Kind::Integer));
        assert_eq!(kind("/profile/speculative/acceptance"), Some(Kind::Float));
        assert_eq!(kind("/profile/speculative/draft_cost_ms"), Some(Kind::Float));
        assert_eq!(
            fields::choices("method"),
            Some(vec!["mtp".into(), "eagle".into(), "draft".into(), "ngram".into()])
        );
        let a = fields::spec("acceptance").expect("acceptance");
        assert_eq!((a.min, a.max), (0.0, 1.0));
        assert!(fields::spec("draft_tokens").is_some_and(|k| k.min == 1.0 && k.step == 1.0));
        assert!(fields::spec("draft_cost_ms").is_some_and(|c| c.min == 0.0));

        // The default is a valid scenario, with speculation on; every method of the menu is too.
        let sc = shared::scenario::Scenario::from_value(j.clone()).expect("a speculative scenario is valid");
        let shared::scenario::Scenario::Engine(e) = sc else {
            panic!("an engine scenario")
        };
        let spec = e.profile.speculative.expect("speculation on");
        assert_eq!(
            (spec.draft_tokens, spec.acceptance),
            (1, shared::engine::spec::Acceptance::Rate(0.72))
        );
        for m in fields::choices("method").expect("a menu") {
            j["profile"]["speculative"]["method"] = Value::from(m.clone());
            shared::scenario::Scenario::from_value(j.clone()).unwrap_or_else(|e| panic!("{m}: {e}"));
        }
        // What the controls' ranges allow at their ends is valid too; outside them the scenario names the field.
        j["profile"]["speculative"]["acceptance"] = Value::from(1.0);
        j["profile"]["speculative"]["draft_tokens"] = Value::from(16);
        shared::scenario::Scenario::from_value(j.clone()).expect("the ranges' ends are valid");
        j["profile"]["speculative"]["draft_tokens"] = Value::from(0);
        let err = shared::scenario::Scenario::from_value(j.clone()).expect_err("k = 0");
        assert!(err.to_string().contains("draft_tokens"), "{err}");

        // A seed scenario and a deployment are offered none.
        let seed = serde_json::json!({"model": "seed", "workload": {"kind": "bursty"}});
        assert!(
            shape(&seed)
                .iter()
                .flat_map(|g| g.leaves.iter())
                .all(|l| l.name != "speculative")
        );
        let dep = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "poisson", "num_requests": 10, "rate_rps": 1.0},
            "deployment": {"model": "llama-3.1-8b", "gpu": "h100-sxm"}
        });
        assert!(
            shape(&dep)
                .iter()
                .flat_map(|g| g.leaves.iter())
                .all(|l| l.name != "speculative")
        );
    }

    #[test]
    fn a_fleet_offers_disaggregation_and_its_default_is_a_valid_scenario() {
        let mut j: Value = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "poisson", "num_requests": 10, "rate_rps": 1.0},
            "profile": serde_json::to_value(shared::engine::presets::by_name("laptop-demo").expect("preset"))
                .expect("json")
        });
        // No fleet, no offer; a fleet offers it in its group.
        let offered = |j: &Value| {
            shape(j)
                .into_iter()
                .flat_map(|g| g.leaves)
                .find(|l| l.pointer == "/fleet/disaggregation")
        };
        assert!(offered(&j).is_none());
        for replicas in [2u64, 5] {
            j["fleet"] = default_fleet();
            j["fleet"]["replicas"] = Value::from(replicas);
            let leaf = offered(&j).expect("offered");
            assert_eq!(leaf.kind, Kind::Unset);
            assert!(
                shape(&j)
                    .iter()
                    .any(|g| g.key == "disaggregation" && g.leaves.contains(&leaf))
            );
            let d = default_disaggregation(&j);
            j["fleet"]["disaggregation"] = d.clone();
            // Its controls read prefill, decode, then the link.
            let names: Vec<String> = shape(&j)
                .into_iter()
                .find(|g| g.key == "disaggregation")
                .expect("group")
                .leaves
                .into_iter()
                .map(|l| l.name)
                .collect();
            assert_eq!(
                names,
                [
                    "prefill_instances",
                    "decode_instances",
                    "link_bytes_per_s",
                    "link_latency_ms",
                    "kv_bytes_per_token"
                ]
            );
            assert_eq!(d["prefill_instances"], replicas / 2);
            assert_eq!(d["decode_instances"], replicas - replicas / 2);
            // A profile without a roofline is given the KV size the link needs; the result is a valid scenario.
            assert_eq!(d["kv_bytes_per_token"], 131_072);
            j["fleet"]["disaggregation"] = d;
            shared::scenario::Scenario::from_value(j.clone()).expect("a P/D fleet is valid");
            let g = shape(&j)
                .into_iter()
                .find(|g| g.key == "disaggregation")
                .expect("its group");
            assert_eq!(g.title, "Prefill/decode disaggregation");
            let kind = |p: &str| g.leaves.iter().find(|l| l.pointer == p).map(|l| l.kind.clone());
            assert_eq!(kind("/fleet/disaggregation/prefill_instances"), Some(Kind::Integer));
            assert_eq!(kind("/fleet/disaggregation/decode_instances"), Some(Kind::Integer));
            assert_eq!(kind("/fleet/disaggregation/link_bytes_per_s"), Some(Kind::Float));
            assert_eq!(kind("/fleet/disaggregation/link_latency_ms"), Some(Kind::Float));
            assert!(offered(&j).is_none());
        }
        // P + D off the replicas is refused, naming the field.
        j["fleet"]["disaggregation"]["decode_instances"] = Value::from(9);
        let err = shared::scenario::Scenario::from_value(j.clone()).expect_err("P + D != replicas");
        assert!(err.to_string().contains("decode_instances"), "{err}");
        // A deployment's roofline carries its KV size: the default leaves it to it, and is valid.
        let mut dep: Value =
            serde_json::from_str(include_str!("../../../examples/deployment-h100-llama8b.json")).expect("example");
        dep["fleet"] = default_fleet();
        let d = default_disaggregation(&dep);
        assert!(d.get("kv_bytes_per_token").is_none());
        dep["fleet"]["disaggregation"] = d;
        shared::scenario::Scenario::from_value(dep).expect("a P/D deployment is valid");
    }

    #[test]
    fn a_session_workload_offers_the_agent_shapes_and_each_default_is_a_valid_scenario() {
        let mut j: Value = serde_json::from_str(include_str!("../../../examples/agents-tour.json")).unwrap();
        let unset = |j: &Value| -> Vec<String> {
            let s = shape(j);
            let w = s.iter().find(|g| g.key == "workload").expect("a workload group");
            w.leaves
                .iter()
                .filter(|l| l.kind == Kind::Unset)
                .map(|l| l.pointer.clone())
                .collect()
        };
        assert_eq!(
            unset(&j),
            [
                "/workload/think",
                "/workload/compaction",
                "/workload/reasoning",
                "/workload/subagents"
            ]
        );
        for key in AGENT_SHAPES {
            j["workload"][key] = default_agent_shape(key).expect(key);
            let alone = {
                let mut one: Value = serde_json::from_str(include_str!("../../../examples/agents-tour.json")).unwrap();
                one["workload"][key] = default_agent_shape(key).unwrap();
                one
            };
            shared::scenario::Scenario::from_value(alone).unwrap_or_else(|e| panic!("{key}: {e}"));
        }
        // All four at once, and their knobs are controls of the workload.
        shared::scenario::Scenario::from_value(j.clone()).expect("all four shapes together are valid");
        assert!(unset(&j).is_empty());
        let s = shape(&j);
        let w = s.iter().find(|g| g.key == "workload").unwrap();
        for p in [
            "/workload/compaction/at_tokens",
            "/workload/reasoning/echo",
            "/workload/subagents/count",
            "/workload/think/sigma",
        ] {
            assert!(w.leaves.iter().any(|l| l.pointer == p), "{p} is a control");
        }
        // A workload of another kind is offered none.
        let poisson: Value = serde_json::from_str(include_str!("../../../examples/engine-10k.json")).unwrap();
        assert!(
            shape(&poisson)
                .iter()
                .flat_map(|g| &g.leaves)
                .all(|l| !l.pointer.starts_with("/workload/think"))
        );
    }

    #[test]
    fn a_deployment_offers_its_model_and_gpu_as_menus() {
        let j: Value = serde_json::from_str(include_str!("../../../examples/deployment-h100-llama8b.json")).unwrap();
        let s = shape(&j);
        let d = s.iter().find(|g| g.key == "deployment").expect("a deployment group");
        assert_eq!(d.title, "Deployment: model and GPU");
        for (p, name) in [
            ("/deployment/model", "model"),
            ("/deployment/gpu", "gpu"),
            ("/deployment/kv_dtype", "kv_dtype"),
        ] {
            let leaf = d
                .leaves
                .iter()
                .find(|l| l.pointer == p)
                .unwrap_or_else(|| panic!("{p} is a control"));
            assert_eq!(leaf.kind, Kind::Text);
            assert!(fields::choices(name).is_some(), "{name} is a menu");
        }
        assert!(
            d.leaves
                .iter()
                .any(|l| l.pointer == "/deployment/tp" && l.kind == Kind::Integer)
        );
        // It opens on the decisions, in the explorer's first controls; the rest of it is under Advanced.
        let (first, advanced) = layout(s.clone());
        let keys: Vec<&str> = first.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["workload", "deployment", "slo"]);
        let names: Vec<&str> = first[1].leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["model", "gpu", "tp", "weight_dtype", "kv_dtype"]);
        assert!(advanced.iter().any(|g| g.key == "deployment-more"));
        // The scenario's own `model` stays hidden.
        assert!(s.iter().flat_map(|g| &g.leaves).all(|l| l.pointer != "/model"));
    }

    #[test]
    fn shape_lists_every_leaf_with_its_kind() {
        let j: Value = serde_json::json!({
            "version": 1, "model": "seed",
            "workload": {"kind": "bursty", "num_requests": 80, "seed": 42, "mean_rps": 8.5},
            "profile": {"name": "baseline", "max_batch_slots": 16, "base_tpot_ms": 17.5},
            "slo": {"ttft_ms": 500.0, "tpot_ms": 35.0, "e2e_ms": null},
            "closed_loop": false, "workload_name": "agent"
        });
        let s = shape(&j);
        let titles: Vec<&str> = s.iter().map(|g| g.title.as_str()).collect();
        assert_eq!(titles, ["Workload", "Engine profile", "SLOs", "General"]);
        assert_eq!(s[1].leaves[0].name, "name", "text fields first");
        let w = &s[0].leaves;
        assert_eq!(w.len(), 3, "kind is hidden: {w:?}");
        assert_eq!(w[0].pointer, "/workload/mean_rps");
        assert_eq!(w[0].kind, Kind::Float);
        assert_eq!(w[1].kind, Kind::Integer);
        assert_eq!(s[2].leaves[0].kind, Kind::Unset);
        assert_eq!(s[3].leaves[0].kind, Kind::Text);
        assert_eq!(s[3].leaves[1].kind, Kind::Bool, "switches last");
    }

    #[test]
    fn primary_knobs_then_slos_then_the_rest_under_advanced() {
        let j: Value = serde_json::json!({
            "model": "engine",
            "workload": {"kind": "sessions", "base_tokens": 22000, "drain_grace_s": 420.0, "duration_s": 900.0,
                         "gen_tokens": 700, "respawn": true, "sessions": 8, "spread": 0.5, "steps": 12,
                         "think_s": 6.0, "tool_tokens": 900},
            "profile": {"name": "p", "num_kv_blocks": 100},
            "slo": {"ttft_ms": 2000.0, "tpot_ms": 50.0},
            "seed": 7
        });
        let (first, advanced) = layout(shape(&j));
        let keys: Vec<&str> = first.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["workload", "slo"]);
        let slos: Vec<&str> = first[1].leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(slos, ["ttft_ms", "tpot_ms"], "TTFT first");
        let names: Vec<&str> = first[0].leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "sessions",
                "think_s",
                "steps",
                "base_tokens",
                "tool_tokens",
                "gen_tokens"
            ]
        );
        let keys: Vec<&str> = advanced.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["workload-more", "profile", "speculative", "fleet", "general"]);
        let more: Vec<&str> = advanced[0].leaves.iter().map(|l| l.name.as_str()).collect();
        assert!(more.contains(&"drain_grace_s") && more.contains(&"respawn") && !more.contains(&"sessions"));
        // Every leaf is somewhere, once.
        let all = shape(&j).iter().map(|g| g.leaves.len()).sum::<usize>();
        let shown = first.iter().chain(&advanced).map(|g| g.leaves.len()).sum::<usize>();
        assert_eq!(all, shown);
        // Solver options (no workload) are not split.
        let opts = serde_json::json!({"slots": 8, "min_steps": 2});
        assert!(layout(shape(&opts)).1.is_empty());
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert_eq!(number_value(&Kind::Integer, 16.4), Some(serde_json::json!(16)));
        assert_eq!(number_value(&Kind::Float, 16.4), Some(serde_json::json!(16.4)));
        assert_eq!(number_value(&Kind::Float, f64::NAN), None);
    }

    /// A fitted profile's `reply_cached_share` (a share, 0..=1) gets a slider over the whole range, not the fallback
    /// around its value.
    #[test]
    fn the_reply_share_slides_over_zero_to_one() {
        let s = crate::explorer::fields::spec("reply_cached_share").expect("a known field");
        assert_eq!((s.min, s.max), (0.0, 1.0));
    }
}
