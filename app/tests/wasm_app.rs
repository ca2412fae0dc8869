//! The page in a real browser (wasm-bindgen-test in headless Chromium): mount the app, read the DOM.
//!
//! Run with `CHROMEDRIVER=/usr/bin/chromedriver WASM_BINDGEN_TEST_WEBDRIVER_JSON=<file>
//! cargo test -p loadshape-app --target wasm32-unknown-unknown --test wasm_app`.
#![cfg(target_arch = "wasm32")]
// The seed model is the only model yet; `let Scenario::Seed(..) else` becomes refutable with the engine model.
#![allow(irrefutable_let_patterns)]

use leptos::prelude::*;
use loadshape_app::App;
use shared::scenario::Scenario;
use shared::seed_model;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let _ = web_sys::window()
            .expect("window")
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

fn document() -> web_sys::Document {
    web_sys::window().and_then(|w| w.document()).expect("document")
}

/// Mount the app into a fresh container; the returned handle unmounts it when dropped.
fn mount(id: &str) -> (web_sys::HtmlElement, impl Drop) {
    let doc = document();
    let el: web_sys::HtmlElement = doc.create_element("div").unwrap().dyn_into().unwrap();
    el.set_id(id);
    doc.body().unwrap().append_child(&el).unwrap();
    let handle = leptos::mount::mount_to(el.clone(), || view! { <App/> });
    (el, handle)
}

fn value_of(root: &web_sys::HtmlElement, selector: &str) -> Option<String> {
    let el = root.query_selector(selector).ok()??;
    el.get_attribute("data-value").or_else(|| el.text_content())
}

/// Poll until `selector` under `root` has a value (the explorer computes after a debounce and a paint).
async fn wait_value(root: &web_sys::HtmlElement, selector: &str) -> Option<String> {
    for _ in 0..100 {
        if let Some(v) = value_of(root, selector).filter(|v| !v.is_empty()) {
            return Some(v);
        }
        sleep(20).await;
    }
    None
}

fn set_hash(hash: &str) {
    let window = web_sys::window().unwrap();
    let path = window.location().pathname().unwrap();
    window
        .history()
        .unwrap()
        .replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("{path}{hash}")))
        .unwrap();
}

#[wasm_bindgen_test]
async fn seed_profiles_show_the_seed_report_exactly() {
    set_hash("");
    let (root, _handle) = mount("seed-profiles");
    let report = seed_model::seed_report();
    for (name, expected) in report["scenario_comparisons"].as_object().unwrap() {
        for (field, value) in expected.as_object().unwrap() {
            let sel = format!("[data-profile=\"{name}\"] [data-metric=\"{field}\"]");
            // The seed panel loads once the explorer has shown its first result.
            let shown = wait_value(&root, &sel).await.unwrap_or_else(|| panic!("{sel} missing"));
            match value {
                serde_json::Value::Number(n) => assert_eq!(shown.parse::<f64>().ok(), n.as_f64(), "{sel}"),
                serde_json::Value::String(s) => assert_eq!(&shown, s, "{sel}"),
                _ => {}
            }
        }
    }
    root.remove();
}

#[wasm_bindgen_test]
async fn moving_a_slider_recomputes_the_summary() {
    // The seed model's scenario (the page opens on the engine model; the seed is a link or a click away).
    set_hash(&format!(
        "#s={}",
        shared::link::encode(&shared::presets::default_scenario())
    ));
    let (root, _handle) = mount("slider");
    let sel = "[data-summary=\"explorer\"] [data-metric=\"ttft_p50_ms\"]";
    let before = wait_value(&root, sel).await.expect("first result");
    assert_eq!(before, "3915.16");

    let slider: web_sys::HtmlInputElement = root
        .query_selector("input[type=range][data-pointer=\"/profile/prefill_tokens_per_ms\"]")
        .unwrap()
        .expect("prefill slider")
        .dyn_into()
        .unwrap();
    slider.set_value("40");
    slider.dispatch_event(&web_sys::Event::new("input").unwrap()).unwrap();

    let mut json =
        serde_json::from_str::<serde_json::Value>(include_str!("../../examples/seed-baseline.json")).unwrap();
    json["profile"]["prefill_tokens_per_ms"] = serde_json::json!(40.0);
    let Scenario::Seed(sc) = Scenario::from_value(json).unwrap() else {
        panic!("seed scenario")
    };
    let expected = seed_model::evaluate(&sc).unwrap();

    let mut shown = before.clone();
    for _ in 0..100 {
        sleep(20).await;
        shown = value_of(&root, sel).unwrap_or_default();
        if shown != before {
            break;
        }
    }
    assert_eq!(shown.parse::<f64>().ok(), Some(expected.ttft_p50_ms));
    root.remove();
}

