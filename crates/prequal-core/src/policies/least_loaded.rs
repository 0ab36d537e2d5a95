//! `least-loaded`: the replica with the fewest of this client's requests in flight.
//!
//! The client counts, per replica, the queries it has dispatched that have not completed yet
//! (client-local RIF, from [`Policy::on_dispatch`] to [`Policy::on_complete`]) and sends each
//! query to a replica with the minimum count. It needs no signal from the servers, so it reacts
//! to a stalled replica as soon as that replica's queries pile up; but it only sees its own
//! traffic, so many independent clients can still herd onto the same replica (the case the
//! "power of two" experiment studies).
//!
//! Ties are common (at low load every count is zero), and they are broken in cyclic order: among
//! the replicas with the minimum count, the first one after the last replica chosen, in id order,
//! wrapping around. At low load this degrades to round robin instead of always hammering the
//! lowest id. Like `round-robin`, the first pick starts the cycle at a random replica, so many
//! clients started together do not break their ties in lockstep onto the same replica. It takes
//! no parameters. Source: the "least loaded" baseline of "Beyond Round Robin"
//! and of the Prequal paper (section 5.2).

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, PolicyInfo};
use crate::policies::local::LocalLoad;
use crate::policy::{Completion, Pick, Policy, Query, QueryId, Snapshot};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// `least-loaded` takes no parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "least-loaded",
        signal: "client-local requests in flight (RIF)",
        rule: "minimum client-local RIF over all replicas; ties go to the first one after the \
               last chosen, in cyclic id order (starting at a random replica)",
        source: "baseline (Beyond Round Robin; Prequal paper, section 5.2)",
        params: &[],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(LeastLoaded::default())
    }
}

/// Picks the minimum client-local RIF, breaking ties cyclically.
#[derive(Debug, Default)]
pub struct LeastLoaded {
    replicas: Replicas<LocalLoad>,
    last: Option<ReplicaId>,
}

impl LeastLoaded {
    /// The position at which the cyclic scan starts: just after the last replica chosen, or a
    /// random one before the first pick.
    fn scan_start(&self, rng: &mut dyn RngCore) -> usize {
        let ids = self.replicas.ids();
        match self.last {
            Some(last) => ids.partition_point(|id| *id <= last) % ids.len(),
            None => rng.random_range(0..ids.len()),
        }
    }
}

