//! Agent sessions, as the seed's `agent_replay.py` runs them: a session resends a GROWING conversation.
//!
//! Step 0's prompt is `base + task`; step k's prompt is step k−1's prompt plus its reply (`gen_tokens[k-1]`) plus a
//! tool output (`tool_tokens`). Between steps the session thinks (`think_s[k]`); sessions start `stagger_s` apart;
//! with `respawn` a slot restarts its session (next instance) when one finishes; the run lasts `duration_s`, and with
//! `drain` in-flight sessions may finish within `drain_grace_s` after it.
//!
//! [`SessionWorkload::plan`] draws one session instance's shape deterministically from `(seed, slot, inst)`; the
//! live replay and the simulator both use it, so both run the same sessions. Draw semantics follow the seed:
//! - ladder: `(base, steps) = ladder[slot % len]`;
//! - lognormal: `base = max(4000, int(base·exp(gauss(0, spread))))`, `steps = max(2, round(steps·exp(gauss(0,
//!   0.6·spread))))`; uniform: the same with `uniform(1 − spread, 1 + spread)` factors;
//! - per step: `gen = max(64, int(gauss(gen, gen/2)))`, `think = max(0, gauss(think, 0.4·think))`.
//!
//! The per-instance stream is Python's `random.Random(seed + slot·7919 + inst·104729)` (the seed's derivation
//! WITHOUT its content nonce: content uniqueness is the filler's job, see `shared::filler`).

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;
use crate::ladder::Ladder;
use crate::pyrand::PyRandom;

use super::compaction::Compaction;
use super::reasoning::Reasoning;
use super::subagents::Subagents;
use super::think::ThinkDist;

/// Shape of the per-session random draw (ignored when a ladder is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionDist {
    /// Skewed like production's prompt distribution (median 26k, p90 65k). The seed's default.
    #[default]
    Lognormal,
    /// Symmetric `uniform(1 − spread, 1 + spread)` factors.
    Uniform,
}

pub use super::limits::{MAX_SECONDS, MAX_SESSIONS, MAX_STEPS, MAX_TOKENS};

/// The seed replay's knobs. Defaults equal `agent_replay.py`'s command-line defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionWorkload {
    /// Concurrent session slots (`--sessions`). With a ladder, the ladder's length wins (as in the seed).
    pub sessions: u32,
    /// Mean steps per session (`--steps`).
    pub steps: u32,
    /// Mean starting context per session, tokens (`--base`).
    pub base_tokens: u64,
    /// Mean forced generation length per step, tokens (`--gen`).
    pub gen_tokens: u32,
    /// Synthetic tool output appended per step, tokens (`--tool`).
    pub tool_tokens: u32,
    /// Mean think time between a session's steps, seconds (`--think`).
    pub think_s: f64,
    /// Per-session draw shape (`--dist`).
    pub dist: SessionDist,
    /// Per-session variation as a fraction (`--spread`).
    pub spread: f64,
    /// Fixed session shapes `base:steps,base:steps,...` (`--ladder`); overrides sessions/steps/base/dist/spread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ladder: Option<Ladder>,
    /// Restart a slot's session when it finishes (`--respawn`).
    pub respawn: bool,
    /// Seconds between session starts (`--stagger`).
    pub stagger_s: f64,
    /// Run length, seconds (`--max-seconds`): no new session starts after it.
    pub duration_s: f64,
    /// At `duration_s`, let in-flight sessions finish instead of cutting them (`--drain`).
    pub drain: bool,
    /// Hard cap on the drain, seconds (`--drain-grace`).
    pub drain_grace_s: f64,
    /// Tokens of the task line appended to the base ("Task: find why the loader refuses the shard ...").
    pub task_tokens: u32,
    /// Think-time distribution ([`ThinkDist`]); `None`: the seed's `max(0, N(think_s, 0.4·think_s))`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think: Option<ThinkDist>,
    /// Context compaction ([`Compaction`]); `None`: conversations only grow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// Hidden reasoning per reply ([`Reasoning`]); `None`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// Sub-agents ([`Subagents`]); `None`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagents: Option<Subagents>,
}

