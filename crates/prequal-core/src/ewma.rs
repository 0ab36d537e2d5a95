//! A peak-sensitive, time-decaying moving average of round-trip times.
//!
//! This is the estimator behind Finagle's and Linkerd's `peak-ewma` balancer (and the "Beyond
//! Round Robin" article's third contender). It keeps one value `v`, stamped with the time `t` of
//! the last sample, and a time constant `τ` (the `decay`, 10 s by default in the policy):
//!
//! - **Read**: at time `now` the estimate is `v · e^(−(now − t)/τ)`. With no samples it decays
//!   toward zero, so a replica that stopped receiving traffic (because it looked slow) is tried
//!   again after a while instead of being shunned forever.
//! - **Peak**: a sample `s` above the current estimate replaces it at once. One slow response is
//!   enough to steer traffic away; a balancer that averaged it in would keep sending queries to a
//!   replica that has just stalled.
//! - **Otherwise**: `v ← v · w + s · (1 − w)` with `w = e^(−(now − t)/τ)`. The weight a sample
//!   gets grows with the time since the previous one, so the average forgets at the same rate in
//!   wall time whatever the request rate (a sample at the same instant as the last one moves
//!   nothing; many samples spread over `τ` move it most of the way).
//!
//! Reads are pure ([`PeakEwma::value_at`] takes `&self`); unlike tower's version, reading the
//! estimate never changes it, so a snapshot or a comparison cannot perturb later decisions.
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::ewma::PeakEwma;
//! use prequal_core::Time;
//!
//! let mut rtt = PeakEwma::new(Duration::from_secs(10));
//! assert_eq!(rtt.value_at(Time::ZERO), None);
//! rtt.observe(Duration::from_millis(20), Time::ZERO);
//! rtt.observe(Duration::from_millis(200), Time::from_millis(1)); // a peak: taken at once
//! assert_eq!(rtt.value_at(Time::from_millis(1)), Some(Duration::from_millis(200)));
//! ```

use std::time::Duration;

use crate::time::Time;

/// A peak-sensitive EWMA of durations that decays with time constant `tau`. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakEwma {
    tau_secs: f64,
    /// The estimate at `stamp`, in seconds; `None` before the first sample.
    state: Option<(f64, Time)>,
}

impl PeakEwma {
    /// An empty average with time constant `tau` (a zero `tau` makes it follow the last sample).
    pub fn new(tau: Duration) -> Self {
        Self {
            tau_secs: tau.as_secs_f64(),
            state: None,
        }
    }

    /// The time constant.
    pub fn tau(&self) -> Duration {
        Duration::from_secs_f64(self.tau_secs)
    }

    /// True until the first sample.
    pub fn is_empty(&self) -> bool {
        self.state.is_none()
    }

    /// `e^(−elapsed/τ)`: how much of the old value survives from `since` to `now`.
    fn survival(&self, since: Time, now: Time) -> f64 {
        if self.tau_secs <= 0.0 {
            return 0.0;
        }
        let elapsed = now.saturating_since(since).as_secs_f64();
        (-elapsed / self.tau_secs).exp()
    }

    /// The estimate at `now`, in seconds, or `None` before the first sample.
    pub fn secs_at(&self, now: Time) -> Option<f64> {
        let (value, stamp) = self.state?;
        if self.tau_secs <= 0.0 {
            // With no memory there is nothing to decay either: the last sample stands.
            return Some(value);
        }
        Some(value * self.survival(stamp, now))
    }

    /// The estimate at `now`, or `None` before the first sample. Never mutates.
    pub fn value_at(&self, now: Time) -> Option<Duration> {
        self.secs_at(now).map(Duration::from_secs_f64)
    }

