//! [`StepEngine`] over a fleet of `shared::engine::Engine`s (`sim-server --fleet FILE`): the simulator's fleet
//! (`shared/src/engine/fleet.rs`) and its prefill/decode disaggregation (`shared/src/engine/disagg.rs`) behind one
//! endpoint, as vLLM's P/D proxy puts one URL before its prefill and decode instances.
//!
//! The model is the simulator's, reused piece by piece: a request is routed by the fleet's router
//! ([`FleetSpec::pick`]) over the prefill instances (every replica without `disaggregation`), whose prefix caches
//! are the fleet's; disaggregated, the prefill instance computes the prompt and one token (not sent), the prompt's
//! KV crosses the link for [`Disaggregation::transfer_ms`], and the decode instance with the fewest outstanding
//! requests takes it with its whole prompt in KV ([`Engine::submit_prefilled_request`]) and decodes, its first
//! decode step emitting the first token. So TTFT = queue + prefill + transfer + (decode queue +) first decode step,
//! as `simulate` computes it.
//!
//! Each replica has its own clock. A call to [`StepEngine::step`] at `now` delivers the transfers that have arrived,
//! starts a step on every replica that has work and no step under way, and returns at the earliest end among the
//! steps under way and the transfers on the link, with the events of the steps that ended then. The driver
//! ([`super::engine`]) sleeps to that moment, so the replicas step side by side in real time.

use std::collections::HashMap;

use shared::engine::{
    Disaggregation, Engine, EngineProfile, FleetSpec, PromptBlocks, ReqId, Router, StepEvent, UNROUTED,
};

use super::engine::{ServerEvent, StepEngine};

/// A request as the fleet's endpoint sees it.
#[derive(Debug, Clone, Copy)]
struct Outer {
    prompt: u32,
    output: u32,
    /// The replica it is on and its id there; `None` while its KV crosses the link.
    at: Option<(usize, u64)>,
    /// On a prefill instance of a disaggregated fleet (its tokens are not sent; its finish starts the transfer).
    prefilling: bool,
    /// The `Admitted` event was sent.
    admitted: bool,
}

/// A prompt's KV on the link, arriving at `t_ms`.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    t_ms: f64,
    id: u64,
}

/// The fleet ([`super::EngineChoice::Fleet`]).
pub struct FleetEngine {
    engines: Vec<Engine>,
    fleet: FleetSpec,
    /// Disaggregation and the model's KV bytes per token.
    disagg: Option<(Disaggregation, f64)>,
    /// Per replica: the step under way, its end and events.
    under_way: Vec<Option<(f64, Vec<StepEvent>)>>,
    /// On the link, in the order they were sent.
    link: Vec<Transfer>,
    outer: HashMap<u64, Outer>,
    /// (replica, its id) → the endpoint's id.
    inner: HashMap<(usize, u64), u64>,
    next_id: u64,
    /// Requests routed so far (round robin's count).
    sent: u64,
    preemptions: u64,
    outstanding: Vec<u64>,
    cached: Vec<u64>,
    /// `session_affinity`: each session's replica (the request's session header → [`FleetSpec::pick`]'s
    /// affinity), as the simulator keeps one per session.
    sessions: HashMap<String, u32>,
}

impl FleetEngine {
    /// A fleet of `profile` (or the fleet's own `profiles`); checked as a scenario's fleet is
    /// ([`shared::engine::validate_fleet`]), errors naming the field (`fleet.disaggregation.decode_instances`).
    pub fn new(
        profile: EngineProfile,
        fleet: FleetSpec,
        disaggregation: Option<Disaggregation>,
    ) -> Result<Self, shared::error::ScenarioError> {
        shared::engine::validate_fleet(&profile, Some(&fleet), disaggregation.as_ref())?;
        let n = fleet.replicas as usize;
        let engines: Vec<Engine> = (0..n)
            .map(|r| Engine::new(fleet.profile_of(r, &profile).clone()))
            .collect();
        let disagg = disaggregation.map(|dg| {
            // `validate_with` made sure the KV size is known.
            let kv = dg.kv_bytes_per_token(&profile).unwrap_or(0.0);
            (dg, kv)
        });
        Ok(FleetEngine {
            engines,
            fleet,
            disagg,
            under_way: vec![None; n],
            link: Vec::new(),
            outer: HashMap::new(),
            inner: HashMap::new(),
            next_id: 1,
            sent: 0,
            preemptions: 0,
            outstanding: Vec::with_capacity(n),
            cached: Vec::with_capacity(n),
            sessions: HashMap::new(),
        })
    }

