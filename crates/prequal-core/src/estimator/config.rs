//! [`EstimatorConfig`]: the load tracker's settings, their defaults and their validation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::buckets::RING;

/// Settings of the load tracker. Embedded (as `[estimator]` or similar) in the sidecar's and the
/// testbed backend's configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EstimatorConfig {
    /// `window`, default `"10ms"`: samples that finished within this span are "recent"; when at
    /// least `min_samples` of them are near the current RIF, only they count. Must be > 0.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// `min_samples`, default `16`: below this many recent samples, the estimate uses this many
    /// newest samples instead (the low-rate fallback, the paper's "last K"). Between 1 and 32.
    pub min_samples: usize,
    /// `rate_window`, default `"1s"`: the span over which qps and error rate are measured.
    /// Between 10 ms and 1 hour.
    #[serde(with = "humantime_serde")]
    pub rate_window: Duration,
    /// `max_age`, default `"1s"`: samples older than this are stale and never stand for the
    /// current RIF; they are used only when the replica has too few fresh samples at any RIF.
    /// Must be at least `window`.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// `in_flight_floor`, default `true`: when a query in flight that no later query has
    /// overtaken has waited longer than the slowest sample behind the median, the report grows
    /// by the difference, so a replica that stalls shows it before its first slow query
    /// finishes (see the module docs). `false` reports the median alone, as the Prequal paper
    /// does.
    pub in_flight_floor: bool,
    /// `stale_half_life`, default `"10s"`: once a replica has had no fresh sample at all for
    /// `max_age` (it gets no traffic), its estimate halves for every `stale_half_life` more, so
    /// a replica that was shunned for being slow is eventually tried again. `"0s"` keeps the
    /// stale estimate for ever.
    #[serde(with = "humantime_serde")]
    pub stale_half_life: Duration,
    /// `scale_above_samples`, default `true`: when the replica's RIF is above every bucket
    /// with fresh samples (its queue grew faster than queries finished), the estimate from the
    /// highest of those buckets is scaled by (RIF + 1) / (that bucket's RIF + 1), so a replica
    /// that was just handed a burst reports the longer wait instead of the latency of the
    /// shorter queue it had. `false` reports the lower RIFs' median as it is, as the Prequal
    /// paper does.
    pub scale_above_samples: bool,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_millis(10),
            min_samples: 16,
            rate_window: Duration::from_secs(1),
            max_age: Duration::from_secs(1),
            in_flight_floor: true,
            stale_half_life: Duration::from_secs(10),
            scale_above_samples: true,
        }
    }
}

/// An [`EstimatorConfig`] value the tracker cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("estimator: `{key}` {message}")]
pub struct EstimatorConfigError {
    /// The offending key.
    pub key: &'static str,
    /// What was wrong and what is expected.
    pub message: String,
}

impl EstimatorConfig {
    /// Checks every setting; the error names the offending key.
    pub fn validate(&self) -> Result<(), EstimatorConfigError> {
        let bad = |key, message: String| Err(EstimatorConfigError { key, message });
        if self.window.is_zero() {
            return bad("window", "must be greater than zero".into());
        }
        if !(1..=RING).contains(&self.min_samples) {
            return bad(
                "min_samples",
                format!("must be between 1 and {RING}, got {}", self.min_samples),
            );
        }
        let rate_range = Duration::from_millis(10)..=Duration::from_secs(3600);
        if !rate_range.contains(&self.rate_window) {
            return bad(
                "rate_window",
                format!("must be between 10ms and 1h, got {:?}", self.rate_window),
            );
        }
        if self.max_age < self.window {
            return bad(
                "max_age",
                format!(
                    "must be at least `window` ({:?}), got {:?}",
                    self.window, self.max_age
                ),
            );
        }
        Ok(())
    }
}
