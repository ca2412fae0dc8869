//! The real-time engine driver: one thread owns the emulated engine, steps it, sleeps each step's duration
//! (divided by `--speed`), and fans the step's events out to per-request channels.
//!
//! A thread of its own, not a tokio task, for the clock: tokio's timer ticks in whole milliseconds, so a 7.12 ms
//! step would wake on the next tick and the token gaps come out as 7s and 8s, whose median (what `calibrate` fits)
//! is not the step (docs/calibration.md, "The sim-server's engine paced to the microsecond"). The thread sleeps to
//! each step's absolute deadline (`std::thread::sleep`: the kernel's high-resolution timers), so gaps follow the
//! step and a late wake does not carry over.
//!
//! The engine is virtual-time: `now_ms` advances by each step's duration; when the engine is idle the clock jumps
//! to wall time so idle periods pass. A request whose HTTP client went away (its channel closed) is cancelled in the
//! engine at the next step.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

/// An event for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReqEvent {
    /// The engine admitted the request; `cached_tokens` of its prompt came from the prefix cache.
    Admitted { cached_tokens: u64 },
    /// Speculative decoding: the step that just ended drafted `drafted` tokens for it and accepted `accepted`.
    Spec { drafted: u32, accepted: u32 },
    /// `n` more output tokens were produced in the step that just ended.
    Tokens(u32),
    /// The request produced its last token.
    Finished,
    /// A fleet behind the endpoint routed the request to this replica ([`StepEngine::replica_of`]); sent when the
    /// engine takes the request, before any other event.
    Routed(u32),
}

/// What one engine step did, per request id.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    Admitted {
        id: u64,
        cached_tokens: u64,
    },
    Tokens {
        id: u64,
        n: u32,
    },
    /// Speculative decoding: drafted and accepted tokens of one request in the step.
    Spec {
        id: u64,
        drafted: u32,
        accepted: u32,
    },
    Finished {
        id: u64,
    },
    /// Prefill/decode disaggregation: the request's prompt was computed on a prefill instance and its KV starts
    /// across the link, taking `ms` milliseconds.
    Transferring {
        id: u64,
        ms: f64,
    },
}

/// A step-able iteration-level engine: `shared::engine::Engine` behind [`super::shared_engine::SharedEngine`],
/// or a scripted engine in tests.
pub trait StepEngine: Send + 'static {
    /// Queue a request; its prompt is `prompt_tokens` long with the given full-block chained hashes.
    fn submit(&mut self, now_ms: f64, prompt_tokens: u32, block_hashes: Vec<u64>, output_tokens: u32) -> u64;
    /// [`StepEngine::submit`] for a request of `session` (the request's session header, when it had one): a fleet
    /// under `session_affinity` routes by it; every other engine ignores it.
    fn submit_in_session(
        &mut self,
        now_ms: f64,
        prompt_tokens: u32,
        block_hashes: Vec<u64>,
        output_tokens: u32,
        _session: Option<&str>,
    ) -> u64 {
        self.submit(now_ms, prompt_tokens, block_hashes, output_tokens)
    }
    fn cancel(&mut self, id: u64);
    /// Run one iteration starting at `now_ms`: returns its duration and events, or `None` when idle.
    fn step(&mut self, now_ms: f64) -> Option<(f64, Vec<ServerEvent>)>;
    /// (running, waiting) request counts.
    fn load(&self) -> (usize, usize);
    /// Block size the engine hashes prompts with.
    fn block_size(&self) -> usize;
    /// The longest prompt + output a request may have (the profile's `max_model_len`), when the engine has one:
    /// longer requests are refused before they start, with HTTP 400 as vLLM refuses them.
    fn max_model_len(&self) -> Option<u64> {
        None
    }
    /// KV blocks referenced by running requests / all KV blocks, when the engine models a KV cache.
    fn kv_usage(&self) -> Option<f64> {
        None
    }
    /// Running requests preempted so far, when the engine preempts.
    fn preemptions(&self) -> Option<u64> {
        None
    }
    /// Prefill/decode disaggregation's link and the model's KV bytes per token, when the engine is a
    /// disaggregated fleet ([`super::fleet_engine::FleetEngine`]).
    fn kv_link(&self) -> Option<(shared::engine::Disaggregation, f64)> {
        None
    }
    /// A fleet of several replicas: the replica request `id` was routed to (a disaggregated fleet's prefill
    /// instance), from its submission on. `None` for one engine.
    fn replica_of(&self, _id: u64) -> Option<u32> {
        None
    }
    /// Whether [`StepEngine::replica_of`] names a replica for every request.
    fn routes(&self) -> bool {
        false
    }
}

