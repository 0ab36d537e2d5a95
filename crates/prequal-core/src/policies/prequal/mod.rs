//! `prequal`: asynchronous probing, a probe pool, and the hot-cold lexicographic rule.
//!
//! Prequal (Wydrowski et al., "Load is not what you should balance: Introducing Prequal",
//! NSDI 2024, section 4) balances on two signals that replicas report when probed: requests in
//! flight (RIF) and a latency estimate at the current RIF. Probing is taken off the query's path:
//!
//! - **Probing.** Each query triggers `probe_rate` probes (r_probe, default 3; fractional rates
//!   are rounded deterministically so the long-run average is exact, see
//!   [`crate::rounding`]) to replicas sampled uniformly without replacement. An idle client sends
//!   one probe every `max_idle` (default 100 ms, a tenth of the age limit, so about ten fresh
//!   replies survive an idle spell). Probes time out after `probe_timeout` (default 3 ms).
//! - **Pool.** At most `pool_size` replies (m = 16), oldest evicted first, none older than
//!   `max_age` (1 s). Our addition, off by default: `pool_share` below 1 caps the pool at that
//!   share of the replicas (rounded up, at least 2), so that in a small cluster clients keep
//!   choosing among a changing subset instead of all piling onto the one lowest-latency replica
//!   ([`params::pool_capacity`]). Each reply may be used b_reuse = max{1, (1+δ)/((1 − m/n)·r_probe
//!   − r_remove)} times (δ = `delta`, default 1; randomly rounded per reply; capped at m, which
//!   is also the value when the denominator is ≤ 0, see [`params::b_reuse`]). Using a reply adds
//!   one to its RIF, accounting for the query this client just sent there. Our addition, on by
//!   default (`completions_lower_rif = false` is the paper's pool): when a query of this client
//!   finishes, its replica's reply loses that one again, as it does one for a query that was in
//!   flight when the reply came ([`Pool::on_finished`](super::probing::pool::Pool::on_finished)).
//!   Also ours, on by default (`own_rif_live = false` is the counting above): a reply's RIF is
//!   split when it comes into the other clients' share (the reported RIF less this client's
//!   queries in flight at the replica then) and this client's own, which is then counted live:
//!   the RIF ranked is the others' share + this client's queries in flight there now
//!   ([`Entry::with_own`](super::probing::pool::Entry::with_own)). It counts this client's
//!   queries that had not reached the replica when it answered, and those sent since by any
//!   route; behind one balancer it is about that balancer's own count.
//! - **Removal.** `remove_rate` (r_remove, default 1) replies per query, alternating between the
//!   oldest and the worst (the highest RIF among hot replies if any is hot, else the highest
//!   latency among cold ones; with `hot_by_work`, the RIF weighed as work queued).
//! - **Selection (HCL).** A reply is hot when its RIF exceeds the `q_rif` quantile (default
//!   2^−0.25 ≈ 0.84) of recently reported RIFs. The cold reply with the lowest latency wins; if
//!   all are hot, the lowest RIF wins. With fewer than two replies, a uniformly random replica
//!   in the paper; ours, on by default (`fallback_by_local_rif = false` is the paper's), while
//!   probing is blind (probes fail and none has been answered within `max_age`), the less
//!   loaded of two random replicas by this client's queries in flight.
//!   Our departure from the paper, on by default (`latency_band = 0` is the paper's rule): cold
//!   replies within (1 + `latency_band`) × the lowest cold latency (default 2.5: 3.5 times) count as
//!   equally fast, and among them the lowest expected delay wins: this client's recent latency
//!   from the replica × (1 + RIF / `delay_concurrency`), default 2, raised to `delay_power`
//!   (default 1; 2 ranks by the delay the query adds in all) (`band_ranks_by_delay`, on by
//!   default; false ranks them by RIF alone). Also ours, on by default
//!   (`own_queries_raise_latency = false` is the paper's rule): the latency a reply is ranked
//!   by grows in proportion to this client's queries sent on it that have not finished,
//!   × (RIF + 1) / (RIF − those + 1), since the report described the replica before them
//!   ([`Entry::latency_with_own_queries_ns`](super::probing::pool::Entry::latency_with_own_queries_ns)).
//!   And (`max_cold_slowdown = 0` is the paper's rule): a cold reply whose latency is more than
//!   `max_cold_slowdown` (default 10) times the fastest hot reply's ranks after every hot one,
//!   so a replica that is idle because it is very slow does not win for being idle.
//!   Ours, on by default (`hot_by_work = false` is the paper's test of the raw RIF): the hot
//!   test reads each RIF as the work queued, RIF × this client's observed latency from the
//!   replica / the known replicas' mean, so that a fast replica's naturally higher RIF does
//!   not make it hot.
//!   See [`hcl`].
//! - **Error aversion.** Replies from replicas whose recent error share exceeds
//!   `error_threshold` rank after all others, so a replica that fails fast cannot sinkhole
//!   traffic. See [`aversion`](super::probing::aversion).
//! - **Waiting for fresh replies.** Ours, on by default (`wait_when_stale = false` is the
//!   paper's pool, always used as it is): a query that finds fewer than two replies younger
//!   than this client's typical latency waits, at most `probe_timeout`, for two replies to
//!   arrive and is placed among them (over the whole pool, new replies included, where the
//!   cluster has more replicas than the pool's capacity, `pool_size` after `pool_share`: the
//!   pool is a sample there). A client behind many balancers sends queries rarer than the
//!   replicas' state changes; its pool would be out of date at every pick. It waits only
//!   while that latency is at least ten probe round trips, and never while probing is blind.
//!
//! The engine ([`AsyncProbing`], with the pool, error aversion and the shared parameters in
//! [`probing`](super::probing)) is shared with `linear` and `c3`, which replace only the ranking
//! rule. Sync mode, with no pool, is [`sync`] (`prequal-sync`).
//!
//! ```
//! use prequal_core::{BuildPolicy, LoadReport, Pick, Query, QueryId, ReplicaChange, ReplicaId, Time};
//! use prequal_core::policies::prequal::Config;
//! use rand::SeedableRng;
//! use std::time::Duration;
//!
//! let mut policy = Config::default().build();
//! let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
//! for id in 0..8 {
//!     policy.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
//! }
//! let query = Query { id: QueryId(1), hint: None };
//! // An empty pool: a random replica, and three probes to send.
//! assert!(matches!(policy.pick(&query, Time::ZERO, &mut rng), Pick::Replica(_)));
//! let now = Time::from_millis(1);
//! while let Some(probe) = policy.poll_probe(now, &mut rng) {
//!     let fast = probe.replica == ReplicaId(2);
//!     let report = LoadReport {
//!         rif: 1,
//!         latency: Duration::from_millis(if fast { 1 } else { 20 }),
//!         ..LoadReport::default()
//!     };
//!     policy.on_probe_reply(&probe, &report, now, &mut rng);
//! }
//! let snapshot = policy.snapshot(now);
//! assert_eq!(snapshot.pool.len(), 3);
//! ```

