//! What a run measures, and the serialisable results it produces.
//!
//! Every query is attributed to the second (and the load phase) in which the client issued
//! it, so latency over time lines up with the load schedule. Latency is measured from issue to
//! the response at the client; a timed-out query counts at its deadline. Quantiles come from
//! HdrHistograms at microsecond resolution (3 significant digits overall, 2 per second).
//! Server RIF is sampled at every query arrival; CPU utilisation (capacity model) once per
//! replica per second, as a share of the allocation.

use hdrhistogram::Histogram;
use prequal_core::{Outcome, Time};
use serde::Serialize;

use crate::scenario::Phase;

/// Quantiles of one distribution (latencies in milliseconds; RIF and utilisation unitless).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Quantiles {
    fn of(h: &Histogram<u64>, scale: f64) -> Quantiles {
        if h.is_empty() {
            return Quantiles::default();
        }
        // Rounded to 1/1000 of the unit so the JSON stays short and stable.
        let r = |v: f64| (v * 1000.0).round() / 1000.0;
        let q = |p: f64| r(h.value_at_quantile(p) as f64 * scale);
        Quantiles {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: r(h.max() as f64 * scale),
            mean: r(h.mean() * scale),
        }
    }
}

/// Counts and latency of a set of queries.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Queries issued.
    pub queries: u64,
    /// Successful responses.
    pub successes: u64,
    /// Error responses.
    pub errors: u64,
    /// Queries past their deadline.
    pub timeouts: u64,
    /// Queries the policy had no replica for.
    pub no_replica: u64,
    /// Share of queries that succeeded within the latency objective.
    pub within_objective: f64,
    /// Latency quantiles, milliseconds.
    pub latency_ms: Quantiles,
}

/// One load phase's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseResult {
    /// The phase's label.
    pub label: String,
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Offered aggregate qps at the start.
    pub qps: f64,
    /// Its queries.
    pub summary: Summary,
}

/// One second of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Second {
    /// Seconds since the start.
    pub t: u64,
    /// Queries issued.
    pub queries: u64,
    /// Errors.
    pub errors: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Latency quantiles, milliseconds.
    pub latency_ms: Quantiles,
    /// Server RIF at arrival.
    pub rif: Quantiles,
    /// Replica utilisation (share of allocation) across replicas, capacity model only.
    pub utilization: Option<Quantiles>,
    /// Queries each replica received in this second, by replica index.
    pub replicas: Vec<u64>,
}

/// One replica's totals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerResult {
    /// Replica index.
    pub index: u32,
    /// Queries it received.
    pub queries: u64,
    /// Its share of all queries.
    pub share: f64,
    /// Mean utilisation (share of allocation), capacity model only.
    pub mean_utilization: Option<f64>,
}

#[derive(Clone, Debug)]
struct Acc {
    hist: Histogram<u64>,
    counts: [u64; 5],
    within: u64,
}

const QUERIES: usize = 0;
const SUCCESS: usize = 1;
const ERROR: usize = 2;
const TIMEOUT: usize = 3;
const NO_REPLICA: usize = 4;

type HistResult = Result<Histogram<u64>, hdrhistogram::CreationError>;

/// Microseconds up to a day.
fn hist(sigfig: u8) -> HistResult {
    Histogram::new_with_bounds(1, 24 * 3_600 * 1_000_000, sigfig)
}

impl Acc {
    fn new(sigfig: u8) -> Result<Acc, hdrhistogram::CreationError> {
        Ok(Acc {
            hist: hist(sigfig)?,
            counts: [0; 5],
            within: 0,
        })
    }

    fn record(&mut self, latency_us: Option<u64>, outcome: Option<Outcome>, within: bool) {
        self.counts[QUERIES] += 1;
        let slot = match outcome {
            Some(Outcome::Success) => SUCCESS,
            Some(Outcome::Error) => ERROR,
            // A query the client gave up on counts as timed out.
            Some(Outcome::Timeout | Outcome::Cancelled) => TIMEOUT,
            None => NO_REPLICA,
        };
        self.counts[slot] += 1;
        self.within += u64::from(within);
        if let Some(us) = latency_us {
            self.hist.saturating_record(us);
        }
    }