impl Default for SessionWorkload {
    fn default() -> Self {
        Self {
            sessions: 6,
            steps: 12,
            base_tokens: 22_000,
            gen_tokens: 700,
            tool_tokens: 900,
            think_s: 6.0,
            dist: SessionDist::Lognormal,
            spread: 0.5,
            ladder: None,
            respawn: false,
            stagger_s: 4.0,
            duration_s: 900.0,
            drain: false,
            drain_grace_s: 420.0,
            task_tokens: 16,
            think: None,
            compaction: None,
            reasoning: None,
            subagents: None,
        }
    }
}

/// One session instance's drawn shape. `think_s[k]` is the think time AFTER step k (the seed also waits after the
/// last step before the slot respawns), so `gen_tokens` and `think_s` both have `steps` entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionPlan {
    pub slot: u32,
    pub inst: u32,
    pub base_tokens: u64,
    pub steps: u32,
    pub gen_tokens: Vec<u32>,
    pub think_s: Vec<f64>,
    /// Tool output appended after each reply, tokens.
    pub tool_tokens: u32,
    /// Task line appended to the base, tokens.
    pub task_tokens: u32,
    /// The workload's compaction, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// The workload's hidden reasoning, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    /// The workload's sub-agents, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<Subagents>,
}

impl SessionPlan {
    /// Hidden reasoning tokens of every reply (0 without reasoning).
    pub fn reasoning_tokens(&self) -> u32 {
        self.reasoning.map_or(0, |r| r.per_reply())
    }

    /// Tokens step `k` generates: its reply's reasoning and content.
    pub fn output_tokens(&self, k: u32) -> u32 {
        let g = self.gen_tokens.get(k as usize).copied().unwrap_or(0);
        g.saturating_add(self.reasoning_tokens())
    }

    /// Tokens of step `k`'s reply that the next prompt carries: its content, and its reasoning when echoed.
    pub fn reply_in_prompt(&self, k: u32) -> u64 {
        let g = u64::from(self.gen_tokens.get(k as usize).copied().unwrap_or(0));
        match self.reasoning {
            Some(r) if r.echo => g + u64::from(r.per_reply()),
            _ => g,
        }
    }

    /// Step `k + 1`'s prompt from step `k`'s (`prompt`): `prompt + reply + tool`, or, when that passes the
    /// compaction threshold, the summary and the task line; and whether it was compacted.
    pub fn next_prompt(&self, prompt: u64, k: u32) -> (u64, bool) {
        let grown = prompt + self.reply_in_prompt(k) + u64::from(self.tool_tokens) + self.results_after(k);
        match self.compaction {
            Some(c) if grown > c.at_tokens => (c.compacted_prompt(self.task_tokens), true),
            _ => (grown, false),
        }
    }

    /// Whether the session fans out sub-agents after step `k`.
    pub fn spawns_after(&self, k: u32) -> bool {
        self.subagents.is_some_and(|s| s.after_step(k, self.steps))
    }

    /// Tokens of sub-agent results step `k + 1`'s prompt carries (0 unless the session fanned out after step `k`
    /// and waited).
    pub fn results_after(&self, k: u32) -> u64 {
        match self.subagents {
            Some(s) if s.after_step(k, self.steps) => s.results_tokens(),
            _ => 0,
        }
    }

    /// The prefix children fork after step `k` (whose prompt is `prompt`): the prompt and the reply as the next
    /// prompt carries it.
    pub fn fork_tokens(&self, prompt: u64, k: u32) -> u64 {
        prompt + self.reply_in_prompt(k)
    }

    /// Step `k`'s prompt and whether it was compacted (step 0: `base + task`, never).
    fn prompt_at(&self, k: u32) -> (u64, bool) {
        let mut p = (self.base_tokens + u64::from(self.task_tokens), false);
        for j in 0..k {
            p = self.next_prompt(p.0, j);
        }
        p
    }

    /// Designed prompt length of step `k`: `base + task + Σ_{j<k} (reply_j + tool)`, restarting from the summary
    /// at each compaction.
    pub fn prompt_tokens(&self, k: u32) -> u64 {
        self.prompt_at(k).0
    }

    /// Step `k`'s prompt is a compacted conversation's first (a cold prefix).
    pub fn compacted(&self, k: u32) -> bool {
        self.prompt_at(k).1
    }