pub mod hcl;
pub mod sync;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod sync_tests;
#[cfg(test)]
mod tests;

pub use hcl::validate_q_rif;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, PolicyInfo};
use crate::policies::probing::aversion::Aversion;
use crate::policies::probing::engine::AsyncProbing;
use crate::policies::probing::params::{self, ProbingParams};
use crate::policy::Policy;
use hcl::Hcl;

/// The `prequal` policy: async probing with the HCL rule.
pub type Prequal = AsyncProbing<Hcl>;

/// `prequal` parameters. Every key is optional; defaults are those of the paper's testbed,
/// except `latency_band` and `max_cold_slowdown` (the paper's rule is 0 for both; with no band
/// `band_ranks_by_delay` does nothing),
/// `hot_by_work`, `completions_lower_rif`, `own_rif_live`, `reports_refresh_pool` and
/// `own_queries_raise_latency` (all false in the paper).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Probes per query (r_probe), default 3.0.
    pub probe_rate: f64,
    /// Most replies in the pool (m), default 16.
    pub pool_size: u32,
    /// Largest share of the replicas the pool may cover, default 1.0 (the paper's pool).
    pub pool_share: f64,
    /// Age limit of a reply, default 1 s.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// δ in the b_reuse formula, default 1.0.
    pub delta: f64,
    /// Replies removed per query (r_remove), default 1.0.
    pub remove_rate: f64,
    /// RIF quantile above which a reply is hot, default 2^−0.25.
    pub q_rif: f64,
    /// Cold replies within (1 + this) × the fastest cold latency rank before the others, by
    /// expected delay or RIF, default 2.5 (the paper's rule: 0).
    pub latency_band: f64,
    /// Replies inside the band rank by expected delay (observed latency × (RIF + 1)), default
    /// true; false ranks them by RIF.
    pub band_ranks_by_delay: bool,
    /// Queries a replica is taken to serve at once in the band's expected delay, observed
    /// latency × (1 + RIF / this), default 2 (Traefik's `leasttime` score: 1).
    pub delay_concurrency: f64,
    /// The band's queueing factor (1 + RIF / `delay_concurrency`) is raised to this power,
    /// default 1 (the query's own expected delay; 2 ranks by the delay it adds in all).
    pub delay_power: f64,
    /// The hot test weighs each reply's RIF by its replica's observed speed (RIF × observed
    /// latency / the known replicas' mean), default true (the paper's raw RIF: false).
    pub hot_by_work: bool,
    /// A finished query of this client lowers its replica's reply RIF by one, default true
    /// (the paper's pool: false).
    pub completions_lower_rif: bool,
    /// A reply's RIF is the other clients' share it reported plus this client's queries in
    /// flight at the replica now, default true (the paper's pool, where a use adds one: false).
    pub own_rif_live: bool,
    /// A piggybacked load report refreshes its replica's reply in the pool, default true (the
    /// paper's pool holds probe replies alone: false).
    pub reports_refresh_pool: bool,
    /// Each piggybacked report that refreshed a reply spares one probe of the next query (never
    /// its last), default false (`probe_rate` probes per query, as in the paper).
    pub reports_replace_probes: bool,
    /// A reply's latency grows with this client's unfinished queries sent on it, default true
    /// (the paper's rule: false).
    pub own_queries_raise_latency: bool,
    /// With fewer than two replies in the pool while probing is blind, the less loaded of two
    /// random replicas by this client's queries in flight, default true (the paper's uniformly
    /// random replica: false).
    pub fallback_by_local_rif: bool,
    /// A query that finds the pool stale waits for two fresh replies, default true (the
    /// paper's pool, used as it is: false).
    pub wait_when_stale: bool,
    /// A cold reply more than this many times slower than the fastest hot one ranks after
    /// every hot one, default 10 (the paper's rule: 0, no limit).
    pub max_cold_slowdown: f64,
    /// Idle-probe period, default 100 ms.
    #[serde(with = "humantime_serde")]
    pub max_idle: Duration,
    /// Probe timeout, default 3 ms.
    #[serde(with = "humantime_serde")]
    pub probe_timeout: Duration,
    /// Error share above which a replica is avoided, default 0.1.
    pub error_threshold: f64,
    /// Time constant of the error-share decay, default 5 s.
    #[serde(with = "humantime_serde")]
    pub error_decay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            probe_rate: params::PROBE_RATE,
            pool_size: params::POOL_SIZE,
            pool_share: params::POOL_SHARE,
            max_age: params::MAX_AGE,
            delta: params::DELTA,
            remove_rate: params::REMOVE_RATE,
            q_rif: params::Q_RIF,
            latency_band: params::LATENCY_BAND,
            band_ranks_by_delay: params::BAND_RANKS_BY_DELAY,
            delay_concurrency: params::DELAY_CONCURRENCY,
            delay_power: params::DELAY_POWER,
            hot_by_work: params::HOT_BY_WORK,
            completions_lower_rif: params::COMPLETIONS_LOWER_RIF,
            own_rif_live: params::OWN_RIF_LIVE,
            reports_refresh_pool: params::REPORTS_REFRESH_POOL,
            reports_replace_probes: params::REPORTS_REPLACE_PROBES,
            own_queries_raise_latency: params::OWN_QUERIES_RAISE_LATENCY,
            fallback_by_local_rif: params::FALLBACK_BY_LOCAL_RIF,
            wait_when_stale: params::WAIT_WHEN_STALE,
            max_cold_slowdown: params::MAX_COLD_SLOWDOWN,
            max_idle: params::MAX_IDLE,
            probe_timeout: params::PROBE_TIMEOUT,
            error_threshold: params::ERROR_THRESHOLD,
            error_decay: params::ERROR_DECAY,
        }
    }
}

