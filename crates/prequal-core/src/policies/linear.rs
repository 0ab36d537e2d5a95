//! `linear`: Prequal's probe pool with a linear score instead of the HCL rule.
//!
//! The Prequal paper (appendix A) compares HCL with rules that minimise
//!
//! ```text
//! score = (1 − λ)·latency + λ·α·RIF
//! ```
//!
//! over the replies in the pool, where α turns a RIF into time. λ = 0 is latency-only control,
//! λ = 1 RIF-only (`lambda`, default 0.5, the paper's equal weighting). The paper set α to the
//! median latency of replicas with one request in flight (75 ms on its testbed); here α is
//! estimated online as the median latency of the last [`ALPHA_SAMPLES`] replies that reported a
//! RIF of exactly 1. Before any such reply arrives, α falls back to the median latency of the
//! last [`ALPHA_SAMPLES`] replies at any RIF, the best available guess at the time one query
//! costs; with no reply at all the pool is empty and α is not used.
//!
//! Probing, pool, reuse, removal (oldest and worst by this score, alternately) and error
//! aversion are those of `prequal`, shared through [`AsyncProbing`]; every probing key of
//! `prequal` applies here too, except `q_rif`.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::probing::aversion::{Aversion, ReplicaLoad};
use super::probing::engine::{AsyncProbing, Rank, RankKey, Rule};
use super::probing::params::{self, ProbingParams};
use super::probing::pool::Entry;
use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::policy::{LoadReport, Policy};
use crate::replica::ReplicaId;
use crate::time::Time;

/// How many recent latencies the α estimate is the median of.
pub const ALPHA_SAMPLES: usize = 64;

/// `linear` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Weight of scaled RIF against latency, in [0, 1]; default 0.5.
    pub lambda: f64,
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
            lambda: 0.5,
            probe_rate: params::PROBE_RATE,
            pool_size: params::POOL_SIZE,
            pool_share: params::POOL_SHARE,
            max_age: params::MAX_AGE,
            delta: params::DELTA,
            remove_rate: params::REMOVE_RATE,
            max_idle: params::MAX_IDLE,
            probe_timeout: params::PROBE_TIMEOUT,
            error_threshold: params::ERROR_THRESHOLD,
            error_decay: params::ERROR_DECAY,
        }
    }
}

impl Config {
    fn probing(&self) -> ProbingParams {
        ProbingParams {
            probe_rate: self.probe_rate,
            pool_size: self.pool_size,
            pool_share: self.pool_share,
            max_age: self.max_age,
            delta: self.delta,
            remove_rate: self.remove_rate,
            // The paper's pool: this rule is a baseline from its comparison.
            completions_lower_rif: false,
            reports_refresh_pool: false,
            reports_replace_probes: false,
            fallback_by_local_rif: false,
            own_rif_live: false,
            wait_when_stale: false,
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
        name: "linear",
        signal: "probed latency and RIF",
        rule: "async probe pool; minimise (1−λ)·latency + λ·α·RIF, α = median latency at RIF 1",
        source: "Prequal paper (NSDI 2024), section 5.2 and appendix A",
        params: &[
            ParamDoc {
                key: "lambda",
                default: "0.5",
                doc: "weight of scaled RIF against latency, in [0, 1]; 0 = latency-only, \
                      1 = RIF-only",
            },
            params::PROBE_RATE_DOC,
            params::POOL_SIZE_DOC,
            params::POOL_SHARE_DOC,
            params::MAX_AGE_DOC,
            params::DELTA_DOC,
            params::REMOVE_RATE_DOC,
            params::MAX_IDLE_DOC,
            params::PROBE_TIMEOUT_DOC,
            params::ERROR_THRESHOLD_DOC,
            params::ERROR_DECAY_DOC,
        ],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.lambda) {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "lambda",
                format!("must be between 0 and 1, got {}", self.lambda),
            ));
        }
        self.probing().validate(Self::INFO.name)
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(Linear::new(self.probing(), LinearRule::new(self.lambda)))
    }
}

/// The `linear` policy.
pub type Linear = AsyncProbing<LinearRule>;

/// The linear scoring rule and its online α estimate.
#[derive(Clone, Debug)]
pub struct LinearRule {
    lambda: f64,
    at_rif_one: VecDeque<Duration>,
    any_rif: VecDeque<Duration>,
}

impl LinearRule {
    /// The rule with weight `lambda` in [0, 1].
    pub fn new(lambda: f64) -> Self {
        Self {
            lambda,
            at_rif_one: VecDeque::with_capacity(ALPHA_SAMPLES),
            any_rif: VecDeque::with_capacity(ALPHA_SAMPLES),
        }
    }

