//! What a load run reports: the whole run ([`LoadReport`]) and each elapsed second of it
//! ([`Progress`]).

use prequal_model::metrics::Measured;
use serde::Serialize;

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
    /// Whether it stopped because queries were still unsent `timeout` after the schedule's
    /// end: the rate was more than this machine could send, and the rest were never sent.
    pub fell_behind: bool,
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