    fn summary(&self) -> Summary {
        let q = self.counts[QUERIES];
        Summary {
            queries: q,
            successes: self.counts[SUCCESS],
            errors: self.counts[ERROR],
            timeouts: self.counts[TIMEOUT],
            no_replica: self.counts[NO_REPLICA],
            within_objective: if q == 0 {
                0.0
            } else {
                self.within as f64 / q as f64
            },
            latency_ms: Quantiles::of(&self.hist, 1e-3),
        }
    }
}

#[derive(Clone, Debug)]
struct SecondAcc {
    acc: Acc,
    rif: Histogram<u64>,
    util: Option<Histogram<u64>>,
    replicas: Vec<u64>,
}

/// Collects one run's measurements: the simulator feeds it in virtual time, the testbed's load
/// generator in time since the start of the load, so both produce the same [`Measured`].
#[derive(Debug)]
pub struct Recorder {
    objective_us: u64,
    overall: Acc,
    phases: Vec<(Phase, Acc)>,
    seconds: Vec<SecondAcc>,
    rif: Histogram<u64>,
    util: Option<Histogram<u64>>,
    server_queries: Vec<u64>,
    server_util: Vec<(f64, u64)>,
}

impl Recorder {
    /// A recorder for `servers` replicas, the given phases, `seconds` seconds, and whether
    /// utilisation is measured.
    pub fn new(
        objective_us: u64,
        phases: &[Phase],
        servers: usize,
        with_util: bool,
    ) -> Result<Self, hdrhistogram::CreationError> {
        let seconds = phases
            .last()
            .map_or(0, |p| p.end.as_nanos().div_ceil(1_000_000_000));
        let second = || -> Result<SecondAcc, hdrhistogram::CreationError> {
            Ok(SecondAcc {
                acc: Acc::new(2)?,
                rif: hist(2)?,
                util: with_util.then(|| hist(2)).transpose()?,
                replicas: vec![0; servers],
            })
        };
        Ok(Recorder {
            objective_us,
            overall: Acc::new(3)?,
            phases: phases
                .iter()
                .map(|p| Ok((p.clone(), Acc::new(3)?)))
                .collect::<Result<_, hdrhistogram::CreationError>>()?,
            seconds: (0..seconds).map(|_| second()).collect::<Result<_, _>>()?,
            rif: hist(3)?,
            util: with_util.then(|| hist(3)).transpose()?,
            server_queries: vec![0; servers],
            server_util: vec![(0.0, 0); servers],
        })
    }

    fn second(&mut self, at: Time) -> Option<&mut SecondAcc> {
        self.seconds
            .get_mut((at.as_nanos() / 1_000_000_000) as usize)
    }

    /// A query issued at `issued` ended after `latency_ns` (None: no replica) with `outcome`.
    pub fn query(&mut self, issued: Time, latency_ns: Option<u64>, outcome: Option<Outcome>) {
        let us = latency_ns.map(|n| n.div_ceil(1_000));
        let within =
            outcome == Some(Outcome::Success) && us.is_some_and(|u| u <= self.objective_us);
        self.overall.record(us, outcome, within);
        let i = self.phases.partition_point(|(p, _)| p.end <= issued);
        if let Some((_, acc)) = self.phases.get_mut(i) {
            acc.record(us, outcome, within);
        }
        if let Some(s) = self.second(issued) {
            s.acc.record(us, outcome, within);
        }
    }

    /// A query reached replica `server`, which had `rif` others in flight.
    pub fn arrival(&mut self, now: Time, server: usize, rif: u32) {
        self.rif.saturating_record(u64::from(rif));
        self.served(now, server);
        if let Some(s) = self.second(now) {
            s.rif.saturating_record(u64::from(rif));
        }
    }

