//! A thread-safe load tracker: the core's [`LoadTracker`] made cheap to share between threads.
//!
//! Every request a replica serves touches the tracker twice (arrival and finish), and every
//! probe reads it, so the split between lock-free and locked work matters:
//!
//! - **RIF** is an [`AtomicU32`]. An arrival is one `fetch_add`, whose previous value is exactly
//!   the "RIF seen at arrival" the estimator tags samples with (Prequal paper, section 4); a
//!   finish is one decrement. Probes read it without locking.
//! - **Samples** (latency by arrival RIF, completions and errors for qps and error rate) and the
//!   arrival times of the queries in flight (for the age of the oldest) go into the core's
//!   single-threaded [`LoadTracker`] under a [`Mutex`] held only for its O(1) `on_arrival` and
//!   `on_finish`. The atomic RIF is the one reported, handed to the core's `report_at_rif`.
//!
//! The benchmark `benches/tracker.rs` measures one arrival + finish. On a shared 2-vCPU VM: about
//! 46 ns with the time handed in and about 52 ns with the two clock reads a real request needs
//! (the clock reads the time-stamp counter through `quanta`; `Instant::now` costs 24 ns there).
//! Two threads doing nothing but that contend to about 400 ns; a real request does far more
//! work between the two, so the lock is not sharded.
//!
//! Time comes from a [`Clock`]: the real monotonic clock by default, or any source of [`Time`]
//! the caller hands in (the `*_at` methods), so tests never depend on the wall clock.
//!
//! Utilisation is not something a tracker can observe; a replica that knows it (the testbed's
//! emulated CPU, or a service reading its cgroup) stores it with
//! [`SharedTracker::set_utilization`], and reports carry the last value stored.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use prequal_core::{Arrival, EstimatorConfig, LoadReport, LoadTracker, Outcome, Time};

/// The bit pattern stored in the utilisation slot when no value is known.
const NO_UTILIZATION: u64 = u64::MAX;

