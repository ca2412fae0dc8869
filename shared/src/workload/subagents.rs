//! Sub-agents (`workload.subagents`): every `every_steps` steps a session fans out `count` child sessions. Each
//! child starts from the parent's conversation as it stands after the parent's reply (so it shares the parent's
//! cached prefix), adds its own task line, and runs `steps` steps of `gen_tokens` replies and `tool_tokens` tool
//! outputs, back to back; the children run in parallel. With `wait` the parent's next step waits for all of them
//! (and its own think time), and carries their results: each child's last reply, `gen_tokens` tokens, in the
//! parent's next prompt.

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;

use super::limits::{MAX_SESSIONS, MAX_STEPS, MAX_TOKENS};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subagents {
    /// Fan out after every this many parent steps (after step `every_steps − 1`, `2·every_steps − 1`, …), when the
    /// parent has a next step.
    pub every_steps: u32,
    /// Children per fan-out.
    pub count: u32,
    /// Steps each child runs.
    pub steps: u32,
    /// Reply length of each child step, tokens.
    pub gen_tokens: u32,
    /// Tool output appended after each child step, tokens.
    pub tool_tokens: u32,
    /// The parent's next step waits for the children and carries their results.
    #[serde(default = "yes")]
    pub wait: bool,
}

fn yes() -> bool {
    true
}

impl Subagents {
    /// Errors name the field. `slots` is the run's session slots: with `count` children each, the concurrent
    /// sessions `slots · (1 + count)` must stay within the run's session limit ([`MAX_SESSIONS`]).
    pub fn validate(&self, slots: u32) -> Result<(), ScenarioError> {
        let f = ScenarioError::field;
        if self.every_steps == 0 || self.every_steps > MAX_STEPS {
            return Err(f(
                "every_steps",
                format!("must be in 1..={MAX_STEPS} (got {})", self.every_steps),
            ));
        }
        if self.count == 0 {
            return Err(f("count", "must be >= 1 (got 0)".to_string()));
        }
        let total = u64::from(slots) * (1 + u64::from(self.count));
        if total > u64::from(MAX_SESSIONS) {
            return Err(f(
                "count",
                format!(
                    "{} children for each of {slots} session slots make {total} concurrent sessions, more than the \
                     run's limit of {MAX_SESSIONS}",
                    self.count
                ),
            ));
        }
        if self.steps == 0 || self.steps > MAX_STEPS {
            return Err(f("steps", format!("must be in 1..={MAX_STEPS} (got {})", self.steps)));
        }
        if self.gen_tokens == 0 || u64::from(self.gen_tokens) > MAX_TOKENS {
            return Err(f(
                "gen_tokens",
                format!("must be in 1..={MAX_TOKENS} (got {})", self.gen_tokens),
            ));
        }
        if u64::from(self.tool_tokens) > MAX_TOKENS {
            return Err(f(
                "tool_tokens",
                format!("must be <= {MAX_TOKENS} (got {})", self.tool_tokens),
            ));
        }
        Ok(())
    }

    /// Whether the parent fans out after its step `k` (of `steps`): after every `every_steps`-th step that has a
    /// next one.
    pub fn after_step(&self, k: u32, steps: u32) -> bool {
        (k + 1).is_multiple_of(self.every_steps) && k + 1 < steps
    }

    /// Tokens of results the parent's next prompt carries after a fan-out.
    pub fn results_tokens(&self) -> u64 {
        if self.wait {
            u64::from(self.count) * u64::from(self.gen_tokens)
        } else {
            0
        }
    }

    /// Child step `i`'s prompt, from the prefix it forked (`fork`: the parent's prompt and reply) and the task line.
    pub fn child_prompt(&self, fork: u64, task_tokens: u32, i: u32) -> u64 {
        fork + u64::from(task_tokens) + u64::from(i) * (u64::from(self.gen_tokens) + u64::from(self.tool_tokens))
    }

    /// The record session id of child `j` of parent slot `slot`, in a run of `slots` slots: `slots + slot · count +
    /// j` (its instances, one per fan-out, are the record's `inst`).
    pub fn child_session(&self, slots: u32, slot: u32, j: u32) -> u64 {
        u64::from(slots) + u64::from(slot) * u64::from(self.count) + u64::from(j)
    }
}
