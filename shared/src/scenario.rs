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
use crate::seed_model::SeedScenario;

/// The scenario format version this build writes and the newest it reads.
pub const SCENARIO_VERSION: u32 = 1;

/// Why a scenario was rejected. The message always says which field and what value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// A field has a bad value: `path` is the dotted field path (`profile.max_batch_slots`).
    #[error("{path} {message}")]
    Field { path: String, message: String },
    /// The text is not a scenario at all (bad JSON, missing or unknown field, wrong type).
    #[error("invalid scenario: {0}")]
    Parse(String),
    /// The file declares a format version this build does not know.
    #[error(
        "version {found} is not supported: this loadshape reads scenario versions 1..={SCENARIO_VERSION}; \
         upgrade loadshape to read this file"
    )]
    UnsupportedVersion { found: String },
}

impl ScenarioError {
    /// A bad value in field `path`: `ScenarioError::field("workload.mean_rps", "must be > 0 (got 0)")`.
    pub fn field(path: impl Into<String>, message: impl Into<String>) -> Self {
        ScenarioError::Field {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error with `prefix.` put in front of its field path (for nested validation).
    pub fn within(self, prefix: &str) -> Self {
        match self {
            ScenarioError::Field { path, message } => ScenarioError::Field {
                path: format!("{prefix}.{path}"),
                message,
            },
            other => other,
        }
    }
}

/// One experiment: workload + engine profile + SLOs + model choice + seed.
///
/// Read scenarios with [`Scenario::from_json`] / [`Scenario::from_value`] and write them with
/// [`Scenario::to_value`] / [`Scenario::to_json_pretty`]: those handle `"version"`, validate, and report field
/// paths. The derived serde impls see only the tagged body (no `"version"`, no validation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum Scenario {
    /// The seed simulator's model, reproduced exactly.
    Seed(SeedScenario),
    /// The iteration-level engine model: continuous batching, KV blocks, prefix cache over block hashes.
    Engine(EngineScenario),
}

impl Scenario {
    /// Parse and validate a scenario from JSON text. Unknown fields and bad values are errors naming the field.
    pub fn from_json(text: &str) -> Result<Scenario, ScenarioError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        Scenario::from_value(value)
    }

    /// Parse and validate a scenario from an already-parsed JSON value (see [`Scenario::from_json`]).
    pub fn from_value(mut value: serde_json::Value) -> Result<Scenario, ScenarioError> {
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
