//! The contract each policy's `Config` implements: [`BuildPolicy`], the [`PolicyInfo`] and
//! [`ParamDoc`]s a policy documents itself with, and the [`ConfigError`] its validation returns.
//! The policies use it from here and [`crate::config`] re-exports it, so the policies never reach
//! back to the [`PolicyConfig`](crate::config::PolicyConfig) that lists them all.

use serde::Serialize;

use crate::policy::Policy;
use crate::retry_budget::BlockConfigError;

/// A configuration parameter was out of range or inconsistent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// No policy has this name.
    #[error("unknown policy {name:?}; expected one of: {known}")]
    UnknownPolicy {
        /// The name that was given.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
    /// A parameter had a value the policy cannot use.
    #[error("policy {policy:?}: parameter `{key}` {message}")]
    InvalidParam {
        /// The policy's name.
        policy: &'static str,
        /// The parameter's key.
        key: &'static str,
        /// What was wrong and what is expected.
        message: String,
    },
    /// A building block around the policy (the balancer's `max_attempts`, retry budget,
    /// outlier ejection, slow start, hedging) was configured wrongly.
    #[error(transparent)]
    Block(#[from] BlockConfigError),
}

impl ConfigError {
    /// Shorthand for [`ConfigError::InvalidParam`].
    pub fn invalid(policy: &'static str, key: &'static str, message: impl Into<String>) -> Self {
        ConfigError::InvalidParam {
            policy,
            key,
            message: message.into(),
        }
    }
}

/// One documented parameter of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParamDoc {
    /// The TOML key.
    pub key: &'static str,
    /// The default, written as it would be in TOML.
    pub default: &'static str,
    /// What it does and the range it accepts.
    pub doc: &'static str,
}

/// What `prequal policies` and docs/policies.md say about a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PolicyInfo {
    /// The config name.
    pub name: &'static str,
    /// The load signal it uses.
    pub signal: &'static str,
    /// The selection rule, in one sentence.
    pub rule: &'static str,
    /// Where the rule comes from.
    pub source: &'static str,
    /// Its parameters with their defaults.
    pub params: &'static [ParamDoc],
}

/// Implemented by each policy's `Config`: documentation, validation, construction.
pub trait BuildPolicy {
    /// The policy's documentation and parameter table.
    const INFO: PolicyInfo;

    /// Checks every parameter; the error names the offending key.
    fn validate(&self) -> Result<(), ConfigError>;

    /// Builds a fresh policy instance (assumes [`BuildPolicy::validate`] passed).
    fn build(&self) -> Box<dyn Policy>;
}