/// Counters exposed on `/metrics` under vLLM's names.
#[derive(Debug)]
pub struct EngineMetrics {
    pub prompt_tokens_total: AtomicU64,
    pub generation_tokens_total: AtomicU64,
    pub prefix_cache_queries_total: AtomicU64,
    pub prefix_cache_hits_total: AtomicU64,
    pub requests_running: AtomicU64,
    pub requests_waiting: AtomicU64,
    pub request_success_total: AtomicU64,
    pub steps_total: AtomicU64,
    /// KV-cache use as `f64` bits ([`EngineMetrics::kv_usage`]); [`NOT_REPORTED`] when the engine has no KV model.
    pub kv_usage_bits: AtomicU64,
    /// Preemptions so far; [`NOT_REPORTED`] when the engine does not preempt.
    pub preemptions_total: AtomicU64,
    /// Speculative decoding: verification steps per request that drafted, draft tokens, accepted tokens (vLLM's
    /// `spec_decode_num_drafts`, `…_num_draft_tokens`, `…_num_accepted_tokens`; on `/metrics` once any is > 0).
    pub spec_drafts_total: AtomicU64,
    pub spec_draft_tokens_total: AtomicU64,
    pub spec_accepted_tokens_total: AtomicU64,
    /// Prefill/decode disaggregation: KV transfers started, and their link time in all, microseconds.
    pub kv_transfers_total: AtomicU64,
    pub kv_transfer_us_total: AtomicU64,
}

/// The value of an [`EngineMetrics`] field the engine does not report.
pub const NOT_REPORTED: u64 = u64::MAX;

impl Default for EngineMetrics {
    fn default() -> Self {
        EngineMetrics {
            prompt_tokens_total: AtomicU64::new(0),
            generation_tokens_total: AtomicU64::new(0),
            prefix_cache_queries_total: AtomicU64::new(0),
            prefix_cache_hits_total: AtomicU64::new(0),
            requests_running: AtomicU64::new(0),
            requests_waiting: AtomicU64::new(0),
            request_success_total: AtomicU64::new(0),
            steps_total: AtomicU64::new(0),
            kv_usage_bits: AtomicU64::new(NOT_REPORTED),
            preemptions_total: AtomicU64::new(NOT_REPORTED),
            spec_drafts_total: AtomicU64::new(0),
            spec_draft_tokens_total: AtomicU64::new(0),
            spec_accepted_tokens_total: AtomicU64::new(0),
            kv_transfers_total: AtomicU64::new(0),
            kv_transfer_us_total: AtomicU64::new(0),
        }
    }
}

impl EngineMetrics {
    /// KV-cache use (a fraction, vLLM's `kv_cache_usage_perc`), if the engine reports it.
    pub fn kv_usage(&self) -> Option<f64> {
        let bits = self.kv_usage_bits.load(Ordering::Relaxed);
        (bits != NOT_REPORTED).then(|| f64::from_bits(bits))
    }

    /// Preemptions so far (vLLM's `num_preemptions_total`), if the engine reports them.
    pub fn preemptions(&self) -> Option<u64> {
        let n = self.preemptions_total.load(Ordering::Relaxed);
        (n != NOT_REPORTED).then_some(n)
    }