impl Config {
    /// The HCL rule with these settings.
    pub fn rule(&self) -> Hcl {
        Hcl::new(
            self.q_rif,
            self.latency_band,
            self.own_queries_raise_latency,
        )
        .with_max_cold_slowdown(self.max_cold_slowdown)
        .with_band_ranks_by_delay(self.band_ranks_by_delay)
        .with_delay_concurrency(self.delay_concurrency)
        .with_delay_power(self.delay_power)
        .with_hot_by_work(self.hot_by_work)
    }

    /// The engine parameters.
    pub fn probing(&self) -> ProbingParams {
        ProbingParams {
            probe_rate: self.probe_rate,
            pool_size: self.pool_size,
            pool_share: self.pool_share,
            max_age: self.max_age,
            delta: self.delta,
            remove_rate: self.remove_rate,
            completions_lower_rif: self.completions_lower_rif,
            own_rif_live: self.own_rif_live,
            reports_refresh_pool: self.reports_refresh_pool,
            reports_replace_probes: self.reports_replace_probes,
            fallback_by_local_rif: self.fallback_by_local_rif,
            wait_when_stale: self.wait_when_stale,
            max_idle: self.max_idle,
            probe_timeout: self.probe_timeout,
            aversion: Aversion {
                threshold: self.error_threshold,
                decay: self.error_decay,
            },
        }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "prequal",
        signal: "probed RIF and latency",
        rule: "async probe pool; the cold reply with the lowest latency, or the lowest RIF if all \
               are hot (HCL)",
        source: "Prequal paper (NSDI 2024), section 4",
        params: &[
            params::PROBE_RATE_DOC,
            params::POOL_SIZE_DOC,
            params::POOL_SHARE_DOC,
            params::MAX_AGE_DOC,
            params::DELTA_DOC,
            params::REMOVE_RATE_DOC,
            params::Q_RIF_DOC,
            params::LATENCY_BAND_DOC,
            params::BAND_RANKS_BY_DELAY_DOC,
            params::DELAY_CONCURRENCY_DOC,
            params::DELAY_POWER_DOC,
            params::HOT_BY_WORK_DOC,
            params::OWN_RIF_LIVE_DOC,
            params::COMPLETIONS_LOWER_RIF_DOC,
            params::REPORTS_REFRESH_POOL_DOC,
            params::REPORTS_REPLACE_PROBES_DOC,
            params::OWN_QUERIES_RAISE_LATENCY_DOC,
            params::FALLBACK_BY_LOCAL_RIF_DOC,
            params::WAIT_WHEN_STALE_DOC,
            params::MAX_COLD_SLOWDOWN_DOC,
            params::MAX_IDLE_DOC,
            params::PROBE_TIMEOUT_DOC,
            params::ERROR_THRESHOLD_DOC,
            params::ERROR_DECAY_DOC,
        ],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        self.probing().validate(Self::INFO.name)?;
        validate_q_rif(Self::INFO.name, self.q_rif)?;
        if !(self.latency_band.is_finite() && self.latency_band >= 0.0) {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "latency_band",
                format!("must be a finite number >= 0, got {}", self.latency_band),
            ));
        }
        for (key, value) in [
            ("delay_concurrency", self.delay_concurrency),
            ("delay_power", self.delay_power),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::invalid(
                    Self::INFO.name,
                    key,
                    format!("must be a finite number > 0, got {value}"),
                ));
            }
        }
        let slowdown = self.max_cold_slowdown;
        if !(slowdown.is_finite() && (slowdown == 0.0 || slowdown >= 1.0)) {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "max_cold_slowdown",
                format!("must be 0 (no limit) or a finite number >= 1, got {slowdown}"),
            ));
        }
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(Prequal::new(self.probing(), self.rule()))
    }
}
