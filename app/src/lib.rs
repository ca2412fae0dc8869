//! The loadshape page: components over `shared` calls; it holds no simulation logic.
//!
//! Layout: a header (brand, views, agent status), then one view at a time: the what-if [`explorer`], the A/B
//! [`compare`] view, the [`ladder`], the [`live`] panel. Every view stays mounted (hidden, not removed) so
//! scripts can read any `data-metric` at any time, once its module has loaded (the split points below). Principal
//! pieces:
//! - [`agent::ws::AgentConn`]: the websocket to the agent (`#token=...` in the page URL), with `data-status`.
//! - [`explorer::seed_panel::SeedPanel`]: the seed model's three profiles, computed in wasm, each in `data-profile="<name>"`.
//! - [`ui::metric::Metric`]: one summary value, rendered with `data-metric="<field name>"` and `data-value`.
//! - [`worker::offload`]: runs the simulations in a Web Worker (the same wasm module, see [`worker`] and
//!   [`worker::wire`]), so
//!   large runs never freeze the page; the main thread computes when no worker can start.
//! - Split points (`#[lazy]`, below and in [`agent::ws`]): the compare, ladder and live views, the trace card, a
//!   deployment's card and the engine switch, the capacity card (with a deployment's GPUs), the retention card, the
//!   code of the worker's jobs loaded on demand, and the agent link are modules of their own, loaded once the explorer has shown its first result, so the first module
//!   holds what the explorer needs for it (docs/page.md, "Modules loaded on demand").

pub mod agent;
pub mod capacity;
pub mod compare;
pub mod explorer;
pub mod ladder;
pub mod live;
pub mod model;
pub mod ui;
pub mod worker;

#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use futures_util::FutureExt;
use leptos::prelude::*;

use agent::ws::AgentConn;

/// The views of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Explorer,
    Compare,
    Ladder,
    Live,
}

impl View {
    const ALL: [View; 4] = [View::Explorer, View::Compare, View::Ladder, View::Live];

    fn label(self) -> &'static str {
        match self {
            View::Explorer => "Explorer",
            View::Compare => "Compare",
            View::Ladder => "Ladder",
            View::Live => "Live",
        }
    }

    fn id(self) -> &'static str {
        match self {
            View::Explorer => "explorer",
            View::Compare => "compare",
            View::Ladder => "ladder",
            View::Live => "live",
        }
    }
}

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    let ex = model::state::Explorer::from_url();
    provide_context(ex);
    // What loads on demand waits for the explorer's first result (or its error).
    let settled = ex.settled().shared();
    let conn = AgentConn::start(model::url::token(), settled.clone());
    provide_context(conn);
    // A link pasted into this tab's address bar changes only the fragment, which the browser does not reload for
    // (the page itself edits it with `replaceState`, which fires no event): open it as a fresh page would, with this
    // page's agent token kept (a share link never carries one).
    let token = model::url::token();
    let on_hash = window_event_listener(leptos::ev::hashchange, move |_| {
        let (hash, search) = model::url::location_parts();
        if let Some(t) = &token
            && model::url::param(&hash, &search, "token").is_none()
        {
            model::url::replace_hash(&model::url::with_param(&hash, "token", Some(t)));
        }
        if let Some(w) = web_sys::window() {
            let _ = w.location().reload();
        }
    });
    on_cleanup(move || on_hash.remove());
    // The view shown is kept in the URL (`view=live`), so a reload comes back to it.
    let view = RwSignal::new(
        model::url::page_param("view")
            .and_then(|v| View::ALL.into_iter().find(|x| x.id() == v))
            .unwrap_or(View::Explorer),
    );
    Effect::new(move |_| {
        let v = view.get();
        model::url::set_page_param("view", (v != View::Explorer).then_some(v.id()));
    });
    // For "Use in explorer" buttons in other views.
    provide_context(view);
    // Targets' calibrated profiles and the calibration followed: the live panel, its fit card and the explorer.
    provide_context(live::calibrate::Calibration::new());

    view! {
        <header class="topbar">
            <div class="brand">
                <span class="logo" aria-hidden="true"></span>
                <span class="name">"loadshape"</span>
                <span class="tagline">"agent-shaped load for LLM servers"</span>
            </div>
            <nav class="views" role="tablist">
                {View::ALL
                    .into_iter()
                    .map(|v| {
                        view! {
                            <button
                                role="tab"
                                class="view-tab"
                                data-view=v.id()
                                class:active=move || view.get() == v
                                aria-selected=move || (view.get() == v).to_string()
                                on:click=move |_| view.set(v)
                            >
                                {v.label()}
                            </button>
                        }
                    })
                    .collect_view()}
            </nav>
            <AgentBadge conn=conn/>
        </header>
        <main class="page">
            <section class="view" id="view-explorer" class:hidden=move || view.get() != View::Explorer>
                <explorer::ExplorerView ex=ex/>
                {later(settled.clone(), move || trace_panel(ex))}
                {later(settled.clone(), seed_panel)}
            </section>
            {later(settled.clone(), move || other_views(OtherViews { ex, conn, view }))}
        </main>
        <footer class="foot">
            <span>"loadshape " {shared::version::LOADSHAPE_VERSION}</span>
            <span>"protocol " <span data-metric="page_protocol">{shared::version::PROTOCOL_VERSION}</span></span>
            <span>"all simulation runs in your browser (wasm); nothing leaves this page unless you launch a live run"</span>
        </footer>
    }
}

