//! The one description of an experiment: [`Scenario`], used by the CLI, the page, share links and live runs.
//!
//! A scenario file is JSON, internally tagged on `"model"`:
//! - `"seed"`: [`crate::seed_model::SeedScenario`], the seed simulator's model exactly;
//! - `"engine"`: [`crate::engine::EngineScenario`], the iteration-level engine model.
//!
//! An optional top-level `"version"` (default 1) guards the format: a file written by a newer loadshape is rejected
//! with a message saying so instead of being misread. Unknown fields are rejected, naming the field.
//!
//! Every error is a [`ScenarioError`] whose message names the offending field path and value
//! (`workload.mean_rps must be > 0 (got 0)`).

use serde::{Deserialize, Serialize};

use crate::engine::EngineScenario;
pub use crate::error::{SCENARIO_VERSION, ScenarioError};
use crate::seed_model::SeedScenario;

/// One experiment: workload + engine profile + SLOs + model choice + seed.
///
/// Read scenarios with [`Scenario::from_json`] / [`Scenario::from_value`] and write them with
/// [`Scenario::to_value`] / [`Scenario::to_json_pretty`]: those handle `"version"`, validate, and report field
/// paths. The derived serde impls see only the tagged body (no `"version"`, no validation).
// A run holds one `Scenario`, so the engine variant's size (≈ 370 bytes, ≈ 200 more than the seed's) costs
// nothing worth a `Box` in every match on it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum Scenario {
    /// The seed simulator's model, reproduced exactly.
    Seed(SeedScenario),
    /// The iteration-level engine model: continuous batching, KV blocks, prefix cache over block hashes.
    Engine(EngineScenario),
}

impl Scenario {
    /// Parse and validate a scenario from JSON text. Unknown fields, duplicate keys and bad values are errors
    /// naming the field; a leading UTF-8 byte order mark is skipped. Every part of an error message is cut to
    /// [`crate::error::MAX_MESSAGE_CHARS`] characters.
    // `#[inline]` on this file's cold serde entry points (not for speed): their code, with the serde code they
    // instantiate, is compiled in the calling crate, so the page builds it at its size-optimized opt-level while
    // the engine stays at `shared`'s opt-level 3 (docs/page.md, "Budget": -39 KB gzip).
    #[inline]
    pub fn from_json(text: &str) -> Result<Scenario, ScenarioError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let parsed = serde_json::from_str::<serde_json::Value>(text).and_then(|value| {
            // serde_json keeps the last of two equal keys; a second pass over the text refuses them instead.
            let mut de = serde_json::Deserializer::from_str(text);
            serde::de::DeserializeSeed::deserialize(NoDuplicateKeys { path: "" }, &mut de)?;
            Ok(value)
        });
        let value = parsed.map_err(|e| ScenarioError::Parse(e.to_string()).bounded())?;
        Scenario::from_value(value)
    }

    /// Parse and validate a scenario from an already-parsed JSON value (see [`Scenario::from_json`]).
    #[inline]
    pub fn from_value(value: serde_json::Value) -> Result<Scenario, ScenarioError> {
        Scenario::from_value_unbounded(value).map_err(ScenarioError::bounded)
    }

    #[inline]
    fn from_value_unbounded(mut value: serde_json::Value) -> Result<Scenario, ScenarioError> {
        let serde_json::Value::Object(map) = &mut value else {
            return Err(ScenarioError::Parse(format!(
                "a scenario is a JSON object (got {value})"
            )));
        };
        if let Some(version) = map.remove("version") {
            match version.as_u64() {
                Some(v) if (1..=u64::from(SCENARIO_VERSION)).contains(&v) => {}
                Some(v) if v > u64::from(SCENARIO_VERSION) => {
                    return Err(ScenarioError::UnsupportedVersion { found: v.to_string() });
                }
                _ => {
                    return Err(ScenarioError::field(
                        "version",
                        format!("must be an integer >= 1 (got {version})"),
                    ));
                }
            }
        }
        let model = map.remove("model");
        let scenario = match model.as_ref().and_then(|m| m.as_str()) {
            Some("seed") => Scenario::Seed(deserialize_tracked(value)?),
            Some("engine") => Scenario::Engine(deserialize_tracked(value)?),
            _ => {
                let got = model.map_or_else(|| "nothing".to_string(), |m| m.to_string());
                return Err(ScenarioError::field(
                    "model",
                    format!("must be one of \"seed\", \"engine\" (got {got})"),
                ));
            }
        };
        scenario.validate()?;
        Ok(scenario)
    }

    /// The service-level objectives goodput and attainment are scored against.
    pub fn slo(&self) -> crate::metrics::Slo {
        match self {
            Scenario::Seed(s) => s.slo,
            Scenario::Engine(e) => e.slo,
        }
    }

    /// Check every field; the first bad one is reported.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        match self {
            Scenario::Seed(s) => s.validate(),
            Scenario::Engine(s) => s.validate(),
        }
    }

    /// The scenario as a JSON value, with `"version"`.
    #[inline]
    pub fn to_value(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        out.insert("version".to_string(), serde_json::Value::from(SCENARIO_VERSION));
        // Serializing plain structs of numbers and strings cannot fail.
        if let Ok(serde_json::Value::Object(body)) = serde_json::to_value(self) {
            out.extend(body);
        }
        serde_json::Value::Object(out)
    }

    /// Pretty JSON (two-space indent) with `"version"`, readable back by [`Scenario::from_json`].
    #[inline]
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(&self.to_value()).unwrap_or_default()
    }
}

/// Deserialize one variant's body, reporting the dotted path of a bad field (`workload.num_requests: invalid type:
/// floating point `80.5`, expected u64`). The variants are read as plain structs here because serde loses paths
/// inside internally tagged enums.
fn deserialize_tracked<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, ScenarioError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            ScenarioError::Parse(inner)
        } else {
            ScenarioError::Parse(format!("{path}: {inner}"))
        }
    })
}

/// Walks a JSON document and fails on the first object that has a key twice, naming the key by its dotted path
/// (`duplicate key \`workload.mean_rps\``; serde_json adds the line and column). It keeps nothing but the keys of
/// the objects open on the way down.
struct NoDuplicateKeys<'a> {
    path: &'a str,
}

impl<'de> serde::de::DeserializeSeed<'de> for NoDuplicateKeys<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let path = format!("{}[{i}]", self.path);
            if seq.next_element_seed(NoDuplicateKeys { path: &path })?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            // Bounded at every level, so a huge key under deep nesting cannot multiply into huge paths.
            let path = crate::error::bounded(&if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            });
            if !seen.insert(key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key `{path}` (each key may appear once)"
                )));
            }
            map.next_value_seed(NoDuplicateKeys { path: &path })?;
        }
        Ok(())
    }
}
