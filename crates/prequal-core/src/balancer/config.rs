//! The balancer's configuration (the proxy's cluster keys and a scenario's `[clients]` keys)
//! and the values its decisions are phrased in.

use serde::{Deserialize, Serialize};

use crate::hedge::HedgeConfig;
use crate::outlier::OutlierConfig;
use crate::retry_budget::{BlockConfigError, RetryBudgetConfig};
use crate::slow_start::SlowStartConfig;

/// Everything around the policy, with the proxy's defaults. The keys are the proxy's
/// `[clusters.NAME]` keys of the same names and a scenario's `[clients]` keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BalancerConfig {
    /// Tries per request, the first included. Default 3; 1 disables retries.
    pub max_attempts: u32,
    /// The retry budget shared by all requests.
    pub retry_budget: RetryBudgetConfig,
    /// Whether replicas that keep failing are ejected. Default true.
    pub outlier_ejection: bool,
    /// Outlier ejection parameters.
    pub outlier: OutlierConfig,
    /// Slow start for replicas that join after the starting set.
    pub slow_start: SlowStartConfig,
    /// Hedging (its `enabled` key says whether requests are hedged; default true).
    pub hedge: HedgeConfig,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            retry_budget: RetryBudgetConfig::default(),
            outlier_ejection: true,
            outlier: OutlierConfig::default(),
            slow_start: SlowStartConfig::default(),
            hedge: HedgeConfig::default(),
        }
    }
}

impl BalancerConfig {
    /// Checks every parameter; the error names the block (`balancer` for `max_attempts`).
    pub fn validate(&self) -> Result<(), BlockConfigError> {
        if self.max_attempts == 0 {
            return Err(BlockConfigError::new(
                "balancer",
                "max_attempts",
                "must be at least 1",
            ));
        }
        self.retry_budget.validate()?;
        self.outlier.validate()?;
        self.slow_start.validate()?;
        self.hedge.validate()
    }
}

/// Whether [`super::Balancer::dispatch`] may fall back to a replica the request already tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strict {
    /// Yes, when no other is left (a retry on a one-replica cluster).
    No,
    /// Never (a retry beside a try still out: a second try to the same replica would only
    /// double its load).
    Yes,
    /// Never, and with hedging's `idle_only` to an idle replica (none of this balancer's tries
    /// in flight, none in its last load report, alive since the given time, the hedged
    /// request's start, and usually not much slower than the hedge delay; see
    /// [`crate::hedge::HedgeConfig::idle_only`]), the policy's pick when none is.
    Hedge(crate::time::Time),
}

/// What [`super::Balancer::try_retry`] says about a failed try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Retry: the budget is charged.
    Retry,
    /// The request used all of `max_attempts`.
    NoAttemptsLeft,
    /// The retry budget refused.
    OverBudget,
}

impl RetryDecision {
    /// True for [`RetryDecision::Retry`].
    pub fn is_retry(self) -> bool {
        self == RetryDecision::Retry
    }
}
