//! Turning fractional rates into whole counts, deterministically or at random.
//!
//! Prequal's knobs are rates per query: 2.5 probes, 0.25 removals. Each query can only send or
//! remove a whole number, so the rate is rounded, and the Prequal paper (section 4) asks for two
//! kinds of rounding:
//!
//! - [`RateRounder`]: per query, the floor or the ceiling of the rate, chosen deterministically
//!   so that after `k` queries exactly `floor(k · rate)` have been issued. The long-run average is
//!   the configured rate with no drift and no randomness (used for `r_probe` and `r_remove`).
//! - [`random_round`]: the floor or the ceiling, at random, with the expectation preserved (used
//!   for the reuse budget `b_reuse` of each probe reply).

use rand::distr::Bernoulli;
use rand::{Rng, RngCore};

/// Slack added before taking a floor so that a product such as `10 × 0.3` (which is
/// 2.9999999999999996 in binary floating point) counts as the 3 it means.
const FLOOR_SLACK: f64 = 1e-9;

/// Rounds a fractional per-event rate into whole counts whose running total never drifts.
///
/// The `k`-th call to [`RateRounder::next_count`] returns `floor(k·rate) − floor((k−1)·rate)`, which
/// is always `floor(rate)` or `ceil(rate)`. The total is computed from the event count rather
/// than accumulated, so floating-point error cannot build up over a long run.
#[derive(Clone, Debug, PartialEq)]
pub struct RateRounder {
    rate: f64,
    events: u64,
    issued: u64,
}

impl RateRounder {
    /// A rounder for `rate` per event; negative or non-finite rates count as zero.
    pub fn new(rate: f64) -> Self {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            0.0
        };
        Self {
            rate,
            events: 0,
            issued: 0,
        }
    }

    /// The configured rate.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The count for the next event.
    pub fn next_count(&mut self) -> u32 {
        self.events = self.events.saturating_add(1);
        // The product is not negative, so truncation is its floor (and `f64::floor` is a libm
        // call on the baseline target); both saturate beyond `u64::MAX`.
        let due = (self.events as f64 * self.rate + FLOOR_SLACK) as u64;
        let count = due.saturating_sub(self.issued);
        self.issued = due;
        u32::try_from(count).unwrap_or(u32::MAX)
    }
}

/// Rounds `x` to its floor or ceiling at random so that the expectation is `x`. Negative and
/// non-finite inputs give 0; values beyond `u32::MAX` saturate.
pub fn random_round(x: f64, rng: &mut dyn RngCore) -> u32 {
    RandomRound::new(x).sample(rng)
}

/// [`random_round`] of one value, prepared once: its floor, and the coin that rounds it up when
/// it has a fraction. For a value rounded again and again (the reuse budget of every probe
/// reply); each sample draws exactly what `random_round` would.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomRound {
    whole: u32,
    up: Option<Bernoulli>,
}

impl RandomRound {
    /// Prepares the rounding of `x` (see [`random_round`] for the edge cases).
    pub fn new(x: f64) -> Self {
        if !x.is_finite() || x <= 0.0 {
            return Self { whole: 0, up: None };
        }
        if x >= u32::MAX as f64 {
            return Self {
                whole: u32::MAX,
                up: None,
            };
        }
        // 0 < x < 2^32 here, so truncation is the floor (and cheaper than `f64::floor`, a libm
        // call on the baseline target).
        let whole = x as u32;
        let frac = (x - f64::from(whole)).clamp(0.0, 1.0);
        // `Rng::random_bool(frac)` is a sample of this coin.
        let up = (frac > 0.0).then(|| Bernoulli::new(frac).ok()).flatten();
        Self { whole, up }
    }

    /// The floor or the ceiling, at random.
    pub fn sample(&self, rng: &mut dyn RngCore) -> u32 {
        let up = self.up.is_some_and(|coin| rng.sample(coin));
        self.whole + u32::from(up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;
    use proptest::prelude::*;

    #[test]
    fn fractional_rates_are_exact_in_the_long_run() {
        for (rate, events, total) in [(0.3, 1000, 300), (2.5, 1000, 2500), (3.0, 7, 21)] {
            let mut r = RateRounder::new(rate);
            let sum: u64 = (0..events).map(|_| u64::from(r.next_count())).sum();
            assert_eq!(sum, total, "rate {rate}");
        }
    }

    #[test]
    fn below_one_spreads_evenly() {
        let mut r = RateRounder::new(0.5);
        let counts: Vec<u32> = (0..6).map(|_| r.next_count()).collect();
        assert_eq!(counts, vec![0, 1, 0, 1, 0, 1]);
        let mut zero = RateRounder::new(-1.0);
        assert_eq!(zero.next_count(), 0);
    }

    #[test]
    fn random_rounding_preserves_the_mean() {
        let mut rng = rng(3);
        let n = 20_000;
        let sum: u64 = (0..n)
            .map(|_| u64::from(random_round(1.316, &mut rng)))
            .sum();
        let mean = sum as f64 / n as f64;
        assert!((mean - 1.316).abs() < 0.02, "mean {mean}");
        assert_eq!(random_round(2.0, &mut rng), 2);
        assert_eq!(random_round(f64::NAN, &mut rng), 0);
    }

    proptest! {
        /// A prepared rounding draws the same numbers as `random_round` and `random_bool`, the
        /// way `random_round` drew before it was prepared.
        #[test]
        fn prepared_rounding_draws_like_random_bool(
            x in prop_oneof![0.0f64..40.0, Just(0.0), Just(3.0), Just(-1.0), Just(f64::NAN)],
            seed in 0u64..1000,
        ) {
            let (mut a, mut b) = (rng(seed), rng(seed));
            let prepared = RandomRound::new(x);
            for _ in 0..20 {
                let by_coin = if !x.is_finite() || x <= 0.0 {
                    0
                } else {
                    let whole = x as u32;
                    let frac = x - f64::from(whole);
                    whole + u32::from(frac > 0.0 && b.random_bool(frac))
                };
                prop_assert_eq!(prepared.sample(&mut a), by_coin);
            }
        }

        #[test]
        fn each_count_is_floor_or_ceil(rate in 0.0f64..20.0, events in 1usize..500) {
            let mut r = RateRounder::new(rate);
            let mut total = 0u64;
            for _ in 0..events {
                let c = r.next_count();
                prop_assert!(f64::from(c) >= rate.floor() && f64::from(c) <= rate.ceil());
                total += u64::from(c);
            }
            let expected = events as f64 * rate;
            prop_assert!((total as f64 - expected).abs() < 1.0);
        }
    }
}
