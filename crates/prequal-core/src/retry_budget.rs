//! A retry budget: retries may add at most a share of the traffic, plus a small floor.
//!
//! Retrying failed requests hides transient faults, but unbounded retries turn an overloaded
//! cluster into a more overloaded one (each failure breeds more requests). A budget caps the
//! extra load: over the sliding `window` (default 10 s), the retries admitted may not exceed
//! `ratio` (default 0.2, i.e. 20%) of the original requests seen in that window, plus a floor
//! of `min_per_second` (default 10) retries per second so that a lightly loaded client can
//! still retry at all. This is the scheme of Finagle's and Linkerd's retry budgets.
//!
//! The window is kept in [`BUCKETS`] buckets of `window / BUCKETS` each, so memory is constant
//! whatever the rate. The rounding is made to err on the safe side: retries are counted over a
//! span that covers at least the whole window ending now, requests only over buckets that lie
//! wholly inside it. Hence the guarantee a test checks: whenever a retry is admitted at time
//! `t`, the retries admitted in `(t − window, t]` are at most
//! `ratio × requests in (t − window, t] + min_per_second × window`.
//!
//! Sans-IO: [`RetryBudget::on_request`] and [`RetryBudget::try_retry`] take `now`; reads such as
//! [`RetryBudget::available`] are pure. Retries are not requests: call `on_request` only for
//! originals, so retries cannot earn budget for further retries.
//!
//! ```
//! use prequal_core::retry_budget::{RetryBudget, RetryBudgetConfig};
//! use prequal_core::Time;
//!
//! let config = RetryBudgetConfig { min_per_second: 0.0, ..RetryBudgetConfig::default() };
//! let mut budget = RetryBudget::new(&config).unwrap();
//! for _ in 0..10 {
//!     budget.on_request(Time::ZERO);
//! }
//! assert!(budget.try_retry(Time::ZERO) && budget.try_retry(Time::ZERO)); // 20% of 10
//! assert!(!budget.try_retry(Time::ZERO));
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sliding_window::SlidingWindow;
use crate::time::Time;

pub use crate::sliding_window::BUCKETS;

/// Why a building block's configuration was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{component}: `{key}` {message}")]
pub struct BlockConfigError {
    /// Which building block (`retry_budget`, `outlier`, `slow_start`).
    pub component: &'static str,
    /// The offending key.
    pub key: &'static str,
    /// What was wrong and what is expected.
    pub message: String,
}

impl BlockConfigError {
    pub(crate) fn new(component: &'static str, key: &'static str, message: &str) -> Self {
        Self {
            component,
            key,
            message: message.to_string(),
        }
    }
}

/// Retry budget parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryBudgetConfig {
    /// Retries allowed as a share of original requests in the window. Default 0.2; >= 0.
    pub ratio: f64,
    /// Retries allowed per second regardless of traffic. Default 10; >= 0.
    pub min_per_second: f64,
    /// The sliding window. Default "10s"; at least 10 ms.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        Self {
            ratio: 0.2,
            min_per_second: 10.0,
            window: Duration::from_secs(10),
        }
    }
}

impl RetryBudgetConfig {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), BlockConfigError> {
        let err = |key, msg| Err(BlockConfigError::new("retry_budget", key, msg));
        if !(self.ratio.is_finite() && self.ratio >= 0.0) {
            return err("ratio", "must be a finite number >= 0");
        }
        if !(self.min_per_second.is_finite() && self.min_per_second >= 0.0) {
            return err("min_per_second", "must be a finite number >= 0");
        }
        if self.window < Duration::from_millis(10) {
            return err("window", "must be at least 10ms");
        }
        Ok(())
    }
}

/// A retry budget. See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryBudget {
    ratio: f64,
    floor: f64,
    /// Counts `(requests, retries)`.
    counts: SlidingWindow,
}

impl RetryBudget {
    /// A budget with the given parameters, validated.
    pub fn new(config: &RetryBudgetConfig) -> Result<Self, BlockConfigError> {
        config.validate()?;
        Ok(Self {
            ratio: config.ratio,
            floor: config.min_per_second * config.window.as_secs_f64(),
            counts: SlidingWindow::new(config.window),
        })
    }

    /// An original (not retried) request was sent at `now`.
    pub fn on_request(&mut self, now: Time) {
        self.counts.add(now, 1, 0);
    }