    /// Records a sample taken at `now`.
    ///
    /// A sample earlier than the last one (out-of-order delivery) is folded in as if it arrived
    /// at the same instant: it can still raise a peak but otherwise has no weight.
    pub fn observe(&mut self, sample: Duration, now: Time) {
        let sample = sample.as_secs_f64();
        let next = match self.state {
            None => (sample, now),
            Some((value, stamp)) => {
                let stamp_next = now.max(stamp);
                let current = self.secs_at(stamp_next).unwrap_or(value);
                if sample > current || self.tau_secs <= 0.0 {
                    (sample, stamp_next)
                } else {
                    let w = self.survival(stamp, stamp_next);
                    (value * w + sample * (1.0 - w), stamp_next)
                }
            }
        };
        self.state = Some(next);
    }
}

/// One step of a plain exponentially weighted mean: `sample` moves `old` by `weight` of the
/// difference, and the first sample is the mean.
pub(crate) fn ewma(old: Option<f64>, sample: f64, weight: f64) -> Option<f64> {
    Some(match old {
        Some(old) => old + weight * (sample - old),
        None => sample,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TAU: Duration = Duration::from_secs(10);

    fn ms(v: Option<f64>) -> f64 {
        v.map(|s| s * 1e3).unwrap_or(f64::NAN)
    }

    #[test]
    fn takes_a_peak_at_once() {
        let mut e = PeakEwma::new(TAU);
        e.observe(Duration::from_millis(10), Time::ZERO);
        e.observe(Duration::from_millis(500), Time::from_millis(1));
        assert!((ms(e.secs_at(Time::from_millis(1))) - 500.0).abs() < 1e-9);
    }

    #[test]
    fn decays_by_e_after_one_time_constant() {
        let mut e = PeakEwma::new(TAU);
        e.observe(Duration::from_millis(100), Time::from_secs(5));
        let after = ms(e.secs_at(Time::from_secs(15)));
        assert!((after - 100.0 * (-1.0f64).exp()).abs() < 1e-9, "{after}");
        let after_two = ms(e.secs_at(Time::from_secs(25)));
        assert!((after_two - 100.0 * (-2.0f64).exp()).abs() < 1e-9);
    }

    #[test]
    fn faster_samples_pull_down_with_time_weight() {
        let mut e = PeakEwma::new(TAU);
        e.observe(Duration::from_millis(100), Time::ZERO);
        // One τ later, a 10 ms sample: 100·e^-1 + 10·(1 − e^-1).
        e.observe(Duration::from_millis(10), Time::from_secs(10));
        let w = (-1.0f64).exp();
        let expected = 100.0 * w + 10.0 * (1.0 - w);
        assert!((ms(e.secs_at(Time::from_secs(10))) - expected).abs() < 1e-9);
        // A sample at the same instant carries no weight.
        e.observe(Duration::from_millis(1), Time::from_secs(10));
        assert!((ms(e.secs_at(Time::from_secs(10))) - expected).abs() < 1e-9);
    }

    #[test]
    fn zero_tau_follows_the_last_sample() {
        let mut e = PeakEwma::new(Duration::ZERO);
        e.observe(Duration::from_millis(100), Time::ZERO);
        e.observe(Duration::from_millis(3), Time::from_secs(1));
        assert_eq!(
            e.value_at(Time::from_secs(9)),
            Some(Duration::from_millis(3))
        );
    }

    proptest! {
        /// The estimate never exceeds the largest sample and never rises while idle.
        #[test]
        fn bounded_by_peak_and_monotone_when_idle(
            samples in prop::collection::vec((0u64..1_000_000, 0u64..2_000), 1..40),
            probe in 0u64..100_000,
        ) {
            let mut e = PeakEwma::new(TAU);
            let mut now = Time::ZERO;
            let mut peak = 0.0f64;
            for (us, gap_ms) in samples {
                now = now + Duration::from_millis(gap_ms);
                e.observe(Duration::from_micros(us), now);
                peak = peak.max(us as f64 / 1e6);
                let v = e.secs_at(now).unwrap_or(f64::NAN);
                prop_assert!(v <= peak + 1e-12 && v >= 0.0);
            }
            let a = e.secs_at(now).unwrap_or(f64::NAN);
            let b = e.secs_at(now + Duration::from_millis(probe)).unwrap_or(f64::NAN);
            prop_assert!(b <= a + 1e-15);
        }
    }
}
