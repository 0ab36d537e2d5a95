//! Cost of the load tracker per request: one arrival plus one finish, as `ProbeLayer` does for
//! every request, uncontended and with two threads hammering the same tracker; and the cost of
//! answering one probe (a report).
//!
//! Run: `cargo bench -p prequal-server --bench tracker`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use prequal_core::{EstimatorConfig, Outcome, Time};
use prequal_server::SharedTracker;

fn warmed() -> SharedTracker {
    let tracker = SharedTracker::new(EstimatorConfig::default());
    for _ in 0..10_000 {
        let a = tracker.on_arrival();
        tracker.on_finish(a, Outcome::Success);
    }
    tracker
}

fn uncontended(c: &mut Criterion) {
    let tracker = warmed();
    c.bench_function("tracker/arrival+finish (real clock)", |b| {
        b.iter(|| {
            let a = tracker.on_arrival();
            tracker.on_finish(black_box(a), Outcome::Success);
        })
    });
    let mut now = 0u64;
    c.bench_function("tracker/arrival+finish (time given)", |b| {
        b.iter(|| {
            now += 1_000;
            let a = tracker.on_arrival_at(Time::from_nanos(now));
            tracker.on_finish_at(black_box(a), Outcome::Success, Time::from_nanos(now + 500));
        })
    });
    c.bench_function("clock/Instant::now (for reference)", |b| {
        b.iter(Instant::now)
    });
    // A busy replica: 10 000 requests over the last 10 ms, a few of them still in flight.
    let busy = SharedTracker::new(EstimatorConfig::default());
    for i in 0..10_000u64 {
        let a = busy.on_arrival_at(Time::from_micros(i));
        busy.on_finish_at(a, Outcome::Success, Time::from_micros(i + 300));
    }
    let _in_flight: Vec<_> = (0..3)
        .map(|_| busy.on_arrival_at(Time::from_millis(10)))
        .collect();
    let now = Time::from_micros(10_300);
    c.bench_function("tracker/report (one probe, busy replica)", |b| {
        b.iter(|| black_box(busy.report_at(black_box(now))))
    });
    // The same replica after a minute without traffic: every sample is stale.
    let later = Time::from_secs(60);
    c.bench_function("tracker/report (one probe, idle replica)", |b| {
        b.iter(|| black_box(busy.report_at(black_box(later))))
    });
}

/// A way of recording one request.
type OneRequest = fn(&SharedTracker);

/// One request as `ProbeLayer` records it: reading the clock at arrival and at finish.
fn request_real_clock(tracker: &SharedTracker) {
    let a = tracker.on_arrival();
    tracker.on_finish(black_box(a), Outcome::Success);
}

/// One request with the time handed in, to separate the tracker's cost from the clock's.
fn request_time_given(tracker: &SharedTracker) {
    let now = Time::from_micros(black_box(1_000));
    let a = tracker.on_arrival_at(now);
    tracker.on_finish_at(
        black_box(a),
        Outcome::Success,
        now + Duration::from_micros(1),
    );
}

/// Two threads run `iters` requests each on one tracker; the time reported is the wall time
/// until both are done, so per iteration it is one request's cost on one thread while the
/// other contends.
fn contended(c: &mut Criterion) {
    let tracker = Arc::new(warmed());
    let cases: [(&str, OneRequest); 2] = [
        (
            "tracker/arrival+finish, 2 threads contending (real clock)",
            request_real_clock,
        ),
        (
            "tracker/arrival+finish, 2 threads contending (time given)",
            request_time_given,
        ),
    ];
    for (name, request) in cases {
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let barrier = Arc::new(Barrier::new(2));
                let other = {
                    let tracker = Arc::clone(&tracker);
                    let barrier = Arc::clone(&barrier);
                    std::thread::spawn(move || {
                        barrier.wait();
                        for _ in 0..iters {
                            request(&tracker);
                        }
                    })
                };
                barrier.wait();
                let start = Instant::now();
                for _ in 0..iters {
                    request(&tracker);
                }
                other.join().unwrap();
                start.elapsed()
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = uncontended, contended
}
criterion_main!(benches);
