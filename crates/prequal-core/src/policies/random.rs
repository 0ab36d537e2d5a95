//! `random`: a uniformly random replica for every query.
//!
//! The floor every other policy must beat; it uses no signal at all.

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, PolicyInfo};
use crate::policy::{Pick, Policy, Query, Snapshot};
use crate::replica::{ReplicaChange, Replicas};
use crate::time::Time;

/// `random` takes no parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "random",
        signal: "none",
        rule: "a uniformly random replica",
        source: "baseline (Prequal paper, section 5.2)",
        params: &[],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(RandomPolicy::default())
    }
}

/// Picks uniformly at random.
#[derive(Debug, Default)]
pub struct RandomPolicy {
    replicas: Replicas<()>,
}

impl Policy for RandomPolicy {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, _now: Time) {
        self.replicas.apply(change, || ());
    }

    fn pick(&mut self, _query: &Query, _now: Time, rng: &mut dyn RngCore) -> Pick {
        if self.replicas.is_empty() {
            return Pick::NoReplica;
        }
        Pick::Replica(
            self.replicas
                .id_at(rng.random_range(0..self.replicas.len())),
        )
    }

    fn snapshot(&self, _now: Time) -> Snapshot {
        Snapshot {
            policy: self.name(),
            ..Snapshot::default()
        }
    }
}
