//! Hedged requests: when a try has not answered after a delay, send one more to another
//! replica; the first response wins and the other try is cancelled.
//!
//! Most of a service's tail latency comes from a few slow tries: a replica in a GC pause, a
//! black-holed connection, the first queries sent to a replica just before it turned slow. No
//! balancing policy can recall those queries once sent; a second try can. Dean and Barroso
//! ("The Tail at Scale", CACM 56(2), 2013) defer the second, *hedged*, request until the first
//! has been outstanding longer than the 95th-percentile latency of its class: in their BigTable
//! benchmark this cut the 99.9th-percentile latency of reading 1,000 keys from 1,800 ms to
//! 74 ms for 2% more requests. The same idea ships as Finagle's `BackupRequestFilter` (delay
//! learned as a latency percentile, bounded by a retry budget), gRPC's hedging policy (gRFC
//! A6: `hedgingDelay`, `maxAttempts`, throttled by a token bucket) and Envoy's
//! `hedge_on_per_try_timeout` (a hedge instead of a cancel when the per-try timeout fires).
//!
//! [`Hedger`] is that decision for one cluster, sans-IO and deterministic: it never reads a
//! clock (every call takes `now`) and draws no random numbers, so the same events always give
//! the same answers. It learns the latencies of the tries that answer ([`Hedger::on_response`])
//! into a [`LatencyQuantile`]; the hedge delay is their `percentile` (default p95), or a fixed
//! `delay` from config, never below `min_delay`. Hedges spend a budget exactly like retries
//! ([`RetryBudget`], reused as is): over a sliding `window`, at most `ratio` of the requests
//! started ([`Hedger::on_request`]) plus `min_per_second` — so a cluster that slows down as a
//! whole, where every request outlives the old p95, gets at most 10% more load, never double.
//!
//! The driver asks [`Hedger::poll_hedge`] about one request, given its first try's start and
//! the hedges it already sent: [`HedgeDecision::Now`] (the budget is charged: send a hedge),
//! [`HedgeDecision::At`] (not yet: ask again then), or [`HedgeDecision::Never`] (disabled, the
//! request already has `max_hedges`, or the budget refused). Which replica the hedge goes to
//! is the policy's choice, not the hedger's: the driver asks its policy to pick again and skips
//! replicas this request already tried, exactly as for a retry. The driver also decides which
//! requests may be hedged at all (idempotent ones, or those configured so), and reports the
//! losing try to the policy with [`Hedger::loser_outcome`] ([`Outcome::Cancelled`], or
//! [`Outcome::Timeout`] when it had outlived the hedge delay), so client-local RIF stays
//! right and a replica that hangs is not mistaken for an idle one.
//!
//! Defaults (each next to its key in [`HedgeConfig`]): enabled, delay learned as p95 of the
//! last 1,000 answering tries (after 50), floor 5 ms, budget 10% of requests plus 1 per second
//! over 10 s, one hedge per request. Why 10% for a p95 delay: in a steady cluster up to 5% of
//! requests outlive the p95 by definition (about 4% here, since the quantile is rounded up),
//! so a 5% budget would be spent on ordinary tail requests and refuse the hedges a fault
//! needs; twice that leaves the other half for faults, and still caps a cluster-wide slowdown
//! at +10%. In the simulator's Beyond Round Robin and faults scenarios the extra load stays
//! near 4% (docs/reliability.md). A `percentile` of 0.99 spends about 1% and, there, rescues
//! as much. The floor of 1 per second lets a quiet client hedge at all.
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::hedge::{HedgeConfig, HedgeDecision, Hedger};
//! use prequal_core::Time;
//!
//! let config = HedgeConfig { delay: Some(Duration::from_millis(50)), ..HedgeConfig::default() };
//! let mut hedger = Hedger::new(&config).unwrap();
//! let started = Time::from_secs(1);
//! hedger.on_request(started); // the request's first try goes out; it earns budget
//! // Too early: the hedger says when to ask again.
//! let at = Time::from_millis(1_050);
//! assert_eq!(hedger.poll_hedge(started, 0, started), HedgeDecision::At(at));
//! // Due: hedge now (the driver asks its policy for a replica this request has not tried).
//! assert_eq!(hedger.poll_hedge(started, 0, at), HedgeDecision::Now);
//! // One hedge per request by default.
//! assert_eq!(hedger.poll_hedge(started, 1, at), HedgeDecision::Never);
//! // The hedge answered first: its latency is learned and the win counted.
//! hedger.on_response(Duration::from_millis(70), true);
//! assert_eq!((hedger.stats().sent, hedger.stats().won), (1, 1));
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::latency_quantile::LatencyQuantile;
use crate::policy::Outcome;
use crate::retry_budget::{BlockConfigError, RetryBudget, RetryBudgetConfig};
use crate::time::Time;

