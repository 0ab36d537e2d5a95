//! The server-side load tracker: what a replica answers when a Prequal client probes it.
//!
//! A probe reply carries two signals (Prequal paper, section 4, "Load signals"):
//!
//! - **RIF**, the replica's requests in flight: a counter incremented when a query reaches the
//!   application and decremented when the application hands its response back;
//! - **latency**, an estimate of how long a query arriving now would take. Each finished query
//!   leaves a sample (its latency, tagged with the RIF it saw when it arrived); the estimate is
//!   the median of the recent samples recorded at (or near) the current RIF. Tagging by RIF is
//!   what makes the estimate predictive: it answers "how slow are queries when this many others
//!   are in flight", not "how slow were queries on average".
//!
//! "Recent" adapts to the rate. At moderate and high rates the samples of the last few
//! milliseconds are plenty, so the estimate uses only those that finished within
//! [`EstimatorConfig::window`] (default 10 ms). At low rates that window is nearly empty, so the
//! estimate falls back to the [`EstimatorConfig::min_samples`] newest samples (default 16).
//!
//! Samples older than [`EstimatorConfig::max_age`] (default 1 s) do not count as "at this RIF":
//! a replica that was fast at RIF 0 an hour ago and is slow now must not report the old speed
//! just because its RIF fell back to 0. The search for samples near the current RIF skips stale
//! ones and widens to other RIFs for fresh ones; only when the whole replica has fewer than
//! `min_samples` fresh samples (it has been idle) does the estimate use the newest samples of
//! any RIF, however old, back to the first gap longer than `max_age + stale_half_life` in the
//! replica's traffic (a replica that clients shunned for a long while is judged by the queries
//! it served after the gap, not by those before it). Among those newest samples, when the
//! oldest is stale, a run of the newest two or more that all lie below half of every one of
//! the four or more before them is a faster regime and alone decides: a replica back from a
//! slow spell, whose clients send it a stray query now and then, reports its own speed after
//! two of them instead of after enough to outvote the spell's samples. And once the replica
//! has had no fresh sample at all, that stale estimate halves every
//! [`EstimatorConfig::stale_half_life`] (default 10 s), so a replica that clients shun for
//! being slow is tried again eventually instead of never. The first query it then gets is a trial: until it finishes, the report
//! is the estimate from before the fade. A trial (a query that arrived after the estimate went
//! stale) below half of every one of the samples before it could start a faster regime, so it
//! leaves the fade running and a second trial follows at once; the second ends the fade,
//! whether it confirms the faster regime (two make it) or not.
//!
//! Queries whose clients went away before the answer ([`LoadTracker::on_abandon`]) leave their
//! wait as a sample when it is longer than the estimate: it is a lower bound on their latency,
//! and without it a replica too slow for its clients' patience would have no slow samples at
//! all and report the speed of its last queries that did finish. They also keep a stall in view
//! that cancellations would hide ([`LoadTracker::abandoned_stall_for`]): once one of them had
//! waited longer than every recent query and none that arrived later has finished, nothing
//! since its arrival has, and the report is at least that long.
//!
//! Two signals go beyond the paper's median, each with a key to turn it off. The stale decay
//! above is one. The other is the **in-flight floor** ([`EstimatorConfig::in_flight_floor`]):
//! a median of finished queries cannot see a stall until the first stalled query finishes, so
//! [`LoadTracker`] also watches the queries in flight. When the oldest one that no later query
//! has overtaken ([`LoadTracker::stalled_for`]) has waited longer than the slowest sample
//! behind the median, the report grows by the difference. Overtaken queries do not count, so
//! one long-lived stream or hung handler on an otherwise healthy replica changes nothing.
//!
//! ## Data structure
//!
//! [`LatencyEstimator`] keeps one bucket per arrival RIF: exact for RIF 0 to 15, then four
//! buckets per doubling (16-19, 20-23, 24-27, 28-31, 32-39, ...), so nearby RIFs share a bucket
//! exactly where they behave alike. Each bucket is a ring of the last 32 samples, allocated once
//! in [`LatencyEstimator::new`], plus one more ring of the newest 32 samples of any RIF.
//! Recording writes two slots: O(1), no allocation. A ring holds its samples in recording
//! order, and recording times never go backwards, so a ring is sorted by time: its fresh samples
//! are a suffix found by a search, and its newest are at its end. Estimating copies the fresh
//! samples of the bucket of the current RIF to a stack buffer and, while it has fewer than
//! `min_samples`, widens to the neighbouring buckets on both sides (a bucket whose newest sample
//! is stale is skipped without reading it, and the walk ends early once only buckets that never
//! held a sample are left), each bucket's samples one sorted run; it keeps the samples inside
//! the window (or the `min_samples` newest, merged from the runs' ends, if too few are recent)
//! and returns their median, sorting at most 64 latencies (up to 16 by a sorting network, see
//! `median.rs`). When the current RIF's own bucket holds `min_samples` fresh samples, the
//! common case under load, the estimate reads them straight from its ring instead.
//! With too few fresh samples anywhere it takes the newest of the any-RIF ring. That is a bounded
//! amount of work however long the replica has run. Repeated probes between two finishes
//! are cheaper still: each bucket remembers its last estimate for as long as it provably holds
//! (until a sample is recorded into a bucket it read, a sample it gathered goes stale, or, when
//! the window chose its samples, one of them leaves the window), so a repeat costs a lookup and
//! returns exactly what a fresh computation would.
//!
//! [`LoadTracker`] combines the RIF counter, the estimator, and bucketed counters of completions
//! and errors over [`EstimatorConfig::rate_window`] (default 1 s) into a
//! [`LoadReport`](crate::policy::LoadReport).
//!
//! The files follow these concepts: `config.rs` (the settings, their defaults and validation),
//! `buckets.rs` (the per-RIF rings and the RIF-to-bucket map), `runs.rs` (the samples one
//! estimate gathers), `latency.rs` ([`LatencyEstimator`]), `memo.rs` (its remembered estimates),
//! `median.rs`, `in_flight.rs` (the ages of the queries in flight) and `tracker.rs`
//! ([`LoadTracker`], whose rates are counted in the crate's one sliding window,
//! `sliding_window.rs`).
//!
//! Everything here is single-threaded and takes `now` as an argument, like the rest of the core;
//! a server shares a tracker between threads behind a lock (each operation is short).
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::{EstimatorConfig, LoadTracker, Outcome, Time};
//!
//! let mut tracker = LoadTracker::new(EstimatorConfig::default());
//! let arrival = tracker.on_arrival(Time::from_millis(1));
//! assert_eq!(tracker.rif(), 1);
//! tracker.on_finish(arrival, Outcome::Success, Time::from_millis(4));
//! let report = tracker.report(Time::from_millis(5));
//! assert_eq!(report.rif, 0);
//! assert_eq!(report.latency, Duration::from_millis(3));
//! ```

mod buckets;
mod config;
mod in_flight;
mod latency;
mod median;
mod memo;
mod runs;
mod tracker;

#[cfg(test)]
mod tests;

pub use config::{EstimatorConfig, EstimatorConfigError};
pub use latency::LatencyEstimator;
pub use tracker::{Arrival, LoadTracker};
