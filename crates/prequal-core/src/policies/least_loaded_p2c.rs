//! `least-loaded-p2c`: the best of `draws` random replicas by client-local requests in flight.
//!
//! The "power of d choices": instead of scanning every replica for the least loaded one, draw
//! `draws` distinct replicas uniformly at random and send the query to the one with the fewest of
//! this client's requests in flight (ties go to the replica drawn first, which is itself random).
//! With d = 2 the maximum load falls exponentially compared with one random choice (Mitzenmacher),
//! and, unlike full least-loaded, independent clients do not all converge on the same "best"
//! replica at once, so herding is much weaker. This is HAProxy's `random(draws)` algorithm.
//!
//! Parameter: `draws` (default 2; at least 1, where 1 is plain random). When the cluster has
//! fewer replicas than `draws`, every replica is compared.

use rand::RngCore;

use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::policies::local::{LocalLoad, best_of_draws};
use crate::policy::{Completion, Pick, Policy, Query, QueryId, Snapshot};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// `least-loaded-p2c` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Distinct random replicas compared per query. Default 2; >= 1.
    pub draws: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self { draws: 2 }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "least-loaded-p2c",
        signal: "client-local requests in flight (RIF)",
        rule: "the lowest client-local RIF among `draws` distinct random replicas",
        source: "power of two choices (Mitzenmacher); HAProxy random(draws); HAProxy's test",
        params: &[ParamDoc {
            key: "draws",
            default: "2",
            doc: "distinct random replicas compared per query; >= 1 (1 is plain random)",
        }],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        if self.draws == 0 {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "draws",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(LeastLoadedP2c::new(self.draws))
    }
}

/// Best of `draws` random replicas by client-local RIF.
#[derive(Debug)]
pub struct LeastLoadedP2c {
    draws: usize,
    replicas: Replicas<LocalLoad>,
}

impl LeastLoadedP2c {
    /// A policy comparing `draws` replicas per query (at least 1).
    pub fn new(draws: u32) -> Self {
        Self {
            draws: usize::try_from(draws).unwrap_or(usize::MAX).max(1),
            replicas: Replicas::new(),
        }
    }
}

impl Policy for LeastLoadedP2c {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, _now: Time) {
        self.replicas.apply(change, LocalLoad::default);
    }

    fn pick(&mut self, _query: &Query, _now: Time, rng: &mut dyn RngCore) -> Pick {
        let replicas = &self.replicas;
        let Some(best) = best_of_draws(replicas.len(), self.draws, rng, |i| replicas.at(i).rif)
        else {
            return Pick::NoReplica;
        };
        let id = replicas.id_at(best);
        tracing::trace!(replica = %id, rif = replicas.at(best).rif, draws = self.draws,
            "least-loaded-p2c pick");
        Pick::Replica(id)
    }

    fn on_dispatch(&mut self, replica: ReplicaId, _query: QueryId, _now: Time) {
        if let Some(load) = self.replicas.get_mut(replica) {
            load.dispatched();
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, _completion: &Completion, _now: Time) {
        if let Some(load) = self.replicas.get_mut(replica) {
            load.completed();
        }
    }

    fn snapshot(&self, _now: Time) -> Snapshot {
        Snapshot {
            policy: self.name(),
            replicas: self
                .replicas
                .iter()
                .map(|(id, load)| load.view(id, Some(f64::from(load.rif))))
                .collect(),
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{rng, with_replicas};

    #[test]
    fn steers_away_from_a_loaded_replica_and_repeats_with_the_seed() {
        let mut policy = with_replicas(Config::default().build(), 0..2);
        for q in 0..5 {
            policy.on_dispatch(ReplicaId(0), QueryId(q), Time::ZERO);
        }
        // With two replicas both are always drawn: the idle one always wins.
        let mut r = rng(3);
        for _ in 0..20 {
            let pick = policy.pick(&Query::default(), Time::ZERO, &mut r);
            assert_eq!(pick, Pick::Replica(ReplicaId(1)));
        }
        let run = |seed| {
            let mut p = with_replicas(Config { draws: 3 }.build(), 0..10);
            let mut r = rng(seed);
            (0..50)
                .map(|q| {
                    let pick = p.pick(&Query::default(), Time::ZERO, &mut r);
                    if let Pick::Replica(id) = pick {
                        p.on_dispatch(id, QueryId(q), Time::ZERO);
                    }
                    pick
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
    }

    #[test]
    fn zero_draws_is_rejected() {
        let err = Config { draws: 0 }.validate().unwrap_err();
        assert!(err.to_string().contains("draws"), "{err}");
    }
}