/// Hedging parameters (`[hedge]` in the proxy's cluster config, `[clients.hedge]` in a
/// simulator scenario). Every key is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HedgeConfig {
    /// Hedge at all. Default true (a config that names hedging means it; `false` turns it off).
    pub enabled: bool,
    /// A fixed hedge delay. Default none: the delay is learned as `percentile` of recent
    /// request latencies.
    #[serde(with = "humantime_serde")]
    pub delay: Option<Duration>,
    /// The latency percentile used as the learned delay, as a share (0 < p <= 1). Default 0.95.
    pub percentile: f64,
    /// The delay is never shorter than this, learned or fixed. Default "5ms".
    #[serde(with = "humantime_serde")]
    pub min_delay: Duration,
    /// How many recent successful latencies (of the tries that answered) the learned delay
    /// is drawn from.
    /// Default 1000; 1 to 1,000,000.
    pub samples: usize,
    /// No learned delay (so no hedge) before this many latencies are known. Default 50;
    /// at most `samples`.
    pub min_samples: usize,
    /// Hedges allowed as a share of requests started in the window. Default 0.1 (twice the
    /// share of requests that outlive a p95 delay; see the module docs); >= 0.
    pub ratio: f64,
    /// Hedges allowed per second regardless of traffic. Default 1; >= 0.
    pub min_per_second: f64,
    /// The budget's sliding window. Default "10s"; at least 10 ms.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Most hedges one request may send (its tries are at most `1 + max_hedges`).
    /// Default 1; 1 to 16.
    pub max_hedges: u32,
    /// A hedge goes only to an idle replica: none of this balancer's tries in flight, none
    /// reported in flight by its last load report if one came since the request started,
    /// alive since then, and usually no slower than four times the hedge delay (the policy's
    /// pick if it is idle, else the idle one fastest by its usual try). While none is, it
    /// waits (uncharged) and is asked again, unless the request has stalled: its latest
    /// try's replica, one that reports its load, has shown no life since the request started,
    /// or the request has waited more than four times the shorter of that replica's usual
    /// successful try and the hedge delay (a replica hung or slowed,
    /// [`crate::balancer::STALLED`]); then it goes to the policy's pick. A
    /// hedge is a whole second query whose work a replica that does not stop on cancellation
    /// finishes anyway: sent to a busy replica it queues behind others and adds load where
    /// there is none to spare, which near capacity feeds on itself (more queueing, more
    /// hedges). Default true; false hedges to the policy's pick whatever its load.
    pub idle_only: bool,
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            delay: None,
            percentile: 0.95,
            min_delay: Duration::from_millis(5),
            samples: 1000,
            min_samples: 50,
            ratio: 0.1,
            min_per_second: 1.0,
            window: Duration::from_secs(10),
            max_hedges: 1,
            idle_only: true,
        }
    }
}

impl HedgeConfig {
    /// The soonest a hedge can fall due after the first try starts, whatever is learned: the
    /// fixed `delay` (a learned one can be anything), never below `min_delay`, as in
    /// [`Hedger::delay`].
    pub fn earliest_delay(&self) -> Duration {
        self.delay.unwrap_or_default().max(self.min_delay)
    }

    /// The budget part, as a retry budget config.
    fn budget(&self) -> RetryBudgetConfig {
        RetryBudgetConfig {
            ratio: self.ratio,
            min_per_second: self.min_per_second,
            window: self.window,
        }
    }

    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), BlockConfigError> {
        let err = |key, msg| Err(BlockConfigError::new("hedge", key, msg));
        if !(self.percentile > 0.0 && self.percentile <= 1.0) {
            return err(
                "percentile",
                "must be a share above 0 and at most 1 (0.95 = p95)",
            );
        }
        if !(1..=1_000_000).contains(&self.samples) {
            return err("samples", "must be between 1 and 1000000");
        }
        if self.min_samples > self.samples {
            return err("min_samples", "must be at most `samples`");
        }
        if !(1..=16).contains(&self.max_hedges) {
            return err(
                "max_hedges",
                "must be between 1 and 16 (set `enabled = false` for none)",
            );
        }
        self.budget().validate().map_err(|e| BlockConfigError {
            component: "hedge",
            ..e
        })
    }
}

