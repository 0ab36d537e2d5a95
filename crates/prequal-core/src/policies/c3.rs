//! `c3`: the C3 scoring function (Suresh et al., NSDI 2015) over Prequal's probe pool.
//!
//! As the Prequal paper restates it (section 5.2), each replica gets a queue estimate and a score
//!
//! ```text
//! q̂ = 1 + os·n + q̄
//! Ψ = (R − 1/μ) + q̂³ / μ
//! ```
//!
//! where `os` is this client's own requests in flight at the replica, `n` the number of clients
//! sharing the replicas (`clients`, default 1), `q̄` an EWMA of the RIF the replica reports in
//! probe replies, `1/μ` an EWMA of the latency it reports (its service time), and `R` an EWMA of
//! the response time this client observed. The cube punishes queueing much harder than a slow
//! service time. The reply with the lowest Ψ in the pool wins; removal of the worst takes the
//! highest Ψ.
//!
//! EWMA weights: probed signals give the new sample weight [`PROBED_WEIGHT`] (0.5), because each
//! replica is probed only now and then (about r_probe/n times per query); response times, which
//! arrive with every completion, give it [`RESPONSE_WEIGHT`] (0.1). Before the first completion
//! from a replica, `R` is taken equal to `1/μ`, so the first term is zero rather than a guess.
//!
//! Probing, pool, reuse, removal and error aversion are those of `prequal`, shared through
//! [`AsyncProbing`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::probing::aversion::{Aversion, ReplicaLoad};
use super::probing::engine::{AsyncProbing, Rank, RankKey, Rule};
use super::probing::params::{self, ProbingParams};
use super::probing::pool::Entry;
use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::ewma::ewma;
use crate::policy::{Completion, LoadReport, Policy};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// Weight of a new probed sample (latency, RIF) in its EWMA.
pub const PROBED_WEIGHT: f64 = 0.5;
/// Weight of a new client-observed response time in its EWMA.
pub const RESPONSE_WEIGHT: f64 = 0.1;

/// `c3` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Number of clients sharing the replicas (n), default 1.
    pub clients: u32,
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
            clients: 1,
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
        name: "c3",
        signal: "probed RIF and latency, client RIF and response time",
        rule: "async probe pool; minimise Ψ = (R − 1/μ) + q̂³/μ with q̂ = 1 + os·n + q̄",
        source: "C3 (NSDI 2015) as restated in the Prequal paper, section 5.2",
        params: &[
            ParamDoc {
                key: "clients",
                default: "1",
                doc: "number of clients sharing the replicas (n in q̂), >= 1",
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
        if self.clients == 0 {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "clients",
                "must be at least 1",
            ));
        }
        self.probing().validate(Self::INFO.name)
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(C3::new(self.probing(), C3Rule::new(self.clients)))
    }
}

/// The `c3` policy.
pub type C3 = AsyncProbing<C3Rule>;

/// EWMAs C3 keeps per replica.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct C3State {
    /// Client-observed response time R, seconds.
    pub response: Option<f64>,
    /// Probed service time 1/μ, seconds.
    pub service: Option<f64>,
    /// Probed server RIF q̄.
    pub queue: Option<f64>,
}

impl C3State {
    /// Ψ with `outstanding` local requests in flight and `clients` clients; `None` before the
    /// first probe reply.
    pub fn score(&self, outstanding: u32, clients: u32) -> Option<f64> {
        let service = self.service?;
        let response = self.response.unwrap_or(service);
        let q_hat = 1.0 + f64::from(outstanding) * f64::from(clients) + self.queue.unwrap_or(0.0);
        Some((response - service) + q_hat.powi(3) * service)
    }
}

/// The C3 scoring rule.
#[derive(Clone, Debug)]
pub struct C3Rule {
    clients: u32,
    state: Replicas<C3State>,
}

impl C3Rule {
    /// The rule for `clients` clients.
    pub fn new(clients: u32) -> Self {
        Self {
            clients,
            state: Replicas::new(),
        }
    }

    /// The EWMAs of `replica`, if known.
    pub fn state(&self, replica: ReplicaId) -> Option<&C3State> {
        self.state.get(replica)
    }
}

impl Rule for C3Rule {
    type Context = ();
    type Facts = ();
    const NAME: &'static str = "c3";
    const READS_RATES: bool = false;

