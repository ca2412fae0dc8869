//! Session ladders: a fixed list of session shapes `base:steps,base:steps,...` that live replay cycles through.
//!
//! A [`Ladder`] is a list of [`Rung`]s, one per session slot. Slot `i` starts from `base_tokens` of context and runs
//! `steps` requests; step `k`'s prompt is `base + task + k·G` on average, where `G` (the growth) is the reply plus
//! the tool output appended per step (each reply's length is drawn, `max(64, N(gen, gen/2))`; the statistics and the
//! solver take one constant `G`, the mean; the seed measured 2,703). Because the shapes are fixed, the prompt-length
//! distribution is identical in every arm of every run (the seed's `agent_replay.py` learned that a random draw per
//! session cannot be tuned on 10 samples).
//!
//! - [`stats`](mod@stats): exact statistics of the prompt distribution a ladder produces ([`stats::stats`]), under the
//!   `respawn` and `single` weightings.
//! - [`solve`](mod@solve): a solver that finds a ladder for a target median, p90 and cached share ([`solve::solve`]).
//! - [`fit`]: derive those targets from a production request log (JSONL or CSV) ([`fit::fit_targets`]).
//!
//! The text form is what the seed's `--ladder` took, and it is also the serde form: a ladder serializes as the
//! string `"3500:9,4000:9"`. Whitespace around entries is allowed, and empty entries (`"3500:9,"`) are skipped, as
//! the seed did.

pub mod fit;
pub mod rungs;
pub mod solve;
pub mod stats;

pub use fit::{FitError, FitTargets, LogRow, ParsedLog, fit_targets, parse_log, parse_log_bytes};
pub use rungs::{LADDER_PROD, Ladder, LadderError, MAX_BASE_TOKENS, MAX_RUNGS, MAX_STEPS, Rung};
pub use solve::{CachedDefinition, MAX_SOLVE_SLOTS, Priority, Solution, SolveError, SolveOptions, solve};
pub use stats::{LadderStats, Margins, Shape, StatsError, Weighting, stats};