    /// The link's transfer time for a prompt of `prompt_tokens`, when the fleet is disaggregated.
    pub fn transfer_ms(&self, prompt_tokens: u32) -> Option<f64> {
        self.disagg
            .as_ref()
            .map(|(dg, kv)| dg.transfer_ms(u64::from(prompt_tokens), *kv))
    }

    /// Replicas that take new requests: the prefill instances, or every replica.
    fn pool(&self) -> usize {
        self.disagg
            .as_ref()
            .map_or(self.engines.len(), |(dg, _)| dg.prefill_instances as usize)
            .min(self.engines.len())
    }

    /// A prompt's KV arrived: queued on the decode instance with the fewest outstanding requests (ties to the
    /// lowest index), as the simulator's `send_decode`.
    fn deliver(&mut self, tr: Transfer) {
        let n = self.engines.len();
        let p = self.pool();
        let Some(o) = self.outer.get_mut(&tr.id) else { return };
        let r = (p..n)
            .min_by_key(|&r| (self.engines[r].running() + self.engines[r].waiting(), r))
            .unwrap_or(n - 1);
        let id = self.engines[r].submit_prefilled_request(tr.t_ms, o.prompt, o.output);
        o.at = Some((r, id.0));
        o.prefilling = false;
        self.inner.insert((r, id.0), tr.id);
    }

    /// One ended step's events, as the endpoint's.
    fn translate(&mut self, r: usize, end_ms: f64, events: Vec<StepEvent>, out: &mut Vec<ServerEvent>) {
        for ev in events {
            let key = |id: ReqId| (r, id.0);
            match ev {
                StepEvent::Preempted { .. } => self.preemptions += 1,
                StepEvent::Admitted { id, cached_tokens, .. } => {
                    let Some(&oid) = self.inner.get(&key(id)) else { continue };
                    if let Some(o) = self.outer.get_mut(&oid)
                        && !o.admitted
                    {
                        o.admitted = true;
                        out.push(ServerEvent::Admitted {
                            id: oid,
                            cached_tokens: u64::from(cached_tokens),
                        });
                    }
                }
                StepEvent::Speculated {
                    id,
                    draft_tokens,
                    accepted_tokens,
                } => {
                    let Some(&oid) = self.inner.get(&key(id)) else { continue };
                    if self.outer.get(&oid).is_some_and(|o| !o.prefilling) {
                        out.push(ServerEvent::Spec {
                            id: oid,
                            drafted: draft_tokens,
                            accepted: accepted_tokens,
                        });
                    }
                }
                StepEvent::Tokens { id, tokens } => {
                    let Some(&oid) = self.inner.get(&key(id)) else { continue };
                    if self.outer.get(&oid).is_some_and(|o| !o.prefilling) {
                        out.push(ServerEvent::Tokens { id: oid, n: tokens });
                    }
                }
                StepEvent::Finished { id, generated } => {
                    let Some(oid) = self.inner.remove(&key(id)) else {
                        continue;
                    };
                    let Some(&o) = self.outer.get(&oid) else { continue };
                    if o.prefilling && generated > 0 {
                        // The prompt is computed: its KV goes over the link.
                        let ms = self.transfer_ms(o.prompt).unwrap_or(0.0);
                        if let Some(o) = self.outer.get_mut(&oid) {
                            o.at = None;
                        }
                        self.link.push(Transfer {
                            t_ms: end_ms + ms,
                            id: oid,
                        });
                        out.push(ServerEvent::Transferring { id: oid, ms });
                    } else {
                        self.outer.remove(&oid);
                        out.push(ServerEvent::Finished { id: oid });
                    }
                }
            }
        }
    }
}

impl StepEngine for FleetEngine {
    fn submit(&mut self, now_ms: f64, prompt_tokens: u32, block_hashes: Vec<u64>, output_tokens: u32) -> u64 {
        self.submit_in_session(now_ms, prompt_tokens, block_hashes, output_tokens, None)
    }