    fn observe(&self, engine: &dyn StepEngine) {
        let (running, waiting) = engine.load();
        self.requests_running.store(running as u64, Ordering::Relaxed);
        self.requests_waiting.store(waiting as u64, Ordering::Relaxed);
        if let Some(u) = engine.kv_usage() {
            self.kv_usage_bits.store(u.to_bits(), Ordering::Relaxed);
        }
        if let Some(p) = engine.preemptions() {
            self.preemptions_total.store(p.min(NOT_REPORTED - 1), Ordering::Relaxed);
        }
    }
}

/// A request handed to the engine thread.
pub struct Submission {
    pub prompt_tokens: u32,
    pub block_hashes: Vec<u64>,
    pub output_tokens: u32,
    /// The request's session header ([`super::SESSION_HEADER`]), when it had one.
    pub session: Option<String>,
    pub events: mpsc::UnboundedSender<ReqEvent>,
}

/// Handle for submitting requests to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Submission>,
    pub metrics: Arc<EngineMetrics>,
    pub block_size: usize,
    /// [`StepEngine::max_model_len`].
    pub max_model_len: Option<u64>,
    /// [`StepEngine::kv_link`].
    pub kv_link: Option<(shared::engine::Disaggregation, f64)>,
    /// [`StepEngine::routes`]: each request's first event is [`ReqEvent::Routed`].
    pub routes: bool,
}

impl EngineHandle {
    /// Start the engine on a thread of its own; it ends when every handle is gone and no request is left.
    pub fn spawn(engine: Box<dyn StepEngine>, speed: f64) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::unbounded_channel();
        let metrics = Arc::new(EngineMetrics::default());
        let block_size = engine.block_size();
        let max_model_len = engine.max_model_len();
        let kv_link = engine.kv_link();
        let routes = engine.routes();
        // Report from the first scrape on (an idle engine's KV use is 0, its preemptions 0).
        metrics.observe(&*engine);
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("sim-engine".into())
            .spawn(move || drive(engine, speed, rx, m))
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot start the emulated engine's thread: {e}")))?;
        Ok(EngineHandle {
            tx,
            metrics,
            block_size,
            max_model_len,
            kv_link,
            routes,
        })
    }

    /// The time the KV of a prompt of `prompt_tokens` takes across a disaggregated fleet's link (what the engine
    /// waits for: [`shared::engine::Disaggregation::transfer_ms`]); `None` when the engine is not disaggregated.
    pub fn kv_transfer_ms(&self, prompt_tokens: u32) -> Option<f64> {
        self.kv_link
            .as_ref()
            .map(|(dg, kv)| dg.transfer_ms(u64::from(prompt_tokens), *kv))
    }

    /// Submit a request (of `session`, when its header named one); events arrive on the returned receiver. `None`
    /// if the engine thread is gone.
    pub fn submit(
        &self,
        prompt_tokens: u32,
        block_hashes: Vec<u64>,
        output_tokens: u32,
        session: Option<String>,
    ) -> Option<mpsc::UnboundedReceiver<ReqEvent>> {
        let (events, rx) = mpsc::unbounded_channel();
        self.tx
            .send(Submission {
                prompt_tokens,
                block_hashes,
                output_tokens,
                session,
                events,
            })
            .ok()?;
        Some(rx)
    }
}

