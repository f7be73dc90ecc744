//! Why a ruleset could not be loaded into the engine or the reference
//! evaluator.

use crate::core::IndexError;
use std::fmt;

/// Why a ruleset could not be loaded into the engine or the reference.
/// Neither can happen to a ruleset the compiler produced or the artifact
/// decoder accepted; both check what is checked here.
#[derive(Debug)]
#[non_exhaustive]
pub enum EngineError {
    /// The ruleset names a predicate, ip set or plan it does not hold.
    Index(IndexError),
    /// A field's prefix, suffix, substring and regex tests do not compile
    /// into one automaton.
    Scan {
        /// The field, as written in the language.
        field: String,
        /// The regex engine's reason.
        message: String,
    },
    /// A regex predicate does not compile.
    Regex {
        /// The pattern.
        pattern: String,
        /// The regex engine's reason.
        message: String,
    },
    /// A test's replayed traffic could not be read whole.
    Replay {
        /// The test.
        test: String,
        /// Why (the file and the reason).
        message: String,
    },
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Index(e) => write!(f, "{e}"),
            EngineError::Scan { field, message } => write!(f, "{field}: {message}"),
            EngineError::Regex { pattern, message } => write!(f, "regex {pattern:?}: {message}"),
            EngineError::Replay { test, message } => write!(f, "test {test:?}: {message}"),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<IndexError> for EngineError {
    fn from(e: IndexError) -> Self {
        EngineError::Index(e)
    }
}