#[wasm_bindgen_test]
async fn a_share_link_restores_the_scenario() {
    let json = serde_json::json!({
        "model": "seed",
        "workload": {"kind": "bursty", "num_requests": 120, "seed": 7, "mean_rps": 6.0},
        "profile": {"name": "custom", "prefill_tokens_per_ms": 30.0, "prefix_cache_hit_efficiency": 0.8,
                    "base_tpot_ms": 15.0, "batch_tpot_slope_ms": 0.5, "max_batch_slots": 24},
        "slo": {"ttft_ms": 400.0, "tpot_ms": 30.0},
        "closed_loop": false, "workload_name": "linked"
    });
    let sc = Scenario::from_value(json).unwrap();
    let Scenario::Seed(seed) = &sc else {
        panic!("seed scenario")
    };
    let expected = seed_model::evaluate(seed).unwrap();
    set_hash(&format!("#s={}", shared::link::encode(&sc)));
    let (root, _handle) = mount("link");
    let shown = wait_value(&root, "[data-summary=\"explorer\"] [data-metric=\"slo_goodput_rps\"]").await;
    assert_eq!(
        shown.and_then(|v| v.parse::<f64>().ok()),
        Some(expected.slo_goodput_rps)
    );
    let slots: web_sys::HtmlInputElement = root
        .query_selector("input[type=number][data-pointer=\"/profile/max_batch_slots\"]")
        .unwrap()
        .expect("slots input")
        .dyn_into()
        .unwrap();
    assert_eq!(slots.value(), "24");
    assert!(root.query_selector("[data-link-error]").unwrap().is_none());
    root.remove();
    set_hash("");
}

#[wasm_bindgen_test]
async fn a_broken_link_shows_a_message_and_the_default() {
    set_hash("#s=1.eJyrVkrOz8lJTQ");
    let (root, _handle) = mount("broken");
    let msg = root
        .query_selector("[data-link-error]")
        .unwrap()
        .expect("a message about the link");
    let text = msg.text_content().unwrap_or_default();
    assert!(text.contains("truncated") || text.contains("corrupted"), "{text}");
    let shown = wait_value(&root, "[data-summary=\"explorer\"] [data-metric=\"ttft_p50_ms\"]").await;
    let default = Scenario::from_value(loadshape_app::model::compute::default_scenario()).unwrap();
    let want = loadshape_app::model::compute::compute(&default)
        .unwrap()
        .get("ttft_p50_ms")
        .unwrap();
    assert_eq!(
        shown.as_deref(),
        Some(want.to_string().as_str()),
        "the default scenario is shown"
    );
    root.remove();

    set_hash("#s=9.abc");
    let (root, _handle) = mount("future");
    let text = root
        .query_selector("[data-link-error]")
        .unwrap()
        .expect("message")
        .text_content()
        .unwrap();
    assert!(text.contains("newer"), "{text}");
    root.remove();
    set_hash("");
}

#[wasm_bindgen_test]
fn pure_helpers_behave_in_wasm() {
    assert_eq!(loadshape_app::ui::fmt::num(3915.16), "3,915");
    let c = shared::metrics::cdf_points([3.0, 1.0, 2.0], 10);
    assert_eq!(c.last(), Some(&(3.0, 1.0)));
    assert_eq!(
        loadshape_app::model::url::param("#token=a&s=1.x", "", "s").as_deref(),
        Some("1.x")
    );
    let (records, skipped) = loadshape_app::live::parse_jsonl(b"{}\n");
    assert!(records.is_empty() && skipped.len() == 1);
}
