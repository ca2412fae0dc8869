//! Runs the page's simulations off the main thread, in a dedicated Web Worker, so the page never freezes.
//!
//! The worker runs the page's own wasm module a second time (no second binary: the same file, already in the
//! browser's cache). Trunk's `<link rel="modulepreload">` and `<link rel="preload" type="application/wasm">`
//! name the module's JS glue and wasm; a tiny module script (a `Blob` URL) imports the glue and instantiates
//! the wasm, whose `main` sees no `window` and becomes the worker ([`crate::worker`]).
//!
//! One worker, one job at a time, in submission order. Jobs belong to a [`Lane`] and carry the generation of
//! the edit that asked for them: [`supersede`] drops a lane's queued jobs of older generations, never delivers
//! their results, and when an outdated job has kept the worker busy for [`RESTART_AFTER_MS`] the worker is
//! terminated and a fresh one started, so a long stale run never delays the newest one.
//!
//! Fallback: when no worker can be started (no module links, e.g. under `wasm-bindgen-test`; a browser without
//! module workers; `?worker=off` in the page URL) or it crashes repeatedly, jobs run on the main thread, one per
//! timer tick, exactly as before. Small jobs also run on the main thread while the worker is still starting, so
//! the first result of a fresh page is not delayed by the worker's start.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

use leptos::prelude::set_timeout;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::worker::wire::{Done, Job};

/// Who asked: each lane's generations are independent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The explorer's result and its goodput sweep.
    Explorer = 0,
    /// The live panel's simulated overlay.
    Live = 1,
    /// The live panel's prediction with a fitted profile ([`crate::live::fit_panel`]).
    Fit = 2,
    /// The live panel's numbers table ([`crate::live::numbers`]).
    Numbers = 3,
}

/// A finished job.
#[derive(Debug, Clone)]
pub struct Finished {
    pub done: Done,
    /// Milliseconds the computation itself took.
    pub ms: f64,
    /// Whether it ran in the worker (else on the main thread).
    pub in_worker: bool,
    /// Bytes of wasm memory where it ran, after the run (memory only grows: the peak so far).
    pub memory_bytes: f64,
    /// Why the job has no result: the worker died running it (the message the page shows).
    pub failure: Option<String>,
}

/// The most wasm memory (bytes) a browser tab gives one instance: 65,536 pages of 64 KiB (wasm32's own limit,
/// and Chromium's). A run that needs more aborts its worker; the page then says so, naming this limit.
pub const WASM_MEMORY_LIMIT: f64 = 4_294_967_296.0;

/// An outdated job that has run this long in the worker gets the worker restarted, milliseconds.
pub const RESTART_AFTER_MS: f64 = 300.0;
/// Jobs at most this large (requests or session steps, [`crate::model::compute::size_of`]) run on the main thread while
/// the worker is starting; larger ones wait for it.
pub const SMALL_JOB: f64 = 2_000.0;
/// A worker not ready after this long is given up for the main thread, milliseconds.
const START_TIMEOUT_MS: u64 = 30_000;
/// Crashes after which the page stops starting workers.
const MAX_CRASHES: u32 = 3;

type Callback = Box<dyn FnOnce(Finished)>;

struct Pending {
    id: u32,
    lane: Lane,
    generation: u64,
    size: f64,
    job: Job,
    callback: Callback,
}

enum State {
    /// Not started (or terminated); started by the next job.
    Off,
    Starting(web_sys::Worker),
    Ready(web_sys::Worker),
    /// No worker: every job runs on the main thread.
    Disabled,
}

struct Pool {
    state: State,
    /// Counts started workers; handlers of an older worker are ignored.
    epoch: u64,
    queue: VecDeque<Pending>,
    /// The job being computed, with `performance.now()` when it was sent.
    in_flight: Option<(Pending, f64)>,
    latest: [u64; 4],
    next_id: u32,
    crashes: u32,
    /// The worker's script URL, revoked once it started.
    script_url: Option<String>,
    /// Keeps the worker's event handlers alive.
    handlers: Vec<Closure<dyn FnMut(JsValue)>>,
    /// The panic message the current worker posted before it trapped, if any.
    panic: Option<String>,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool {
        state: if worker_allowed() { State::Off } else { State::Disabled },
        epoch: 0,
        queue: VecDeque::new(),
        in_flight: None,
        latest: [0; 4],
        next_id: 1,
        crashes: 0,
        script_url: None,
        handlers: Vec::new(),
        panic: None,
    });
}

