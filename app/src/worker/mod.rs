//! The compute worker's side: the page's own wasm module, started a second time inside a dedicated Web Worker.
//!
//! `main` calls [`run`] when there is no `window` (it is running in a worker). Requests arrive as `Uint8Array`s
//! ([`crate::worker::wire`]); each is computed with the same `shared` calls as on the main thread and answered with the
//! result's bytes (the buffer is transferred, not copied) and the size of the worker's wasm memory after the run.
//! The worker says `"ready"` once its handler is installed. A panic is posted to the page as
//! `"panic: <message>"` before the worker's wasm traps, so the page can say what went wrong (an out-of-memory
//! abort has no message: the page names the memory limit instead, see [`crate::worker::offload`]).
//!
//! A worker named [`FAULT_PREFIX`]`oom` (the page's `?worker-fault=oom`, for the browser test of that path)
//! exhausts its wasm memory on its first computation, for real: the allocator's failure aborts the run exactly
//! as a run too large for the tab would. [`FAULT_PREFIX`]`panic` (`?worker-fault=panic`) panics there instead.

pub mod offload;
pub mod wire;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// The word the worker posts when it can take jobs.
pub const READY: &str = "ready";
/// The prefix of the message a panicking worker posts before its wasm traps.
pub const PANIC_PREFIX: &str = "panic: ";
/// The worker's name, without a fault.
pub const NAME: &str = "loadshape-compute";
/// The start of a worker name that asks for a failure on the first computation: `oom` or `panic` follows.
pub const FAULT_PREFIX: &str = "loadshape-compute-fault-";

/// Install the message handler and announce readiness. Does nothing outside a dedicated worker.
pub fn run() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        return;
    };
    let to_page = scope.clone();
    std::panic::set_hook(Box::new(move |info| {
        let _ = to_page.post_message(&JsValue::from_str(&format!("{PANIC_PREFIX}{info}")));
        web_sys::console::error_1(&JsValue::from_str(&info.to_string()));
    }));
    let fault = scope.name().strip_prefix(FAULT_PREFIX).map(str::to_string);
    let reply_to = scope.clone();
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
        let bytes = js_sys::Uint8Array::new(&ev.data()).to_vec();
        let reply_to = reply_to.clone();
        let reply = move |answer: Vec<u8>| {
            let out = js_sys::Uint8Array::from(answer.as_slice());
            let transfer = js_sys::Array::of1(&out.buffer());
            let _ = reply_to.post_message_with_transfer(&out, &transfer);
        };
        match crate::worker::wire::decode_job(&bytes) {
            Ok((id, job)) => {
                if let Some(kind) = &fault
                    && matches!(job, crate::worker::wire::Job::Compute(_))
                {
                    match kind.as_str() {
                        "oom" => exhaust_memory(),
                        _ => panic!("a failure asked for by ?worker-fault={kind}"),
                    }
                }
                // The page sends the next job only after this one's answer, so one runs at a time even when a job
                // waits for its module (`Job::OnDemand`).
                let scope = scope_of_worker();
                wasm_bindgen_futures::spawn_local(async move {
                    let t0 = scope.as_ref().map_or(0.0, now_ms);
                    let done = job.run_async().await;
                    let ms = scope.as_ref().map_or(0.0, now_ms) - t0;
                    reply(crate::worker::wire::encode_done(id, ms, memory_bytes(), &done));
                });
            }
            // Never expected from the same build; answer job 0 so the page can report it.
            Err(e) => reply(crate::worker::wire::encode_done(
                0,
                0.0,
                memory_bytes(),
                &crate::worker::wire::Done::Outcome(Err(e.to_string())),
            )),
        }
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
    let _ = scope.post_message(&JsValue::from_str(READY));
}

/// Bytes of this instance's wasm memory (it only grows: the peak of every run so far).
pub fn memory_bytes() -> f64 {
    // `byteLength` read as a JS number: 4 GiB does not fit the u32 the typed binding returns.
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .ok()
        .and_then(|m| js_sys::Reflect::get(&m.buffer(), &JsValue::from_str("byteLength")).ok())
        .and_then(|n| n.as_f64())
        .unwrap_or(0.0)
}

/// Reserve 256 MiB blocks (never touched, so the machine does not commit them) until wasm memory cannot grow:
/// the allocator's failure aborts the worker as a run too large for the tab does.
fn exhaust_memory() {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        held.push(Vec::with_capacity(256 << 20));
        // Keeps the blocks (and the loop) from being optimised away.
        if held.len() > 1 << 20 {
            break;
        }
    }
    web_sys::console::error_1(&JsValue::from_f64(held.len() as f64));
}

fn scope_of_worker() -> Option<web_sys::DedicatedWorkerGlobalScope> {
    js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>().ok()
}

fn now_ms(scope: &web_sys::DedicatedWorkerGlobalScope) -> f64 {
    scope.performance().map_or_else(js_sys::Date::now, |p| p.now())
}