/// What [`Hedger::poll_hedge`] says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HedgeDecision {
    /// Send a hedge now, to a replica the request has not tried. The budget is charged.
    Now,
    /// Not yet: ask again at this time (the delay may have moved by then).
    At(Time),
    /// No (more) hedges for this request: disabled, `max_hedges` reached, or refused by the
    /// budget. Not worth asking again.
    Never,
}

/// Counters for metrics and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HedgeStats {
    /// Requests started ([`Hedger::on_request`]).
    pub requests: u64,
    /// Hedges sent.
    pub sent: u64,
    /// Requests whose winning response came from a hedge.
    pub won: u64,
    /// Hedges that were due but refused by the budget.
    pub refused: u64,
}

/// The hedging decision for one cluster. See the module docs.
///
/// A driver keeps, per request, the first try's start and the hedges sent, and follows:
///
/// - first try sent: [`Hedger::on_request`], then [`Hedger::poll_hedge`]; on `At(t)`, arm a
///   timer for `t` (one per request, or the earliest over all requests) and poll again then;
/// - `Now`: ask the policy for a replica, skip those the request tried, send, count the hedge
///   in the request, and poll again (for `max_hedges` > 1);
/// - a try answers with success: [`Hedger::on_response`] with that try's own latency; cancel
///   the other tries and report each to the policy with [`Hedger::loser_outcome`];
/// - a try fails (an error, its try timeout): the driver retries it within `max_attempts` and
///   the retry budget ([`crate::Balancer::try_retry`]), beside the other tries if one is out;
///   hedges and retries are both tries of the request.
///
/// ```
/// use std::time::Duration;
/// use prequal_core::hedge::{HedgeConfig, HedgeDecision, Hedger};
/// use prequal_core::{Outcome, Time};
///
/// let config = HedgeConfig { delay: Some(Duration::from_millis(30)), ..HedgeConfig::default() };
/// let mut hedger = Hedger::new(&config).unwrap();
/// let (started, mut hedges) = (Time::from_millis(100), 0);
/// hedger.on_request(started);
/// let HedgeDecision::At(wake) = hedger.poll_hedge(started, hedges, started) else { panic!() };
/// // At `wake` the first try is still out: hedge it.
/// assert_eq!(hedger.poll_hedge(started, hedges, wake), HedgeDecision::Now);
/// hedges += 1;
/// assert_eq!(hedger.poll_hedge(started, hedges, wake), HedgeDecision::Never);
/// // The hedge answers 20 ms after it was sent; the first try, 50 ms old, loses and counts
/// // against its replica as a timeout (it outlived the 30 ms delay).
/// let now = wake + Duration::from_millis(20);
/// hedger.on_response(Duration::from_millis(20), true);
/// assert_eq!(hedger.loser_outcome(now.saturating_since(started)), Outcome::Timeout);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Hedger {
    config: HedgeConfig,
    recent: LatencyQuantile,
    budget: RetryBudget,
    stats: HedgeStats,
}

impl Hedger {
    /// A hedger with the given parameters, validated.
    pub fn new(config: &HedgeConfig) -> Result<Self, BlockConfigError> {
        config.validate()?;
        Ok(Self {
            config: config.clone(),
            recent: LatencyQuantile::new(config.samples),
            budget: RetryBudget::new(&config.budget())?,
            stats: HedgeStats::default(),
        })
    }

    /// The config it was built from.
    pub fn config(&self) -> &HedgeConfig {
        &self.config
    }

    /// A request's first try was sent at `now`: it earns hedge budget. Hedges are not
    /// requests; do not call this for them.
    pub fn on_request(&mut self, now: Time) {
        self.stats.requests += 1;
        self.budget.on_request(now);
    }

    /// A request got its successful response; `latency` is the winning try's own latency
    /// (from that try's start), `by_hedge` when the winning try was a hedge.
    ///
    /// Why the try's latency and not the request's: when a burst of requests is stuck on a
    /// replica that just turned slow (more than 5% of them, say), their request latencies
    /// would drag the learned p95 up to the slow replica's latency exactly when hedges are
    /// needed; their hedges' latencies keep it at what an answering replica takes. Errors and
    /// timeouts are not learned: a replica that fails fast must not pull the delay down, nor
    /// a deadline push it up.
    pub fn on_response(&mut self, latency: Duration, by_hedge: bool) {
        self.recent.record(latency);
        self.stats.won += u64::from(by_hedge);
    }

