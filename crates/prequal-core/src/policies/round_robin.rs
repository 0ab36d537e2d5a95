//! `round-robin`: replicas in turn, in cyclic id order.
//!
//! The policy remembers the last replica it chose and always takes the next one after it; when
//! membership changes, "next" is still well defined (the smallest id above the last one, wrapping
//! around), so a change never makes it skip or repeat more than the changed replica. The first
//! pick starts at a random replica, so that many clients (or proxy instances) started together do
//! not walk the replicas in lockstep and hit the same one at the same moment.

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, PolicyInfo};
use crate::policy::{Pick, Policy, Query, ReplicaView, Snapshot};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// `round-robin` takes no parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "round-robin",
        signal: "none",
        rule: "each replica in turn, in cyclic order",
        source: "baseline (Beyond Round Robin; Prequal paper, section 5.2)",
        params: &[],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(RoundRobin::default())
    }
}

/// Cycles through the replicas.
#[derive(Debug, Default)]
pub struct RoundRobin {
    /// Queries sent to each replica.
    replicas: Replicas<u64>,
    last: Option<ReplicaId>,
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, _now: Time) {
        self.replicas.apply(change, || 0);
    }

    fn pick(&mut self, _query: &Query, _now: Time, rng: &mut dyn RngCore) -> Pick {
        if self.replicas.is_empty() {
            return Pick::NoReplica;
        }
        let ids = self.replicas.ids();
        // The first id above the last one chosen, wrapping to the start.
        let next = match self.last {
            Some(last) => ids.partition_point(|id| *id <= last) % ids.len(),
            None => rng.random_range(0..ids.len()),
        };
        let id = ids[next];
        *self.replicas.at_mut(next) += 1;
        self.last = Some(id);
        Pick::Replica(id)
    }

    fn snapshot(&self, _now: Time) -> Snapshot {
        Snapshot {
            policy: self.name(),
            replicas: self
                .replicas
                .iter()
                .map(|(id, picks)| ReplicaView {
                    id: Some(id),
                    picks: *picks,
                    ..ReplicaView::default()
                })
                .collect(),
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pick_n, with_replicas};

    #[test]
    fn cycles_in_id_order_and_survives_changes() {
        let mut policy = with_replicas(Config::default().build(), 0..3);
        let first = pick_n(&mut *policy, 1)[0];
        let expected: Vec<u32> = (1..=4).map(|i| (first + i) % 3).collect();
        assert_eq!(pick_n(&mut *policy, 4), expected);
        // The last pick was `first + 4`; steer to a known place, then change membership.
        while pick_n(&mut *policy, 1)[0] != 0 {}
        policy.on_replica_change(ReplicaChange::Remove(ReplicaId(1)), Time::ZERO);
        assert_eq!(pick_n(&mut *policy, 3), vec![2, 0, 2]);
        policy.on_replica_change(ReplicaChange::Insert(ReplicaId(1)), Time::ZERO);
        assert_eq!(pick_n(&mut *policy, 3), vec![0, 1, 2]);
    }

    #[test]
    fn clients_start_at_different_replicas() {
        let starts: std::collections::BTreeSet<u32> = (0..20)
            .map(|seed| {
                let mut policy = with_replicas(Config::default().build(), 0..10);
                let mut rng = crate::testing::rng(seed);
                let query = Query::default();
                match policy.pick(&query, Time::ZERO, &mut rng) {
                    Pick::Replica(id) => id.0,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        assert!(starts.len() > 3, "starts {starts:?}");
    }
}