    /// Retries admitted in the window ending at `now` (counted generously, see module docs).
    pub fn retries_in_window(&self, now: Time) -> u64 {
        self.counts.sum(now, BUCKETS as u64 + 1).1
    }

    /// How many more retries would be admitted at `now`. Pure.
    pub fn available(&self, now: Time) -> u64 {
        let requests = self.counts.sum_window(now).0;
        let allowance = (self.ratio * requests as f64 + self.floor).floor();
        // Saturating float-to-int conversion is the intent: allowances beyond u64 are unbounded.
        let allowance = allowance as u64;
        allowance.saturating_sub(self.retries_in_window(now))
    }

    /// Asks to retry at `now`: true (and the retry is charged) if the budget allows it.
    pub fn try_retry(&mut self, now: Time) -> bool {
        let admitted = self.available(now) > 0;
        if admitted {
            self.counts.add(now, 0, 1);
        }
        tracing::trace!(now_ns = now.as_nanos(), admitted, "retry budget");
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::duration_nanos;
    use proptest::prelude::*;

    fn budget(ratio: f64, min_per_second: f64, window_s: u64) -> RetryBudget {
        RetryBudget::new(&RetryBudgetConfig {
            ratio,
            min_per_second,
            window: Duration::from_secs(window_s),
        })
        .unwrap()
    }

    #[test]
    fn floor_alone_allows_min_per_second_times_window() {
        let mut b = budget(0.2, 10.0, 10);
        let admitted = (0..500).filter(|_| b.try_retry(Time::from_secs(1))).count();
        assert_eq!(admitted, 100);
    }

    #[test]
    fn budget_refills_once_the_window_passes() {
        let mut b = budget(0.5, 0.0, 10);
        (0..4).for_each(|_| b.on_request(Time::ZERO));
        assert_eq!(b.available(Time::ZERO), 2);
        assert!(b.try_retry(Time::ZERO) && b.try_retry(Time::ZERO));
        assert!(!b.try_retry(Time::from_secs(5)));
        // The requests expire with the retries; new requests earn new budget.
        (0..2).for_each(|_| b.on_request(Time::from_secs(12)));
        assert!(b.try_retry(Time::from_secs(12)));
        assert!(!b.try_retry(Time::from_secs(12)));
    }

    #[test]
    fn rejects_bad_config_by_key() {
        let bad = RetryBudgetConfig {
            ratio: -1.0,
            ..RetryBudgetConfig::default()
        };
        assert_eq!(RetryBudget::new(&bad).unwrap_err().key, "ratio");
        let bad = RetryBudgetConfig {
            window: Duration::ZERO,
            ..RetryBudgetConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "window");
        let parsed: RetryBudgetConfig = toml::from_str("window = \"2s\"\nratio = 0.1").unwrap();
        assert_eq!(parsed.window, Duration::from_secs(2));
        assert_eq!(parsed.min_per_second, 10.0);
        assert!(toml::from_str::<RetryBudgetConfig>("ratoi = 1").is_err());
    }

    proptest! {
        /// Against a brute-force log: at every admitted retry, the retries in the window ending
        /// there never exceed the share of requests in that window plus the floor.
        #[test]
        fn never_exceeds_share_plus_floor_over_any_window(
            events in prop::collection::vec((0u64..400, any::<bool>()), 1..600),
            ratio in 0.0f64..1.0,
            floor in 0.0f64..3.0,
        ) {
            let window = Duration::from_secs(2);
            let mut b = RetryBudget::new(&RetryBudgetConfig {
                ratio, min_per_second: floor, window,
            }).unwrap();
            let (mut now, mut requests, mut retries) = (Time::ZERO, Vec::new(), Vec::new());
            for (gap_ms, is_retry) in events {
                now = now + Duration::from_millis(gap_ms);
                if !is_retry {
                    b.on_request(now);
                    requests.push(now);
                } else if b.try_retry(now) {
                    retries.push(now);
                    let start = now.as_nanos().saturating_sub(duration_nanos(window));
                    let inside = |t: &&Time| t.as_nanos() > start || start == 0;
                    let n_req = requests.iter().filter(inside).count() as f64;
                    let n_ret = retries.iter().filter(inside).count() as f64;
                    prop_assert!(n_ret <= ratio * n_req + floor * 2.0 + 1e-9,
                        "{n_ret} retries vs {n_req} requests at {now:?}");
                }
            }
        }
    }
}
