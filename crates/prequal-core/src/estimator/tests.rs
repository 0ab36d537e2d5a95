//! Unit tests of the latency estimator and the load tracker.

use std::time::Duration;

use super::buckets::*;
use super::latency::*;
use super::memo::*;
use super::*;
use crate::policy::{LoadReport, Outcome};
use crate::time::Time;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn estimator() -> LatencyEstimator {
    LatencyEstimator::new(EstimatorConfig::default())
}

/// The defaults without `scale_above_samples`, for tests of other rules that ask at a RIF above
/// every sample.
fn unscaled() -> EstimatorConfig {
    EstimatorConfig {
        scale_above_samples: false,
        ..Default::default()
    }
}

#[test]
fn buckets_are_exact_then_geometric_and_monotone() {
    for rif in 0..EXACT {
        assert_eq!(bucket_of(rif), rif as usize);
    }
    assert_eq!(bucket_of(16), 16);
    assert_eq!(bucket_of(19), 16);
    assert_eq!(bucket_of(20), 17);
    assert_eq!(bucket_of(32), 20);
    assert_eq!(bucket_of(u32::MAX), BUCKETS - 1);
    let mut last = 0;
    for shift in 0..32 {
        for rif in [1u32 << shift, (1u32 << shift) | ((1 << shift) >> 1)] {
            let b = bucket_of(rif);
            assert!(b >= last && b < BUCKETS, "rif {rif} -> {b}");
            last = b;
        }
    }
}

#[test]
fn no_estimate_before_any_sample() {
    assert_eq!(estimator().estimate(0, Time::ZERO), None);
    let tracker = LoadTracker::new(EstimatorConfig::default());
    assert_eq!(tracker.report(Time::from_secs(1)).latency, Duration::ZERO);
}

#[test]
fn median_of_odd_and_even_counts() {
    let mut est = estimator();
    let now = Time::from_millis(100);
    for latency in [5, 1, 4, 2, 3] {
        est.record(3, ms(latency), now);
    }
    assert_eq!(est.estimate(3, now), Some(ms(3)));
    est.record(3, ms(6), now);
    // 1..=6: the mean of the middle two.
    assert_eq!(est.estimate(3, now), Some(Duration::from_micros(3_500)));
}

#[test]
fn widens_to_the_nearest_rif_with_samples() {
    // The paper's estimate: the nearest samples as they are (scaling has its own test below).
    let mut est = LatencyEstimator::new(unscaled());
    let now = Time::from_secs(1);
    for _ in 0..16 {
        est.record(5, ms(10), now);
        est.record(200, ms(100), now);
    }
    assert_eq!(est.estimate(5, now), Some(ms(10)));
    assert_eq!(est.estimate(7, now), Some(ms(10)));
    assert_eq!(est.estimate(0, now), Some(ms(10)));
    assert_eq!(est.estimate(180, now), Some(ms(100)));
    assert_eq!(est.estimate(u32::MAX, now), Some(ms(100)));
}

#[test]
fn uses_only_the_window_when_recent_samples_suffice() {
    let mut est = estimator();
    for i in 0..16 {
        est.record(2, ms(100), Time::from_millis(i));
    }
    for i in 0..16 {
        est.record(2, ms(5), Time::from_micros(1_000_000 + i * 500));
    }
    // All 16 fast samples are within 10 ms of 1.01 s; the slow ones are ignored entirely
    // (the median over all 32 would be 52.5 ms).
    assert_eq!(est.estimate(2, Time::from_millis(1_010)), Some(ms(5)));
}

#[test]
fn falls_back_to_the_newest_samples_at_low_rates() {
    let mut est = estimator();
    for i in 0..16 {
        est.record(1, ms(10), Time::from_secs(i));
    }
    for i in 16..32 {
        est.record(1, ms(30), Time::from_secs(i));
    }
    // Nothing is within 10 ms of 100 s: the 16 newest (all 30 ms) decide, not all 32.
    assert_eq!(est.estimate(1, Time::from_secs(100)), Some(ms(30)));
}

#[test]
fn fewer_samples_than_wanted_are_all_used() {
    let mut est = estimator();
    est.record(0, ms(2), Time::ZERO);
    est.record(9, ms(4), Time::ZERO);
    est.record(40, ms(12), Time::ZERO);
    assert_eq!(est.estimate(3, Time::from_secs(60)), Some(ms(4)));
}

#[test]
fn a_slow_episode_shows_within_a_bounded_number_of_completions() {
    // Low rate (one completion a second): the newest 16 decide, so 9 slow ones flip the median
    // (only a faster regime stands alone, see the next test).
    let mut est = estimator();
    let mut t = 0;
    for _ in 0..32 {
        est.record(2, ms(1), Time::from_secs(t));
        t += 1;
    }
    let mut slow_needed = None;
    for n in 1..=32 {
        est.record(2, ms(50), Time::from_secs(t));
        t += 1;
        if est.estimate(2, Time::from_secs(t)) == Some(ms(50)) {
            slow_needed = Some(n);
            break;
        }
    }
    assert_eq!(slow_needed, Some(9));

    // High rate (one completion every 100 us): at most half a ring of slow ones, plus one.
    let mut est = estimator();
    let mut t = 0;
    for _ in 0..200 {
        est.record(2, ms(1), Time::from_micros(t));
        t += 100;
    }
    let mut slow_needed = None;
    for n in 1..=200 {
        est.record(2, ms(50), Time::from_micros(t));
        t += 100;
        if est.estimate(2, Time::from_micros(t)) == Some(ms(50)) {
            slow_needed = Some(n);
            break;
        }
    }
    let n = slow_needed.unwrap_or(usize::MAX);
    assert!(n <= RING / 2 + 1, "took {n} slow completions");
}

