//! Deterministic shards of a request plan: `loadshape replay --shard I/N` runs shard `I` of `N` (docs/scale.md).
//!
//! A workload is cut into **units**, and shard `I` of `N` owns every unit `u` with `u mod N == I` (round robin, so
//! the shards' units are spread evenly over the plan's time line):
//! - **sessions**: session *slots*. A slot keeps its global number, so instance `(slot, inst)` has the single
//!   process's shape ([`super::SessionWorkload::plan`]`(slot, inst, seed)`), start time (`slot × stagger_s`) and
//!   filler stream (`Filler::stream(slot, inst)`); every instance of a slot (respawns) stays in its shard;
//! - **open-loop requests** (bursty, Poisson, gamma, trace): request *indices*; request `i` keeps its arrival time
//!   and lengths ([`super::Workload::requests`]);
//! - **closed loop**: *users*. Request `i` belongs to user `i mod U` (`U` = the users that have a request,
//!   `min(users, num_requests)`), so shard `I` runs its users and their requests.
//!
//! So the union of the `N` shards' planned requests is exactly the single process's plan — the same shapes, seeds
//! and times — and no two shards share a unit: each unit's text comes from a filler stream keyed by its own global
//! number under the run's one seed and nonce, so the per-unit content streams are distinct from shard to shard
//! (and the open loop's one shared system prompt, stream `u32::MAX`, is the same in every shard, as the single
//! plan shares it). [`Shard::WHOLE`] (`0/1`) is the single process. A plan with fewer units than shards is refused
//! ([`ShardError::TooFewUnits`]): a shard would have nothing to run.

use super::kind::Workload;
use super::request::PlannedRequest;

/// Shard `index` of `count` (`0 <= index < count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// Why a shard cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("--shard must be I/N with whole numbers 0 <= I < N (got {0:?})")]
    Syntax(String),
    #[error("the shard count must be at least 1 (got 0)")]
    ZeroCount,
    #[error("shard index {index} is out of range for {count} shards (0 <= I < {count})")]
    IndexOutOfRange { index: u32, count: u32 },
    #[error("the plan has {units} {unit}, fewer than the {count} shards: every shard needs at least one")]
    TooFewUnits { count: u32, units: u64, unit: &'static str },
    #[error(
        "a trace file's workload cannot be sharded yet (its sessions and wait_for dependencies cross shards): run it \
         in one process (no --shard, or --shard 0/1)"
    )]
    TraceNotShardable,
}

/// The kind of unit a workload is sharded by (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardUnit {
    /// Session slots.
    Slots,
    /// Open-loop request indices.
    Requests,
    /// Closed-loop users.
    Users,
}

impl ShardUnit {
    /// Plural name, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            ShardUnit::Slots => "session slots",
            ShardUnit::Requests => "requests",
            ShardUnit::Users => "closed-loop users",
        }
    }
}