// Code loaded on demand. With the `split` feature (the page's build, index.html) each `#[lazy]` function below is a
// split point: `scripts/page_split.sh` moves the code only it reaches into a module of its own, fetched the first
// time it is called, so the page's first module holds what the explorer needs for its first result (docs/page.md,
// "Modules loaded on demand"). Without it (the wasm tests, which mount the page unsplit) they are plain async
// functions. Every view is still mounted at start (hidden, not removed); the modules load once the explorer has shown
// its first result (`Explorer::settled`), so they never compete with it for the main thread.

/// Renders a view whose code loads on demand, once `after` resolves; nothing shows until it has loaded.
pub(crate) fn later<F>(
    after: impl Future<Output = ()> + Send + 'static,
    view: impl FnOnce() -> F + Send + 'static,
) -> impl IntoView
where
    F: Future<Output = AnyView> + Send + 'static,
{
    let view = Suspend::new(async move {
        after.await;
        view().await
    });
    view! { <Suspense fallback=|| ()>{view}</Suspense> }
}

/// What the compare, ladder and live views take.
#[derive(Clone, Copy)]
struct OtherViews {
    ex: model::state::Explorer,
    conn: AgentConn,
    view: RwSignal<View>,
}

/// The compare, ladder and live views (with the fit and live capacity cards): one module.
#[cfg_attr(feature = "split", lazy)]
async fn other_views(a: OtherViews) -> AnyView {
    let OtherViews { ex, conn, view } = a;
    view! {
        <section class="view" id="view-compare" class:hidden=move || view.get() != View::Compare>
            <compare::CompareView ex=ex/>
        </section>
        <section class="view" id="view-ladder" class:hidden=move || view.get() != View::Ladder>
            <ladder::LadderPanel ex=ex/>
        </section>
        <section class="view" id="view-live" class:hidden=move || view.get() != View::Live>
            <live::LivePanel ex=ex conn=conn/>
            <HandshakePanel conn=conn/>
        </section>
    }
    .into_any()
}

/// The explorer's trace card (reading a Mooncake trace file): one module.
#[cfg_attr(feature = "split", lazy)]
async fn trace_panel(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::trace_panel::TracePanel ex=ex/> }.into_any()
}

/// A deployment's card in the explorer (its derived numbers and A/B): one module, loaded once the explorer has
/// settled (the first module stays within its budget, docs/page.md "Budget").
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn deployment_card(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::deployment::DeploymentCard ex=ex/> }.into_any()
}

/// The explorer's capacity card (the simulated search): one module, loaded once the explorer has settled (the
/// search itself starts after the first result anyway).
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn capacity_card(ex: model::state::Explorer) -> AnyView {
    view! { <capacity::panel::CapacityCard ex=ex/> }.into_any()
}

/// The explorer's retention card (the cached share by think time, and the host-tier what-if): one module, loaded
/// once the explorer has settled.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn retention_card(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::retention::RetentionCard ex=ex/> }.into_any()
}

/// The code of a job loaded on demand ([`worker::wire::Job::OnDemand`]), in the worker (or on the main thread when
/// there is none): one module, fetched by the first such job. Its answer is postcard bytes of the job's own type.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn on_demand_job(
    kind: worker::wire::OnDemand,
    scenario: serde_json::Value,
    numbers: Vec<f64>,
) -> Result<Vec<u8>, String> {
    use shared::scenario::Scenario;
    use worker::wire::{OnDemand, to_bytes};
    let sc = Scenario::from_value(scenario).map_err(|e| e.to_string())?;
    match kind {
        OnDemand::Capacity => capacity::view::capacity_view(&sc).map(|v| to_bytes(&v)),
        OnDemand::Predict => live::numbers::predicted(&sc, numbers.first().copied()).map(|p| to_bytes(&p)),
        OnDemand::Gpus => match &sc {
            Scenario::Engine(e) => capacity::view::gpus_view(e).map(|g| to_bytes(&g)),
            Scenario::Seed(_) => Err("GPUs need an engine scenario with a deployment".to_string()),
        },
        OnDemand::HostTier => {
            let (think_s, target) = match numbers[..] {
                [t, s] => (t, s),
                _ => {
                    return Err(format!(
                        "the host-tier what-if takes a think time and a share (got {numbers:?})"
                    ));
                }
            };
            model::retention::search(&sc, think_s, target).map(|w| to_bytes(&w))
        }
    }
}

