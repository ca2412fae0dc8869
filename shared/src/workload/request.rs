//! The one request type of a request plan ([`super::Workload::requests`]).

/// One planned request of a request-level workload (bursty, Poisson, gamma, closed loop): when it arrives and how
/// long its prompt and its output are. The seed's `WorkloadRequest` without its id (`req-000` is its index).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedRequest {
    /// Arrival after the run's origin, milliseconds (closed loop: 0; a user sends it when its previous one ends).
    pub arrival_ms: f64,
    /// Tokens of the one system prompt every request of the workload starts with (so the prefix cache can hit).
    pub shared_prefix_tokens: u32,
    /// Tokens of the prompt after the shared prefix, unique to this request.
    pub unique_prompt_tokens: u32,
    /// Output tokens asked for (forced: `max_tokens` = `min_tokens`).
    pub output_tokens: u32,
}