fn drive(
    mut engine: Box<dyn StepEngine>,
    speed: f64,
    mut rx: mpsc::UnboundedReceiver<Submission>,
    m: Arc<EngineMetrics>,
) {
    let speed = if speed.is_finite() && speed > 0.0 { speed } else { 1.0 };
    let origin = Instant::now();
    let mut now_ms = 0.0f64;
    let mut sinks: HashMap<u64, (mpsc::UnboundedSender<ReqEvent>, u32)> = HashMap::new();
    loop {
        // Take every queued submission; block for one when idle.
        let (running, waiting) = engine.load();
        if running + waiting == 0 {
            let Some(sub) = rx.blocking_recv() else { return };
            now_ms = now_ms.max(origin.elapsed().as_secs_f64() * 1000.0 * speed);
            accept(&mut *engine, now_ms, sub, &mut sinks, &m);
        }
        while let Ok(sub) = rx.try_recv() {
            accept(&mut *engine, now_ms, sub, &mut sinks, &m);
        }
        // Cancel requests nobody listens to any more.
        let listened = sinks.len();
        sinks.retain(|&id, (tx, _)| {
            let open = !tx.is_closed();
            if !open {
                engine.cancel(id);
            }
            open
        });
        if sinks.len() < listened {
            // `/metrics` says so now, not at the next step: an engine left idle by its cancellations reports idle
            // (a benchmark waits for that before it starts).
            m.observe(&*engine);
        }
        let Some((duration_ms, events)) = engine.step(now_ms) else {
            continue;
        };
        now_ms += duration_ms.max(0.0);
        m.steps_total.fetch_add(1, Ordering::Relaxed);
        let wake = origin + Duration::from_secs_f64((now_ms / speed / 1000.0).max(0.0));
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        // The gauges say what the step left before any client hears of it: a client that scrapes `/metrics` on its
        // first token sees its request running, not still waiting.
        m.observe(&*engine);
        for ev in events {
            match ev {
                ServerEvent::Admitted { id, cached_tokens } => {
                    m.prefix_cache_hits_total.fetch_add(cached_tokens, Ordering::Relaxed);
                    if let Some((tx, _)) = sinks.get(&id) {
                        let _ = tx.send(ReqEvent::Admitted { cached_tokens });
                    }
                }
                ServerEvent::Tokens { id, n } => {
                    m.generation_tokens_total.fetch_add(u64::from(n), Ordering::Relaxed);
                    if let Some((tx, _)) = sinks.get(&id) {
                        let _ = tx.send(ReqEvent::Tokens(n));
                    }
                }
                ServerEvent::Spec { id, drafted, accepted } => {
                    m.spec_drafts_total.fetch_add(1, Ordering::Relaxed);
                    m.spec_draft_tokens_total
                        .fetch_add(u64::from(drafted), Ordering::Relaxed);
                    m.spec_accepted_tokens_total
                        .fetch_add(u64::from(accepted), Ordering::Relaxed);
                    if let Some((tx, _)) = sinks.get(&id) {
                        let _ = tx.send(ReqEvent::Spec { drafted, accepted });
                    }
                }
                ServerEvent::Transferring { ms, .. } => {
                    m.kv_transfers_total.fetch_add(1, Ordering::Relaxed);
                    m.kv_transfer_us_total
                        .fetch_add((ms * 1000.0).round().max(0.0) as u64, Ordering::Relaxed);
                }
                ServerEvent::Finished { id } => {
                    if let Some((tx, _)) = sinks.remove(&id) {
                        m.request_success_total.fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(ReqEvent::Finished);
                    }
                }
            }
        }
    }
}

fn accept(
    engine: &mut dyn StepEngine,
    now_ms: f64,
    sub: Submission,
    sinks: &mut HashMap<u64, (mpsc::UnboundedSender<ReqEvent>, u32)>,
    m: &EngineMetrics,
) {
    m.prompt_tokens_total
        .fetch_add(u64::from(sub.prompt_tokens), Ordering::Relaxed);
    m.prefix_cache_queries_total
        .fetch_add(u64::from(sub.prompt_tokens), Ordering::Relaxed);
    let id = engine.submit_in_session(
        now_ms,
        sub.prompt_tokens,
        sub.block_hashes,
        sub.output_tokens,
        sub.session.as_deref(),
    );
    if let Some(r) = engine.replica_of(id) {
        let _ = sub.events.send(ReqEvent::Routed(r));
    }
    sinks.insert(id, (sub.events, sub.output_tokens));
    m.observe(engine);
}