impl Shard {
    /// The whole plan in one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> Result<Shard, ShardError> {
        if count == 0 {
            return Err(ShardError::ZeroCount);
        }
        if index >= count {
            return Err(ShardError::IndexOutOfRange { index, count });
        }
        Ok(Shard { index, count })
    }

    /// Parses `I/N`, or `N` / `/N` with the index left to the caller (`None`: e.g. `$JOB_COMPLETION_INDEX`).
    /// Returns the index (if given) and the count; the pair is checked by [`Shard::new`].
    pub fn parse(s: &str) -> Result<(Option<u32>, u32), ShardError> {
        let bad = || ShardError::Syntax(s.to_string());
        let num = |t: &str| {
            let t = t.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse::<u32>().map_err(|_| bad())
        };
        let (index, count) = match s.split_once('/') {
            Some((i, n)) if i.trim().is_empty() => (None, num(n)?),
            Some((i, n)) => (Some(num(i)?), num(n)?),
            None => (None, num(s)?),
        };
        if count == 0 {
            return Err(ShardError::ZeroCount);
        }
        if let Some(i) = index {
            Shard::new(i, count)?;
        }
        Ok((index, count))
    }

    /// Whether this is the whole plan (`count == 1`).
    pub const fn is_whole(self) -> bool {
        self.count == 1
    }

    /// Whether unit `unit` (a slot, an open-loop request index or a closed-loop user) is this shard's.
    #[inline]
    pub const fn owns(self, unit: u64) -> bool {
        unit % self.count as u64 == self.index as u64
    }

    /// The session slots of `slot_count` this shard runs, ascending (global numbers).
    pub fn slots(self, slot_count: u32) -> impl Iterator<Item = u32> {
        (self.index..slot_count).step_by(self.count as usize)
    }

    /// Closed loop: whether request `index` is this shard's, with `users` users that have a request
    /// (`min(users, num_requests)`): it belongs to user `index mod users`.
    #[inline]
    pub fn owns_closed_request(self, index: u64, users: u32) -> bool {
        self.owns(index % u64::from(users.max(1)))
    }

    /// Closed loop: the users that have a request, `min(users, requests)` (at least 1): what a shard splits.
    pub fn closed_loop_users(users: u32, requests: u64) -> u32 {
        users.min(u32::try_from(requests).unwrap_or(u32::MAX)).max(1)
    }

    /// Closed loop: how many of `users` users this shard runs.
    pub fn users(self, users: u32) -> u32 {
        self.slots(users).count() as u32
    }

    /// Refuses a plan of `units` units of kind `unit` with fewer units than shards.
    pub fn check(self, units: u64, unit: ShardUnit) -> Result<(), ShardError> {
        if units < u64::from(self.count) {
            return Err(ShardError::TooFewUnits {
                count: self.count,
                units,
                unit: unit.name(),
            });
        }
        Ok(())
    }

    /// A content nonce common to every shard of a run that starts at `start_at_unix_s` (when no `--nonce` is
    /// given, every shard derives the same one, so the shards send the single plan's text).
    pub fn nonce_for_start(start_at_unix_s: u64) -> u64 {
        // splitmix64's finaliser: nearby start times give unrelated nonces.
        let mut z = start_at_unix_s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % 1_000_000_007
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What one shard of a workload runs ([`Workload::shard`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ShardPlan {
    /// Agent sessions: the slots (global numbers) this shard runs.
    Sessions { slots: Vec<u32> },
    /// Open loop: this shard's requests with their global indices, in arrival order.
    Open(Vec<(u64, PlannedRequest)>),
    /// Closed loop: this shard's users and their requests (global indices, in plan order).
    Closed {
        users: u32,
        requests: Vec<(u64, PlannedRequest)>,
    },
}

impl Workload {
    /// The unit this workload is sharded by and how many the plan has.
    pub fn shard_units(&self) -> (ShardUnit, u64) {
        match self {
            Workload::Sessions(s) => (ShardUnit::Slots, u64::from(s.slot_count())),
            Workload::ClosedLoop(c) => (
                ShardUnit::Users,
                u64::from(Shard::closed_loop_users(c.users, c.num_requests)),
            ),
            _ => (ShardUnit::Requests, self.expected_requests()),
        }
    }

    /// Shard `shard` of the plan [`Workload::requests`]`(seed)` makes (sessions: of its slots); see the module docs.
    pub fn shard(&self, seed: u64, shard: Shard) -> Result<ShardPlan, ShardError> {
        let (unit, units) = self.shard_units();
        shard.check(units, unit)?;
        Ok(match self {
            Workload::Sessions(s) => ShardPlan::Sessions {
                slots: shard.slots(s.slot_count()).collect(),
            },
            Workload::ClosedLoop(_) => {
                let users = units as u32;
                ShardPlan::Closed {
                    users: shard.users(users),
                    requests: (0u64..)
                        .zip(self.requests(seed))
                        .filter(|(i, _)| shard.owns_closed_request(*i, users))
                        .collect(),
                }
            }
            _ => ShardPlan::Open(
                (0u64..)
                    .zip(self.requests(seed))
                    .filter(|(i, _)| shard.owns(*i))
                    .collect(),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_index_and_count_and_names_bad_input() {
        assert_eq!(Shard::parse("3/8"), Ok((Some(3), 8)));
        assert_eq!(Shard::parse("8"), Ok((None, 8)));
        assert_eq!(Shard::parse("/8"), Ok((None, 8)));
        assert_eq!(Shard::parse(" 0 / 1 "), Ok((Some(0), 1)));
        assert_eq!(
            Shard::parse("8/8"),
            Err(ShardError::IndexOutOfRange { index: 8, count: 8 })
        );
        assert_eq!(Shard::parse("0/0"), Err(ShardError::ZeroCount));
        for bad in ["", "a/3", "-1/3", "1/", "1/2/3", "1.5/3", "99999999999/3"] {
            assert!(matches!(Shard::parse(bad), Err(ShardError::Syntax(_))), "{bad:?}");
        }
        assert!(Shard::parse("x").unwrap_err().to_string().contains("\"x\""));
    }

    #[test]
    fn every_unit_has_exactly_one_shard() {
        for count in 1..=7u32 {
            for unit in 0..50u64 {
                let owners = (0..count).filter(|&i| Shard { index: i, count }.owns(unit)).count();
                assert_eq!(owners, 1, "unit {unit}, {count} shards");
            }
            let mut slots: Vec<u32> = (0..count).flat_map(|i| Shard { index: i, count }.slots(23)).collect();
            slots.sort_unstable();
            assert_eq!(slots, (0..23).collect::<Vec<_>>());
            assert_eq!((0..count).map(|i| Shard { index: i, count }.users(23)).sum::<u32>(), 23);
        }
    }

    #[test]
    fn too_few_units_is_refused_by_name() {
        let w: Workload =
            serde_json::from_str(r#"{"kind": "sessions", "sessions": 3, "steps": 2, "duration_s": 60.0}"#).unwrap();
        let e = w.shard(1, Shard::new(0, 4).unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the plan has 3 session slots, fewer than the 4 shards: every shard needs at least one"
        );
        assert!(w.shard(1, Shard::new(2, 3).unwrap()).is_ok());
    }
}