/// The real monotonic clock, as a [`Time`] since the tracker was built.
///
/// It reads the CPU's time-stamp counter through `quanta` where that is stable (calibrated
/// against the OS clock once per process) and the OS monotonic clock otherwise: a request reads
/// the clock twice, and on virtual machines `Instant::now` alone costs 30 - 40 ns.
#[derive(Clone, Debug)]
pub struct Clock {
    source: quanta::Clock,
    origin: quanta::Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let source = quanta::Clock::new();
        let origin = source.now();
        Self { source, origin }
    }

    /// A clock whose origin is `delay` from now; it reads zero until then.
    pub fn starting_in(delay: std::time::Duration) -> Self {
        let source = quanta::Clock::new();
        let origin = source.now() + delay;
        Self { source, origin }
    }

    /// Nanoseconds since the origin.
    pub fn now(&self) -> Time {
        let nanos = self
            .source
            .now()
            .saturating_duration_since(self.origin)
            .as_nanos();
        Time::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// One replica's load, shared by every thread that serves it. Wrap it in an `Arc`.
#[derive(Debug)]
pub struct SharedTracker {
    rif: AtomicU32,
    samples: Mutex<LoadTracker>,
    utilization: AtomicU64,
    clock: Clock,
}

impl SharedTracker {
    /// A tracker with nothing in flight, reading the real clock from now on.
    pub fn new(config: EstimatorConfig) -> Self {
        Self::with_clock(config, Clock::new())
    }

    /// A tracker whose [`Time`]s are measured from `clock`'s origin.
    pub fn with_clock(config: EstimatorConfig, clock: Clock) -> Self {
        Self {
            rif: AtomicU32::new(0),
            samples: Mutex::new(LoadTracker::new(config)),
            utilization: AtomicU64::new(NO_UTILIZATION),
            clock,
        }
    }

    /// The tracker's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// A query reached the application now.
    pub fn on_arrival(&self) -> Arrival {
        self.on_arrival_at(self.clock.now())
    }

    /// A query reached the application at `now`: counts it in flight.
    pub fn on_arrival_at(&self, now: Time) -> Arrival {
        // Relaxed is enough: the counter is a statistic, not a guard for other memory.
        let before = self.rif.fetch_add(1, Ordering::Relaxed);
        self.lock().on_arrival(now);
        Arrival {
            at: now,
            rif: before,
        }
    }

    /// The query's response was handed back now.
    pub fn on_finish(&self, arrival: Arrival, outcome: Outcome) {
        self.on_finish_at(arrival, outcome, self.clock.now());
    }

    /// The query's response was handed back at `now`: records its latency and outcome.
    pub fn on_finish_at(&self, arrival: Arrival, outcome: Outcome, now: Time) {
        self.decrement();
        self.lock().on_finish(arrival, outcome, now);
    }

    /// The query left now without a response (its client went away): no longer in flight; its
    /// wait is kept as evidence where it exceeds the estimate (see
    /// [`prequal_core::LoadTracker::on_abandon`]).
    pub fn on_abandon(&self, arrival: Arrival) {
        self.on_abandon_at(arrival, self.clock.now());
    }

    /// The query left at `now` without a response.
    pub fn on_abandon_at(&self, arrival: Arrival, now: Time) {
        self.decrement();
        self.lock().on_abandon(arrival, now);
    }

    /// Requests in flight now.
    pub fn rif(&self) -> u32 {
        self.rif.load(Ordering::Relaxed)
    }

    /// Stores the replica's current utilisation (1.0 = its whole allocation); `None` forgets it.
    pub fn set_utilization(&self, utilization: Option<f64>) {
        let bits = utilization
            .filter(|u| u.is_finite())
            .map_or(NO_UTILIZATION, f64::to_bits);
        self.utilization.store(bits, Ordering::Relaxed);
    }

    /// The load report a probe gets now.
    pub fn report(&self) -> LoadReport {
        self.report_at(self.clock.now())
    }

    /// The load report at `now`: current RIF, latency estimate at that RIF (zero before any
    /// sample), qps and error rate over the rate window, and the stored utilisation.
    pub fn report_at(&self, now: Time) -> LoadReport {
        let rif = self.rif();
        let mut report = self.lock().report_at_rif(rif, now);
        let bits = self.utilization.load(Ordering::Relaxed);
        report.utilization = (bits != NO_UTILIZATION).then(|| f64::from_bits(bits));
        report
    }

    fn decrement(&self) {
        // Saturating, so a stray extra finish can never wrap the counter to 4 billion.
        let _ = self
            .rif
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(1));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LoadTracker> {
        // A panic while holding the lock leaves the tracker consistent (every update is a
        // single O(1) step), so a poisoned lock is still usable.
        self.samples.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn rif_counts_queries_in_flight_and_tags_arrivals() {
        let tracker = SharedTracker::new(EstimatorConfig::default());
        let first = tracker.on_arrival_at(Time::from_millis(1));
        let second = tracker.on_arrival_at(Time::from_millis(2));
        assert_eq!((first.rif, second.rif, tracker.rif()), (0, 1, 2));
        tracker.on_finish_at(first, Outcome::Success, Time::from_millis(5));
        assert_eq!(tracker.rif(), 1);
        tracker.on_abandon_at(second, Time::from_millis(6));
        assert_eq!(tracker.rif(), 0);
        tracker.on_abandon_at(second, Time::from_millis(6));
        assert_eq!(tracker.rif(), 0, "an extra finish must not wrap");
    }

    #[test]
    fn report_estimates_at_the_current_rif() {
        let tracker = SharedTracker::new(EstimatorConfig::default());
        // Queries that arrived alone took 2 ms; queries that arrived with 3 others took 8 ms.
        for i in 0..20 {
            let t = Time::from_millis(10 * i);
            let a = tracker.on_arrival_at(t);
            tracker.on_finish_at(a, Outcome::Success, t + Duration::from_millis(2));
        }
        let now = Time::from_millis(300);
        let batch: Vec<_> = (0..4).map(|_| tracker.on_arrival_at(now)).collect();
        let idle = tracker.report_at(now);
        assert_eq!(idle.rif, 4);
        for a in batch {
            tracker.on_finish_at(a, Outcome::Success, now + Duration::from_millis(8));
        }
        let after = tracker.report_at(now + Duration::from_millis(8));
        assert_eq!(after.rif, 0);
        assert_eq!(after.latency, Duration::from_millis(2));
        assert!(after.qps.is_some_and(|q| q > 0.0));
        assert_eq!(after.error_rate, Some(0.0));
        assert_eq!(after.utilization, None);
    }

    #[test]
    fn a_stall_shows_in_the_report_before_any_stalled_query_finishes() {
        let tracker = SharedTracker::new(EstimatorConfig::default());
        for i in 0..20 {
            let t = Time::from_millis(10 * i);
            let a = tracker.on_arrival_at(t);
            tracker.on_finish_at(a, Outcome::Success, t + Duration::from_millis(2));
        }
        // Two queries arrive at 300 ms and never finish.
        let stuck = [300, 301].map(|ms| tracker.on_arrival_at(Time::from_millis(ms)));
        let report = tracker.report_at(Time::from_millis(700));
        assert_eq!(report.rif, 2);
        // 2 ms median, grown by the 399 ms the oldest has waited beyond the slowest sample.
        assert_eq!(report.latency, Duration::from_millis(2 + 399 - 2));
        for a in stuck {
            tracker.on_abandon_at(a, Time::from_millis(700));
        }
        // Their clients gave up, but nothing that arrived since 300 ms has finished: the stall
        // they proved stays the report's floor for max_age (1 s) after the last give-up.
        let report = tracker.report_at(Time::from_millis(700));
        assert_eq!(
            (report.rif, report.latency),
            (0, Duration::from_millis(400))
        );
        // Then it is forgotten, and the twenty 2 ms samples, stale by now, fade from 2 ms.
        let report = tracker.report_at(Time::from_millis(1_701));
        assert!(report.latency <= Duration::from_millis(2), "{report:?}");
    }

    #[test]
    fn errors_count_in_the_rate_and_utilization_is_passed_through() {
        let tracker = SharedTracker::new(EstimatorConfig::default());
        for i in 0..4 {
            let a = tracker.on_arrival_at(Time::from_millis(i));
            let outcome = if i == 0 {
                Outcome::Error
            } else {
                Outcome::Success
            };
            tracker.on_finish_at(a, outcome, Time::from_millis(i + 1));
        }
        tracker.set_utilization(Some(0.5));
        let report = tracker.report_at(Time::from_millis(10));
        assert_eq!(report.error_rate, Some(0.25));
        assert_eq!(report.utilization, Some(0.5));
        tracker.set_utilization(Some(f64::NAN));
        assert_eq!(tracker.report_at(Time::from_millis(10)).utilization, None);
    }

    #[test]
    fn concurrent_threads_leave_rif_at_zero() {
        let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let tracker = Arc::clone(&tracker);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let a = tracker.on_arrival();
                        tracker.on_finish(a, Outcome::Success);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(tracker.rif(), 0);
        assert!(tracker.report().qps.is_some_and(|q| q > 0.0));
    }
}
