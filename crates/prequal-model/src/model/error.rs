//! [`ModelError`], what every part of the model returns when a scenario's parameter is wrong.

/// A model parameter was wrong; `key` is the dotted path in the scenario file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A value was out of range or inconsistent.
    #[error("`{key}`: {message}")]
    Invalid {
        /// Dotted key path, such as `servers.episodes[0].end`.
        key: String,
        /// What was wrong and what is expected.
        message: String,
    },
    /// A trace file line could not be read.
    #[error("{file}:{line}: {message}")]
    Trace {
        /// The trace file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
}

impl ModelError {
    /// Shorthand for [`ModelError::Invalid`].
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}
