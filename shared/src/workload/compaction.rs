//! Context compaction (`workload.compaction`): when a session's next prompt would pass `at_tokens`, the agent
//! replaces its whole conversation (base, replies, tool outputs) with a summary of `summary_tokens` and goes on from
//! there in a new conversation: `summary + task line`, a prefix the server never saw (a cold prefill).

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;

/// Largest accepted threshold, tokens (as the largest drawn base).
pub const MAX_AT_TOKENS: u64 = 80_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compaction {
    /// Compact when the next prompt would hold more than this many tokens.
    pub at_tokens: u64,
    /// Tokens of the summary the conversation is replaced with.
    pub summary_tokens: u32,
}

impl Compaction {
    /// Checks the two fields against the session's smallest starting prompt `base + task` (`base_context`): a
    /// threshold at or below it would compact before any step. Errors name the field (`at_tokens`).
    pub fn validate(&self, base_context: u64, task_tokens: u32) -> Result<(), ScenarioError> {
        if self.at_tokens > MAX_AT_TOKENS {
            return Err(ScenarioError::field(
                "at_tokens",
                format!("must be <= {MAX_AT_TOKENS} (got {})", self.at_tokens),
            ));
        }
        if self.at_tokens <= base_context {
            return Err(ScenarioError::field(
                "at_tokens",
                format!(
                    "must be above the base context (base + task = {base_context} tokens; got {}): a session would \
                     compact before its first step",
                    self.at_tokens
                ),
            ));
        }
        let after = u64::from(self.summary_tokens) + u64::from(task_tokens);
        if self.summary_tokens == 0 || after >= self.at_tokens {
            return Err(ScenarioError::field(
                "summary_tokens",
                format!(
                    "must be >= 1 and, with the task's {task_tokens} tokens, below at_tokens {} (got {})",
                    self.at_tokens, self.summary_tokens
                ),
            ));
        }
        Ok(())
    }

    /// The prompt a session goes on with after compacting: the summary and the task line.
    pub fn compacted_prompt(&self, task_tokens: u32) -> u64 {
        u64::from(self.summary_tokens) + u64::from(task_tokens)
    }
}
