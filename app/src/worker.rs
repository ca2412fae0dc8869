//! The compute worker's side: the page's own wasm module, started a second time inside a dedicated Web Worker.
//!
//! `main` calls [`run`] when there is no `window` (it is running in a worker). Requests arrive as `Uint8Array`s
//! ([`crate::wire`]); each is computed with the same `shared` calls as on the main thread and answered with the
//! result's bytes (the buffer is transferred, not copied). The worker says `"ready"` once its handler is installed.

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// The word the worker posts when it can take jobs.
pub const READY: &str = "ready";

/// Install the message handler and announce readiness. Does nothing outside a dedicated worker.
pub fn run() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        return;
    };
    let reply_to = scope.clone();
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
        let bytes = js_sys::Uint8Array::new(&ev.data()).to_vec();
        let answer = match crate::wire::decode_job(&bytes) {
            Ok((id, job)) => {
                let t0 = now_ms(&reply_to);
                let done = job.run();
                crate::wire::encode_done(id, now_ms(&reply_to) - t0, &done)
            }
            // Never expected from the same build; answer job 0 so the page can report it.
            Err(e) => crate::wire::encode_done(0, 0.0, &crate::wire::Done::Outcome(Err(e.to_string()))),
        };
        let out = js_sys::Uint8Array::from(answer.as_slice());
        let transfer = js_sys::Array::of1(&out.buffer());
        let _ = reply_to.post_message_with_transfer(&out, &transfer);
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    let _ = scope.post_message(&JsValue::from_str(READY));
}

fn now_ms(scope: &web_sys::DedicatedWorkerGlobalScope) -> f64 {
    scope.performance().map_or_else(js_sys::Date::now, |p| p.now())
}
