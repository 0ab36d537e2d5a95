//! `peak-ewma`: power of two choices on a latency-times-load cost (Finagle's and Linkerd's).
//!
//! For each replica the client keeps a peak-sensitive, time-decaying EWMA of the round-trip
//! times it observed ([`crate::ewma::PeakEwma`]: it jumps up at once on a slower response,
//! otherwise follows the samples with weight `e^(−Δt/τ)`, and decays toward zero while no
//! samples arrive). The cost of a replica at time `now` is
//!
//! `cost = rtt_ewma(now) × (local_rif + 1)`,
//!
//! the expected wait if every query in flight took the average time. Each query draws two
//! distinct replicas at random and goes to the cheaper one (ties to the first drawn). The
//! decay toward zero means a replica that was shunned after a stall is retried within a few `τ`
//! even if no query reached it meanwhile.
//!
//! Parameters: `decay`, the EWMA time constant τ (default 10 s, as in Finagle and Linkerd), and
//! `default_rtt`, the RTT assumed for a replica with no sample yet (default 500 ms). The
//! default is deliberately pessimistic for RPC services, so that a replica that just joined does
//! not look free and swallow a burst before its first response; it is still picked when both
//! draws land on unmeasured replicas, or when the measured one is loaded enough. Every completion
//! counts as a sample, failures included, as in Finagle and Linkerd: a replica that fails fast
//! therefore looks fast (the sinkholing that retry budgets and outlier ejection exist to catch).
//!
//! The cost is a pure read, [`PeakEwmaPolicy::cost_at`]: unlike tower, reading it never moves
//! the average.

use std::time::Duration;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::ewma::PeakEwma;
use crate::policies::local::LocalLoad;
use crate::policies::local::best_of_draws;
use crate::policy::{Completion, Outcome, Pick, Policy, Query, QueryId, Snapshot};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// `peak-ewma` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The EWMA time constant τ. Default "10s"; > 0.
    #[serde(with = "humantime_serde")]
    pub decay: Duration,
    /// The RTT assumed for a replica with no sample yet. Default "500ms"; > 0.
    #[serde(with = "humantime_serde")]
    pub default_rtt: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            decay: Duration::from_secs(10),
            default_rtt: Duration::from_millis(500),
        }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "peak-ewma",
        signal: "client-observed latency and client-local RIF",
        rule: "the cheaper of two random replicas, cost = peak-sensitive EWMA of RTT × (RIF + 1)",
        source: "Finagle / Linkerd peak EWMA; Beyond Round Robin",
        params: &[
            ParamDoc {
                key: "decay",
                default: "\"10s\"",
                doc: "EWMA time constant: samples and idle decay both forget at this rate; > 0",
            },
            ParamDoc {
                key: "default_rtt",
                default: "\"500ms\"",
                doc: "RTT assumed for a replica with no sample yet (pessimistic on purpose); > 0",
            },
        ],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        let name = Self::INFO.name;
        if self.decay.is_zero() {
            return Err(ConfigError::invalid(
                name,
                "decay",
                "must be greater than 0",
            ));
        }
        if self.default_rtt.is_zero() {
            return Err(ConfigError::invalid(
                name,
                "default_rtt",
                "must be greater than 0",
            ));
        }
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(PeakEwmaPolicy::new(self))
    }
}

/// One replica: its RTT average and its client-local load.
#[derive(Clone, Debug)]
struct ReplicaState {
    rtt: PeakEwma,
    load: LocalLoad,
}

/// Power of two choices on peak-EWMA cost. See the module docs.
#[derive(Debug)]
pub struct PeakEwmaPolicy {
    decay: Duration,
    default_rtt_secs: f64,
    replicas: Replicas<ReplicaState>,
}

impl PeakEwmaPolicy {
    /// A policy with the given (validated) parameters.
    pub fn new(config: &Config) -> Self {
        Self {
            decay: config.decay,
            default_rtt_secs: config.default_rtt.as_secs_f64(),
            replicas: Replicas::new(),
        }
    }

    fn cost_of(&self, state: &ReplicaState, now: Time) -> f64 {
        let rtt = state.rtt.secs_at(now).unwrap_or(self.default_rtt_secs);
        rtt * (f64::from(state.load.rif) + 1.0)
    }

    /// The cost of sending to `replica` at `now`, in seconds; `None` for an unknown replica.
    /// Pure: reading never changes the average.
    pub fn cost_at(&self, replica: ReplicaId, now: Time) -> Option<f64> {
        self.replicas.get(replica).map(|s| self.cost_of(s, now))
    }
}

