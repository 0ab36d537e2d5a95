//! [`LoadTracker`]: one replica's RIF counter, [`LatencyEstimator`], in-flight ages and windows
//! of completions and errors, combined into the [`LoadReport`] a probe is answered with.

use std::time::Duration;

use crate::policy::{LoadReport, Outcome};
use crate::sliding_window::SlidingWindow;
use crate::time::Time;

use super::config::EstimatorConfig;
use super::in_flight::InFlightAges;
use super::latency::LatencyEstimator;
use super::memo::Estimate;

/// What a query's arrival left behind, handed back at its finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When the query arrived.
    pub at: Time,
    /// RIF seen at arrival, before counting itself.
    pub rif: u32,
}

/// RIF counter + [`LatencyEstimator`] + recent qps / error-rate windows: one replica, one
/// thread.
#[derive(Debug, Clone)]
pub struct LoadTracker {
    pub(super) rif: u32,
    pub(super) estimator: LatencyEstimator,
    /// Counts `(completions, errors)` over the rate window.
    pub(super) rates: SlidingWindow,
    /// Queries in flight by arrival time, for the age of the oldest.
    pub(super) in_flight: InFlightAges,
    /// The latest arrival time among the queries that have finished: a query in flight that
    /// arrived before it has been overtaken (see [`LoadTracker::stalled_for`]).
    pub(super) last_finished_arrival: Option<Time>,
    /// A stall that abandoned queries proved: the arrival of the oldest abandoned query that no
    /// later query has overtaken, and when the latest such query was abandoned (see
    /// [`LoadTracker::abandoned_stall_for`]).
    pub(super) abandoned_stall: Option<AbandonedStall>,
    /// The first event seen, so rates early in a replica's life are not diluted by a window
    /// that reaches back before it started.
    pub(super) first_seen: Option<Time>,
}

/// A stall seen through abandoned queries: nothing that arrived at or after `since` has
/// finished, and the latest of those queries was abandoned at `last_abandon`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct AbandonedStall {
    pub(super) since: Time,
    pub(super) last_abandon: Time,
}

impl AbandonedStall {
    /// Still evidence at `now`: its last abandon is at most `max_age` old.
    pub(super) fn is_recent(&self, now: Time, max_age: Duration) -> bool {
        now.saturating_since(self.last_abandon) <= max_age
    }
}

impl LoadTracker {
    /// A tracker with nothing in flight and no samples.
    pub fn new(config: EstimatorConfig) -> Self {
        Self {
            rif: 0,
            estimator: LatencyEstimator::new(config),
            rates: SlidingWindow::new(config.rate_window),
            in_flight: InFlightAges::default(),
            last_finished_arrival: None,
            abandoned_stall: None,
            first_seen: None,
        }
    }

    /// A query reached the application: counts it in flight.
    pub fn on_arrival(&mut self, now: Time) -> Arrival {
        self.first_seen.get_or_insert(now);
        let arrival = Arrival {
            at: now,
            rif: self.rif,
        };
        self.rif = self.rif.saturating_add(1);
        self.in_flight.arrive(now);
        arrival
    }

    /// The application handed back the response of the query that `arrival` describes.
    ///
    /// Error responses do not feed the latency estimate: a replica that fails fast would
    /// otherwise look quick and attract more traffic (sinkholing). They still count in the
    /// error rate, which clients use to avoid such a replica.
    pub fn on_finish(&mut self, arrival: Arrival, outcome: Outcome, now: Time) {
        self.first_seen.get_or_insert(arrival.at);
        self.rif = self.rif.saturating_sub(1);
        self.in_flight.leave(arrival.at);
        self.last_finished_arrival = self.last_finished_arrival.max(Some(arrival.at));
        if self
            .abandoned_stall
            .is_some_and(|stall| arrival.at >= stall.since)
        {
            // A query that arrived after the stall began has finished: it is over.
            self.abandoned_stall = None;
        }
        if outcome != Outcome::Error {
            let latency = now.saturating_since(arrival.at);
            self.estimator.record(arrival.rif, latency, now);
        }
        self.rates.add(now, 1, u64::from(outcome.is_failure()));
    }