    fn submit_in_session(
        &mut self,
        now_ms: f64,
        prompt_tokens: u32,
        block_hashes: Vec<u64>,
        output_tokens: u32,
        session: Option<&str>,
    ) -> u64 {
        let pool = self.pool();
        self.outstanding.clear();
        self.outstanding
            .extend(self.engines[..pool].iter().map(|e| (e.running() + e.waiting()) as u64));
        self.cached.clear();
        if self.fleet.router == Router::PrefixAware {
            let full = (prompt_tokens / self.block_size().max(1) as u32) as usize;
            let prompt_hashes = &block_hashes[..full.min(block_hashes.len())];
            self.cached.extend(
                self.engines[..pool]
                    .iter()
                    .map(|e| u64::from(e.cached_prefix_blocks(prompt_hashes))),
            );
        } else {
            self.cached.resize(pool, 0);
        }
        // A session's requests go where its first went (session affinity; only that router keeps the map); requests
        // without a session by least outstanding, as the simulator routes them.
        let r = match session {
            Some(key) if self.fleet.router == Router::SessionAffinity => {
                let a = self.sessions.entry(key.to_string()).or_insert(UNROUTED);
                self.fleet.pick(self.sent, &self.outstanding, &self.cached, Some(a))
            }
            _ => self.fleet.pick(self.sent, &self.outstanding, &self.cached, None),
        };
        self.sent += 1;
        let prefilling = self.disagg.is_some();
        // Disaggregated: the prefill instance computes the prompt and its first token, which is not sent.
        let engine_output = if prefilling { 1 } else { output_tokens };
        let inner = self.engines[r].submit(
            now_ms,
            PromptBlocks {
                tokens: prompt_tokens,
                block_hashes,
            },
            engine_output,
        );
        let id = self.next_id;
        self.next_id += 1;
        self.outer.insert(
            id,
            Outer {
                prompt: prompt_tokens,
                output: output_tokens,
                at: Some((r, inner.0)),
                prefilling,
                admitted: false,
            },
        );
        self.inner.insert((r, inner.0), id);
        id
    }

    fn cancel(&mut self, id: u64) {
        let Some(o) = self.outer.remove(&id) else { return };
        match o.at {
            Some((r, inner)) => {
                self.inner.remove(&(r, inner));
                self.engines[r].cancel(ReqId(inner));
            }
            None => self.link.retain(|t| t.id != id),
        }
    }

    fn step(&mut self, now_ms: f64) -> Option<(f64, Vec<ServerEvent>)> {
        // The transfers that have arrived.
        let mut i = 0;
        while i < self.link.len() {
            if self.link[i].t_ms <= now_ms {
                let tr = self.link.remove(i);
                self.deliver(tr);
            } else {
                i += 1;
            }
        }
        // A step on every replica with work and none under way.
        for r in 0..self.engines.len() {
            if self.under_way[r].is_none()
                && let Some(step) = self.engines[r].step(now_ms)
            {
                self.under_way[r] = Some((step.start_ms + step.duration_ms, step.events));
            }
        }
        let next = self
            .under_way
            .iter()
            .flatten()
            .map(|(end, _)| *end)
            .chain(self.link.iter().map(|t| t.t_ms))
            .min_by(f64::total_cmp)?;
        let mut out = Vec::new();
        for r in 0..self.engines.len() {
            if self.under_way[r].as_ref().is_some_and(|(end, _)| *end <= next)
                && let Some((end, events)) = self.under_way[r].take()
            {
                self.translate(r, end, events, &mut out);
            }
        }
        Some(((next - now_ms).max(0.0), out))
    }

    fn load(&self) -> (usize, usize) {
        // The endpoint's requests: admitted ones (on the link too) run, the others wait. A request whose last
        // step is under way counts until that step's events are out.
        let running = self.outer.values().filter(|o| o.admitted).count();
        (running, self.outer.len() - running)
    }

    fn block_size(&self) -> usize {
        self.engines
            .first()
            .map_or(16, |e| e.profile().block_size.max(1) as usize)
    }

    fn max_model_len(&self) -> Option<u64> {
        self.engines.iter().map(|e| e.profile().model_len()).min()
    }

