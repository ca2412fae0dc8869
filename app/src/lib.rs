//! The loadshape page: components over `shared` calls; it holds no simulation logic.
//!
//! Layout: a header (brand, views, agent status), then one view at a time: the what-if [`explorer`], the A/B
//! [`compare`] view, the [`ladder_panel`], the [`live`] panel. Every view stays mounted (hidden, not removed) so
//! scripts can read any `data-metric` at any time. Principal pieces:
//! - [`agent_ws::AgentConn`]: the websocket to the agent (`#token=...` in the page URL), with `data-status`.
//! - [`seed_panel::SeedPanel`]: the seed model's three profiles, computed in wasm, each in `data-profile="<name>"`.
//! - [`metric::Metric`]: one summary value, rendered with `data-metric="<field name>"` and `data-value`.
//! - [`offload`]: runs the simulations in a Web Worker (the same wasm module, see [`worker`] and [`wire`]), so
//!   large runs never freeze the page; the main thread computes when no worker can start.

pub mod agent_ws;
pub mod capacity_live;
pub mod capacity_panel;
pub mod capacity_view;
pub mod charts;
pub mod compare;
pub mod compute;
pub mod controls;
pub mod explorer;
pub mod fields;
pub mod fit_panel;
pub mod fmt;
pub mod ladder_panel;
pub mod live;
pub mod metric;
pub mod offload;
pub mod seed_band;
pub mod seed_panel;
pub mod server_msg;
pub mod state;
pub mod trace_panel;
pub mod url;
pub mod wire;
pub mod worker;

#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use leptos::prelude::*;

use agent_ws::AgentConn;

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
    let conn = AgentConn::start(url::token());
    provide_context(conn);
    let ex = state::Explorer::from_url();
    provide_context(ex);
    let view = RwSignal::new(View::Explorer);
    // For "Use in explorer" buttons in other views.
    provide_context(view);

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
                <trace_panel::TracePanel ex=ex/>
                <seed_panel::SeedPanel/>
            </section>
            <section class="view" id="view-compare" class:hidden=move || view.get() != View::Compare>
                <compare::CompareView ex=ex/>
            </section>
            <section class="view" id="view-ladder" class:hidden=move || view.get() != View::Ladder>
                <ladder_panel::LadderPanel ex=ex/>
            </section>
            <section class="view" id="view-live" class:hidden=move || view.get() != View::Live>
                <live::LivePanel ex=ex conn=conn/>
                <HandshakePanel conn=conn/>
            </section>
        </main>
        <footer class="foot">
            <span>"loadshape " {shared::version::LOADSHAPE_VERSION}</span>
            <span>"protocol " <span data-metric="page_protocol">{shared::version::PROTOCOL_VERSION}</span></span>
            <span>"all simulation runs in your browser (wasm); nothing leaves this page unless you launch a live run"</span>
        </footer>
    }
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
            <Show when=move || conn.status.get() == agent_ws::Status::NoToken>
                <p class="muted">
                    "Not connected to an agent. Start one with " <code>"loadshape serve"</code>
                    " and open the link it prints (it carries " <code>"#token=…"</code> "); simulation works without it."
                </p>
            </Show>
        </div>
    }
}
