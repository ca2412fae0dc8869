//! [`ScenarioError`], the one error every scenario check returns (`workload.mean_rps must be > 0 (got 0)`).
//!
//! It lives in its own module so the modules that validate parts of a scenario (`engine`, `seed_model`,
//! `workload`, `metrics`) need not import `scenario`, which imports them: no two modules of `shared` import each
//! other, directly or around a loop. `scenario` re-exports it.

/// The scenario format version this build writes and the newest it reads.
pub const SCENARIO_VERSION: u32 = 1;

/// Most characters of one part of an error message (a path, a message, a found version). A longer part keeps its
/// head and tail, which name what is wrong and where (`… expected u64 at line 1 column 10000023`), and says how
/// much was cut: a 10 MB value in a scenario never becomes a 10 MB message.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// `text` cut to at most about [`MAX_MESSAGE_CHARS`] characters: its first and last 140 with `…[N bytes cut]…`
/// between them.
pub fn bounded(text: &str) -> String {
    const KEEP: usize = 140;
    if text.chars().count() <= MAX_MESSAGE_CHARS {
        return text.to_string();
    }
    let head_end = text.char_indices().nth(KEEP).map_or(text.len(), |(i, _)| i);
    let tail_start = text.char_indices().rev().nth(KEEP - 1).map_or(0, |(i, _)| i);
    format!(
        "{}…[{} bytes cut]…{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

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

    /// The same error with every part cut to [`MAX_MESSAGE_CHARS`] (see [`bounded`]).
    pub fn bounded(self) -> Self {
        match self {
            ScenarioError::Field { path, message } => ScenarioError::Field {
                path: bounded(&path),
                message: bounded(&message),
            },
            ScenarioError::Parse(m) => ScenarioError::Parse(bounded(&m)),
            ScenarioError::UnsupportedVersion { found } => ScenarioError::UnsupportedVersion { found: bounded(&found) },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_head_and_tail_of_long_text() {
        assert_eq!(bounded("short"), "short");
        let long = format!(
            "invalid type: string \"{}\", expected u64 at line 1 column 9",
            "é".repeat(10_000)
        );
        let cut = bounded(&long);
        assert!(cut.chars().count() <= MAX_MESSAGE_CHARS + 40, "{}", cut.len());
        assert!(cut.starts_with("invalid type: string"), "{cut}");
        assert!(cut.ends_with("expected u64 at line 1 column 9"), "{cut}");
        assert!(cut.contains("bytes cut"), "{cut}");
    }
}
