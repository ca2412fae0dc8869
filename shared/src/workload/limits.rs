//! The limits of a session workload's knobs, in a file of their own so that the session workload and the parts it
//! is made of (`think`, `subagents`) all read them without importing each other.

/// Largest accepted token count for any single size knob (base, gen, tool, task).
pub const MAX_TOKENS: u64 = 10_000_000;
/// Largest accepted session slot count and step count.
pub const MAX_SESSIONS: u32 = 1_000_000;
pub const MAX_STEPS: u32 = 100_000;
/// Largest accepted time knob, seconds (about 3 years).
pub const MAX_SECONDS: f64 = 1e8;
