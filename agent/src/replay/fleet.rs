//! Live fleets: `replay --url A --url B … --router POLICY` spreads the requests over several replicas that have
//! no router in front of them, by the simulator's routing policies, so a fleet can be measured live and laid over
//! its simulation (`simulate` with the same `"fleet"`).
//!
//! The decision is `shared::engine::FleetSpec::pick`, the one the simulator makes. What it reads differs only
//! where the client cannot see the server: a replica's outstanding requests are the requests this process has in
//! flight there (running or queued on the server alike), and for `prefix_aware` its resident prefix is this
//! process's own record of what it sent there (`shared::engine::PrefixView`: the prompts' words hashed in blocks
//! of [`ROUTE_BLOCK_TOKENS`] designed tokens, least recently sent out first once a replica holds
//! `cache_tokens`). Every record names its replica (`replica`, the URL's index).

use std::collections::HashMap;
use std::sync::Mutex;

use shared::engine::{FleetSpec, PrefixView, Router, UNROUTED};

use super::client::Client;

/// Blocks of the client-side prefix view, designed tokens (a prompt's words hashed `scale.words(64)` at a time).
pub const ROUTE_BLOCK_TOKENS: u64 = 64;

/// Several target URLs and how requests are spread over them.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveFleet {
    /// Every replica's OpenAI base URL, in order (replica `i` is `urls[i]`; `TargetSettings::url` is `urls[0]`).
    pub urls: Vec<String>,
    /// The policy; `replicas` equals `urls.len()`.
    pub spec: FleetSpec,
    /// `prefix_aware`: what the client-side view keeps per replica, tokens (the simulator's prefix cache is bound
    /// by its KV blocks the same way).
    pub cache_tokens: u64,
    /// Every replica's Prometheus endpoint, in the order of `urls` (replica `i` is scraped at `metrics_urls[i]`;
    /// `ReplaySettings::metrics_url` is `metrics_urls[0]`); empty: no replica is scraped.
    pub metrics_urls: Vec<String>,
}

/// Each URL's origin + `/metrics`: where a replica is scraped unless told otherwise.
pub fn default_metrics_urls(urls: &[String]) -> anyhow::Result<Vec<String>> {
    urls.iter()
        .map(|u| Ok(format!("{}/metrics", super::client::origin_of(u)?)))
        .collect()
}

impl LiveFleet {
    /// The router name, e.g. `session_affinity`.
    pub fn router(&self) -> Router {
        self.spec.router
    }
}

/// The routing state of a run: one client per URL, what is in flight at each, the sessions' replicas and the
/// prefix view.
pub struct LiveRouter {
    clients: Vec<Client>,
    spec: FleetSpec,
    /// Words per view block (0: no view, the router reads no prefix).
    block_words: usize,
    state: Mutex<RouteState>,
}

struct RouteState {
    sent: u64,
    outstanding: Vec<u64>,
    cached: Vec<u64>,
    /// `(session, instance)` → its replica.
    affinity: HashMap<(u64, u32), u32>,
    view: Option<PrefixView>,
}

/// A request routed to a replica: counts as outstanding there until dropped.
pub struct Routed<'a> {
    router: &'a LiveRouter,
    pub replica: usize,
}

impl Drop for Routed<'_> {
    fn drop(&mut self) {
        let mut st = self.router.lock();
        if let Some(n) = st.outstanding.get_mut(self.replica) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Routed<'_> {
    pub fn client(&self) -> &Client {
        &self.router.clients[self.replica]
    }
}

impl LiveRouter {
    /// `clients[i]` sends to replica `i`; `block_words` = words of [`ROUTE_BLOCK_TOKENS`] designed tokens of the
    /// run's filler (the view's block).
    pub fn new(clients: Vec<Client>, fleet: &LiveFleet, block_words: usize) -> Self {
        let n = clients.len();
        let prefix = fleet.spec.router == Router::PrefixAware;
        let view = prefix.then(|| PrefixView::new(n, (fleet.cache_tokens / ROUTE_BLOCK_TOKENS).max(1) as usize));
        LiveRouter {
            clients,
            spec: fleet.spec.clone(),
            block_words: if prefix { block_words.max(1) } else { 0 },
            state: Mutex::new(RouteState {
                sent: 0,
                outstanding: vec![0; n],
                cached: Vec::with_capacity(n),
                affinity: HashMap::new(),
                view,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RouteState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn clients(&self) -> &[Client] {
        &self.clients
    }

    /// Route one request: `session` is its `(session, instance)` when it belongs to one (session affinity),
    /// `text` its prompt as sent (the prefix view's input; only read by `prefix_aware`).
    pub fn route(&self, session: Option<(u64, u32)>, text: &str) -> Routed<'_> {
        let hashes = if self.block_words > 0 {
            let t = text;
            let mut h = shared::workload::mooncake::text_block_hashes(t, self.block_words);
            // Only whole blocks: a trailing partial block is not a prefix the next prompt can share.
            h.truncate(t.split_whitespace().count() / self.block_words);
            h
        } else {
            Vec::new()
        };
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(v) = &st.view {
            v.cached_blocks(&hashes, &mut st.cached);
        } else {
            st.cached.clear();
        }
        let replica = match session {
            // Only session affinity reads (and so keeps) a session's replica.
            Some(key) if self.spec.router == Router::SessionAffinity => {
                let a = st.affinity.entry(key).or_insert(UNROUTED);
                self.spec.pick(st.sent, &st.outstanding, &st.cached, Some(a))
            }
            _ => self.spec.pick(st.sent, &st.outstanding, &st.cached, None),
        };
        st.sent += 1;
        st.outstanding[replica] += 1;
        if let Some(v) = &mut st.view {
            v.sent(replica, &hashes);
        }
        drop(guard);
        Routed { router: self, replica }
    }
}
