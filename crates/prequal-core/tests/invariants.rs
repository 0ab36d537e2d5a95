//! Invariants every policy in [`prequal_core::catalog`] must keep, checked by driving each one
//! with the same seeded stream of queries, completions, probe replies, timeouts, membership
//! changes and stray input (see `common/mod.rs`). New policies are covered as soon as they are
//! listed in the catalog.

mod common;

use common::{Decision, Harness, build};
use prequal_core::{
    LoadReport, Pick, ProbeId, ProbeRequest, Query, QueryId, ReplicaChange, ReplicaId, Time,
    catalog,
};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

const STEPS: usize = 3_000;
/// Steps of 1 ms allowed for pending picks to resolve once queries stop.
const SETTLE_STEPS: usize = 2_000;

fn names() -> impl Iterator<Item = &'static str> {
    catalog().iter().map(|info| info.name)
}

fn run(name: &str, seed: u64, steps: usize) -> Harness {
    run_with(name, 8, seed, steps)
}

fn run_with(name: &str, replicas: u32, seed: u64, steps: usize) -> Harness {
    let mut harness = Harness::new(build(name), replicas, seed);
    for _ in 0..steps {
        harness.step();
    }
    harness
}

#[test]
fn picks_name_live_replicas_and_pending_picks_resolve() {
    let mut failures = Vec::new();
    for name in names() {
        for (replicas, seed) in [(8, 1), (8, 2), (1, 3), (40, 4)] {
            eprintln!("driving {name} with {replicas} replicas, seed {seed}");
            let mut harness = run_with(name, replicas, seed, STEPS);
            let settled = harness.settle(SETTLE_STEPS);
            failures.extend(harness.violations.iter().take(5).cloned());
            if !settled {
                failures.push(format!(
                    "{name}: {} picks still pending {SETTLE_STEPS} ms after the last query",
                    harness.pending.len()
                ));
            }
            let picks = harness
                .log
                .iter()
                .filter(|d| matches!(d, Decision::Pick(_, Pick::Replica(_))))
                .count()
                + harness
                    .log
                    .iter()
                    .filter(|d| matches!(d, Decision::Resolved(_, Pick::Replica(_))))
                    .count();
            // Most steps send a query; a policy that never picked would pass vacuously.
            if picks < STEPS / 2 {
                failures.push(format!("{name}: only {picks} queries were sent anywhere"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn same_seed_and_events_give_the_same_decisions() {
    for name in names() {
        let first = run(name, 42, 1_000);
        let second = run(name, 42, 1_000);
        assert_eq!(first.log.len(), second.log.len(), "{name}");
        if let Some(i) = (0..first.log.len()).find(|&i| first.log[i] != second.log[i]) {
            panic!(
                "{name}: decision {i} differs: {:?} vs {:?}",
                first.log[i], second.log[i]
            );
        }
        assert_eq!(
            first.policy.snapshot(first.now),
            second.policy.snapshot(second.now),
            "{name}"
        );
    }
}

#[test]
fn removing_every_replica_gives_no_replica() {
    for name in names() {
        let mut harness = run(name, 7, 500);
        harness.remove_all();
        harness.settle(SETTLE_STEPS);
        assert!(harness.violations.is_empty(), "{:?}", harness.violations);
        for _ in 0..3 {
            match harness.query() {
                Pick::NoReplica => {}
                Pick::Pending => {
                    harness.settle(SETTLE_STEPS);
                    let last = harness.log.last();
                    assert!(
                        matches!(last, Some(Decision::Resolved(_, Pick::NoReplica))),
                        "{name}: pending pick with no replicas ended as {last:?}"
                    );
                }
                other => panic!("{name}: {other:?} with no replicas"),
            }
        }
        assert!(harness.violations.is_empty(), "{:?}", harness.violations);
    }
}

#[test]
fn a_fresh_policy_tolerates_stray_input_and_has_no_replica() {
    let mut rng = Pcg64Mcg::seed_from_u64(3);
    let query = Query {
        id: QueryId(1),
        hint: None,
    };
    for name in names() {
        let mut policy = build(name);
        let now = Time::from_millis(1);
        let stray = ProbeRequest {
            id: ProbeId(99),
            replica: ReplicaId(7),
            query: None,
            hint: None,
        };
        policy.on_probe_reply(&stray, &LoadReport::default(), now, &mut rng);
        policy.on_probe_failure(&stray, now);
        policy.on_load_report(ReplicaId(7), &LoadReport::default(), now);
        policy.on_replica_change(ReplicaChange::Remove(ReplicaId(7)), now);
        policy.handle_timeout(now, &mut rng);
        assert_eq!(
            policy.pick(&query, now, &mut rng),
            Pick::NoReplica,
            "{name}"
        );
        while policy.poll_probe(now, &mut rng).is_some() {}

        // Duplicate inserts must not make a replica count twice or confuse removal.
        policy.on_replica_change(ReplicaChange::Insert(ReplicaId(1)), now);
        policy.on_replica_change(ReplicaChange::Insert(ReplicaId(1)), now);
        policy.on_replica_change(ReplicaChange::Remove(ReplicaId(1)), now);
        assert_eq!(
            policy.pick(&query, now, &mut rng),
            Pick::NoReplica,
            "{name}"
        );
        let snapshot = policy.snapshot(now);
        assert_eq!(snapshot.policy, name);
        assert!(
            snapshot.replicas.iter().all(|r| r.id != Some(ReplicaId(1))),
            "{name}: removed replica still in its snapshot"
        );
    }
}

#[test]
fn the_driver_catches_a_broken_policy() {
    // A check that cannot fail proves nothing: a policy that names a replica outside the set
    // must be reported.
    #[derive(Debug)]
    struct Wrong;
    impl prequal_core::Policy for Wrong {
        fn name(&self) -> &'static str {
            "wrong"
        }
        fn on_replica_change(&mut self, _: ReplicaChange, _: Time) {}
        fn pick(&mut self, _: &Query, _: Time, _: &mut dyn rand::RngCore) -> Pick {
            Pick::Replica(ReplicaId(999))
        }
        fn snapshot(&self, _: Time) -> prequal_core::Snapshot {
            prequal_core::Snapshot::default()
        }
    }
    let mut harness = Harness::new(Box::new(Wrong), 3, 1);
    for _ in 0..10 {
        harness.step();
    }
    assert!(
        harness.violations.iter().any(|v| v.contains("named r999")),
        "{:?}",
        harness.violations
    );
}