    /// A query issued at `now` was served by replica `server` (its RIF unknown).
    pub fn served(&mut self, now: Time, server: usize) {
        if let Some(c) = self.server_queries.get_mut(server) {
            *c += 1;
        }
        if let Some(c) = self.second(now).and_then(|s| s.replicas.get_mut(server)) {
            *c += 1;
        }
    }

    /// Replica `server` used `utilization` (share of allocation) over the second ending at `now`.
    pub fn utilization(&mut self, now: Time, server: usize, utilization: f64) {
        let pct = (utilization * 100.0).round().max(0.0) as u64;
        if let Some(h) = &mut self.util {
            h.saturating_record(pct);
        }
        if let Some(u) = self.server_util.get_mut(server) {
            u.0 += utilization;
            u.1 += 1;
        }
        let t = now - std::time::Duration::from_nanos(1);
        if let Some(h) = self.second(t).and_then(|s| s.util.as_mut()) {
            h.saturating_record(pct);
        }
    }

    /// The results.
    pub fn finish(&self) -> Measured {
        let total: u64 = self.server_queries.iter().sum();
        Measured {
            summary: self.overall.summary(),
            phases: self
                .phases
                .iter()
                .map(|(p, a)| phase_result(p, a))
                .collect(),
            per_second: self
                .seconds
                .iter()
                .enumerate()
                .map(|(t, s)| second_result(t, s))
                .collect(),
            servers: self
                .server_queries
                .iter()
                .zip(&self.server_util)
                .enumerate()
                .map(|(i, (&q, &(u, n)))| ServerResult {
                    index: i as u32,
                    queries: q,
                    share: if total == 0 {
                        0.0
                    } else {
                        q as f64 / total as f64
                    },
                    mean_utilization: (n > 0).then(|| u / n as f64),
                })
                .collect(),
            rif: Quantiles::of(&self.rif, 1.0),
            utilization: self.util.as_ref().map(|h| Quantiles::of(h, 0.01)),
            latency_curve: curve(&self.overall.hist),
        }
    }
}

fn phase_result(p: &Phase, a: &Acc) -> PhaseResult {
    PhaseResult {
        label: p.label.clone(),
        start_s: p.start.as_secs_f64(),
        end_s: p.end.as_secs_f64(),
        qps: p.qps_start,
        summary: a.summary(),
    }
}

fn second_result(t: usize, s: &SecondAcc) -> Second {
    let summary = s.acc.summary();
    Second {
        t: t as u64,
        queries: summary.queries,
        errors: summary.errors,
        timeouts: summary.timeouts,
        latency_ms: summary.latency_ms,
        rif: Quantiles::of(&s.rif, 1.0),
        utilization: s.util.as_ref().map(|h| Quantiles::of(h, 0.01)),
        replicas: s.replicas.clone(),
    }
}

/// Everything a run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measured {
    /// All queries.
    pub summary: Summary,
    /// Per load phase.
    pub phases: Vec<PhaseResult>,
    /// Per second.
    pub per_second: Vec<Second>,
    /// Per replica.
    pub servers: Vec<ServerResult>,
    /// Server RIF at query arrival.
    pub rif: Quantiles,
    /// Replica utilisation per second (share of allocation), capacity model only.
    pub utilization: Option<Quantiles>,
    /// Latency (ms) at percentiles spaced evenly on a log scale of 1/(1-p), up to p99.99:
    /// the data of the latency-against-percentile plot.
    pub latency_curve: Vec<(f64, f64)>,
}

/// Percentiles `100·(1 − 10^(−k/8))` for k = 0..=32: 0, 25, 43.8, ..., 99.99.
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (0..=32)
        .map(|k| {
            let q = 1.0 - 10f64.powf(-f64::from(k) / 8.0);
            let pct = (q * 1e6).round() / 1e4;
            let ms = h.value_at_quantile(q) as f64 / 1e3;
            (pct, (ms * 1e3).round() / 1e3)
        })
        .collect()
}
