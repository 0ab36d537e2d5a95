//! Slow start: a replica that just joined gets a growing share of traffic, not a full one.
//!
//! A fresh replica often serves its first queries slowly (cold caches, JIT warm-up, lazily opened
//! connections), and a latency- or load-aware policy may find it attractive precisely because it
//! has nothing in flight. Slow start scales the replica's weight by a factor that rises from a
//! floor to 1 over a window after the replica was added at `t0`, with Envoy's curve:
//!
//! `factor(now) = max(min_weight, ((now − t0) / window)^(1 / aggression))`, and 1 once
//! `now − t0 ≥ window`.
//!
//! Defaults: `window` 30 s, `aggression` 1.0 (a straight line; larger values ramp faster at
//! first, smaller ones hold the replica back longer), `min_weight` 0.1 (10% of a full share, so
//! the replica is never starved of the traffic it needs to warm up). The factor is a pure
//! function of `now`, so a driver simply multiplies a policy's weight (or divides its cost) by
//! it. It never decreases as time passes.
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::slow_start::SlowStartConfig;
//! use prequal_core::Time;
//!
//! let ramp = SlowStartConfig::default();
//! assert_eq!(ramp.factor(Time::ZERO, Time::ZERO), 0.1);
//! assert_eq!(ramp.factor(Time::ZERO, Time::from_secs(15)), 0.5);
//! assert_eq!(ramp.factor(Time::ZERO, Time::from_secs(60)), 1.0);
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::retry_budget::BlockConfigError;
use crate::time::Time;

/// Slow-start parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlowStartConfig {
    /// How long the ramp lasts. Default "30s"; zero disables slow start.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// The curve's exponent is `1 / aggression`. Default 1.0 (linear); > 0.
    pub aggression: f64,
    /// The factor at the start of the ramp. Default 0.1; in (0, 1].
    pub min_weight: f64,
}

impl Default for SlowStartConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(30),
            aggression: 1.0,
            min_weight: 0.1,
        }
    }
}

impl SlowStartConfig {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), BlockConfigError> {
        let err = |key, msg| Err(BlockConfigError::new("slow_start", key, msg));
        if !(self.aggression.is_finite() && self.aggression > 0.0) {
            return err("aggression", "must be a finite number > 0");
        }
        if !(self.min_weight > 0.0 && self.min_weight <= 1.0) {
            return err("min_weight", "must be in (0, 1]");
        }
        Ok(())
    }

    /// The weight factor, in `[min_weight, 1]`, for a replica added at `added_at`. Pure; never
    /// decreases as `now` grows. A `now` before `added_at` counts as the start of the ramp.
    pub fn factor(&self, added_at: Time, now: Time) -> f64 {
        let elapsed = now.saturating_since(added_at);
        if elapsed >= self.window {
            return 1.0;
        }
        let progress = elapsed.as_secs_f64() / self.window.as_secs_f64();
        progress
            .powf(1.0 / self.aggression)
            .clamp(self.min_weight, 1.0)
    }

    /// True while a replica added at `added_at` is still ramping up.
    pub fn is_ramping(&self, added_at: Time, now: Time) -> bool {
        now.saturating_since(added_at) < self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn aggression_bends_the_curve() {
        let t0 = Time::from_secs(100);
        let quarter = t0 + Duration::from_millis(7_500);
        let fast = SlowStartConfig {
            aggression: 2.0,
            ..SlowStartConfig::default()
        };
        let slow = SlowStartConfig {
            aggression: 0.5,
            ..SlowStartConfig::default()
        };
        assert!((fast.factor(t0, quarter) - 0.5).abs() < 1e-12);
        assert!((slow.factor(t0, quarter) - 0.1).abs() < 1e-12); // 1/16 held at the floor
        assert!(fast.is_ramping(t0, quarter) && !fast.is_ramping(t0, t0 + fast.window));
    }

    #[test]
    fn zero_window_means_full_weight_at_once() {
        let off = SlowStartConfig {
            window: Duration::ZERO,
            ..SlowStartConfig::default()
        };
        assert_eq!(off.factor(Time::from_secs(5), Time::from_secs(5)), 1.0);
        assert_eq!(off.validate(), Ok(()));
    }

    #[test]
    fn bad_config_names_its_key() {
        let bad = SlowStartConfig {
            min_weight: 0.0,
            ..SlowStartConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "min_weight");
        let parsed: SlowStartConfig = toml::from_str("window = \"1m\"").unwrap();
        assert_eq!(parsed.window, Duration::from_secs(60));
    }

    proptest! {
        /// The factor rises monotonically from the floor to exactly 1 at the window's end.
        #[test]
        fn rises_monotonically_to_one(
            aggression in 0.1f64..5.0,
            min_weight in 0.01f64..1.0,
            window_ms in 1u64..100_000,
            steps in prop::collection::vec(0u64..5_000, 1..50),
        ) {
            let config = SlowStartConfig {
                window: Duration::from_millis(window_ms), aggression, min_weight,
            };
            let t0 = Time::from_secs(3);
            let mut now = t0;
            let mut last = config.factor(t0, now);
            prop_assert!((last - min_weight).abs() < 1e-12);
            for step in steps {
                now = now + Duration::from_millis(step);
                let f = config.factor(t0, now);
                prop_assert!(f >= last && (min_weight..=1.0).contains(&f));
                last = f;
            }
            prop_assert_eq!(config.factor(t0, t0 + config.window), 1.0);
        }
    }
}
