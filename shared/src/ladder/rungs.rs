//! The [`Ladder`] itself: its [`Rung`]s, the text form `base:steps,...`, its limits and [`LadderError`].
//!
//! Kept apart from `ladder/mod.rs`, which only declares and re-exports, so that `stats`, `solve` and `fit` import
//! the ladder type from here and no file of `ladder` imports another that imports it back.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The ladder the seed hand-solved against production (median 26,032, p90 64,648) for G = 2,703, reply 700,
/// under `respawn`: median 26,015, p90 64,560, 92.80 % of prompt tokens cached.
pub const LADDER_PROD: &str = "3500:9,4000:9,5000:28,6000:23,7000:16,9000:28,9500:7,10500:23,12500:30,20500:19";

/// Largest base context a rung may ask for, tokens. Larger is not a session shape, it is a typo.
pub const MAX_BASE_TOKENS: u64 = 10_000_000;
/// Most steps a rung may ask for.
pub const MAX_STEPS: u32 = 100_000;
/// Most rungs (session slots) a ladder may have.
pub const MAX_RUNGS: usize = 4_096;

/// One session slot: `base_tokens` of starting context, then `steps` requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rung {
    /// Starting context of the session (before the task suffix), tokens. At least 1.
    pub base_tokens: u64,
    /// Requests the session makes. At least 1.
    pub steps: u32,
}

/// A fixed list of session shapes; slot `i` of a replay runs `rungs[i % len]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ladder {
    pub rungs: Vec<Rung>,
}

/// Why a ladder string or value was rejected. Rung numbers are 1-based, as a user counts them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LadderError {
    #[error("ladder is empty: expected `base:steps,base:steps,...` (e.g. `3500:9,4000:9`)")]
    Empty,
    #[error("ladder rung {rung} (`{text}`): expected `base:steps`, e.g. `3500:9`")]
    Syntax { rung: usize, text: String },
    #[error("ladder rung {rung}: {field} must be a whole number (got `{text}`)")]
    NotNumeric {
        rung: usize,
        field: &'static str,
        text: String,
    },
    #[error("ladder rung {rung}: steps must be ≥ 1 (got 0)")]
    ZeroSteps { rung: usize },
    #[error("ladder rung {rung}: base_tokens must be ≥ 1 (got 0)")]
    ZeroBase { rung: usize },
    #[error("ladder rung {rung}: {field} must be ≤ {max} (got {value})")]
    TooLarge {
        rung: usize,
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("ladder has {count} rungs; at most {max} are allowed")]
    TooManyRungs { count: usize, max: usize },
}

impl Rung {
    pub const fn new(base_tokens: u64, steps: u32) -> Self {
        Self { base_tokens, steps }
    }

    /// Check one rung; `rung` is its 1-based position for the message.
    fn validate(&self, rung: usize) -> Result<(), LadderError> {
        if self.steps == 0 {
            return Err(LadderError::ZeroSteps { rung });
        }
        if self.base_tokens == 0 {
            return Err(LadderError::ZeroBase { rung });
        }
        if self.base_tokens > MAX_BASE_TOKENS {
            return Err(LadderError::TooLarge {
                rung,
                field: "base_tokens",
                value: self.base_tokens,
                max: MAX_BASE_TOKENS,
            });
        }
        if self.steps > MAX_STEPS {
            return Err(LadderError::TooLarge {
                rung,
                field: "steps",
                value: u64::from(self.steps),
                max: u64::from(MAX_STEPS),
            });
        }
        Ok(())
    }
}

impl Ladder {
    /// A validated ladder.
    pub fn new(rungs: Vec<Rung>) -> Result<Self, LadderError> {
        let ladder = Self { rungs };
        ladder.validate()?;
        Ok(ladder)
    }

    /// The seed's production ladder, [`LADDER_PROD`].
    pub fn prod() -> Self {
        // Covered by a unit test; the constant is a valid ladder.
        LADDER_PROD.parse().unwrap_or_else(|_| Self { rungs: Vec::new() })
    }

    /// Check every rung and the rung count. Values built field by field should be validated before use.
    pub fn validate(&self) -> Result<(), LadderError> {
        if self.rungs.is_empty() {
            return Err(LadderError::Empty);
        }
        if self.rungs.len() > MAX_RUNGS {
            return Err(LadderError::TooManyRungs {
                count: self.rungs.len(),
                max: MAX_RUNGS,
            });
        }
        for (i, rung) in self.rungs.iter().enumerate() {
            rung.validate(i + 1)?;
        }
        Ok(())
    }

    /// Number of session slots.
    pub fn slots(&self) -> usize {
        self.rungs.len()
    }

    /// Requests in one pass over every slot (Σ steps).
    pub fn requests_per_pass(&self) -> u64 {
        self.rungs.iter().map(|r| u64::from(r.steps)).sum()
    }

    /// The rung slot `slot` runs (slots cycle through the ladder). `None` only for an empty ladder.
    pub fn rung_for_slot(&self, slot: usize) -> Option<Rung> {
        if self.rungs.is_empty() {
            None
        } else {
            Some(self.rungs[slot % self.rungs.len()])
        }
    }
}