    /// The query that `arrival` describes left at `now` without a response (its client went
    /// away): no longer in flight.
    ///
    /// How long it had waited is a lower bound on its latency. When that bound is above what
    /// the estimate says a query at its RIF takes, it is recorded as a sample: a replica too
    /// slow for its clients' patience, whose queries all end this way, must not report the
    /// fast latency of its last completed ones (or none at all) once the in-flight floor no
    /// longer sees them. A bound below the estimate says nothing against it and is dropped, so
    /// clients that give up early (or hedges cancelled on a healthy replica) never make the
    /// estimate look faster than it is.
    ///
    /// An abandoned query that no later query has overtaken also keeps the stall it was part
    /// of in view, and then leaves the stall's length as its sample: see
    /// [`LoadTracker::abandoned_stall_for`].
    pub fn on_abandon(&mut self, arrival: Arrival, now: Time) {
        self.rif = self.rif.saturating_sub(1);
        self.in_flight.leave(arrival.at);
        let believed = self.estimator.estimate_with_max(arrival.rif, now);
        let mut waited = now.saturating_since(arrival.at);
        let overtaken = self
            .last_finished_arrival
            .is_some_and(|last| arrival.at <= last);
        let max_age = self.estimator.config.max_age;
        let ongoing = self
            .abandoned_stall
            .filter(|stall| stall.is_recent(now, max_age));
        if !overtaken {
            // A query that waited longer than any recent query took, with no later query
            // finished, shows a stall that began no later than it arrived; any query of an
            // ongoing stall that no later query overtook extends it.
            let since = match ongoing {
                Some(stall) => Some(stall.since.min(arrival.at)),
                None if believed.is_none_or(|(_, max)| waited > max) => Some(arrival.at),
                None => None,
            };
            if let Some(since) = since {
                self.abandoned_stall = Some(AbandonedStall {
                    since,
                    last_abandon: now,
                });
                // Nothing that arrived since the stall began has finished: that is the bound.
                waited = now.saturating_since(since);
            }
        }
        if believed.is_none_or(|(median, _)| waited > median) {
            self.estimator.record(arrival.rif, waited, now);
        }
    }

    /// Requests in flight now.
    pub fn rif(&self) -> u32 {
        self.rif
    }

    /// How long the oldest query still in flight has waited at `now` (understated by up to
    /// 1 ms); zero when none is.
    pub fn oldest_in_flight_age(&self, now: Time) -> Duration {
        Duration::from_nanos(self.in_flight.oldest_age_nanos(now))
    }

    /// How long the replica has been stalled at `now`: the age of the oldest query in flight
    /// that no later query has overtaken (none that arrived after it has finished), understated
    /// by up to 1 ms; None when every query in flight has been overtaken or none is in flight.
    ///
    /// In a stall nothing that arrives finishes, so the oldest stuck query counts from the
    /// moment the stall began. A single long query on a healthy replica (a hung handler, a
    /// streamed response held open for minutes) is soon overtaken by later ones that finish,
    /// so it does not count: it says nothing about how long a query arriving now will take.
    pub fn stalled_for(&self, now: Time) -> Option<Duration> {
        self.in_flight
            .oldest_age_since(self.last_finished_arrival, now)
            .map(Duration::from_nanos)
    }

    /// How long abandoned queries prove the replica stalled at `now`: since the arrival of the
    /// oldest abandoned query that no later query has overtaken, once one of them had waited
    /// longer than every recent sample (an early give-up on a healthy replica starts nothing;
    /// later abandons of an ongoing stall extend it whatever their wait). When clients cancel what a
    /// stalled replica holds (hedges that won elsewhere, clients out of patience), its queries
    /// in flight stay young and [`LoadTracker::stalled_for`] sees little, yet nothing that
    /// arrived since the first of them has finished. While queries are in flight the evidence
    /// runs to `now`; once none is, it ends at the last abandon, and it is forgotten `max_age`
    /// after that, so a replica that clients left alone is judged afresh by its next queries.
    pub fn abandoned_stall_for(&self, now: Time) -> Option<Duration> {
        let stall = self.abandoned_stall?;
        if self.stalled_for(now).is_some() {
            Some(now.saturating_since(stall.since))
        } else if stall.is_recent(now, self.estimator.config.max_age) {
            Some(stall.last_abandon.saturating_since(stall.since))
        } else {
            None
        }
    }