    fn kv_usage(&self) -> Option<f64> {
        let cap: u64 = self.engines.iter().map(Engine::kv_capacity).sum();
        let used: u64 = self.engines.iter().map(Engine::kv_blocks_used).sum();
        (cap > 0).then(|| used as f64 / cap as f64)
    }

    fn preemptions(&self) -> Option<u64> {
        Some(self.preemptions)
    }

    fn replica_of(&self, id: u64) -> Option<u32> {
        if !self.routes() {
            return None;
        }
        self.outer.get(&id)?.at.map(|(r, _)| r as u32)
    }

    fn routes(&self) -> bool {
        self.engines.len() > 1
    }

    fn kv_link(&self) -> Option<(Disaggregation, f64)> {
        self.disagg.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn profile() -> EngineProfile {
        EngineProfile {
            name: "t".into(),
            block_size: 16,
            num_kv_blocks: 4096,
            max_num_seqs: 8,
            max_num_batched_tokens: 8192,
            max_model_len: Some(16_384),
            step_fixed_ms: 10.0,
            per_seq_ms: 0.0,
            per_ctx_token_ms: 0.0,
            prefill_tokens_per_ms: 100.0,
            prefill_fixed_ms: 3.0,
            ..shared::engine::presets::laptop_demo()
        }
    }

    fn pd(link_latency_ms: f64) -> (FleetSpec, Disaggregation) {
        (
            FleetSpec {
                replicas: 2,
                router: Router::RoundRobin,
                load_cap: 1.5,
                profiles: Vec::new(),
            },
            Disaggregation {
                prefill_instances: 1,
                decode_instances: 1,
                link_bytes_per_s: 1e9,
                link_latency_ms,
                kv_bytes_per_token: Some(100_000.0),
            },
        )
    }

    /// Runs the engine as the driver does; returns (time, event) pairs.
    fn run(e: &mut FleetEngine, mut now: f64) -> Vec<(f64, ServerEvent)> {
        let mut seen = Vec::new();
        while let Some((d, ev)) = e.step(now) {
            now += d;
            seen.extend(ev.into_iter().map(|x| (now, x)));
            if e.load() == (0, 0) {
                break;
            }
        }
        seen
    }

    #[test]
    fn a_disaggregated_request_prefills_crosses_the_link_and_decodes_elsewhere() {
        let (fleet, dg) = pd(2.0);
        let mut e = FleetEngine::new(profile(), fleet, Some(dg)).unwrap_or_else(|err| panic!("{err}"));
        // 1,000 tokens: transfer = 2 ms + 1,000 · 100,000 B / 1e9 B/s = 102 ms.
        assert_eq!(e.transfer_ms(1000), Some(102.0));
        let id = e.submit(0.0, 1000, Vec::new(), 4);
        let seen = run(&mut e, 0.0);
        let first_token = seen
            .iter()
            .find(|(_, x)| matches!(x, ServerEvent::Tokens { .. }))
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("{seen:?}"));
        let transfer = seen
            .iter()
            .find_map(|(t, x)| match x {
                ServerEvent::Transferring { id: i, ms } if *i == id => Some((*t, *ms)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{seen:?}"));
        assert_eq!(transfer.1, 102.0);
        // The prefill step computes the prompt and the unsent first token: prefill 3 + 1,000/100 = 13 ms (the
        // engine's step time for a 1,000-token chunk), then the link, then the decode instance's first step
        // (10 ms) emits the first token.
        let prefill_end = transfer.0;
        assert!(prefill_end > 0.0 && prefill_end < 40.0, "{prefill_end}");
        assert!(
            (first_token - (prefill_end + 102.0 + 10.0)).abs() < 1e-6,
            "first token at {first_token}, prefill ended at {prefill_end}: {seen:?}"
        );
        // Four tokens sent in all (the prefill instance's is not), then finished; one admission event.
        let tokens: u32 = seen
            .iter()
            .map(|(_, x)| match x {
                ServerEvent::Tokens { n, .. } => *n,
                _ => 0,
            })
            .sum();
        assert_eq!(tokens, 4, "{seen:?}");
        assert_eq!(
            seen.iter()
                .filter(|(_, x)| matches!(x, ServerEvent::Admitted { .. }))
                .count(),
            1
        );
        assert!(matches!(seen.last(), Some((_, ServerEvent::Finished { id: i })) if *i == id));
        assert_eq!(e.load(), (0, 0));
    }

    /// The fleet stepped as the sim-server steps it equals `simulate` of the same requests: two bursts (all at
    /// once, so no request arrives while a step is under way) on 2 prefill + 1 decode instances, round robin.
    #[test]
    fn it_times_each_request_as_the_simulator_does() {
        let p = EngineProfile {
            enable_prefix_caching: false,
            per_seq_ms: 0.5,
            per_ctx_token_ms: 0.001,
            ..profile()
        };
        let fleet = FleetSpec {
            replicas: 3,
            router: Router::RoundRobin,
            load_cap: 1.5,
            profiles: Vec::new(),
        };
        let dg = Disaggregation {
            prefill_instances: 2,
            decode_instances: 1,
            link_bytes_per_s: 5e9,
            link_latency_ms: 1.5,
            kv_bytes_per_token: Some(131_072.0),
        };
        // (arrival ms, prompt, output)
        let reqs: Vec<(f64, u32, u32)> = (0..12u32)
            .map(|i| (if i < 6 { 0.0 } else { 5_000.0 }, 400 + 350 * i, 4 + 3 * (i % 5)))
            .collect();
        let trace = json!({"kind": "trace", "requests": reqs.iter().map(|&(t, pr, out)| json!({
            "arrival_ms": t, "unique_prompt_tokens": pr, "output_tokens": out})).collect::<Vec<_>>()});
        let sc = json!({"model": "engine", "counterfactuals": false, "workload": trace, "profile": p,
                        "fleet": {"replicas": 3, "router": "round_robin", "disaggregation": dg}});
        let shared::scenario::Scenario::Engine(sc) =
            shared::scenario::Scenario::from_value(sc).unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("an engine scenario")
        };
        let sim = shared::engine::simulate_with(
            &sc,
            shared::engine::SimOptions {
                record_itl_quantiles: false,
                keep_records: true,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));

        let mut e = FleetEngine::new(p, fleet, Some(dg)).unwrap_or_else(|err| panic!("{err}"));
        let mut ids = Vec::new();
        let mut first: HashMap<u64, f64> = HashMap::new();
        let mut end: HashMap<u64, f64> = HashMap::new();
        let mut now = 0.0;
        let mut next = 0;
        loop {
            while next < reqs.len() && reqs[next].0 <= now {
                ids.push(e.submit(now, reqs[next].1, Vec::new(), reqs[next].2));
                next += 1;
            }
            match e.step(now) {
                Some((d, events)) => {
                    now += d;
                    for ev in events {
                        match ev {
                            ServerEvent::Tokens { id, .. } => {
                                first.entry(id).or_insert(now);
                            }
                            ServerEvent::Finished { id } => {
                                end.insert(id, now);
                            }
                            _ => {}
                        }
                    }
                }
                None if next < reqs.len() => now = reqs[next].0,
                None => break,
            }
        }
        assert_eq!(sim.records.len(), reqs.len());
        for (i, (r, id)) in sim.records.iter().zip(&ids).enumerate() {
            let t0 = reqs[i].0;
            let ttft = first[id] - t0;
            let e2e = end[id] - t0;
            let (want_ttft, want_e2e) = (r.ttft_s.unwrap_or_default() * 1000.0, r.wall_s * 1000.0);
            assert!(
                (ttft - want_ttft).abs() < 1e-6 && (e2e - want_e2e).abs() < 1e-6,
                "request {i}: TTFT {ttft} vs simulated {want_ttft}, E2E {e2e} vs {want_e2e}"
            );
            assert_eq!(e.transfer_ms(reqs[i].1), r.kv_transfer_ms);
        }
    }

    #[test]
    fn the_prefix_cache_is_the_prefill_instances() {
        let (fleet, dg) = pd(0.0);
        let mut e = FleetEngine::new(profile(), fleet, Some(dg)).unwrap_or_else(|err| panic!("{err}"));
        let blocks: Vec<u64> = (1..=64).collect();
        e.submit(0.0, 1024, blocks.clone(), 2);
        let mut now = run(&mut e, 0.0).last().map_or(0.0, |(t, _)| *t);
        now += 1.0;
        e.submit(now, 1024, blocks, 2);
        let seen = run(&mut e, now);
        let cached = seen.iter().find_map(|(_, x)| match x {
            ServerEvent::Admitted { cached_tokens, .. } => Some(*cached_tokens),
            _ => None,
        });
        assert!(cached.is_some_and(|c| c >= 1000), "{seen:?}");
    }

    #[test]
    fn a_co_located_fleet_sends_every_token_and_no_transfer() {
        let fleet = FleetSpec {
            replicas: 2,
            router: Router::RoundRobin,
            load_cap: 1.5,
            profiles: Vec::new(),
        };
        let mut e = FleetEngine::new(profile(), fleet, None).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(e.transfer_ms(1000), None);
        let a = e.submit(0.0, 100, Vec::new(), 3);
        let b = e.submit(0.0, 100, Vec::new(), 3);
        // Round robin: each says its replica (the server's `x-replica`).
        assert!(e.routes());
        assert_eq!(
            (e.replica_of(a), e.replica_of(b), e.replica_of(999)),
            (Some(0), Some(1), None)
        );
        let seen = run(&mut e, 0.0);
        let tokens: u32 = seen
            .iter()
            .map(|(_, x)| match x {
                ServerEvent::Tokens { n, .. } => *n,
                _ => 0,
            })
            .sum();
        assert_eq!(tokens, 6);
        assert!(!seen.iter().any(|(_, x)| matches!(x, ServerEvent::Transferring { .. })));
        // Round robin: one each, side by side: both first tokens at the same moment.
        let firsts: Vec<f64> = seen
            .iter()
            .filter(|(_, x)| matches!(x, ServerEvent::Tokens { .. }))
            .map(|(t, _)| *t)
            .take(2)
            .collect();
        assert_eq!(firsts[0], firsts[1], "{seen:?}");
    }

    #[test]
    fn a_fleet_without_a_decode_instance_is_refused_by_name() {
        let (fleet, mut dg) = pd(0.0);
        dg.decode_instances = 0;
        let err = FleetEngine::new(profile(), fleet.clone(), Some(dg))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("fleet.disaggregation.decode_instances"), "{err}");
        let (_, mut dg) = pd(0.0);
        dg.link_bytes_per_s = 0.0;
        let err = FleetEngine::new(profile(), fleet, Some(dg))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("fleet.disaggregation.link_bytes_per_s"), "{err}");
    }

