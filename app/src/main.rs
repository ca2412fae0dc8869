//! The loadshape page, mounted on `<body>`. Built by Trunk from the root `index.html`.
use leptos::prelude::*;

fn main() {
    console_error_panic_hook::set_once();
    mount_to_body(|| view! { <loadshape_app::App/> });
}