    /// Whether a query sent to the replica after its estimate went stale is still in flight.
    pub(super) fn on_trial(&self, now: Time) -> bool {
        let stale_since = self.estimator.stale_since();
        now > stale_since
            && self
                .in_flight
                .oldest_age_since(Some(stale_since), now)
                .is_some()
    }

    /// The latency estimator, for inspection.
    pub fn estimator(&self) -> &LatencyEstimator {
        &self.estimator
    }

    /// rif, latency estimate at the current RIF (Duration::ZERO before any sample; decayed by
    /// [`LatencyEstimator::stale_factor`] once no sample is fresh; with `in_flight_floor`,
    /// grown by as much as [`LoadTracker::stalled_for`] exceeds the slowest sample behind the
    /// median),
    /// qps and error_rate over the recent window; utilization None (the caller fills it).
    ///
    /// `qps` counts completions per second over the rate window (or since the first event, if
    /// that is more recent); `error_rate` is the failed share of those completions, 0 when
    /// there were none.
    pub fn report(&self, now: Time) -> LoadReport {
        self.report_at_rif(self.rif, now)
    }

    /// Like [`LoadTracker::report`], but for a RIF counted elsewhere: a multi-threaded server
    /// may keep RIF in an atomic outside the lock that guards this tracker, and only feed
    /// finishes here.
    pub fn report_at_rif(&self, rif: u32, now: Time) -> LoadReport {
        let (completed, failed) = self.rates.sum_window(now);
        let span = self.rates.span(now);
        let span = match self.first_seen {
            Some(first) => span.min(now.saturating_since(first)),
            None => span,
        };
        // A floor on the span keeps the first millisecond from reporting absurd rates.
        let secs = span.max(Duration::from_millis(1)).as_secs_f64();
        let error_rate = if completed == 0 {
            0.0
        } else {
            failed as f64 / completed as f64
        };
        LoadReport {
            qps: Some(completed as f64 / secs),
            error_rate: Some(error_rate),
            ..self.report_without_rates_at(rif, now)
        }
    }

    /// [`LoadTracker::report`] without the rates (`qps` and `error_rate` are None), at less
    /// cost: for a reader that uses only RIF and latency (see
    /// [`crate::Policy::reads_probe_rates`]).
    pub fn report_without_rates(&self, now: Time) -> LoadReport {
        self.report_without_rates_at(self.rif, now)
    }

    pub(super) fn report_without_rates_at(&self, rif: u32, now: Time) -> LoadReport {
        // Nanoseconds until the report is assembled: exact, and cheaper than `Duration`s.
        let Estimate { median, max } = self.estimator.estimate_nanos(rif, now).unwrap_or_default();
        // An idle replica's stale estimate fades, except while its trial query is in flight:
        // the fade invites one query, not as many as its decayed latency and empty queue would
        // draw before any of them has finished.
        // (While the estimate is fresh, the common case, there is no fade to stop.)
        let factor = if now <= self.estimator.stale_since() || self.on_trial(now) {
            1.0
        } else {
            self.estimator.stale_factor(now)
        };
        let median = Duration::from_nanos(median);
        let mut latency = if factor < 1.0 {
            median.mul_f64(factor)
        } else {
            median
        };
        if self.estimator.config.in_flight_floor {
            // A query stuck for longer than any recent query took is a stall the median cannot
            // see yet: the report grows by as much as that query outlasts them.
            let stalled_for = self
                .in_flight
                .oldest_age_since(self.last_finished_arrival, now)
                .unwrap_or(0);
            let beyond = stalled_for.saturating_sub(max);
            if beyond > 0 {
                latency = latency.saturating_add(Duration::from_nanos(beyond));
            }
            // Nothing that arrived since the abandoned stall began has finished: a query
            // arriving now takes at least as long as that.
            if let Some(stall) = self.abandoned_stall_for(now) {
                latency = latency.max(stall);
            }
        }
        LoadReport {
            rif,
            latency,
            qps: None,
            utilization: None,
            error_rate: None,
        }
    }
}
