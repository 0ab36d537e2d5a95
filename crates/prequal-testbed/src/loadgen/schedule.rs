//! The intended send times: an open-loop arrival process over the load phases.
//!
//! Each phase's rate is linear in time (`qps_start` to `qps_end`), so the expected number of
//! queries up to time `t`, Λ(t), is piecewise quadratic and can be inverted exactly. The k-th
//! query is due where Λ reaches a target: `k − ½` for constant gaps (so a phase of `r` qps for
//! `d` seconds yields `r·d` queries, evenly spaced, none on the phase boundary), or the running
//! sum of unit exponential draws for Poisson arrivals (time rescaling of a homogeneous Poisson
//! process, exact for ramps too). The schedule depends only on the phases, the arrival kind and
//! the seed, never on how the run goes.

use prequal_core::Time;
use prequal_model::scenario::Phase;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Exp1};

/// The intended send times of one run, in order, as an iterator.
#[derive(Debug)]
pub struct Schedule {
    /// Phases as (start s, end s, qps at start, qps at end).
    phases: Vec<(f64, f64, f64, f64)>,
    /// The phase `cursor` lies in.
    phase: usize,
    /// Current position, seconds since t=0.
    cursor: f64,
    /// Poisson draws, or constant gaps when `None`.
    rng: Option<SmallRng>,
    /// Whether the first query (half a gap in) is still to come.
    first: bool,
}

impl Schedule {
    /// The schedule over `phases` (back to back from t=0, as [`crate::loadgen::LoadSpec`]
    /// requires); Poisson arrivals from `seed` when `poisson`, else constant gaps.
    pub fn new(phases: &[Phase], poisson: bool, seed: u64) -> Schedule {
        Schedule {
            phases: phases
                .iter()
                .map(|p| {
                    (
                        p.start.as_secs_f64(),
                        p.end.as_secs_f64(),
                        p.qps_start.max(0.0),
                        p.qps_end.max(0.0),
                    )
                })
                .collect(),
            phase: 0,
            cursor: phases.first().map_or(0.0, |p| p.start.as_secs_f64()),
            rng: poisson.then(|| SmallRng::seed_from_u64(seed)),
            first: true,
        }
    }

    /// Expected queries between the cursor and `need` more: the time where they accumulate,
    /// or `None` (with `need` reduced by what the rest of the schedule offers) past the end.
    fn advance(&mut self, mut need: f64) -> Option<f64> {
        while let Some(&(start, end, q0, q1)) = self.phases.get(self.phase) {
            self.cursor = self.cursor.max(start);
            let span = end - start;
            let slope = if span > 0.0 { (q1 - q0) / span } else { 0.0 };
            let x0 = (self.cursor - start).max(0.0);
            let rate = q0 + slope * x0;
            // Solve rate·x + slope/2·x² = need for x >= 0 (the stable root form).
            let disc = rate * rate + 2.0 * slope * need;
            if disc >= 0.0 && rate + disc.sqrt() > 0.0 {
                let x = 2.0 * need / (rate + disc.sqrt());
                if self.cursor + x < end {
                    self.cursor += x;
                    return Some(self.cursor);
                }
            }
            let rest = end - self.cursor;
            need -= rate * rest + slope / 2.0 * rest * rest;
            self.phase += 1;
            self.cursor = end;
        }
        None
    }
}

impl Iterator for Schedule {
    type Item = Time;

