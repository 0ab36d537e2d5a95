//! `prequal loadgen`: the testbed's open-loop load generator.
//!
//! Queries go out on a schedule fixed in advance ([`schedule`]): a constant or scheduled
//! aggregate rate (the scenario's load phases, ramps included), with constant or Poisson gaps
//! from a seed. One sender task paces itself against that schedule with tokio timers and never
//! waits for a response (open loop); each query runs in its own task on hyper-util's pooled
//! client (HTTP/1.1 keep-alive, or HTTP/2 over cleartext with prior knowledge) and reports to
//! one collector.
//!
//! **Latency is measured from each query's intended send time**, not from when it actually went
//! out. A generator that waits for responses, or one that falls behind and measures from the
//! late send, stops issuing queries exactly while the server is slow and so hides the stall
//! from its own statistics (Gil Tene's "coordinated omission"). Here a query due during a stall
//! is charged the whole wait from the moment it was due; if the sender itself falls behind it
//! sends the overdue queries at once, still timed from their intended instants.
//!
//! Each query has a deadline of `timeout` after its intended time; one not answered (body fully
//! read) by then is a timeout and counts with latency `timeout`. Statuses below 400 are
//! successes; 4xx, 5xx and transport failures are errors. A query that would exceed
//! `max_in_flight` is not sent and counts as an error. Results go into the simulator's
//! [`Recorder`](prequal_model::metrics::Recorder) (from `prequal-model`, which both share),
//! attributed to the second and phase of the intended send time, so a run yields the same
//! [`Measured`] as `prequal sim`; the replica that served a query is read from the
//! `x-prequal-replica` response header.
//!
//! With several targets (one per balancer), queries go round robin over them: each receives an
//! equal share of the aggregate schedule, like independent groups of clients behind separate
//! balancers.

mod client;
mod run;
pub mod schedule;

use std::time::{Duration, SystemTime};

use prequal_model::metrics::Measured;
use prequal_model::scenario::Phase;
use serde::Serialize;

pub use http::Uri;
pub use run::run;
pub use schedule::Schedule;

/// What to send, where, and how fast.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Base URIs (`http://127.0.0.1:8080/path`), queried as given; at least one.
    pub targets: Vec<http::Uri>,
    /// HTTP/2 over cleartext with prior knowledge (h2c) when true, else HTTP/1.1.
    pub http2: bool,
    /// The aggregate rate schedule from t=0 (phases back to back; linear ramps within a phase).
    pub phases: Vec<Phase>,
    /// Exponential inter-arrival gaps (Poisson arrivals); else constant gaps.
    pub poisson: bool,
    /// Per query, counted from its intended send time; past it the query is a timeout.
    pub timeout: Duration,
    /// Latency objective for the "within objective" share.
    pub objective: Duration,
    /// Replica count for per-replica shares (0: unknown, per-replica counts are not kept).
    pub replicas: usize,
    /// Seed of the Poisson gaps (the schedule is reproducible).
    pub seed: u64,
    /// Wait until this wall-clock instant before t=0 (to line up with the backends' episode
    /// clocks); `None` starts at once.
    pub start_at: Option<SystemTime>,
    /// Safety bound on queries in flight; a query that would exceed it is not sent and counts
    /// as an error.
    pub max_in_flight: usize,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadReport {
    /// Everything the recorder measured, by intended send time (the simulator's format).
    pub measured: Measured,
    /// Queries sent.
    pub sent: u64,
    /// Queries due but not sent because `max_in_flight` were in flight (counted as errors in
    /// `measured`).
    pub not_sent: u64,
    /// Queries sent to each target, in the order of `targets`.
    pub per_target: Vec<u64>,
    /// The targets, as given.
    pub targets: Vec<String>,
    /// Wall-clock seconds from t=0 until the last query finished.
    pub duration_s: f64,
    /// Whether the run was stopped before the schedule ended.
    pub stopped_early: bool,
    /// Successful responses (status below 400).
    pub successes: u64,
    /// Error responses (4xx and 5xx) and transport failures, not counting `not_sent`.
    pub errors: u64,
    /// Queries not answered within `timeout` of their intended send time.
    pub timeouts: u64,
    /// Responses by status code (`"200"`, `"503"`), plus `"transport"` for failures without one.
    pub status: std::collections::BTreeMap<String, u64>,
    /// How late the sender sent its latest query, milliseconds (its own lag, which the
    /// latencies already include; large values mean the generator could not keep up).
    pub max_send_lag_ms: f64,
    /// HTTP/2 (h2c) or HTTP/1.1.
    pub http2: bool,
    /// Poisson or constant gaps.
    pub poisson: bool,
    /// The schedule's seed.
    pub seed: u64,
    /// The per-query timeout, milliseconds.
    pub timeout_ms: f64,
    /// The latency objective, milliseconds.
    pub objective_ms: f64,
}