thread_local! {
    static GENERATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A generation number for a new request, larger than every earlier one on this page (whichever component
/// asks), so [`supersede`] can compare generations across components that come and go.
pub fn new_generation() -> u64 {
    GENERATIONS.with(|g| {
        g.set(g.get() + 1);
        g.get()
    })
}

/// `?worker=off` (or `#worker=off`) keeps every computation on the main thread, for comparison.
fn worker_allowed() -> bool {
    let (hash, search) = crate::model::url::location_parts();
    crate::model::url::param(&hash, &search, "worker").as_deref() != Some("off")
}

/// `?worker-fault=oom` / `=panic`: workers exhaust their memory / panic on their first computation (the browser
/// tests of those paths).
fn fault_requested() -> Option<&'static str> {
    let (hash, search) = crate::model::url::location_parts();
    match crate::model::url::param(&hash, &search, "worker-fault").as_deref() {
        Some("oom") => Some("oom"),
        Some("panic") => Some("panic"),
        _ => None,
    }
}

/// Where jobs run now: `worker`, `starting` (the worker is loading) or `main` (no worker).
pub fn mode() -> &'static str {
    POOL.with_borrow(|p| match p.state {
        State::Ready(_) => "worker",
        State::Off | State::Starting(_) => "starting",
        State::Disabled => "main",
    })
}

/// Queue `job` for `lane`; `callback` gets its result unless a newer generation of the lane superseded it.
/// `size` is the job's work ([`crate::model::compute::size_of`]).
pub fn submit(lane: Lane, generation: u64, size: f64, job: Job, callback: impl FnOnce(Finished) + 'static) {
    POOL.with_borrow_mut(|p| {
        let id = p.next_id;
        p.next_id = p.next_id.wrapping_add(1).max(1);
        p.queue.push_back(Pending {
            id,
            lane,
            generation,
            size,
            job,
            callback: Box::new(callback),
        });
    });
    pump();
}

/// A newer generation of `lane` exists: drop its older queued jobs and stop waiting for an older running one.
pub fn supersede(lane: Lane, generation: u64) {
    let check_in = POOL.with_borrow_mut(|p| {
        p.latest[lane as usize] = p.latest[lane as usize].max(generation);
        p.queue.retain(|j| j.lane != lane || j.generation >= generation);
        match (&p.in_flight, &p.state) {
            (Some((job, started)), State::Ready(_)) if job.lane == lane && job.generation < generation => {
                Some((job.id, (RESTART_AFTER_MS - (now_ms() - started)).max(0.0)))
            }
            _ => None,
        }
    });
    if let Some((id, wait_ms)) = check_in {
        set_timeout(
            move || restart_if_stale(id),
            Duration::from_millis(wait_ms.ceil() as u64),
        );
    }
}

fn is_stale(p: &Pool, job: &Pending) -> bool {
    job.generation < p.latest[job.lane as usize]
}

/// The worker is still busy with outdated job `id`: replace the worker.
fn restart_if_stale(id: u32) {
    let restarted = POOL.with_borrow_mut(|p| {
        let stale = matches!(&p.in_flight, Some((job, _)) if job.id == id && is_stale(p, job));
        if stale {
            p.in_flight = None;
            p.stop_worker(State::Off);
        }
        stale
    });
    if restarted {
        pump();
    }
}

impl Pool {
    fn stop_worker(&mut self, next: State) {
        if let State::Starting(w) | State::Ready(w) = std::mem::replace(&mut self.state, next) {
            w.set_onmessage(None);
            w.set_onerror(None);
            w.set_onmessageerror(None);
            w.terminate();
        }
        self.panic = None;
        self.handlers.clear();
        if let Some(url) = self.script_url.take() {
            let _ = web_sys::Url::revoke_object_url(&url);
        }
    }
}

/// What to do next, decided under the borrow and done after it.
enum Step {
    Idle,
    PostToWorker(web_sys::Worker, Vec<u8>),
    OnMainThread(u32, Job),
    Start,
}

