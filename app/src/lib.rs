//! The loadshape page: components over `shared` calls; it holds no simulation logic.

use leptos::prelude::*;

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    view! {
        <header class="top">
            <h1>"loadshape"</h1>
            <span class="tag">"agent-shaped load for LLM servers"</span>
        </header>
        <main>
            <p data-metric="protocol_version">{shared::version::PROTOCOL_VERSION}</p>
        </main>
    }
}