impl LoadReport {
    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
}

/// One elapsed second of a run, for live progress. Counts are for that second alone; the
/// quantiles are over the queries that finished in it (the report attributes queries to their
/// intended send time instead).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Progress {
    /// Seconds since t=0 at the end of this second (1 for the first; the last may be partial).
    pub t: u64,
    /// Queries sent.
    pub sent: u64,
    /// Queries finished (successes, errors and timeouts).
    pub completed: u64,
    /// Queries in flight at the end of the second.
    pub in_flight: u64,
    /// Errors among the finished (including queries not sent).
    pub errors: u64,
    /// Timeouts among the finished.
    pub timeouts: u64,
    /// Median latency of the finished, milliseconds (0 when none).
    pub p50_ms: f64,
    /// 99th percentile latency of the finished, milliseconds (0 when none).
    pub p99_ms: f64,
}

/// A load could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// No targets were given.
    #[error("loadgen: no targets (give at least one base URI)")]
    NoTargets,
    /// A target URI cannot be queried.
    #[error("loadgen: target {index} ({uri}): {reason}")]
    BadTarget {
        /// Its position in `targets`.
        index: usize,
        /// The URI.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The schedule has no phases.
    #[error("loadgen: the load schedule has no phases")]
    NoPhases,
    /// A phase has an impossible span or rate.
    #[error("loadgen: load phase {index} ({label:?}): {reason}")]
    BadPhase {
        /// Its position in `phases`.
        index: usize,
        /// Its label.
        label: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting is out of range.
    #[error("loadgen: {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What was expected.
        reason: &'static str,
    },
    /// The latency histograms could not be created.
    #[error("loadgen: latency histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
}

impl LoadSpec {
    /// Checks the spec, naming the first field that is wrong.
    pub fn validate(&self) -> Result<(), LoadgenError> {
        if self.targets.is_empty() {
            return Err(LoadgenError::NoTargets);
        }
        for (index, uri) in self.targets.iter().enumerate() {
            let bad = |reason| LoadgenError::BadTarget {
                index,
                uri: uri.to_string(),
                reason,
            };
            match uri.scheme_str() {
                Some("http") => {}
                Some(_) => return Err(bad("only http:// is supported (h2c for HTTP/2)")),
                None => return Err(bad("expected an absolute URI, like http://127.0.0.1:8080/")),
            }
            if uri.authority().is_none() {
                return Err(bad("expected a host and port, like http://127.0.0.1:8080/"));
            }
        }
        self.validate_phases()?;
        if self.timeout.is_zero() {
            return Err(LoadgenError::Invalid {
                field: "timeout",
                reason: "expected a duration above 0",
            });
        }
        if self.max_in_flight == 0 {
            return Err(LoadgenError::Invalid {
                field: "max_in_flight",
                reason: "expected at least 1",
            });
        }
        Ok(())
    }

    fn validate_phases(&self) -> Result<(), LoadgenError> {
        if self.phases.is_empty() {
            return Err(LoadgenError::NoPhases);
        }
        let mut previous_end = prequal_core::Time::ZERO;
        for (index, p) in self.phases.iter().enumerate() {
            let bad = |reason: String| LoadgenError::BadPhase {
                index,
                label: p.label.clone(),
                reason,
            };
            if p.end < p.start {
                return Err(bad("ends before it starts".into()));
            }
            if p.start < previous_end {
                return Err(bad("starts before the previous phase ends".into()));
            }
            for (name, q) in [("qps_start", p.qps_start), ("qps_end", p.qps_end)] {
                if !(q.is_finite() && q >= 0.0) {
                    return Err(bad(format!("{name}: expected a rate >= 0, got {q}")));
                }
            }
            previous_end = p.end;
        }
        Ok(())
    }
}