/// Start the next job if nothing is running.
fn pump() {
    loop {
        let step = POOL.with_borrow_mut(|p| {
            if p.in_flight.is_some() {
                return Step::Idle;
            }
            // Outdated jobs never run.
            while p.queue.front().is_some_and(|j| is_stale(p, j)) {
                p.queue.pop_front();
            }
            let Some(front) = p.queue.front() else {
                return Step::Idle;
            };
            let main_thread = match &p.state {
                // Start the worker with the first job, whatever its size.
                State::Off => return Step::Start,
                State::Disabled => true,
                State::Starting(_) => front.size <= SMALL_JOB,
                State::Ready(_) => false,
            };
            if main_thread {
                let Some(job) = p.queue.pop_front() else {
                    return Step::Idle;
                };
                let step = Step::OnMainThread(job.id, job.job.clone());
                p.in_flight = Some((job, now_ms()));
                return step;
            }
            match &p.state {
                State::Ready(w) => {
                    let w = w.clone();
                    let Some(job) = p.queue.pop_front() else {
                        return Step::Idle;
                    };
                    let bytes = crate::worker::wire::encode_job(job.id, &job.job);
                    p.in_flight = Some((job, now_ms()));
                    Step::PostToWorker(w, bytes)
                }
                State::Off | State::Starting(_) | State::Disabled => Step::Idle,
            }
        });
        match step {
            Step::Idle => return,
            Step::Start => {
                start_worker();
                continue;
            }
            Step::PostToWorker(w, bytes) => {
                let arr = js_sys::Uint8Array::from(bytes.as_slice());
                let transfer = js_sys::Array::of1(&arr.buffer());
                if let Err(e) = w.post_message_with_transfer(&arr, &transfer) {
                    crashed(&format!("cannot send to the worker: {e:?}"));
                }
                return;
            }
            Step::OnMainThread(id, job) => {
                // A timer tick lets the browser paint "computing…" first; the job is synchronous here.
                let delay = if matches!(job, Job::Compute(_) | Job::ComputeWindow(..)) {
                    16
                } else {
                    0
                };
                set_timeout(
                    move || {
                        wasm_bindgen_futures::spawn_local(async move {
                            let t0 = now_ms();
                            let done = job.run_async().await;
                            let ms = now_ms() - t0;
                            finish(id, done, ms, crate::worker::memory_bytes(), false);
                        });
                    },
                    Duration::from_millis(delay),
                );
                return;
            }
        }
    }
}

/// Start the next job, then deliver job `id`'s result (unless outdated). The next job starts first, so a
/// callback that fails (e.g. its component is gone) cannot stall the queue.
fn finish(id: u32, done: Done, ms: f64, memory_bytes: f64, in_worker: bool) {
    let deliver = POOL.with_borrow_mut(|p| match p.in_flight.take() {
        Some((job, _)) if job.id == id => (!is_stale(p, &job)).then_some(job.callback),
        other => {
            p.in_flight = other;
            None
        }
    });
    pump();
    if let Some(callback) = deliver {
        callback(Finished {
            done,
            ms,
            in_worker,
            memory_bytes,
            failure: None,
        });
    }
}

/// The worker failed: fail its job (if any) with a message that says why, drop the worker, and go on (on the
/// main thread after repeated crashes or when it never started).
fn crashed(why: &str) {
    web_sys::console::warn_1(&JsValue::from_str(&format!("loadshape compute worker: {why}")));
    let (failed, panic) = POOL.with_borrow_mut(|p| {
        let panic = p.panic.take();
        let never_started = matches!(p.state, State::Starting(_));
        p.crashes += 1;
        let next = if never_started || p.crashes >= MAX_CRASHES {
            State::Disabled
        } else {
            State::Off
        };
        p.stop_worker(next);
        (p.in_flight.take(), panic)
    });
    pump();
    if let Some((job, _)) = failed {
        let message = failure_message(why, panic.as_deref(), job.size);
        let done = job.job.failed(&message);
        let deliver = POOL.with_borrow(|p| !is_stale(p, &job));
        if deliver {
            (job.callback)(Finished {
                done,
                ms: 0.0,
                in_worker: true,
                memory_bytes: 0.0,
                failure: Some(message),
            });
        }
    }
}

/// What the page shows when the worker died running a job of `size` (requests or session steps).
fn failure_message(why: &str, panic: Option<&str>, size: f64) -> String {
    match panic {
        Some(p) => format!("The computation failed in the background worker: {p}"),
        // A trap with no panic before it: wasm's `unreachable`, which is how an allocation failure ends.
        None if why.contains("unreachable") => format!(
            "The computation stopped in the background worker ({why}): it most likely ran out of memory. \
             WebAssembly in a browser tab gets at most {} GiB; this run ({} requests or session steps, \
             counterfactual runs included) needed more. Use fewer requests, or the command line's simulator for this size.",
            WASM_MEMORY_LIMIT / f64::from(1u32 << 30),
            crate::ui::fmt::num(size)
        ),
        None => format!("The computation stopped in the background worker: {why}"),
    }
}

/// The JS glue and wasm URLs of this page's module, from Trunk's preload links.
fn module_urls() -> Option<(String, String)> {
    let doc = web_sys::window()?.document()?;
    let href = |sel: &str| {
        doc.query_selector(sel)
            .ok()
            .flatten()
            .and_then(|el| el.dyn_into::<web_sys::HtmlLinkElement>().ok())
            .map(|l| l.href())
            .filter(|h| !h.is_empty())
    };
    let glue = href("link[rel=modulepreload][href$='.js']")?;
    let wasm = href("link[rel=preload][type='application/wasm']")
        .or_else(|| glue.strip_suffix(".js").map(|g| format!("{g}_bg.wasm")))?;
    Some((glue, wasm))
}