    fn next(&mut self) -> Option<Time> {
        let need = match &mut self.rng {
            Some(rng) => Exp1.sample(rng),
            None if self.first => 0.5,
            None => 1.0,
        };
        self.first = false;
        // An exponential draw may be 0; a zero target would not move the cursor.
        let at = self.advance(f64::max(need, 1e-12))?;
        Some(Time::from_nanos((at * 1e9).round() as u64))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn phase(start_s: f64, end_s: f64, q0: f64, q1: f64) -> Phase {
        Phase {
            label: "p".into(),
            start: Time::from_nanos((start_s * 1e9) as u64),
            end: Time::from_nanos((end_s * 1e9) as u64),
            qps_start: q0,
            qps_end: q1,
        }
    }

    fn secs(t: &[Time]) -> Vec<f64> {
        t.iter().map(|t| t.as_secs_f64()).collect()
    }

    #[test]
    fn constant_rate_is_evenly_spaced_and_exact() {
        let times: Vec<Time> = Schedule::new(&[phase(0.0, 2.0, 100.0, 100.0)], false, 1).collect();
        assert_eq!(times.len(), 200);
        let s = secs(&times);
        assert!((s[0] - 0.005).abs() < 1e-9);
        for w in s.windows(2) {
            assert!((w[1] - w[0] - 0.01).abs() < 1e-9, "{w:?}");
        }
        assert!(*s.last().unwrap() < 2.0);
    }

    #[test]
    fn steps_change_the_rate_at_the_boundary() {
        let phases = [phase(0.0, 1.0, 10.0, 10.0), phase(1.0, 2.0, 40.0, 40.0)];
        let s = secs(&Schedule::new(&phases, false, 1).collect::<Vec<_>>());
        assert_eq!(s.len(), 50);
        assert_eq!(s.iter().filter(|&&t| t < 1.0).count(), 10);
        // Gaps are 0.1 s, then 0.025 s.
        assert!((s[1] - s[0] - 0.1).abs() < 1e-9);
        assert!((s[49] - s[48] - 0.025).abs() < 1e-9);
    }

    #[test]
    fn idle_phases_send_nothing() {
        let phases = [
            phase(0.0, 1.0, 0.0, 0.0),
            phase(1.0, 2.0, 20.0, 20.0),
            phase(2.0, 5.0, 0.0, 0.0),
        ];
        let s = secs(&Schedule::new(&phases, false, 1).collect::<Vec<_>>());
        assert_eq!(s.len(), 20);
        assert!(s.iter().all(|&t| (1.0..2.0).contains(&t)));
        assert!(Schedule::new(&[], false, 1).next().is_none());
    }

    #[test]
    fn ramps_follow_the_rate() {
        // 0 → 200 qps over 1 s: 100 queries, three times as many in the second half.
        let up = secs(&Schedule::new(&[phase(0.0, 1.0, 0.0, 200.0)], false, 1).collect::<Vec<_>>());
        assert_eq!(up.len(), 100);
        assert_eq!(up.iter().filter(|&&t| t < 0.5).count(), 25);
        let down =
            secs(&Schedule::new(&[phase(0.0, 1.0, 200.0, 0.0)], false, 1).collect::<Vec<_>>());
        assert_eq!(down.len(), 100);
        assert_eq!(down.iter().filter(|&&t| t < 0.5).count(), 75);
        for w in up.windows(2).chain(down.windows(2)) {
            assert!(w[0] < w[1]);
        }
    }

    #[test]
    fn poisson_is_seeded_and_near_the_rate() {
        let phases = [phase(0.0, 10.0, 500.0, 500.0)];
        let a: Vec<Time> = Schedule::new(&phases, true, 7).collect();
        let b: Vec<Time> = Schedule::new(&phases, true, 7).collect();
        let c: Vec<Time> = Schedule::new(&phases, true, 8).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // 5000 expected, standard deviation ~71.
        assert!((4650..5350).contains(&a.len()), "{}", a.len());
        let s = secs(&a);
        let gaps: Vec<f64> = s.windows(2).map(|w| w[1] - w[0]).collect();
        // Exponential gaps: about 37% exceed the mean of 2 ms; constant gaps would give 0%.
        let long = gaps.iter().filter(|&&g| g > 0.002).count() as f64 / gaps.len() as f64;
        assert!((0.32..0.42).contains(&long), "{long}");
    }
}