    /// Tokens of step `k`'s prompt that the workload designed to be cacheable: the previous prompt plus its reply
    /// (0 for step 0 and a compacted step; the tool output is new content; without echoed reasoning the reply is
    /// new too, its prefix broken where the reasoning was cut out).
    pub fn designed_cached_tokens(&self, k: u32) -> u64 {
        if k == 0 {
            return 0;
        }
        let (prev, _) = self.prompt_at(k - 1);
        self.designed_cached_after(prev, k - 1, self.next_prompt(prev, k - 1).1)
    }

    /// [`Self::designed_cached_tokens`] of step `k + 1`, from step `k`'s prompt and whether step `k + 1` was
    /// compacted (the simulator and replay track the prompt as they go).
    pub fn designed_cached_after(&self, prompt: u64, k: u32, compacted: bool) -> u64 {
        if compacted {
            0
        } else if self.reasoning.is_some_and(|r| !r.echo) {
            prompt
        } else {
            prompt + self.reply_in_prompt(k)
        }
    }
}

fn err(field: &str, msg: String) -> ScenarioError {
    ScenarioError::field(field, msg)
}

impl SessionWorkload {
    /// Checks every knob; errors name the field under `workload.`.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.validate_fields().map_err(|e| e.within("workload"))
    }

    /// [`Self::validate`] with the field path prefixed by `prefix` (e.g. `"replay"`).
    pub fn validate_at(&self, prefix: &str) -> Result<(), ScenarioError> {
        self.validate_fields().map_err(|e| e.within(prefix))
    }

    /// [`Self::validate`] with relative field paths (`sessions`).
    pub fn validate_fields(&self) -> Result<(), ScenarioError> {
        let f = |name: &str| name.to_string();
        if let Some(l) = &self.ladder {
            l.validate().map_err(|e| err(&f("ladder"), e.to_string()))?;
        } else {
            if self.sessions == 0 || self.sessions > MAX_SESSIONS {
                return Err(err(
                    &f("sessions"),
                    format!("must be in 1..={MAX_SESSIONS} (got {})", self.sessions),
                ));
            }
            if self.steps == 0 || self.steps > MAX_STEPS {
                return Err(err(
                    &f("steps"),
                    format!("must be in 1..={MAX_STEPS} (got {})", self.steps),
                ));
            }
            if self.base_tokens == 0 || self.base_tokens > MAX_TOKENS {
                return Err(err(
                    &f("base_tokens"),
                    format!("must be in 1..={MAX_TOKENS} (got {})", self.base_tokens),
                ));
            }
            if !(self.spread.is_finite() && (0.0..=5.0).contains(&self.spread)) {
                return Err(err(&f("spread"), format!("must be in 0..=5 (got {})", self.spread)));
            }
            if self.dist == SessionDist::Uniform && self.spread > 1.0 {
                return Err(err(
                    &f("spread"),
                    format!("must be <= 1 with dist uniform (got {})", self.spread),
                ));
            }
        }
        if self.gen_tokens == 0 || u64::from(self.gen_tokens) > MAX_TOKENS {
            return Err(err(
                &f("gen_tokens"),
                format!("must be in 1..={MAX_TOKENS} (got {})", self.gen_tokens),
            ));
        }
        if u64::from(self.tool_tokens) > MAX_TOKENS {
            return Err(err(
                &f("tool_tokens"),
                format!("must be <= {MAX_TOKENS} (got {})", self.tool_tokens),
            ));
        }
        if u64::from(self.task_tokens) > MAX_TOKENS {
            return Err(err(
                &f("task_tokens"),
                format!("must be <= {MAX_TOKENS} (got {})", self.task_tokens),
            ));
        }
        for (name, v, positive) in [
            ("think_s", self.think_s, false),
            ("stagger_s", self.stagger_s, false),
            ("duration_s", self.duration_s, true),
            ("drain_grace_s", self.drain_grace_s, false),
        ] {
            let ok = v.is_finite() && v <= MAX_SECONDS && if positive { v > 0.0 } else { v >= 0.0 };
            if !ok {
                let want = if positive { "> 0" } else { ">= 0" };
                return Err(err(
                    &f(name),
                    format!("must be finite, {want} and <= {MAX_SECONDS} (got {v})"),
                ));
            }
        }
        if let Some(t) = &self.think {
            t.validate().map_err(|e| e.within("think"))?;
        }
        if let Some(c) = &self.compaction {
            c.validate(self.largest_base() + u64::from(self.task_tokens), self.task_tokens)
                .map_err(|e| e.within("compaction"))?;
        }
        if let Some(r) = &self.reasoning {
            r.validate().map_err(|e| e.within("reasoning"))?;
        }
        if let Some(s) = &self.subagents {
            s.validate(self.slot_count()).map_err(|e| e.within("subagents"))?;
        }
        Ok(())
    }

    /// Session slots that run concurrently: the ladder's length when a ladder is set, else `sessions`.
    pub fn slot_count(&self) -> u32 {
        match &self.ladder {
            Some(l) if !l.rungs.is_empty() => l.rungs.len() as u32,
            _ => self.sessions,
        }
    }

    /// The base context compaction is checked against: a ladder's largest rung, else the mean `base_tokens` (a
    /// drawn base above the threshold compacts after its first step).
    fn largest_base(&self) -> u64 {
        match &self.ladder {
            Some(l) if !l.rungs.is_empty() => l.rungs.iter().map(|r| r.base_tokens).max().unwrap_or(0),
            _ => self.base_tokens,
        }
    }

    /// Mean think time after a step, seconds: `think_s`, or the mean of `think` when set (size estimates).
    pub fn mean_think_s(&self) -> f64 {
        self.think.as_ref().map_or(self.think_s, ThinkDist::mean_s)
    }

    /// Draws instance `inst` of slot `slot`, deterministically from `(seed, slot, inst)`.
    pub fn plan(&self, slot: u32, inst: u32, seed: u64) -> SessionPlan {
        self.draw(&mut PyRandom::from_u128(plan_key(slot, inst, seed)), slot, inst, seed)
    }

    /// The plans of instances `first_inst .. first_inst + 4` of `slot`: equal to four [`Self::plan`] calls, with
    /// the generators seeded side by side (the simulator's per-session cost is mostly seeding).
    pub fn plans4(&self, slot: u32, first_inst: u32, seed: u64) -> [SessionPlan; 4] {
        let insts: [u32; 4] = std::array::from_fn(|i| first_inst.saturating_add(i as u32));
        let mut rngs = PyRandom::from_u128s(insts.map(|inst| plan_key(slot, inst, seed)));
        std::array::from_fn(|i| self.draw(&mut rngs[i], slot, insts[i], seed))
    }

    fn draw(&self, rng: &mut PyRandom, slot: u32, inst: u32, seed: u64) -> SessionPlan {
        let (base_tokens, steps) = match self.ladder.as_ref().and_then(|l| l.rung_for_slot(slot as usize)) {
            Some(rung) => (rung.base_tokens, rung.steps),
            None => {
                let spread = self.spread.max(0.0);
                let (fb, fs) = match self.dist {
                    SessionDist::Lognormal => ((rng.gauss(0.0, spread)).exp(), (rng.gauss(0.0, spread * 0.6)).exp()),
                    SessionDist::Uniform => (
                        rng.uniform(1.0 - spread, 1.0 + spread),
                        rng.uniform(1.0 - spread, 1.0 + spread),
                    ),
                };
                let base = (self.base_tokens as f64 * fb)
                    .trunc()
                    .clamp(4000.0, MAX_TOKENS as f64 * 8.0) as u64;
                let steps = (f64::from(self.steps) * fs)
                    .round_ties_even()
                    .clamp(2.0, f64::from(MAX_STEPS)) as u32;
                (base, steps)
            }
        };
        let gen_mean = f64::from(self.gen_tokens);
        let think = self.think_s.max(0.0);
        // The empirical think list picks from a stream of its own (keys above 2^80 never meet a plan's key).
        let mut pick = self
            .think
            .as_ref()
            .filter(|t| t.needs_pick())
            .map(|_| PyRandom::from_u128(plan_key(slot, inst, seed) + THINK_PICK_KEY));
        let mut gen_tokens = Vec::with_capacity(steps as usize);
        let mut think_s = Vec::with_capacity(steps as usize);
        for _ in 0..steps {
            let g = rng
                .gauss(gen_mean, gen_mean * 0.5)
                .trunc()
                .clamp(64.0, MAX_TOKENS as f64);
            gen_tokens.push(g as u32);
            think_s.push(match &self.think {
                None => rng.gauss(think, think * 0.4).max(0.0),
                Some(t) => t.sample(rng.gauss(0.0, 1.0), pick.as_mut()),
            });
        }
        SessionPlan {
            slot,
            inst,
            base_tokens,
            steps,
            gen_tokens,
            think_s,
            tool_tokens: self.tool_tokens,
            task_tokens: self.task_tokens,
            compaction: self.compaction,
            reasoning: self.reasoning,
            subagents: self.subagents,
        }
    }
}