    fn on_reply(&mut self, replica: ReplicaId, report: &LoadReport, _now: Time) {
        if let Some(s) = self.state.get_mut(replica) {
            s.service = ewma(s.service, report.latency.as_secs_f64(), PROBED_WEIGHT);
            s.queue = ewma(s.queue, f64::from(report.rif), PROBED_WEIGHT);
        }
    }

    /// C3 was designed around feedback piggybacked on responses, so it takes it as a probe.
    fn on_load_report(&mut self, replica: ReplicaId, report: &LoadReport, now: Time) {
        self.on_reply(replica, report, now);
    }

    fn on_complete(&mut self, replica: ReplicaId, completion: &Completion) {
        // A cancelled query's latency is only a lower bound on its response time.
        if completion.outcome == crate::policy::Outcome::Cancelled {
            return;
        }
        if let Some(s) = self.state.get_mut(replica) {
            s.response = ewma(
                s.response,
                completion.latency.as_secs_f64(),
                RESPONSE_WEIGHT,
            );
        }
    }

    fn on_replica_change(&mut self, change: ReplicaChange) {
        self.state.apply(change, C3State::default);
    }

    fn context(&self) {}

    fn rank(&self, _cx: &(), entry: &Entry, load: &ReplicaLoad) -> Rank {
        let fallback = C3State {
            service: Some(entry.latency.as_secs_f64()),
            queue: Some(f64::from(entry.rif)),
            response: None,
        };
        let state = self.state.get(entry.replica).unwrap_or(&fallback);
        let score = state
            .score(load.local_rif, self.clients)
            .or_else(|| fallback.score(load.local_rif, self.clients))
            .unwrap_or(f64::INFINITY);
        Rank {
            hot: false,
            key: score,
            tie: entry.latency.as_secs_f64(),
        }
    }

    type Key = RankKey;

    fn key(&self, cx: &(), entry: &Entry, load: &ReplicaLoad) -> RankKey {
        RankKey(self.rank(cx, entry, load))
    }

    fn values(&self, _cx: &()) -> Vec<(&'static str, f64)> {
        vec![("clients", f64::from(self.clients))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Outcome, QueryId};

    #[test]
    fn score_follows_the_formula() {
        let state = C3State {
            response: Some(0.030),
            service: Some(0.010),
            queue: Some(2.0),
        };
        // q̂ = 1 + 1·3 + 2 = 6; Ψ = (0.030 − 0.010) + 216·0.010 = 2.18.
        let psi = state.score(1, 3).unwrap_or(f64::NAN);
        assert!((psi - 2.18).abs() < 1e-9, "{psi}");
        assert_eq!(C3State::default().score(0, 1), None);
    }

    #[test]
    fn ewmas_weight_new_samples_as_documented() {
        let mut rule = C3Rule::new(1);
        rule.on_replica_change(ReplicaChange::Insert(ReplicaId(0)));
        let report = |rif, ms| LoadReport {
            rif,
            latency: Duration::from_millis(ms),
            ..LoadReport::default()
        };
        rule.on_reply(ReplicaId(0), &report(4, 10), Time::ZERO);
        rule.on_reply(ReplicaId(0), &report(0, 30), Time::ZERO);
        for ms in [100, 200] {
            let done = Completion {
                query: QueryId(0),
                latency: Duration::from_millis(ms),
                outcome: Outcome::Success,
            };
            rule.on_complete(ReplicaId(0), &done);
        }
        let s = rule.state(ReplicaId(0)).copied().unwrap_or_default();
        assert_eq!(s.queue, Some(2.0));
        assert!((s.service.unwrap_or(0.0) - 0.020).abs() < 1e-12);
        assert!((s.response.unwrap_or(0.0) - 0.110).abs() < 1e-12);
        rule.on_replica_change(ReplicaChange::Remove(ReplicaId(0)));
        assert!(rule.state(ReplicaId(0)).is_none());
    }

    #[test]
    fn queueing_outweighs_a_faster_service_time() {
        let idle_slow = C3State {
            response: None,
            service: Some(0.020),
            queue: Some(0.0),
        };
        let busy_fast = C3State {
            response: None,
            service: Some(0.010),
            queue: Some(3.0),
        };
        let a = idle_slow.score(0, 1).unwrap_or(f64::NAN);
        let b = busy_fast.score(0, 1).unwrap_or(f64::NAN);
        assert!(a < b, "{a} vs {b}");
        assert!(
            Config {
                clients: 0,
                ..Config::default()
            }
            .validate()
            .is_err()
        );
    }
}