    /// The current α in seconds per request in flight.
    pub fn alpha(&self) -> f64 {
        let source = if self.at_rif_one.is_empty() {
            &self.any_rif
        } else {
            &self.at_rif_one
        };
        median_secs(source)
    }
}

fn push_bounded(buffer: &mut VecDeque<Duration>, value: Duration) {
    if buffer.len() >= ALPHA_SAMPLES {
        buffer.pop_front();
    }
    buffer.push_back(value);
}

/// The median (the lower one for an even count) in seconds; 0 when empty.
fn median_secs(values: &VecDeque<Duration>) -> f64 {
    let mut copy: Vec<Duration> = values.iter().copied().collect();
    if copy.is_empty() {
        return 0.0;
    }
    let middle = (copy.len() - 1) / 2;
    let (_, median, _) = copy.select_nth_unstable(middle);
    median.as_secs_f64()
}

impl Rule for LinearRule {
    type Context = f64;
    type Facts = ();
    const NAME: &'static str = "linear";
    const READS_LOAD: bool = false;
    const READS_RATES: bool = false;

    fn on_reply(&mut self, _replica: ReplicaId, report: &LoadReport, _now: Time) {
        if report.rif == 1 {
            push_bounded(&mut self.at_rif_one, report.latency);
        }
        push_bounded(&mut self.any_rif, report.latency);
    }

    fn context(&self) -> f64 {
        self.alpha()
    }

    fn rank(&self, alpha: &f64, entry: &Entry, _load: &ReplicaLoad) -> Rank {
        let latency = entry.latency.as_secs_f64();
        let rif = f64::from(entry.rif);
        Rank {
            hot: false,
            key: (1.0 - self.lambda) * latency + self.lambda * alpha * rif,
            tie: rif,
        }
    }

    type Key = RankKey;

    fn key(&self, alpha: &f64, entry: &Entry, load: &ReplicaLoad) -> RankKey {
        RankKey(self.rank(alpha, entry, load))
    }

    fn values(&self, alpha: &f64) -> Vec<(&'static str, f64)> {
        vec![("alpha_us", alpha * 1e6), ("lambda", self.lambda)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Pick, Query, QueryId};
    use crate::replica::ReplicaChange;
    use crate::testing::{report, rng};

    #[test]
    fn alpha_is_the_median_at_rif_one_with_a_fallback() {
        let mut rule = LinearRule::new(0.5);
        assert_eq!(rule.alpha(), 0.0);
        rule.on_reply(ReplicaId(0), &report(4, 40), Time::ZERO);
        rule.on_reply(ReplicaId(0), &report(2, 20), Time::ZERO);
        assert_eq!(rule.alpha(), 0.020, "fallback: median of all replies");
        for ms in [70, 75, 80] {
            rule.on_reply(ReplicaId(0), &report(1, ms), Time::ZERO);
        }
        assert_eq!(rule.alpha(), 0.075);
    }

    /// Drives one pick against a pool holding exactly two replies.
    fn choose(lambda: f64, a: LoadReport, b: LoadReport) -> ReplicaId {
        let mut policy = Linear::new(Config::default().probing(), LinearRule::new(lambda));
        let mut rng = rng(2);
        for id in 0..2 {
            policy.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
        }
        // α = 10 ms from a reply at RIF 1 that never enters the pool.
        policy
            .rule_mut()
            .on_reply(ReplicaId(0), &report(1, 10), Time::ZERO);
        for (id, r) in [(0, a), (1, b)] {
            let probe = crate::policy::ProbeRequest {
                id: crate::policy::ProbeId(id.into()),
                replica: ReplicaId(id),
                query: None,
                hint: None,
            };
            crate::policy::Policy::on_probe_reply(&mut policy, &probe, &r, Time::ZERO, &mut rng);
        }
        let query = Query {
            id: QueryId(1),
            hint: None,
        };
        match crate::policy::Policy::pick(&mut policy, &query, Time::ZERO, &mut rng) {
            Pick::Replica(id) => id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lambda_moves_between_latency_and_rif() {
        let busy_fast = report(8, 5);
        let idle_slow = report(0, 50);
        assert_eq!(
            choose(0.0, busy_fast, idle_slow),
            ReplicaId(0),
            "latency-only"
        );
        assert_eq!(choose(1.0, busy_fast, idle_slow), ReplicaId(1), "RIF-only");
        // λ = 0.5: 0.5·5 + 0.5·10·8 = 42.5 ms against 0.5·50 = 25 ms.
        assert_eq!(choose(0.5, busy_fast, idle_slow), ReplicaId(1));
    }

    #[test]
    fn lambda_out_of_range_is_rejected() {
        let config = Config {
            lambda: 1.5,
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("lambda"), "{err}");
    }
}
