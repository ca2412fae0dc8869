//! Hidden reasoning (`workload.reasoning`): every reply of a session first streams `tokens` reasoning tokens, then
//! its content. The reasoning costs decode time like any output token; whether the next prompt carries it
//! (`echo`) decides how much of the previous turn the prefix cache can reuse: echoed, the whole reply; not echoed
//! (what most agents do with thinking blocks), the prefix breaks where the reply began, so the reply is new
//! content to the server (cache-miss reason "reasoning not echoed").

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;

/// Largest accepted reasoning length per reply, tokens.
pub const MAX_REASONING_TOKENS: i64 = 10_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// Hidden reasoning tokens per reply. Signed so that a negative count is refused by name, not as a type error.
    pub tokens: i64,
    /// The next prompt carries the reasoning (true) or strips it (false, the default).
    #[serde(default)]
    pub echo: bool,
}

impl Reasoning {
    /// Errors name the field (`tokens`).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !(1..=MAX_REASONING_TOKENS).contains(&self.tokens) {
            return Err(ScenarioError::field(
                "tokens",
                format!("must be in 1..={MAX_REASONING_TOKENS} (got {})", self.tokens),
            ));
        }
        Ok(())
    }

    /// The reasoning tokens of one reply (0 for a bad, unvalidated count).
    pub fn per_reply(&self) -> u32 {
        u32::try_from(self.tokens.clamp(0, MAX_REASONING_TOKENS)).unwrap_or(0)
    }
}