/// Added to [`plan_key`] for the empirical think-time stream.
const THINK_PICK_KEY: u128 = 1 << 80;

/// The seed's per-session generator seed: `seed + slot·7919 + inst·104729` (may pass 2^64).
fn plan_key(slot: u32, inst: u32, seed: u64) -> u128 {
    u128::from(seed) + u128::from(slot) * 7919 + u128::from(inst) * 104_729
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans4_equals_plan() {
        let w = SessionWorkload::default();
        // The last case straddles 2^32: two keys of one word, two of two (seeded one by one).
        for (slot, inst, seed) in [(0, 0, 42), (3, 9, 7), (1, 5, u64::MAX), (0, 0, (1 << 32) - 2 * 104_729)] {
            let four = w.plans4(slot, inst, seed);
            for (i, p) in four.iter().enumerate() {
                assert_eq!(*p, w.plan(slot, inst + i as u32, seed));
            }
        }
    }

    #[test]
    fn defaults_equal_the_seed_and_parse_from_empty_object() {
        let w: SessionWorkload = serde_json::from_str("{}").expect("defaults");
        assert_eq!(w, SessionWorkload::default());
        assert_eq!(
            (w.sessions, w.steps, w.base_tokens, w.gen_tokens, w.tool_tokens),
            (6, 12, 22_000, 700, 900)
        );
        assert!(serde_json::from_str::<SessionWorkload>(r#"{"bogus": 1}"#).is_err());
        w.validate().expect("defaults valid");
    }

    #[test]
    fn plan_is_deterministic_and_depends_on_slot_inst_seed() {
        let w = SessionWorkload::default();
        let a = w.plan(1, 0, 42);
        assert_eq!(a, w.plan(1, 0, 42));
        assert_ne!(a, w.plan(2, 0, 42));
        assert_ne!(a, w.plan(1, 1, 42));
        assert_ne!(a, w.plan(1, 0, 43));
        assert!(a.base_tokens >= 4000 && a.steps >= 2);
        assert_eq!(a.gen_tokens.len(), a.steps as usize);
        assert!(a.gen_tokens.iter().all(|&g| g >= 64));
        assert!(a.think_s.iter().all(|&t| t >= 0.0));
    }

    #[test]
    fn lognormal_draw_matches_python() {
        // python3: r = random.Random(42 + 1*7919 + 0*104729);
        //   base = max(4000, int(22000*math.exp(r.gauss(0,0.5)))); steps = max(2, int(round(12*math.exp(r.gauss(0,0.3)))))
        //   gen = max(64, int(r.gauss(700, 350))); think = max(0.0, r.gauss(6.0, 2.4))
        let p = SessionWorkload::default().plan(1, 0, 42);
        assert_eq!((p.base_tokens, p.steps), PY_PLAN_1_0_42.0);
        assert_eq!(p.gen_tokens[0], PY_PLAN_1_0_42.1);
        assert!((p.think_s[0] - PY_PLAN_1_0_42.2).abs() < 1e-9);
    }

    const PY_PLAN_1_0_42: ((u64, u32), u32, f64) = ((13167, 12), 298, 6.957169093991879);

    #[test]
    fn plan_seeding_past_two_to_the_64_is_python_s() {
        use crate::pyrand::PySeed;
        // Below 2^64 `from_u128` is `random.Random(n)` exactly; above it the key just grows a word, as in Python.
        for n in [0u64, 1, 42, 7919 + 104_729, u64::MAX] {
            let (mut a, mut b) = (PyRandom::from_u128(u128::from(n)), PyRandom::new(PySeed::new(n)));
            for _ in 0..100 {
                assert_eq!(a.gauss(5.0, 2.0).to_bits(), b.gauss(5.0, 2.0).to_bits(), "seed {n}");
            }
        }
    }

    #[test]
    fn ladder_picks_rung_by_slot() {
        let w = SessionWorkload {
            ladder: Some("3500:9, 4000:9,20500:19".parse().expect("ladder")),
            ..Default::default()
        };
        w.validate().expect("valid");
        assert_eq!(w.slot_count(), 3);
        let p = w.plan(4, 2, 7);
        assert_eq!((p.base_tokens, p.steps), (4000, 9));
        assert_eq!(p.prompt_tokens(0), 4016);
        assert_eq!(p.prompt_tokens(1), 4016 + u64::from(p.gen_tokens[0]) + 900);
        assert_eq!(p.designed_cached_tokens(1), 4016 + u64::from(p.gen_tokens[0]));
        assert_eq!(p.designed_cached_tokens(0), 0);
    }

    #[test]
    fn think_dists_change_think_times_only() {
        let base = SessionWorkload::default();
        let with = |t: &str| SessionWorkload {
            think: Some(serde_json::from_str(t).expect(t)),
            ..Default::default()
        };
        let p0 = base.plan(2, 1, 42);
        // `normal` with the mean alone is the default draw, bit for bit.
        assert_eq!(with(r#"{"dist": "normal", "mean_s": 6.0}"#).plan(2, 1, 42), p0);
        let fixed = with(r#"{"dist": "fixed", "value_s": 1.5}"#).plan(2, 1, 42);
        assert_eq!((fixed.base_tokens, &fixed.gen_tokens), (p0.base_tokens, &p0.gen_tokens));
        assert!(fixed.think_s.iter().all(|&t| t == 1.5));
        // Log-normal: median · exp(σ z) with the default draw's z = (think − 6) / 2.4 where that was not clamped.
        let logn = with(r#"{"dist": "lognormal", "median_s": 3.0, "sigma": 1.0}"#).plan(2, 1, 42);
        assert_eq!(logn.gen_tokens, p0.gen_tokens);
        for (l, d) in logn.think_s.iter().zip(&p0.think_s) {
            if *d > 0.0 {
                let z = (d - 6.0) / 2.4;
                assert!((l - 3.0 * z.exp()).abs() < 1e-9 * l.max(1.0), "{l} vs z {z}");
            }
        }
        let gaps = [0.2, 4.0, 90.0];
        let emp_w = with(r#"{"dist": "empirical", "gaps_s": [0.2, 4.0, 90.0]}"#);
        let emp = emp_w.plan(2, 1, 42);
        assert_eq!(emp.gen_tokens, p0.gen_tokens);
        assert!(emp.think_s.iter().all(|t| gaps.contains(t)), "{:?}", emp.think_s);
        assert_eq!(emp, emp_w.plan(2, 1, 42));
        assert_eq!(emp_w.plans4(2, 1, 42)[0], emp);
        // Each instance picks its own gaps; over many the three show up about equally.
        let mut count = [0usize; 3];
        for inst in 0..200 {
            for t in emp_w.plan(0, inst, 7).think_s {
                count[gaps.iter().position(|&g| g == t).expect("a listed gap")] += 1;
            }
        }
        let total: usize = count.iter().sum();
        assert!(count.iter().all(|&c| c * 4 > total), "{count:?}");
        // The mean the size estimates take.
        assert_eq!(base.mean_think_s(), 6.0);
        assert!((emp_w.mean_think_s() - 94.2 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn think_errors_name_the_field_under_workload() {
        let w = SessionWorkload {
            think: Some(ThinkDist::Lognormal {
                median_s: 2.0,
                sigma: 0.0,
            }),
            ..Default::default()
        };
        let e = w.validate().expect_err("sigma 0").to_string();
        assert!(e.starts_with("workload.think.sigma must be > 0"), "{e}");
        let e = serde_json::from_str::<SessionWorkload>(r#"{"think": {"dist": "lognormal", "median_s": 1}}"#)
            .expect_err("no sigma")
            .to_string();
        assert!(e.contains("sigma"), "{e}");
    }

    #[test]
    fn compaction_and_reasoning_errors_name_the_field() {
        let parse = |json: &str| serde_json::from_str::<SessionWorkload>(json).expect(json);
        // The threshold must be above the base context (base + task), with the ladder's largest rung.
        let e = parse(r#"{"base_tokens": 22000, "compaction": {"at_tokens": 20000, "summary_tokens": 500}}"#)
            .validate()
            .expect_err("below base")
            .to_string();
        assert!(
            e.starts_with("workload.compaction.at_tokens must be above the base context"),
            "{e}"
        );
        assert!(e.contains("22016"), "{e}");
        let e = parse(r#"{"ladder": "4000:3,9000:3", "compaction": {"at_tokens": 8000, "summary_tokens": 5}}"#)
            .validate()
            .expect_err("below a rung")
            .to_string();
        assert!(e.starts_with("workload.compaction.at_tokens"), "{e}");
        let e = parse(r#"{"base_tokens": 4000, "compaction": {"at_tokens": 8000, "summary_tokens": 7990}}"#)
            .validate()
            .expect_err("summary too large")
            .to_string();
        assert!(e.starts_with("workload.compaction.summary_tokens"), "{e}");
        parse(r#"{"base_tokens": 4000, "compaction": {"at_tokens": 8000, "summary_tokens": 500}}"#)
            .validate()
            .expect("valid");
        let e = parse(r#"{"reasoning": {"tokens": -5}}"#)
            .validate()
            .expect_err("negative")
            .to_string();
        assert!(e.starts_with("workload.reasoning.tokens must be in 1..="), "{e}");
        assert!(e.contains("got -5"), "{e}");
        let w = parse(r#"{"reasoning": {"tokens": 300}}"#);
        w.validate().expect("valid");
        assert_eq!(
            w.reasoning,
            Some(Reasoning {
                tokens: 300,
                echo: false
            })
        );
        assert!(serde_json::from_str::<SessionWorkload>(r#"{"compaction": {"at_tokens": 9, "x": 1}}"#).is_err());
    }

    #[test]
    fn plan_grows_with_echoed_reasoning_and_restarts_at_compaction() {
        let w = SessionWorkload {
            ladder: Some("4000:6".parse().expect("ladder")),
            tool_tokens: 1000,
            reasoning: Some(Reasoning {
                tokens: 200,
                echo: true,
            }),
            compaction: Some(Compaction {
                at_tokens: 7000,
                summary_tokens: 300,
            }),
            ..Default::default()
        };
        let p = w.plan(0, 0, 3);
        let g = |k: usize| u64::from(p.gen_tokens[k]);
        assert_eq!(p.output_tokens(0), p.gen_tokens[0] + 200);
        let p1 = 4016 + g(0) + 200 + 1000;
        assert_eq!(p.prompt_tokens(1), p1);
        assert_eq!(p.designed_cached_tokens(1), 4016 + g(0) + 200);
        let p2 = p1 + g(1) + 1200;
        let (want2, compacted2) = if p2 > 7000 { (316, true) } else { (p2, false) };
        assert_eq!((p.prompt_tokens(2), p.compacted(2)), (want2, compacted2));
        assert_eq!(p.designed_cached_tokens(2) == 0, compacted2);
        // Without echo the reply is not part of the designed prefix.
        let stripped = SessionWorkload {
            reasoning: Some(Reasoning {
                tokens: 200,
                echo: false,
            }),
            compaction: None,
            ..w
        }
        .plan(0, 0, 3);
        assert_eq!(stripped.prompt_tokens(1), 4016 + g(0) + 1000);
        assert_eq!(stripped.designed_cached_tokens(1), 4016);
    }

    #[test]
    fn bad_knobs_name_the_field() {
        let cases: Vec<(SessionWorkload, &str)> = vec![
            (
                SessionWorkload {
                    sessions: 0,
                    ..Default::default()
                },
                "workload.sessions",
            ),
            (
                SessionWorkload {
                    think_s: f64::NAN,
                    ..Default::default()
                },
                "workload.think_s",
            ),
            (
                SessionWorkload {
                    stagger_s: -1.0,
                    ..Default::default()
                },
                "workload.stagger_s",
            ),
            (
                SessionWorkload {
                    duration_s: 0.0,
                    ..Default::default()
                },
                "workload.duration_s",
            ),
            (
                SessionWorkload {
                    spread: -0.1,
                    ..Default::default()
                },
                "workload.spread",
            ),
            (
                SessionWorkload {
                    gen_tokens: 0,
                    ..Default::default()
                },
                "workload.gen_tokens",
            ),
            (
                SessionWorkload {
                    base_tokens: u64::MAX,
                    ..Default::default()
                },
                "workload.base_tokens",
            ),
            (
                SessionWorkload {
                    ladder: Some(Ladder { rungs: vec![] }),
                    ..Default::default()
                },
                "workload.ladder",
            ),
        ];
        for (w, field) in cases {
            let e = w.validate().expect_err(field).to_string();
            assert!(e.starts_with(field), "{e}");
        }
    }
}