impl Policy for LeastLoaded {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, _now: Time) {
        self.replicas.apply(change, LocalLoad::default);
    }

    fn pick(&mut self, _query: &Query, _now: Time, rng: &mut dyn RngCore) -> Pick {
        let n = self.replicas.len();
        if n == 0 {
            return Pick::NoReplica;
        }
        let start = self.scan_start(rng);
        // Strictly smaller wins, so among equals the first in cyclic order stays.
        let best = (start..n)
            .chain(0..start)
            .min_by_key(|&i| self.replicas.at(i).rif)
            .unwrap_or(start);
        let id = self.replicas.id_at(best);
        tracing::trace!(replica = %id, rif = self.replicas.at(best).rif, "least-loaded pick");
        self.last = Some(id);
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
    use crate::policy::Outcome;
    use crate::testing::{pick_n, rng, with_replicas};
    use std::time::Duration;

    fn dispatch(policy: &mut dyn Policy, id: u32, times: u64) {
        for q in 0..times {
            policy.on_dispatch(ReplicaId(id), QueryId(q), Time::ZERO);
        }
    }

    fn complete(policy: &mut dyn Policy, id: u32) {
        let done = Completion {
            query: QueryId(0),
            latency: Duration::from_millis(1),
            outcome: Outcome::Success,
        };
        policy.on_complete(ReplicaId(id), &done, Time::ZERO);
    }

    #[test]
    fn picks_the_minimum_rif() {
        let mut policy = with_replicas(Config::default().build(), 0..4);
        dispatch(&mut *policy, 0, 3);
        dispatch(&mut *policy, 1, 1);
        dispatch(&mut *policy, 2, 2);
        dispatch(&mut *policy, 3, 2);
        assert_eq!(pick_n(&mut *policy, 1), vec![1]);
        complete(&mut *policy, 3);
        complete(&mut *policy, 3);
        assert_eq!(pick_n(&mut *policy, 1), vec![3]);
        let snap = policy.snapshot(Time::ZERO);
        assert_eq!(snap.replicas[0].local_rif, 3);
        assert_eq!(snap.replicas[0].picks, 3);
    }

    #[test]
    fn ties_go_to_the_next_replica_after_the_last_chosen() {
        let mut policy = with_replicas(Config::default().build(), [2, 4, 6, 8]);
        // All idle: ties everywhere, so it cycles like round robin from a random start.
        let first = pick_n(&mut *policy, 1)[0];
        let ids = [2, 4, 6, 8];
        let at = ids.iter().position(|&id| id == first).unwrap();
        let expected: Vec<u32> = (1..=4).map(|i| ids[(at + i) % 4]).collect();
        assert_eq!(pick_n(&mut *policy, 4), expected);
        // Steer to a known place: the last pick is 2.
        while pick_n(&mut *policy, 1)[0] != 2 {}
        // 4 and 8 tie at the minimum; the last chosen was 2, so 4 comes next, then 8.
        dispatch(&mut *policy, 6, 1);
        dispatch(&mut *policy, 2, 1);
        assert_eq!(pick_n(&mut *policy, 3), vec![4, 8, 4]);
        // A membership change keeps "next after the last" well defined.
        policy.on_replica_change(ReplicaChange::Remove(ReplicaId(8)), Time::ZERO);
        policy.on_replica_change(ReplicaChange::Insert(ReplicaId(5)), Time::ZERO);
        assert_eq!(pick_n(&mut *policy, 2), vec![5, 4]);
        let _ = rng(0);
    }

    /// Drives a baseline through picks, completions and polls for `steps` virtual milliseconds.
    fn script(name: &str, seed: u64, steps: u64) -> Vec<Pick> {
        use crate::config::PolicyConfig;
        use crate::policy::LoadReport;
        let mut policy = with_replicas(
            PolicyConfig::from_name(name).unwrap().build().unwrap(),
            0..5,
        );
        let mut r = rng(seed);
        let mut picks = Vec::new();
        for step in 0..steps {
            let now = Time::from_millis(step * 10);
            if policy.poll_timeout().is_some_and(|t| t <= now) {
                policy.handle_timeout(now, &mut r);
            }
            while let Some(probe) = policy.poll_probe(now, &mut r) {
                let id = u64::from(probe.replica.0);
                let report = LoadReport {
                    rif: ((id * 3 + step) % 5) as u32,
                    qps: Some(100.0 + id as f64),
                    utilization: Some(0.5),
                    ..LoadReport::default()
                };
                policy.on_probe_reply(&probe, &report, now, &mut r);
            }
            let pick = policy.pick(&Query::default(), now, &mut r);
            if let Pick::Replica(id) = pick {
                policy.on_dispatch(id, QueryId(step), now);
                if step % 3 != 0 {
                    let done = Completion {
                        query: QueryId(step),
                        latency: Duration::from_millis(u64::from(id.0) * 7 + step % 11),
                        outcome: Outcome::Success,
                    };
                    policy.on_complete(id, &done, now);
                }
            }
            picks.push(pick);
        }
        picks
    }

    #[test]
    fn every_baseline_repeats_its_decisions_with_the_same_seed() {
        for name in [
            "weighted-round-robin",
            "least-loaded",
            "least-loaded-p2c",
            "peak-ewma",
            "yarp-p2c",
        ] {
            let first = script(name, 42, 400);
            assert_eq!(first, script(name, 42, 400), "{name}");
            assert!(
                first.iter().all(|p| matches!(p, Pick::Replica(_))),
                "{name}"
            );
        }
    }

    /// A step-driven "Beyond Round Robin" in miniature: one client sends a query every virtual
    /// millisecond for 10 s to 5 replicas; replica 4 answers in 2 s, the others in 20 ms.
    /// Returns the share of queries sent to the slow replica.
    fn slow_replica_share(name: &str) -> f64 {
        use crate::config::PolicyConfig;
        use crate::policy::LoadReport;
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut policy = with_replicas(
            PolicyConfig::from_name(name).unwrap().build().unwrap(),
            0..5,
        );
        let (mut r, mut server_rif, mut done) = (rng(1), [0u32; 5], BinaryHeap::new());
        let mut slow_picks = 0u32;
        for ms in 0..10_000u64 {
            let now = Time::from_millis(ms);
            while let Some(Reverse((at, q, id, latency))) = done.peek().copied() {
                if at > now {
                    break;
                }
                done.pop();
                server_rif[id as usize] -= 1;
                let completion = Completion {
                    query: QueryId(q),
                    latency,
                    outcome: Outcome::Success,
                };
                policy.on_complete(ReplicaId(id), &completion, at);
            }
            if policy.poll_timeout().is_some_and(|t| t <= now) {
                policy.handle_timeout(now, &mut r);
            }
            while let Some(probe) = policy.poll_probe(now, &mut r) {
                let report = LoadReport {
                    rif: server_rif[probe.replica.0 as usize],
                    ..LoadReport::default()
                };
                policy.on_probe_reply(&probe, &report, now, &mut r);
            }
            let Pick::Replica(id) = policy.pick(
                &Query {
                    id: QueryId(ms),
                    hint: None,
                },
                now,
                &mut r,
            ) else {
                panic!("{name}: no replica");
            };
            policy.on_dispatch(id, QueryId(ms), now);
            server_rif[id.0 as usize] += 1;
            let latency = Duration::from_millis(if id.0 == 4 { 2_000 } else { 20 });
            done.push(Reverse((now + latency, ms, id.0, latency)));
            slow_picks += u32::from(id.0 == 4);
        }
        f64::from(slow_picks) / 10_000.0
    }

    #[test]
    fn load_aware_baselines_starve_a_slow_replica_where_round_robin_cannot() {
        assert_eq!(slow_replica_share("round-robin"), 0.2);
        // Signals seen at once (local RIF, observed latency) starve it almost completely.
        for name in ["least-loaded", "least-loaded-p2c", "peak-ewma"] {
            let share = slow_replica_share(name);
            assert!(
                share < 0.01,
                "{name} sent {share} of queries to the slow replica"
            );
        }
        // A polled signal is up to one interval stale: each time the slow replica's reported
        // RIF drains below the others', it wins its draws for a whole 500 ms round (about 6%).
        let share = slow_replica_share("yarp-p2c");
        assert!(
            share < 0.1,
            "yarp-p2c sent {share} of queries to the slow replica"
        );
    }

    /// Many clients with all counts at zero: each starts its tie-breaking cycle somewhere else,
    /// instead of every client sending its first query to the lowest id.
    #[test]
    fn clients_start_their_tie_breaking_at_different_replicas() {
        let starts: std::collections::BTreeSet<u32> = (0..20)
            .map(|seed| {
                let mut policy = with_replicas(Config::default().build(), 0..10);
                let mut rng = rng(seed);
                match policy.pick(&Query::default(), Time::ZERO, &mut rng) {
                    Pick::Replica(id) => id.0,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        assert!(starts.len() > 3, "starts {starts:?}");
    }

    #[test]
    fn empty_set_has_no_replica_and_unknown_feedback_is_ignored() {
        let mut policy = Config::default().build();
        dispatch(&mut *policy, 9, 1);
        complete(&mut *policy, 9);
        let q = Query::default();
        assert_eq!(policy.pick(&q, Time::ZERO, &mut rng(1)), Pick::NoReplica);
    }
}