#[test]
fn rif_rises_and_falls_and_tags_samples() {
    // The median alone; the in-flight floor has tests of its own.
    let mut tracker = LoadTracker::new(EstimatorConfig {
        in_flight_floor: false,
        ..Default::default()
    });
    let t0 = Time::from_millis(10);
    let arrivals: Vec<Arrival> = (0..5).map(|_| tracker.on_arrival(t0)).collect();
    assert_eq!(tracker.rif(), 5);
    assert_eq!(
        arrivals.iter().map(|a| a.rif).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(tracker.report(t0).rif, 5);
    for (i, arrival) in arrivals.iter().enumerate().take(3) {
        tracker.on_finish(*arrival, Outcome::Success, t0 + ms(i as u64 + 1));
    }
    assert_eq!(tracker.rif(), 2);
    let report = tracker.report(t0 + ms(4));
    assert_eq!(report.rif, 2);
    // Only one sample sits at RIF 2 (3 ms), fewer than `min_samples`, so the estimate widens
    // to RIF 1 (2 ms) and RIF 0 (1 ms): the median of the three.
    assert_eq!(report.latency, ms(2));
    assert_eq!(report.utilization, None);
    for arrival in &arrivals[3..] {
        tracker.on_finish(*arrival, Outcome::Success, t0 + ms(5));
    }
    assert_eq!(tracker.rif(), 0);
    // A RIF counted elsewhere selects the estimate at that RIF: still fewer than
    // `min_samples` in all, so the median of all five (1, 2, 3, 5, 5 ms).
    assert_eq!(tracker.report_at_rif(2, t0 + ms(5)).rif, 2);
    assert_eq!(tracker.report_at_rif(2, t0 + ms(5)).latency, ms(3));
    // A finish without an arrival (a driver bug) never wraps the counter.
    tracker.on_finish(arrivals[0], Outcome::Success, t0 + ms(6));
    assert_eq!(tracker.rif(), 0);
}

#[test]
fn reports_qps_and_error_rate_over_the_window() {
    let mut tracker = LoadTracker::new(EstimatorConfig::default());
    // 100 queries a second for 3 s, every tenth an error.
    for i in 0..300u64 {
        let start = Time::from_millis(i * 10);
        let arrival = tracker.on_arrival(start);
        let outcome = if i % 10 == 0 {
            Outcome::Error
        } else {
            Outcome::Success
        };
        tracker.on_finish(arrival, outcome, start + ms(2));
    }
    let report = tracker.report(Time::from_millis(3_000));
    let qps = report.qps.unwrap_or_default();
    assert!((90.0..=110.0).contains(&qps), "qps {qps}");
    let error_rate = report.error_rate.unwrap_or_default();
    assert!(
        (0.08..=0.12).contains(&error_rate),
        "error rate {error_rate}"
    );
    // Long after the traffic stopped, the window is empty.
    let idle = tracker.report(Time::from_secs(60));
    assert_eq!((idle.qps, idle.error_rate), (Some(0.0), Some(0.0)));
}

#[test]
fn fast_errors_do_not_make_a_replica_look_light() {
    let mut tracker = LoadTracker::new(EstimatorConfig::default());
    for i in 0..20u64 {
        let start = Time::from_millis(i);
        let arrival = tracker.on_arrival(start);
        tracker.on_finish(arrival, Outcome::Success, start + ms(40));
    }
    for i in 0..20u64 {
        let start = Time::from_millis(100 + i);
        let arrival = tracker.on_arrival(start);
        tracker.on_finish(arrival, Outcome::Error, start + Duration::from_micros(10));
    }
    let report = tracker.report(Time::from_millis(130));
    assert_eq!(report.latency, ms(40));
    assert!(report.error_rate.unwrap_or_default() > 0.4);
}

#[test]
fn config_defaults_parse_and_validate() {
    let config = EstimatorConfig::default();
    assert_eq!(config.validate(), Ok(()));
    let parsed: EstimatorConfig = toml::from_str("").expect("empty table");
    assert_eq!(parsed, config);
    let parsed: EstimatorConfig =
        toml::from_str("window = \"5ms\"\nmin_samples = 8\nrate_window = \"2s\"").expect("parses");
    assert_eq!(parsed.window, ms(5));
    assert_eq!(parsed.min_samples, 8);
    assert_eq!(parsed.rate_window, Duration::from_secs(2));
    let text = toml::to_string(&parsed).expect("serialises");
    assert_eq!(toml::from_str::<EstimatorConfig>(&text).ok(), Some(parsed));
}

#[test]
fn config_errors_name_the_key() {
    let cases = [
        (
            EstimatorConfig {
                window: Duration::ZERO,
                ..Default::default()
            },
            "window",
        ),
        (
            EstimatorConfig {
                min_samples: 0,
                ..Default::default()
            },
            "min_samples",
        ),
        (
            EstimatorConfig {
                min_samples: 33,
                ..Default::default()
            },
            "min_samples",
        ),
        (
            EstimatorConfig {
                rate_window: Duration::from_millis(1),
                ..Default::default()
            },
            "rate_window",
        ),
    ];
    for (config, key) in cases {
        let err = config.validate().expect_err(key);
        assert_eq!(err.key, key);
        assert!(err.to_string().contains(key), "{err}");
    }
    let err = toml::from_str::<EstimatorConfig>("windw = \"1ms\"").expect_err("unknown key");
    assert!(err.to_string().contains("windw"), "{err}");
}

#[test]
fn min_samples_changes_the_low_rate_fallback() {
    let config = EstimatorConfig {
        min_samples: 4,
        ..Default::default()
    };
    let mut est = LatencyEstimator::new(config);
    for (i, latency) in [9, 9, 9, 9, 1, 1, 1, 1].into_iter().enumerate() {
        est.record(0, ms(latency), Time::from_secs(i as u64));
    }
    assert_eq!(est.estimate(0, Time::from_secs(100)), Some(ms(1)));
}

/// A replica handed a burst: its RIF jumps past every bucket with fresh samples. The estimate
/// carries the highest of them up as (RIF + 1), unless the paper's estimate is asked for.
#[test]
fn a_rif_above_every_fresh_sample_scales_the_estimate_up() {
    for scale in [true, false] {
        let config = EstimatorConfig {
            scale_above_samples: scale,
            ..Default::default()
        };
        let mut est = LatencyEstimator::new(config);
        // 16 queries that arrived at RIF 9 and took 100 ms, all fresh at 1 s.
        for i in 0..16 {
            est.record(9, ms(100), Time::from_millis(900 + i));
        }
        let now = Time::from_secs(1);
        assert_eq!(est.estimate(9, now), Some(ms(100)), "at the samples' RIF");
        assert_eq!(
            est.estimate(5, now),
            Some(ms(100)),
            "below them: no scaling"
        );
        // RIF 15: 16 in flight with the new one, against 10 when the samples arrived.
        let want = if scale { ms(160) } else { ms(100) };
        assert_eq!(
            est.estimate(15, now),
            Some(want),
            "scale_above_samples = {scale}"
        );
        // A bucket of many RIFs counts from its lowest: 32..=39 scale by 33 / 10.
        let want = if scale { ms(330) } else { ms(100) };
        assert_eq!(
            est.estimate(39, now),
            Some(want),
            "scale_above_samples = {scale}"
        );
        // A fresh sample above the RIF asked for: the usual median.
        est.record(16, ms(100), Time::from_millis(950));
        assert_eq!(est.estimate(15, now), Some(ms(100)));
    }
}

/// Stale samples (the idle fallback) are never scaled: the replica's queue is long gone.
#[test]
fn the_idle_fallback_is_not_scaled() {
    let mut est = LatencyEstimator::new(EstimatorConfig::default());
    for i in 0..16 {
        est.record(9, ms(100), Time::from_millis(i));
    }
    assert_eq!(est.estimate(39, Time::from_secs(2)), Some(ms(100)));
}

#[test]
fn lowest_rif_inverts_bucket_of_at_each_bucket_start() {
    let mut last = None;
    for rif in 0..100_000u32 {
        let bucket = bucket_of(rif);
        if last != Some(bucket) {
            assert_eq!(lowest_rif(bucket), rif, "bucket {bucket}");
            last = Some(bucket);
        }
        assert!(lowest_rif(bucket) <= rif);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// The estimate by its definition, from `log` of (rif, latency, time) records in order.
    fn reference_estimate(
        config: &EstimatorConfig,
        log: &[(u32, u64, u64)],
        rif: u32,
        now: u64,
    ) -> Option<Estimate> {
        let last_ring = |of: &dyn Fn(u32) -> bool| -> Vec<(u64, u64)> {
            let kept: Vec<(u64, u64)> =
                log.iter().filter(|r| of(r.0)).map(|r| (r.2, r.1)).collect();
            kept[kept.len().saturating_sub(RING)..].to_vec()
        };
        let nanos = |d: Duration| d.as_nanos() as u64;
        let fresh_since = now.saturating_sub(nanos(config.max_age));
        let center = bucket_of(rif);
        let mut order = vec![center];
        for distance in 1..BUCKETS {
            if let Some(below) = center.checked_sub(distance) {
                order.push(below);
            }
            if center + distance < BUCKETS {
                order.push(center + distance);
            }
        }
        let mut samples: Vec<(u64, u64)> = Vec::new();
        // The highest bucket that gave a fresh sample.
        let mut highest: Option<usize> = None;
        for bucket in order {
            if samples.len() >= config.min_samples {
                break;
            }
            let ring = last_ring(&|r| bucket_of(r) == bucket);
            let before = samples.len();
            samples.extend(ring.into_iter().filter(|s| s.0 >= fresh_since));
            if samples.len() > before && highest.is_none_or(|h| bucket > h) {
                highest = Some(bucket);
            }
        }
        // Above every fresh sample, latency grows as (RIF + 1) from the highest of them.
        let mut scale = (1u128, 1u128);
        if config.scale_above_samples
            && let Some(highest) = highest.filter(|&h| h < center)
        {
            scale = (
                u128::from(lowest_rif(center)) + 1,
                u128::from(lowest_rif(highest)) + 1,
            );
        }
        if samples.len() < config.min_samples {
            scale = (1, 1);
            let mut newest = last_ring(&|_| true);
            newest.reverse();
            let gap = nanos(config.max_age + config.stale_half_life);
            let keep = (1..newest.len())
                .find(|&i| newest[i - 1].0 - newest[i].0 > gap)
                .unwrap_or(newest.len());
            samples = newest[..keep].to_vec();
            // A faster regime among the newest `min_samples`: the longest run of newest
            // samples, two or more, all below half the fastest of the four or more before them.
            let mut window: Vec<(u64, u64)> =
                samples.iter().take(config.min_samples).copied().collect();
            window.reverse();
            let stale = window.first().is_some_and(|s| s.0 < fresh_since);
            for start in 4..window.len().saturating_sub(1) {
                let (old, new) = window.split_at(start);
                let fastest_before = old.iter().map(|s| s.1).min().unwrap_or(0);
                let slowest_after = new.iter().map(|s| s.1).max().unwrap_or(u64::MAX);
                if stale && slowest_after * 2 < fastest_before {
                    samples = new.to_vec();
                    break;
                }
            }
        }
        if samples.is_empty() {
            return None;
        }
        let window = nanos(config.window);
        let recent: Vec<(u64, u64)> = samples
            .iter()
            .copied()
            .filter(|s| now.saturating_sub(s.0) <= window)
            .collect();
        let chosen = if recent.len() >= config.min_samples {
            recent
        } else {
            samples.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
            samples.truncate(config.min_samples);
            samples
        };
        let latencies: Vec<u64> = chosen.iter().map(|s| s.1).collect();
        let scaled = |nanos: u64| (u128::from(nanos) * scale.0 / scale.1) as u64;
        Some(Estimate {
            median: scaled(true_median(latencies.clone())),
            max: scaled(latencies.into_iter().max().unwrap_or(0)),
        })
    }

    fn true_median(mut values: Vec<u64>) -> u64 {
        values.sort_unstable();
        let mid = values.len() / 2;
        if values.len() % 2 == 1 {
            values[mid]
        } else {
            values[mid - 1] + (values[mid] - values[mid - 1]) / 2
        }
    }

    proptest! {
        /// A report without rates is the full report with its rates left out, whatever the
        /// tracker went through (arrivals, finishes, errors, abandons, idle spells).
        #[test]
        fn report_without_rates_is_the_report_less_its_rates(
            ops in prop::collection::vec((0u8..4, 0u64..3_000_000_000), 1..200),
        ) {
            let mut tracker = LoadTracker::new(EstimatorConfig::default());
            let mut now = Time::ZERO;
            let mut in_flight = Vec::new();
            for (op, gap_ns) in ops {
                // Mostly short gaps, now and then an idle spell long enough to go stale.
                now = now + Duration::from_nanos(if op == 3 { gap_ns } else { gap_ns % 20_000_000 });
                match op {
                    0 => in_flight.push(tracker.on_arrival(now)),
                    1 | 2 if !in_flight.is_empty() => {
                        let arrival = in_flight.remove(gap_ns as usize % in_flight.len());
                        let outcome = if op == 1 { Outcome::Success } else { Outcome::Error };
                        tracker.on_finish(arrival, outcome, now);
                    }
                    _ => {
                        if let Some(arrival) = in_flight.pop() {
                            tracker.on_abandon(arrival, now);
                        }
                    }
                }
                let full = tracker.report(now);
                let expected = LoadReport { qps: None, error_rate: None, ..full };
                prop_assert_eq!(tracker.report_without_rates(now), expected);
            }
        }

        /// Up to one ring of samples at one RIF, all recent: the estimate is their exact median.
        #[test]
        fn one_bucket_gives_the_exact_median(latencies in prop::collection::vec(1u64..1_000_000, 1..=32)) {
            let mut est = estimator();
            let now = Time::from_secs(3);
            for &us in &latencies {
                est.record(4, Duration::from_micros(us), now);
            }
            let expected = true_median(latencies.iter().map(|us| us * 1_000).collect());
            prop_assert_eq!(est.estimate(4, now), Some(Duration::from_nanos(expected)));
        }

        /// Whatever was recorded, wherever it is asked, the estimate is one of the recorded
        /// latencies or between two of them, or (asked above every fresh sample) that scaled
        /// by at most the RIF asked plus one.
        #[test]
        fn estimate_stays_within_the_recorded_range(
            samples in prop::collection::vec((0u32..100, 1u64..100_000, 0u64..5_000), 1..300),
            ask_rif in 0u32..500,
            ask_after_us in 0u64..100_000,
        ) {
            let mut est = estimator();
            let mut now = Time::ZERO;
            for &(rif, latency_us, gap_us) in &samples {
                now = now + Duration::from_micros(gap_us);
                est.record(rif, Duration::from_micros(latency_us), now);
            }
            let low = samples.iter().map(|s| s.1).min().unwrap_or(0);
            let high = samples.iter().map(|s| s.1).max().unwrap_or(0);
            let high = high * (u64::from(ask_rif) + 1);
            let estimate = est.estimate(ask_rif, now + Duration::from_micros(ask_after_us));
            let us = estimate.map(|d| d.as_micros() as u64);
            prop_assert!(matches!(us, Some(v) if (low..=high).contains(&v)), "{:?} not in {}..={}", us, low, high);
        }

        /// The estimate equals a plain reading of its definition, computed here from the log
        /// of every record: the last 32 samples per bucket, gathered outwards from the asked
        /// bucket until `min_samples` fresh ones are in; the recent ones if enough, else the
        /// newest `min_samples`; the newest of any RIF back to a long gap when too few are
        /// fresh. Times are distinct, so "newest" is never a tie.
        #[test]
        fn estimate_matches_its_definition(
            steps in prop::collection::vec((0u32..40, 1u64..50_000, 1u64..3_000), 1..300),
            asks in prop::collection::vec((0u32..60, 0u64..30_000), 1..20),
        ) {
            // Five samples are too few for a faster regime to stand out (four before it and
            // two in it); eight leave room for it.
            for min_samples in [5, 8] {
                let config = EstimatorConfig {
                    window: Duration::from_millis(3),
                    min_samples,
                    max_age: Duration::from_millis(40),
                    stale_half_life: Duration::from_millis(30),
                    ..EstimatorConfig::default()
                };
                let mut est = LatencyEstimator::new(config);
                let mut log: Vec<(u32, u64, u64)> = Vec::new();
                let mut now = 0u64;
                let mut asked = asks.iter().cycle();
                for (i, &(rif, latency_us, gap_us)) in steps.iter().enumerate() {
                    now += gap_us * 1_000;
                    est.record(rif, Duration::from_micros(latency_us), Time::from_nanos(now));
                    log.push((rif, latency_us * 1_000, now));
                    if i % 3 == 0 && let Some(&(ask_rif, after_us)) = asked.next() {
                        let at = now + after_us * 1_000;
                        let want = reference_estimate(&config, &log, ask_rif, at);
                        let got = est.compute(bucket_of(ask_rif), at).0;
                        prop_assert_eq!(got, want, "rif {} at {}", ask_rif, at);
                    }
                }
            }
        }

        /// The memo is invisible: interleaving records and repeated estimates at advancing
        /// times (with a short window and age limit, so samples keep crossing both
        /// boundaries), every answer equals a computation from scratch.
        #[test]
        fn memo_answers_equal_fresh_computations(
            steps in prop::collection::vec((0u8..4, 0u32..6, 1u64..20_000, 0u64..1_500), 1..400),
        ) {
            // Eight samples leave room for a faster regime among an idle replica's newest.
            for min_samples in [4, 8] {
                let config = EstimatorConfig {
                    window: Duration::from_millis(2),
                    min_samples,
                    max_age: Duration::from_millis(6),
                    ..EstimatorConfig::default()
                };
                let mut est = LatencyEstimator::new(config);
                let mut now = Time::ZERO;
                for &(op, rif, latency_us, gap_us) in &steps {
                    now = now + Duration::from_micros(gap_us);
                    // One record for three estimates, over few buckets, so estimates repeat.
                    if op == 0 {
                        est.record(rif, Duration::from_micros(latency_us), now);
                    } else {
                        let fresh = est.compute(bucket_of(rif), now.as_nanos()).0;
                        let answer = est.estimate_with_max(rif, now).map(|(median, max)| Estimate {
                            median: median.as_nanos() as u64,
                            max: max.as_nanos() as u64,
                        });
                        prop_assert_eq!(answer, fresh, "rif {} at {:?}", rif, now);
                    }
                }
            }
        }
    }
}

/// The beyond-round-robin failure mode: a replica that was fast at RIF 0 long ago, then slow
/// at RIF 1 to 10 just now, must not report its old speed when its RIF falls back to 0.
#[test]
fn stale_samples_at_the_current_rif_do_not_hide_a_fresh_slowdown() {
    let mut est = estimator();
    for i in 0..32 {
        est.record(0, ms(167), Time::from_millis(i * 10));
    }
    let slow_done = Time::from_secs(20);
    for rif in 1..=20 {
        est.record(rif, ms(2000), slow_done);
    }
    // Right after the slow queries drained, RIF 0's own samples are 19 s old.
    assert_eq!(est.estimate(0, slow_done + ms(5)), Some(ms(2000)));
    // Idle for a long time: no fresh samples anywhere, so the newest of any RIF still speak.
    assert_eq!(est.estimate(0, Time::from_secs(60)), Some(ms(2000)));
}

#[test]
fn max_age_below_window_is_rejected() {
    let config = EstimatorConfig {
        max_age: ms(5),
        ..EstimatorConfig::default()
    };
    assert_eq!(config.validate().map_err(|e| e.key), Err("max_age"));
}

/// A tracker that has seen 50 queries alternating between 5 and 15 ms, one every 20 ms (all
/// at RIF 0), the last arriving at 980 ms and finishing at 995 ms: median 10 ms, slowest
/// sample 15 ms.
fn steady(config: EstimatorConfig) -> LoadTracker {
    let mut tracker = LoadTracker::new(config);
    for i in 0..50 {
        let arrival = tracker.on_arrival(Time::from_millis(i * 20));
        let latency = if i % 2 == 0 { 5 } else { 15 };
        tracker.on_finish(
            arrival,
            Outcome::Success,
            Time::from_millis(i * 20 + latency),
        );
    }
    tracker
}

#[test]
fn a_stall_raises_the_report_before_its_first_query_finishes() {
    // Queries in flight put the RIF above the samples' 0: unscaled, the floor alone shows.
    let mut tracker = steady(unscaled());
    assert_eq!(tracker.report(Time::from_millis(1_000)).latency, ms(10));
    // From 1 s on, nothing that arrives finishes.
    let stuck: Vec<Arrival> = (50..60)
        .map(|i| tracker.on_arrival(Time::from_millis(i * 20)))
        .collect();
    // Not yet longer than the slowest sample: the median alone.
    assert_eq!(tracker.report(Time::from_millis(1_010)).latency, ms(10));
    // The oldest stuck query (arrived at 1000 ms) has waited 299 ms at 1300 ms (ages count from
    // the end of the arrival's millisecond): the report grows by the 284 ms it outlasts the
    // slowest sample, to 10 + 284 ms.
    let now = Time::from_millis(1_300);
    assert_eq!(tracker.stalled_for(now), Some(ms(299)));
    assert_eq!(tracker.report(now).latency, ms(294));
    for arrival in stuck {
        tracker.on_abandon(arrival, now);
    }
    assert_eq!(tracker.rif(), 0);
    assert_eq!(tracker.stalled_for(now), None);
    // Their clients gave up, but nothing that arrived since 1000 ms has finished: the stall
    // they proved (300 ms) stays the floor of the report although nothing is in flight.
    assert_eq!(tracker.abandoned_stall_for(now), Some(ms(300)));
    assert_eq!(tracker.report(now).latency, ms(300));
    // Once the replica answers quickly again, the stall is over and fresh samples take over.
    for i in 0..32 {
        let t = Time::from_millis(1_300 + i);
        let arrival = tracker.on_arrival(t);
        tracker.on_finish(arrival, Outcome::Success, t + ms(10));
    }
    assert_eq!(tracker.abandoned_stall_for(Time::from_millis(1_341)), None);
    assert_eq!(tracker.report(Time::from_millis(1_341)).latency, ms(10));
}

#[test]
fn a_stall_whose_queries_are_all_cancelled_still_shows() {
    // Hedges that win elsewhere cancel every query a stalled replica holds about 35 ms after it
    // arrived, so none is ever old in flight; yet nothing that arrives finishes.
    let mut tracker = steady(EstimatorConfig::default());
    let start = Time::from_millis(1_000);
    let mut held = std::collections::VecDeque::new();
    for i in 0..40 {
        let t = start + ms(5 * i);
        held.push_back(tracker.on_arrival(t));
        while held
            .front()
            .is_some_and(|a: &Arrival| t.saturating_since(a.at) >= ms(35))
        {
            let arrival = held.pop_front().unwrap();
            tracker.on_abandon(arrival, t);
        }
    }
    let now = start + ms(195);
    // The oldest query in flight is young, but the stall dates from the first arrival.
    assert!(tracker.stalled_for(now) <= Some(ms(35)));
    assert_eq!(tracker.abandoned_stall_for(now), Some(ms(195)));
    assert!(tracker.report(now).latency >= ms(195));
    // Once nothing is in flight the evidence ends at the last abandon...
    for arrival in held.drain(..) {
        tracker.on_abandon(arrival, now);
    }
    assert_eq!(tracker.abandoned_stall_for(now + ms(500)), Some(ms(195)));
    // ...and is forgotten max_age (1 s) after it.
    assert_eq!(tracker.abandoned_stall_for(now + ms(1_001)), None);
}

#[test]
fn early_give_ups_on_a_healthy_replica_prove_no_stall() {
    // Queries in flight put the RIF above the samples' 0: unscaled, the floor alone shows.
    let mut tracker = steady(unscaled());
    let now = Time::from_millis(1_000);
    // A client gives up after 3 ms; later queries go on finishing in 5 to 15 ms.
    let early = tracker.on_arrival(now);
    let next = tracker.on_arrival(now + ms(1));
    tracker.on_abandon(early, now + ms(3));
    assert_eq!(tracker.report(now + ms(10)).latency, ms(10));
    tracker.on_finish(next, Outcome::Success, now + ms(11));
    assert_eq!(tracker.abandoned_stall_for(now + ms(12)), None);
    assert_eq!(tracker.report(now + ms(12)).latency, ms(10));
}

#[test]
fn abandoned_waits_count_only_as_evidence_of_slowness() {
    let mut tracker = steady(EstimatorConfig::default());
    let now = Time::from_millis(1_000);
    assert_eq!(tracker.report(now).latency, ms(10));
    // Clients that give up after 2 ms on a replica that takes 10 ms say nothing against it.
    for i in 0..40 {
        let t = now + ms(i);
        let arrival = tracker.on_arrival(t);
        tracker.on_abandon(arrival, t + ms(2));
    }
    assert_eq!(tracker.report(now + ms(42)).latency, ms(10));
    // A replica too slow for its clients' patience: every query is abandoned after 900 ms.
    let mut tracker = steady(EstimatorConfig::default());
    let arrivals: Vec<Arrival> = (0..20)
        .map(|i| tracker.on_arrival(Time::from_millis(1_000 + 50 * i)))
        .collect();
    for arrival in &arrivals {
        tracker.on_abandon(*arrival, arrival.at + ms(900));
    }
    assert_eq!(tracker.rif(), 0);
    // Each query waited 900 ms, and nothing that arrived from 1000 ms on had finished by the
    // last give-up at 2850 ms: the report is that stall, not the patience of one client.
    let report = tracker.report(Time::from_millis(2_850)).latency;
    assert_eq!(report, ms(1_850));
    // A second later the stall is forgotten; the waits recorded as samples remain.
    let report = tracker.report(Time::from_millis(3_851)).latency;
    assert!(report >= ms(900), "{report:?}");
}

#[test]
fn a_long_query_overtaken_by_later_ones_is_not_a_stall() {
    let mut tracker = LoadTracker::new(EstimatorConfig::default());
    // A streamed response held open for a minute, while the replica serves 10 ms queries.
    let stream = tracker.on_arrival(Time::ZERO);
    for i in 1..6000 {
        let arrival = tracker.on_arrival(Time::from_millis(i * 10));
        tracker.on_finish(arrival, Outcome::Success, Time::from_millis(i * 10 + 10));
    }
    let now = Time::from_secs(60);
    // The stream's age, a lower bound once it is older than the slots kept (about 4 s).
    assert!(tracker.oldest_in_flight_age(now) >= ms(4_000));
    assert_eq!(tracker.stalled_for(now), None);
    assert_eq!(tracker.report(now).latency, ms(10));
    tracker.on_finish(stream, Outcome::Success, now);
    assert_eq!(tracker.rif(), 0);
}

#[test]
fn without_the_floor_a_stall_stays_invisible_until_it_finishes() {
    let mut tracker = steady(EstimatorConfig {
        in_flight_floor: false,
        ..unscaled()
    });
    let _stuck = tracker.on_arrival(Time::from_millis(1_000));
    let now = Time::from_millis(1_300);
    assert_eq!(tracker.report(now).latency, ms(10));
    assert_eq!(tracker.stalled_for(now), Some(ms(299)));
}

#[test]
fn an_idle_replica_stale_estimate_halves_every_half_life() {
    let mut tracker = steady(EstimatorConfig::default());
    // Fresh until max_age (1 s) past the newest sample (995 ms), then halving every 10 s.
    assert_eq!(tracker.report(Time::from_millis(1_995)).latency, ms(10));
    assert_eq!(tracker.report(Time::from_millis(11_995)).latency, ms(5));
    let later = Time::from_millis(21_995);
    assert_eq!(tracker.report(later).latency, Duration::from_micros(2_500));
    // The first query to reach the shunned replica is its trial: until it finishes the report
    // is the estimate from before the fade, so the replica is not flooded on a guess.
    let arrival = tracker.on_arrival(later);
    assert_eq!(tracker.report(later).latency, ms(10));
    // Its finish makes the replica fresh again: no decay, and the samples from before the
    // 21 s gap in its traffic no longer count, so the new one alone decides.
    tracker.on_finish(arrival, Outcome::Success, later + ms(5));
    assert_eq!(tracker.report(later + ms(6)).latency, ms(5));
}

#[test]
fn a_trial_faster_than_half_the_stale_estimate_leaves_the_fade_running() {
    // A replica shunned while its queries took 80 ms, tried once its fade had taken the report
    // to 57 ms (the spell is over: the trial takes 8 ms).
    let slow = |start: u64| {
        let mut tracker = LoadTracker::new(EstimatorConfig::default());
        for i in 0..16 {
            let arrival = tracker.on_arrival(Time::from_millis(start + 10 * i));
            tracker.on_finish(
                arrival,
                Outcome::Success,
                Time::from_millis(start + 10 * i + 80),
            );
        }
        tracker
    };
    let mut tracker = slow(0);
    // Stale from 1.23 s, then half a half-life.
    let faded = Time::from_millis(6_230);
    assert!(tracker.report(faded).latency < ms(57));
    let trial = tracker.on_arrival(faded);
    assert_eq!(tracker.report(faded).latency, ms(80));
    tracker.on_finish(trial, Outcome::Success, faded + ms(8));
    // One fast query is not yet a new regime, but the report stays faded, so the next query
    // comes at once instead of some 6 s later. It is a trial too.
    let next = faded + ms(20);
    assert!(tracker.report(next).latency < ms(57));
    let second = tracker.on_arrival(next);
    assert_eq!(tracker.report(next).latency, ms(80));
    tracker.on_finish(second, Outcome::Success, next + ms(9));
    // Two make a faster regime, and the fade ends with it: the report is their median.
    assert_eq!(
        tracker.report(next + ms(10)).latency,
        Duration::from_micros(8_500)
    );
    assert_eq!(
        tracker.report(next + ms(990)).latency,
        Duration::from_micros(8_500)
    );

    // A trial as slow as the estimate (the spell goes on) starts the fade afresh.
    let mut tracker = slow(0);
    let trial = tracker.on_arrival(faded);
    tracker.on_finish(trial, Outcome::Success, faded + ms(75));
    assert_eq!(tracker.report(faded + ms(80)).latency, ms(80));
    assert_eq!(tracker.report(faded + ms(1_000)).latency, ms(80));
}

#[test]
fn only_one_trial_that_arrived_stale_keeps_the_fade_and_only_against_the_regime_window() {
    let at = |ms_: u64| Time::from_millis(ms_);
    // Sixteen 80 ms samples (the newest at 230 ms): stale from 1230 ms.
    let slow = |config: EstimatorConfig| {
        let mut est = LatencyEstimator::new(config);
        for i in 0..16 {
            est.record(0, ms(80), at(80 + 10 * i));
        }
        est
    };
    let mut est = slow(EstimatorConfig::default());
    assert_eq!(est.stale_since(), at(1_230));
    // A query that arrived before the estimate went stale is no trial, however fast.
    est.record(0, ms(10), at(1_235));
    assert_eq!(est.stale_since(), at(2_235));

    // A trial keeps the fade; a second one ends it even when it is faster still (the faster
    // regime then stands, and the report must not fade below it).
    let mut est = slow(EstimatorConfig::default());
    est.record(0, ms(8), at(5_000));
    assert_eq!(est.stale_since(), at(1_230));
    est.record(0, ms(3), at(5_020));
    assert_eq!(est.stale_since(), at(6_020));
    assert_eq!(
        est.estimate(0, at(5_021)),
        Some(Duration::from_micros(5_500))
    );

    // The samples a trial is judged against are those `new_regime` will see beside a second
    // one: the newest `min_samples - 2`. With `min_samples = 6`, a fast sample five back does
    // not count against it.
    let config = EstimatorConfig {
        min_samples: 6,
        ..Default::default()
    };
    let mut est = LatencyEstimator::new(config);
    for (i, latency) in [100, 25, 100, 100, 100, 100].into_iter().enumerate() {
        est.record(0, ms(latency), at(10 * i as u64));
    }
    est.record(0, ms(15), at(5_000));
    assert_eq!(est.stale_since(), at(1_050));
    est.record(0, ms(15), at(5_020));
    assert_eq!(est.estimate(0, at(5_021)), Some(ms(15)));
    // With a wrapped ring too (more samples than it holds), the newest are the ones read: 40
    // samples every 10 ms, 5 ms until `slow_from`, then 80 ms.
    let wrapped = |slow_from: u64| {
        let mut est = LatencyEstimator::new(EstimatorConfig::default());
        for i in 0..40 {
            let latency = if i < slow_from { 5 } else { 80 };
            est.record(0, ms(latency), at(10 * i));
        }
        est
    };
    let mut est = wrapped(20);
    est.record(0, ms(30), at(5_000));
    assert_eq!(
        est.stale_since(),
        at(1_390),
        "30 ms is below half of the newest fourteen"
    );
    let mut est = wrapped(36);
    est.record(0, ms(30), at(5_000));
    assert_eq!(
        est.stale_since(),
        at(6_000),
        "5 ms samples among the newest fourteen"
    );
}

#[test]
fn samples_before_a_gap_in_traffic_stop_counting_once_one_follows_it() {
    let mut est = estimator();
    // A replica shunned after its queries took 2 s, idle for 30 s, then tried once: 170 ms.
    for i in 0..16 {
        est.record(0, ms(2000), Time::from_millis(i));
    }
    assert_eq!(est.estimate(0, Time::from_secs(30)), Some(ms(2000)));
    est.record(0, ms(170), Time::from_secs(30));
    assert_eq!(est.estimate(0, Time::from_secs(30) + ms(1)), Some(ms(170)));
    // Without a gap (samples every 0.5 s at a low rate) the newest 16 of any age still decide.
    let mut est = estimator();
    for i in 0..16 {
        est.record(0, ms(100 + i), Time::from_millis(500 * i));
    }
    assert_eq!(
        est.estimate(0, Time::from_secs(60)),
        Some(Duration::from_micros(107_500))
    );
}

#[test]
fn a_replica_back_from_a_slow_spell_reports_its_speed_after_two_queries() {
    let mut est = estimator();
    // A replica whose queries took 2 s, then a stray query every half second at 170 ms: one
    // fast sample is not a new regime, two are.
    let at = |ms_: u64| Time::from_millis(ms_);
    for i in 0..16 {
        est.record(0, ms(2000), at(100 * i));
    }
    est.record(0, ms(170), at(3000));
    assert_eq!(est.estimate(0, at(3001)), Some(ms(2000)));
    est.record(0, ms(172), at(3500));
    assert_eq!(est.estimate(0, at(3501)), Some(ms(171)));
    // Further samples of the new regime keep counting, the old one is gone.
    est.record(0, ms(174), at(4000));
    assert_eq!(est.estimate(0, at(4001)), Some(ms(172)));
    // Not the other way round: slower samples still need to outvote the others (a slowdown
    // shows through the in-flight floor and the stalls abandoned queries leave).
    let mut est = estimator();
    for i in 0..16 {
        est.record(0, ms(20), at(100 * i));
    }
    est.record(0, ms(400), at(3000));
    est.record(0, ms(500), at(3500));
    assert_eq!(est.estimate(0, at(3501)), Some(ms(20)));
    // Nor while the samples before are still fresh: that is not an idle replica's history.
    let mut est = estimator();
    for _ in 0..8 {
        est.record(0, ms(2000), at(3000));
    }
    est.record(0, ms(170), at(3500));
    est.record(0, ms(172), at(3600));
    assert_eq!(est.estimate(0, at(3601)), Some(ms(2000)));
}

#[test]
fn ordinary_spread_at_a_low_rate_is_not_a_new_regime() {
    // Log-normal-like spread, newest samples at the low end of it but not half of the fastest
    // before them: the newest 16 decide, as before.
    let mut est = estimator();
    let latencies = [
        30, 22, 41, 25, 35, 28, 19, 33, 26, 38, 24, 31, 27, 36, 11, 10,
    ];
    for (i, l) in latencies.iter().enumerate() {
        est.record(0, ms(*l), Time::from_millis(500 * i as u64));
    }
    assert_eq!(
        est.estimate(0, Time::from_secs(20)),
        Some(Duration::from_micros(27_500))
    );
}

#[test]
fn a_zero_half_life_keeps_the_stale_estimate() {
    let tracker = steady(EstimatorConfig {
        stale_half_life: Duration::ZERO,
        ..Default::default()
    });
    assert_eq!(tracker.report(Time::from_secs(3600)).latency, ms(10));
    assert_eq!(tracker.estimator().stale_factor(Time::from_secs(3600)), 1.0);
}