/// The seed model's jobs ([`worker::wire::Job::is_seed`]: its result, sweep points and a live window's figures), in
/// the worker (or on the main thread when there is none): one module, fetched by the first seed job. The page opens
/// on the engine model, so a visit that never shows the seed model never fetches it.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn seed_job(job: worker::wire::Job) -> worker::wire::Done {
    model::seed::run(&job)
}

/// The explorer's diagnostics and the table of every summary field (below the charts): one module, loaded once
/// the explorer has settled.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn explorer_details(ex: model::state::Explorer) -> AnyView {
    view! {
        <explorer::Diagnostics ex=ex/>
        <explorer::AllMetrics ex=ex/>
    }
    .into_any()
}

/// The explorer's action bar (copy link, pin as A, compare, reset, launch): one module, loaded once the explorer has
/// settled (its first result shown).
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn action_bar(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::ActionBar ex=ex/> }.into_any()
}

/// The scenario as JSON, to read or paste (under the controls): one module, loaded once the explorer has settled.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn scenario_json(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::ScenarioJson ex=ex/> }.into_any()
}

/// The seed's three profiles under the explorer: one module, loaded once the explorer has settled.
#[cfg_attr(feature = "split", lazy)]
async fn seed_panel() -> AnyView {
    view! { <explorer::seed_panel::SeedPanel/> }.into_any()
}

/// The explorer's session timeline (session workloads): one module, loaded once the explorer has settled.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn session_timeline(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::session_timeline::SessionTimeline ex=ex/> }.into_any()
}

/// The explorer's switch to a target's calibrated profile (shown once an agent has calibrated one): one module,
/// loaded once the explorer has settled.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn target_profile_switch(ex: model::state::Explorer) -> AnyView {
    view! { <explorer::target_profile::TargetProfileSwitch ex=ex/> }.into_any()
}

/// The explorer's switch between raw coefficients and a deployment (engine scenarios): one module, loaded when
/// first shown.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn engine_source(
    json: RwSignal<serde_json::Value>,
    memory: StoredValue<explorer::deployment::SwitchMemory>,
) -> AnyView {
    view! { <explorer::deployment::EngineSource json=json memory=memory/> }.into_any()
}

/// What "set" puts at an absent optional field of the explorer's scenario (a fleet, speculation, disaggregation, an
/// agent shape, a number; [`explorer::controls::set_default`]): one module, loaded by the first "set".
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn unset_value(
    json: serde_json::Value,
    pointer: String,
    name: String,
) -> Option<(String, serde_json::Value)> {
    explorer::controls::set_default(&json, &pointer, &name)
}

/// A scenario's share-link payload ([`shared::link::encode`]: compact JSON, deflate, base64), for the page's address
/// after an edit: one module, loaded by the first edit.
#[cfg_attr(feature = "split", lazy)]
pub(crate) async fn link_payload(sc: shared::scenario::Scenario) -> String {
    shared::link::encode(&sc)
}

/// The connection pill in the header: `data-status` and the agent's version.
#[component]
fn AgentBadge(conn: AgentConn) -> impl IntoView {
    view! {
        <div class="agent-badge" data-status=move || conn.status.get().as_str() title=move || conn.message.get().unwrap_or_default()>
            <span class="dot"></span>
            <span class="label">{move || conn.status.get().label()}</span>
            <span class="ver" class:hidden=move || conn.agent_version.get().is_none()>
                "v" <span data-metric="agent_version">{move || conn.agent_version.get().unwrap_or_default()}</span>
                " · protocol " <span data-metric="agent_protocol">{move || conn.agent_protocol.get().map(|p| p.to_string()).unwrap_or_default()}</span>
            </span>
        </div>
    }
}

/// The handshake details: status, agent version and protocol, last message.
#[component]
fn HandshakePanel(conn: AgentConn) -> impl IntoView {
    view! {
        <div class="card handshake">
            <h2>"Agent"</h2>
            <dl class="kv">
                <dt>"status"</dt>
                <dd>{move || conn.status.get().label()}</dd>
                <dt>"agent version"</dt>
                <dd>{move || conn.agent_version.get().unwrap_or_else(|| "—".into())}</dd>
                <dt>"agent protocol"</dt>
                <dd>{move || conn.agent_protocol.get().map(|p| p.to_string()).unwrap_or_else(|| "—".into())}</dd>
                <dt>"page protocol"</dt>
                <dd>{shared::version::PROTOCOL_VERSION}</dd>
            </dl>
            {move || conn.message.get().map(|m| view! { <p class="callout warn">{m}</p> })}
            <Show when=move || conn.status.get() == agent::ws::Status::NoToken>
                <p class="muted">
                    "Not connected to an agent. Start one with " <code>"loadshape serve"</code>
                    " and open the link it prints (it carries " <code>"#token=…"</code> "); simulation works without it."
                </p>
            </Show>
        </div>
    }
}
