//! The replica-side cost of load tracking: `LatencyEstimator::record` (target under 100 ns),
//! `estimate` in its high-rate (window) and low-rate (newest K) regimes, and a query's full
//! `LoadTracker` cycle (arrival, finish, report).
//!
//! An estimate repeated with nothing recorded in between is a memo lookup, so each `estimate`
//! iteration first records one sample where the estimate will read it (one step of the
//! regime's rate later) and then estimates: a fresh computation every time, plus one `record`.
//!
//! Run: `cargo bench -p prequal-core --bench estimator -- --warm-up-time 1 --measurement-time 3`

// criterion_group! expands to an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use prequal_core::{EstimatorConfig, LatencyEstimator, LoadTracker, Outcome, Time};

/// RIFs cycle through 0..RIF_SPREAD, so samples spread over exact and geometric buckets.
const RIF_SPREAD: u32 = 40;

/// An estimator filled with samples `gap` apart at RIFs cycling through 0..RIF_SPREAD.
fn filled(gap: Duration) -> (LatencyEstimator, Time) {
    let mut estimator = LatencyEstimator::new(EstimatorConfig::default());
    let mut now = Time::ZERO;
    for i in 0..10_000u32 {
        now = now + gap;
        let latency = Duration::from_micros(500 + u64::from(i % 97) * 20);
        estimator.record(i % RIF_SPREAD, latency, now);
    }
    (estimator, now)
}

fn estimator(c: &mut Criterion) {
    let mut group = c.benchmark_group("estimator");
    let (mut est, mut now) = filled(Duration::from_micros(10));
    let mut i = 0u32;
    group.bench_function("record", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            now = now + Duration::from_micros(10);
            est.record(black_box(i % RIF_SPREAD), Duration::from_micros(700), now);
        })
    });

    // 100k completions a second: each bucket's ring is within the 10 ms window.
    let mut rif = 0u32;
    let gap = Duration::from_micros(10);
    let (mut est, mut now) = filled(gap);
    group.bench_function("estimate/high-rate", |b| {
        b.iter(|| {
            rif = (rif + 7) % RIF_SPREAD;
            now = now + gap;
            est.record(rif, Duration::from_micros(700), now);
            black_box(est.estimate(black_box(rif), now))
        })
    });

    // 10 completions a second: nothing is within the window and fewer than 16 samples are
    // younger than `max_age`, so every bucket is visited and the newest 16 of any RIF decide.
    let gap = Duration::from_millis(100);
    let (mut est, mut now) = filled(gap);
    group.bench_function("estimate/low-rate", |b| {
        b.iter(|| {
            rif = (rif + 7) % RIF_SPREAD;
            now = now + gap;
            est.record(rif, Duration::from_micros(700), now);
            black_box(est.estimate(black_box(rif), now))
        })
    });

    // A RIF far from every sample, at the low rate: the search widens across every bucket.
    let (mut est, mut now) = filled(gap);
    group.bench_function("estimate/far-rif", |b| {
        b.iter(|| {
            rif = (rif + 7) % RIF_SPREAD;
            now = now + gap;
            est.record(rif, Duration::from_micros(700), now);
            black_box(est.estimate(black_box(1_000_000), now))
        })
    });

    group.finish();
}

fn tracker(c: &mut Criterion) {
    let mut group = c.benchmark_group("tracker");
    let mut tracker = LoadTracker::new(EstimatorConfig::default());
    let mut now = Time::ZERO;
    // Keep a few queries in flight so arrivals see a realistic RIF.
    let mut open: Vec<_> = (0..4).map(|_| tracker.on_arrival(now)).collect();
    let mut next = 0;
    group.bench_function("arrival+finish+report", |b| {
        b.iter(|| {
            now = now + Duration::from_micros(20);
            let arrival = tracker.on_arrival(now);
            let oldest = std::mem::replace(&mut open[next], arrival);
            next = (next + 1) % open.len();
            tracker.on_finish(oldest, Outcome::Success, now);
            black_box(tracker.report(now))
        })
    });
    group.finish();
}

criterion_group!(benches, estimator, tracker);
criterion_main!(benches);
