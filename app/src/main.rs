//! The loadshape page, mounted on `<body>`. Built by Trunk from the root `index.html`.
//!
//! The same module also runs as the page's compute worker (`loadshape_app::worker::offload`): there is no `window`
//! there, and `main` installs the worker's message handler instead of mounting the page.
use leptos::prelude::*;

fn main() {
    console_error_panic_hook::set_once();
    if web_sys::window().is_none() {
        loadshape_app::worker::run();
        return;
    }
    mount_to_body(|| view! { <loadshape_app::App/> });
    // The static "Loading…" placeholder of index.html goes once the app is on screen.
    if let Some(boot) = document().get_element_by_id("boot") {
        boot.remove();
    }
}