fn parse_number(rung: usize, field: &'static str, text: &str) -> Result<u64, LadderError> {
    let t = text.trim();
    let numeric = || LadderError::NotNumeric {
        rung,
        field,
        text: crate::error::bounded(t),
    };
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b == b'_') || t.starts_with('_') {
        return Err(numeric());
    }
    let digits: String = t.chars().filter(|c| *c != '_').collect();
    digits.parse::<u64>().map_err(|_| LadderError::TooLarge {
        rung,
        field,
        value: u64::MAX,
        max: if field == "steps" {
            u64::from(MAX_STEPS)
        } else {
            MAX_BASE_TOKENS
        },
    })
}

impl FromStr for Ladder {
    type Err = LadderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut rungs = Vec::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let rung = rungs.len() + 1;
            if rungs.len() >= MAX_RUNGS {
                let count = s.split(',').filter(|e| !e.trim().is_empty()).count();
                return Err(LadderError::TooManyRungs { count, max: MAX_RUNGS });
            }
            let Some((base, steps)) = entry.split_once(':') else {
                return Err(LadderError::Syntax {
                    rung,
                    text: crate::error::bounded(entry),
                });
            };
            if steps.contains(':') {
                return Err(LadderError::Syntax {
                    rung,
                    text: crate::error::bounded(entry),
                });
            }
            let base_tokens = parse_number(rung, "base_tokens", base)?;
            let steps = parse_number(rung, "steps", steps)?;
            let steps = u32::try_from(steps).map_err(|_| LadderError::TooLarge {
                rung,
                field: "steps",
                value: steps,
                max: u64::from(MAX_STEPS),
            })?;
            let r = Rung { base_tokens, steps };
            r.validate(rung)?;
            rungs.push(r);
        }
        Ladder::new(rungs)
    }
}

impl fmt::Display for Rung {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.base_tokens, self.steps)
    }
}

impl fmt::Display for Ladder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.rungs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl Serialize for Ladder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ladder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prod_parses_and_round_trips() {
        let l: Ladder = LADDER_PROD.parse().expect("prod ladder parses");
        assert_eq!(l.slots(), 10);
        assert_eq!(l.rungs[0], Rung::new(3500, 9));
        assert_eq!(l.rungs[9], Rung::new(20500, 19));
        assert_eq!(l.to_string(), LADDER_PROD);
        assert_eq!(Ladder::prod(), l);
        assert_eq!(l.requests_per_pass(), 9 + 9 + 28 + 23 + 16 + 28 + 7 + 23 + 30 + 19);
    }

    #[test]
    fn whitespace_and_trailing_comma_are_accepted() {
        let l: Ladder = " 3500 : 9 , 4000:9, ".parse().expect("parses");
        assert_eq!(l.to_string(), "3500:9,4000:9");
    }

    #[test]
    fn errors_name_the_rung_and_value() {
        let e = |s: &str| s.parse::<Ladder>().expect_err(s).to_string();
        assert!(e("").contains("empty"));
        assert!(e(" , ").contains("empty"));
        assert_eq!(e("3500:9,4000:0"), "ladder rung 2: steps must be ≥ 1 (got 0)");
        assert_eq!(e("3500:x"), "ladder rung 1: steps must be a whole number (got `x`)");
        assert_eq!(
            e("3.5k:9"),
            "ladder rung 1: base_tokens must be a whole number (got `3.5k`)"
        );
        assert_eq!(
            e("-3:9"),
            "ladder rung 1: base_tokens must be a whole number (got `-3`)"
        );
        assert!(e("3500").contains("expected `base:steps`"));
        assert!(e("3500:9:1").contains("expected `base:steps`"));
        assert_eq!(e("0:9"), "ladder rung 1: base_tokens must be ≥ 1 (got 0)");
        assert_eq!(
            e("99999999999:9"),
            "ladder rung 1: base_tokens must be ≤ 10000000 (got 99999999999)"
        );
        assert_eq!(e("3500:100001"), "ladder rung 1: steps must be ≤ 100000 (got 100001)");
        assert!(e("3500:99999999999999999999999").contains("steps must be ≤ 100000"));
        let many = vec!["1:1"; MAX_RUNGS + 1].join(",");
        assert!(e(&many).contains("at most 4096"));
    }

    #[test]
    fn serde_is_the_string_form() {
        let l: Ladder = "3500:9,4000:9".parse().expect("parses");
        let json = serde_json::to_string(&l).expect("serializes");
        assert_eq!(json, "\"3500:9,4000:9\"");
        let back: Ladder = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, l);
        let bad = serde_json::from_str::<Ladder>("\"3500:0\"").expect_err("zero steps");
        assert!(bad.to_string().contains("steps must be ≥ 1"));
    }

    #[test]
    fn validate_catches_field_built_values() {
        let l = Ladder {
            rungs: vec![Rung::new(3500, 9), Rung::new(4000, 0)],
        };
        assert_eq!(l.validate(), Err(LadderError::ZeroSteps { rung: 2 }));
        assert_eq!(Ladder { rungs: vec![] }.validate(), Err(LadderError::Empty));
        assert_eq!(l.rung_for_slot(3), Some(Rung::new(4000, 0)));
    }
}