impl Policy for PeakEwmaPolicy {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, _now: Time) {
        let decay = self.decay;
        self.replicas.apply(change, || ReplicaState {
            rtt: PeakEwma::new(decay),
            load: LocalLoad::default(),
        });
    }

    fn pick(&mut self, _query: &Query, now: Time, rng: &mut dyn RngCore) -> Pick {
        let n = self.replicas.len();
        let cost = |i| self.cost_of(self.replicas.at(i), now);
        let Some(best) = best_of_draws(n, 2, rng, cost) else {
            return Pick::NoReplica;
        };
        let id = self.replicas.id_at(best);
        tracing::trace!(replica = %id, cost_s = cost(best), "peak-ewma pick");
        Pick::Replica(id)
    }

    fn on_dispatch(&mut self, replica: ReplicaId, _query: QueryId, _now: Time) {
        if let Some(state) = self.replicas.get_mut(replica) {
            state.load.dispatched();
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, completion: &Completion, now: Time) {
        if let Some(state) = self.replicas.get_mut(replica) {
            state.load.completed();
            // A cancelled query's latency is only a lower bound on its round trip.
            if completion.outcome != Outcome::Cancelled {
                state.rtt.observe(completion.latency, now);
            }
        }
    }

    fn snapshot(&self, now: Time) -> Snapshot {
        Snapshot {
            policy: self.name(),
            replicas: self
                .replicas
                .iter()
                .map(|(id, s)| s.load.view(id, Some(self.cost_of(s, now))))
                .collect(),
            values: vec![("default_rtt_s", self.default_rtt_secs)],
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Outcome;
    use crate::testing::rng;

    fn policy(n: u32) -> PeakEwmaPolicy {
        let mut p = PeakEwmaPolicy::new(&Config::default());
        (0..n).for_each(|i| p.on_replica_change(ReplicaChange::Insert(ReplicaId(i)), Time::ZERO));
        p
    }

    fn finish(p: &mut PeakEwmaPolicy, id: u32, latency_ms: u64, now: Time) {
        p.on_dispatch(ReplicaId(id), QueryId(0), now);
        let done = Completion {
            query: QueryId(0),
            latency: Duration::from_millis(latency_ms),
            outcome: Outcome::Success,
        };
        p.on_complete(ReplicaId(id), &done, now);
    }

    #[test]
    fn cost_is_rtt_times_rif_plus_one_and_reads_are_pure() {
        let mut p = policy(2);
        let t = Time::from_secs(1);
        assert_eq!(p.cost_at(ReplicaId(0), t), Some(0.5)); // the default RTT
        finish(&mut p, 0, 100, t);
        p.on_dispatch(ReplicaId(0), QueryId(1), t);
        p.on_dispatch(ReplicaId(0), QueryId(2), t);
        let cost = p.cost_at(ReplicaId(0), t).unwrap();
        assert!((cost - 0.3).abs() < 1e-9, "{cost}");
        // Reading many times changes nothing.
        let later = t + Duration::from_secs(10);
        let a = p.cost_at(ReplicaId(0), later);
        let _ = p.snapshot(later);
        assert_eq!(p.cost_at(ReplicaId(0), later), a);
        assert!((a.unwrap() - 0.3 * (-1.0f64).exp()).abs() < 1e-9);
    }

    #[test]
    fn a_slow_response_steers_traffic_away_at_once() {
        let mut p = policy(2);
        let mut r = rng(5);
        finish(&mut p, 0, 10, Time::ZERO);
        finish(&mut p, 1, 10, Time::ZERO);
        finish(&mut p, 1, 2_000, Time::from_millis(1));
        for _ in 0..20 {
            let pick = p.pick(&Query::default(), Time::from_millis(2), &mut r);
            assert_eq!(pick, Pick::Replica(ReplicaId(0)));
        }
    }

    #[test]
    fn same_seed_same_decisions() {
        let run = |seed| {
            let mut p = policy(8);
            let mut r = rng(seed);
            (0..200u64)
                .map(|q| {
                    let now = Time::from_millis(q);
                    let pick = p.pick(&Query::default(), now, &mut r);
                    if let Pick::Replica(id) = pick {
                        finish(&mut p, id.0, 5 + u64::from(id.0) * 3, now);
                    }
                    pick
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }

    #[test]
    fn zero_durations_are_rejected_by_key() {
        let bad = Config {
            decay: Duration::ZERO,
            ..Config::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("`decay`"));
    }
}