    /// The hedge delay now: the fixed `delay`, or the learned percentile once `min_samples`
    /// latencies are known; never below `min_delay`. None while still learning. Pure.
    pub fn delay(&self) -> Option<Duration> {
        let delay = match self.config.delay {
            Some(fixed) => fixed,
            None if self.recent.len() < self.config.min_samples.max(1) => return None,
            None => self.recent.quantile(self.config.percentile)?,
        };
        Some(delay.max(self.config.min_delay))
    }

    /// When the next hedge of a request whose first try started at `started` and that has
    /// sent `hedges_sent` hedges falls due, at the current delay: hedge k goes out k delays
    /// after the start. None when no hedge will be sent (disabled, `max_hedges` reached) or
    /// the delay is still being learned. Pure.
    pub fn next_hedge_at(&self, started: Time, hedges_sent: u32) -> Option<Time> {
        if !self.config.enabled || hedges_sent >= self.config.max_hedges {
            return None;
        }
        let delay = self.delay()?;
        Some(started + delay.saturating_mul(hedges_sent + 1))
    }

    /// Whether to hedge, at `now`, the request whose first try started at `started` and that
    /// has sent `hedges_sent` hedges. On [`HedgeDecision::Now`] the hedge is charged to the
    /// budget and counted as sent: the driver must send it (or, when the policy has no other
    /// replica, accept that one hedge was spent for nothing).
    pub fn poll_hedge(&mut self, started: Time, hedges_sent: u32, now: Time) -> HedgeDecision {
        if !self.config.enabled || hedges_sent >= self.config.max_hedges {
            return HedgeDecision::Never;
        }
        let Some(due) = self.next_hedge_at(started, hedges_sent) else {
            // Still learning: look again after the floor, when the delay may be known.
            let step = self.config.min_delay.max(Duration::from_millis(1));
            return HedgeDecision::At(now + step);
        };
        if due > now {
            return HedgeDecision::At(due);
        }
        self.charge(hedges_sent, now)
    }

    /// What [`Hedger::poll_hedge`] says while the hedge may not go now (every replica it
    /// could go to is busy, see [`HedgeConfig::idle_only`]): never, or a time to ask again,
    /// the hedge's due time if it is later, else one step (`min_delay`, at least 1 ms) on.
    /// Charges nothing. Pure.
    pub fn held_back(&self, started: Time, hedges_sent: u32, now: Time) -> HedgeDecision {
        if !self.config.enabled || hedges_sent >= self.config.max_hedges {
            return HedgeDecision::Never;
        }
        let step = self.config.min_delay.max(Duration::from_millis(1));
        match self.next_hedge_at(started, hedges_sent) {
            Some(due) if due > now => HedgeDecision::At(due),
            _ => HedgeDecision::At(now + step),
        }
    }

    /// Asks the budget for one hedge at `now`.
    fn charge(&mut self, hedges_sent: u32, now: Time) -> HedgeDecision {
        let admitted = self.budget.try_retry(now);
        tracing::trace!(now_ns = now.as_nanos(), hedges_sent, admitted, "hedge");
        if admitted {
            self.stats.sent += 1;
            HedgeDecision::Now
        } else {
            self.stats.refused += 1;
            HedgeDecision::Never
        }
    }

    /// How to report a losing try, abandoned `age` after it was sent, to the policy:
    /// [`Outcome::Cancelled`] normally, but [`Outcome::Timeout`] when it had already outlived
    /// the hedge delay (the cluster's normal latency). A try that lost to its hedge is one its
    /// replica failed to answer in time; reported as merely cancelled it would leave no trace
    /// (a replica's own tracker drops abandoned work too), and a replica that hangs would keep
    /// looking idle and fast. A hedge that lost to a first try answering a little late is
    /// young, and no fault of its replica. Pure. [`crate::Balancer::loser_outcome`] adds the
    /// replica's own usual time to this rule.
    pub fn loser_outcome(&self, age: Duration) -> Outcome {
        match self.delay() {
            Some(delay) if age >= delay => Outcome::Timeout,
            _ => Outcome::Cancelled,
        }
    }

    /// The counters.
    pub fn stats(&self) -> HedgeStats {
        self.stats
    }

    /// The recent request latencies the delay is learned from.
    pub fn recent(&self) -> &LatencyQuantile {
        &self.recent
    }
}

#[cfg(test)]
mod tests;
