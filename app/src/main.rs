//! The loadshape page, mounted on `<body>`. Built by Trunk from the root `index.html`.
use leptos::prelude::*;

fn main() {
    console_error_panic_hook::set_once();
    mount_to_body(|| view! { <loadshape_app::App/> });
    // The static "Loading…" placeholder of index.html goes once the app is on screen.
    if let Some(boot) = document().get_element_by_id("boot") {
        boot.remove();
    }
}
