//! The balancer keys of a scenario: retries, the retry budget, outlier ejection and slow start,
//! set for every client in `[clients]` or for one contender in its table, with the keys and
//! types of the proxy's `[clusters.NAME]` (prequal-core's [`BalancerConfig`]).

use prequal_core::outlier::OutlierConfig;
use prequal_core::retry_budget::{BlockConfigError, RetryBudgetConfig};
use prequal_core::slow_start::SlowStartConfig;
use prequal_core::{BalancerConfig, HedgeConfig};
use serde::{Deserialize, Serialize};

use crate::model::ModelError;

/// The balancer keys a scenario sets; an unset key takes the proxy's default, so a scenario
/// that sets none simulates what `prequal proxy` does with zero config (hedging aside: it is
/// off unless `hedge` is set, see [`crate::scenario::ClientsSpec::hedge`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalancerKeys {
    /// Tries per query, the first included (default 3; 1 disables retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The retry budget shared by a client's queries (prequal-core defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<RetryBudgetConfig>,
    /// Whether replicas that keep failing are ejected (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_ejection: Option<bool>,
    /// Outlier ejection parameters (prequal-core defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<OutlierConfig>,
    /// Slow start for replicas that join after the start (prequal-core defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<SlowStartConfig>,
}

impl BalancerKeys {
    /// The keys, as they are spelled in a scenario.
    pub const NAMES: [&'static str; 5] = [
        "max_attempts",
        "retry_budget",
        "outlier_ejection",
        "outlier",
        "slow_start",
    ];

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// These keys, each falling back to `base`'s where unset (a contender's over `[clients]`).
    pub fn over(&self, base: &BalancerKeys) -> BalancerKeys {
        BalancerKeys {
            max_attempts: self.max_attempts.or(base.max_attempts),
            retry_budget: self.retry_budget.clone().or(base.retry_budget.clone()),
            outlier_ejection: self.outlier_ejection.or(base.outlier_ejection),
            outlier: self.outlier.clone().or(base.outlier.clone()),
            slow_start: self.slow_start.clone().or(base.slow_start.clone()),
        }
    }

    /// The balancer's whole config: these keys, the proxy's defaults for the rest, and
    /// `hedge` (hedging off without one).
    pub fn config(&self, hedge: Option<&HedgeConfig>) -> BalancerConfig {
        let defaults = BalancerConfig::default();
        let off = HedgeConfig {
            enabled: false,
            ..HedgeConfig::default()
        };
        BalancerConfig {
            max_attempts: self.max_attempts.unwrap_or(defaults.max_attempts),
            retry_budget: self.retry_budget.clone().unwrap_or(defaults.retry_budget),
            outlier_ejection: self.outlier_ejection.unwrap_or(defaults.outlier_ejection),
            outlier: self.outlier.clone().unwrap_or(defaults.outlier),
            slow_start: self.slow_start.clone().unwrap_or(defaults.slow_start),
            hedge: hedge.cloned().unwrap_or(off),
        }
    }

    /// Checks the keys that are set; errors name the key under `prefix` (`clients.` or
    /// `contenders[2].`).
    pub fn validate(&self, prefix: &str) -> Result<(), ModelError> {
        let block = |e: BlockConfigError| {
            ModelError::invalid(format!("{prefix}{}.{}", e.component, e.key), e.message)
        };
        if self.max_attempts == Some(0) {
            return Err(ModelError::invalid(
                format!("{prefix}max_attempts"),
                "must be at least 1 (1 disables retries)",
            ));
        }
        if let Some(b) = &self.retry_budget {
            b.validate().map_err(block)?;
        }
        if let Some(o) = &self.outlier {
            o.validate().map_err(block)?;
        }
        if let Some(s) = &self.slow_start {
            s.validate().map_err(block)?;
        }
        Ok(())
    }

    /// ` +key=value` for each key set, tables with their keys that differ from the defaults
    /// (` +outlier (base_ejection="1s")`), for a contender's label.
    pub fn label(&self) -> String {
        let table = toml::Table::try_from(self).unwrap_or_default();
        let defaults = toml::Table::try_from(BalancerConfig::default()).unwrap_or_default();
        let mut out = String::new();
        for name in Self::NAMES {
            let Some(value) = table.get(name) else {
                continue;
            };
            match (
                value.as_table(),
                defaults.get(name).and_then(|d| d.as_table()),
            ) {
                (Some(set), Some(default)) => {
                    let extra: Vec<String> = set
                        .iter()
                        .filter(|(k, v)| default.get(*k) != Some(*v))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    match extra.is_empty() {
                        true => out.push_str(&format!(" +{name}")),
                        false => out.push_str(&format!(" +{name} ({})", extra.join(", "))),
                    }
                }
                _ => out.push_str(&format!(" +{name}={value}")),
            }
        }
        out
    }
}