fn start_worker() {
    let epoch = POOL.with_borrow_mut(|p| {
        p.epoch += 1;
        p.epoch
    });
    match spawn(epoch) {
        Ok((worker, url, handlers)) => {
            POOL.with_borrow_mut(|p| {
                p.state = State::Starting(worker);
                p.script_url = Some(url);
                p.handlers = handlers;
            });
            set_timeout(
                move || {
                    let late = POOL.with_borrow(|p| p.epoch == epoch && matches!(p.state, State::Starting(_)));
                    if late {
                        crashed("not ready in time");
                    }
                },
                Duration::from_millis(START_TIMEOUT_MS),
            );
        }
        Err(why) => {
            if !why.is_empty() {
                web_sys::console::warn_1(&JsValue::from_str(&format!(
                    "loadshape: computing on the main thread ({why})"
                )));
            }
            POOL.with_borrow_mut(|p| p.state = State::Disabled);
        }
    }
}

type Spawned = (web_sys::Worker, String, Vec<Closure<dyn FnMut(JsValue)>>);

fn spawn(epoch: u64) -> Result<Spawned, String> {
    // Without Trunk's links (e.g. under wasm-bindgen-test) there is no module to start: quietly use the main thread.
    let (glue, wasm) = module_urls().ok_or_else(String::new)?;
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let src = format!(
        "import init from {};\nawait init({{ module_or_path: {} }});\n",
        quote(&glue),
        quote(&wasm)
    );
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type("text/javascript");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&js_sys::Array::of1(&JsValue::from_str(&src)), &opts)
        .map_err(|e| format!("{e:?}"))?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(|e| format!("{e:?}"))?;
    let wo = web_sys::WorkerOptions::new();
    wo.set_type(web_sys::WorkerType::Module);
    wo.set_name(&fault_requested().map_or_else(
        || crate::worker::NAME.to_string(),
        |kind| format!("{}{kind}", crate::worker::FAULT_PREFIX),
    ));
    let worker = web_sys::Worker::new_with_options(&url, &wo).map_err(|e| {
        let _ = web_sys::Url::revoke_object_url(&url);
        format!("cannot start a module worker: {e:?}")
    })?;
    let on_message = Closure::<dyn FnMut(JsValue)>::new(move |ev: JsValue| {
        let Ok(ev) = ev.dyn_into::<web_sys::MessageEvent>() else {
            return;
        };
        on_worker_message(epoch, ev.data());
    });
    let on_error = Closure::<dyn FnMut(JsValue)>::new(move |ev: JsValue| {
        if POOL.with_borrow(|p| p.epoch != epoch) {
            return;
        }
        let why = ev
            .dyn_ref::<web_sys::ErrorEvent>()
            .map(|e| e.message())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "the worker failed to load".to_string());
        crashed(&why);
    });
    // A result the browser could not deserialize: never a silent hang.
    let on_message_error = Closure::<dyn FnMut(JsValue)>::new(move |_: JsValue| {
        if POOL.with_borrow(|p| p.epoch == epoch) {
            crashed("the worker's answer could not be read (messageerror)");
        }
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    worker.set_onmessageerror(Some(on_message_error.as_ref().unchecked_ref()));
    Ok((worker, url, vec![on_message, on_error, on_message_error]))
}

fn on_worker_message(epoch: u64, data: JsValue) {
    if POOL.with_borrow(|p| p.epoch != epoch) {
        return;
    }
    if let Some(p) = data
        .as_string()
        .as_deref()
        .and_then(|s| s.strip_prefix(crate::worker::PANIC_PREFIX))
    {
        // The trap that follows arrives as an error event; the message says why.
        let p = p.to_string();
        POOL.with_borrow_mut(|pool| pool.panic = Some(p));
        return;
    }
    if data.as_string().as_deref() == Some(crate::worker::READY) {
        POOL.with_borrow_mut(|p| {
            if let State::Starting(w) = std::mem::replace(&mut p.state, State::Off) {
                p.state = State::Ready(w);
            }
            if let Some(url) = p.script_url.take() {
                let _ = web_sys::Url::revoke_object_url(&url);
            }
        });
        pump();
        return;
    }
    let Some(bytes) = data.dyn_ref::<js_sys::Uint8Array>().map(js_sys::Uint8Array::to_vec) else {
        return;
    };
    match crate::worker::wire::decode_done(&bytes) {
        Ok((id, ms, memory_bytes, done)) => finish(id, done, ms, memory_bytes, true),
        Err(e) => crashed(&e.to_string()),
    }
}

/// The page's monotonic clock, milliseconds (`performance.now()`; 0 where there is none).
pub fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}