    #[test]
    fn session_affinity_keeps_a_session_where_its_first_request_went() {
        let fleet = FleetSpec {
            replicas: 2,
            router: Router::SessionAffinity,
            load_cap: 1.5,
            profiles: Vec::new(),
        };
        let mut e = FleetEngine::new(profile(), fleet, None).unwrap_or_else(|err| panic!("{err}"));
        // "a" starts on 0 (both idle), "b" on 1 (0 is busier).
        let a0 = e.submit_in_session(0.0, 100, Vec::new(), 3, Some("a"));
        let b0 = e.submit_in_session(0.0, 100, Vec::new(), 3, Some("b"));
        assert_eq!((e.replica_of(a0), e.replica_of(b0)), (Some(0), Some(1)));
        // A request without a session goes by least outstanding: one each, the tie to replica 0.
        let x = e.submit_in_session(0.0, 100, Vec::new(), 3, None);
        assert_eq!(e.replica_of(x), Some(0));
        // "b" stays on 1 and "a" on 0 whatever the load: now 0 holds two and 1 one.
        let a1 = e.submit_in_session(0.0, 100, Vec::new(), 3, Some("a"));
        let b1 = e.submit_in_session(0.0, 100, Vec::new(), 3, Some("b"));
        assert_eq!((e.replica_of(a1), e.replica_of(b1)), (Some(0), Some(1)));
        // Another router ignores the session: round robin alternates.
        let rr = FleetSpec {
            replicas: 2,
            router: Router::RoundRobin,
            load_cap: 1.5,
            profiles: Vec::new(),
        };
        let mut e = FleetEngine::new(profile(), rr, None).unwrap_or_else(|err| panic!("{err}"));
        let ids: Vec<_> = (0..3)
            .map(|_| e.submit_in_session(0.0, 100, Vec::new(), 3, Some("a")))
            .collect();
        assert_eq!(
            ids.iter().map(|&i| e.replica_of(i)).collect::<Vec<_>>(),
            vec![Some(0), Some(1), Some(0)]
        );
    }
}
