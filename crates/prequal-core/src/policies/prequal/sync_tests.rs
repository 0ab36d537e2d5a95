//! Behaviour of `prequal-sync`: deciding on d − 1 replies, on the probe timeout, and on
//! failures.

use std::collections::BTreeSet;
use std::time::Duration;

use super::sync::{Config, PrequalSync};
use crate::config::build_policy::BuildPolicy;
use crate::policy::{Pick, Policy, ProbeRequest, Query, QueryId};
use crate::replica::{ReplicaChange, ReplicaId};
use crate::testing::{report, rng};
use crate::time::Time;

fn sync_policy(n: u32) -> PrequalSync {
    let mut p = PrequalSync::new(Config::default());
    for id in 0..n {
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
    }
    p
}

fn start(p: &mut PrequalSync, id: u64, hint: Option<u64>) -> Vec<ProbeRequest> {
    let mut rng = rng(id);
    let query = Query {
        id: QueryId(id),
        hint,
    };
    assert_eq!(p.pick(&query, Time::ZERO, &mut rng), Pick::Pending);
    std::iter::from_fn(|| p.poll_probe(Time::ZERO, &mut rng)).collect()
}

#[test]
fn probes_carry_the_query_and_its_hint_to_distinct_replicas() {
    let mut p = sync_policy(6);
    let probes = start(&mut p, 1, Some(42));
    assert_eq!(probes.len(), 3);
    let targets: BTreeSet<ReplicaId> = probes.iter().map(|p| p.replica).collect();
    assert_eq!(targets.len(), 3);
    assert!(
        probes
            .iter()
            .all(|p| p.query == Some(QueryId(1)) && p.hint == Some(42))
    );
}

#[test]
fn decides_on_d_minus_one_replies_by_hcl() {
    let mut p = sync_policy(6);
    let mut rng = rng(2);
    let probes = start(&mut p, 1, None);
    p.on_probe_reply(&probes[0], &report(2, 30), Time::ZERO, &mut rng);
    assert_eq!(p.poll_pick(Time::ZERO, &mut rng), None, "one reply of two");
    p.on_probe_reply(&probes[1], &report(1, 10), Time::ZERO, &mut rng);
    let decision = p.poll_pick(Time::ZERO, &mut rng);
    assert_eq!(
        decision,
        Some((QueryId(1), Pick::Replica(probes[1].replica)))
    );
    // The late third reply changes nothing.
    p.on_probe_reply(&probes[2], &report(0, 1), Time::ZERO, &mut rng);
    assert_eq!(p.poll_pick(Time::ZERO, &mut rng), None);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn decides_on_timeout_with_what_it_has() {
    let mut p = sync_policy(6);
    let mut rng = rng(3);
    let probes = start(&mut p, 7, None);
    p.on_probe_reply(&probes[2], &report(5, 50), Time::ZERO, &mut rng);
    let deadline = Time::from_millis(3);
    assert_eq!(p.poll_timeout(), Some(deadline));
    p.handle_timeout(Time::from_millis(2), &mut rng);
    assert_eq!(
        p.poll_pick(Time::from_millis(2), &mut rng),
        None,
        "not due yet"
    );
    p.handle_timeout(deadline, &mut rng);
    let decision = p.poll_pick(deadline, &mut rng);
    assert_eq!(
        decision,
        Some((QueryId(7), Pick::Replica(probes[2].replica)))
    );
}

#[test]
fn all_probes_failed_gives_a_random_replica() {
    let mut p = sync_policy(6);
    let mut rng = rng(4);
    let probes = start(&mut p, 9, None);
    for probe in &probes {
        assert_eq!(p.poll_pick(Time::ZERO, &mut rng), None);
        p.on_probe_failure(probe, Time::ZERO);
    }
    match p.poll_pick(Time::ZERO, &mut rng) {
        Some((QueryId(9), Pick::Replica(id))) => assert!(id.0 < 6),
        other => panic!("{other:?}"),
    }
}

#[test]
fn single_replica_needs_no_probes_and_none_means_no_replica() {
    let mut p = sync_policy(1);
    let mut rng = rng(5);
    let query = Query::default();
    assert_eq!(
        p.pick(&query, Time::ZERO, &mut rng),
        Pick::Replica(ReplicaId(0))
    );
    assert_eq!(p.poll_probe(Time::ZERO, &mut rng), None);
    let mut empty = sync_policy(0);
    assert_eq!(empty.pick(&query, Time::ZERO, &mut rng), Pick::NoReplica);
}

#[test]
fn config_checks_probes_and_replies() {
    let few = Config {
        probes: 1,
        replies: 1,
        ..Config::default()
    };
    assert!(few.validate().unwrap_err().to_string().contains("probes"));
    let many = Config {
        replies: 4,
        ..Config::default()
    };
    assert!(many.validate().unwrap_err().to_string().contains("replies"));
    assert!(Config::default().validate().is_ok());
    assert_eq!(Config::default().build().name(), "prequal-sync");
}

#[test]
fn avoided_replica_loses_to_a_slower_healthy_one() {
    // Waiting for all three replies makes sure the failing replica's reply is compared.
    let mut p = PrequalSync::new(Config {
        replies: 3,
        ..Config::default()
    });
    for id in 0..3 {
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
    }
    let mut rng = rng(6);
    for q in 0..40 {
        let failed = crate::policy::Completion {
            query: QueryId(q),
            latency: Duration::from_millis(1),
            outcome: crate::policy::Outcome::Error,
        };
        p.on_dispatch(ReplicaId(0), QueryId(q), Time::ZERO);
        p.on_complete(ReplicaId(0), &failed, Time::ZERO);
    }
    assert!(p.snapshot(Time::ZERO).replicas[0].avoided);
    let probes = start(&mut p, 100, None);
    for probe in &probes {
        let fast = probe.replica == ReplicaId(0);
        let load = if fast { report(0, 1) } else { report(3, 40) };
        p.on_probe_reply(probe, &load, Time::ZERO, &mut rng);
    }
    match p.poll_pick(Time::ZERO, &mut rng) {
        Some((QueryId(100), Pick::Replica(id))) => assert_ne!(id, ReplicaId(0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unsent_probes_to_a_departed_replica_count_as_failed() {
    let mut p = sync_policy(2);
    let mut rng = rng(7);
    let query = Query {
        id: QueryId(3),
        hint: None,
    };
    assert_eq!(p.pick(&query, Time::ZERO, &mut rng), Pick::Pending);
    // Both replicas are probed; one reply arrives, then the other replica leaves before its
    // probe is handed out.
    let first = p.poll_probe(Time::ZERO, &mut rng).expect("a probe");
    p.on_probe_reply(&first, &report(1, 5), Time::ZERO, &mut rng);
    assert_eq!(p.poll_pick(Time::ZERO, &mut rng), None);
    let other = ReplicaId(1 - first.replica.0);
    p.on_replica_change(ReplicaChange::Remove(other), Time::ZERO);
    assert_eq!(p.poll_probe(Time::ZERO, &mut rng), None);
    let decision = p.poll_pick(Time::ZERO, &mut rng);
    assert_eq!(decision, Some((QueryId(3), Pick::Replica(first.replica))));
}

#[test]
fn a_probe_not_sent_ends_the_wait_for_it() {
    let mut p = sync_policy(2);
    let mut rng = rng(7);
    let query = Query {
        id: QueryId(4),
        hint: None,
    };
    assert_eq!(p.pick(&query, Time::ZERO, &mut rng), Pick::Pending);
    let first = p.poll_probe(Time::ZERO, &mut rng).expect("a probe");
    let second = p.poll_probe(Time::ZERO, &mut rng).expect("a second probe");
    p.on_probe_reply(&first, &report(1, 5), Time::ZERO, &mut rng);
    assert_eq!(
        p.poll_pick(Time::ZERO, &mut rng),
        None,
        "one probe still out"
    );
    p.on_probe_not_sent(&second, Time::ZERO);
    let decision = p.poll_pick(Time::ZERO, &mut rng);
    assert_eq!(decision, Some((QueryId(4), Pick::Replica(first.replica))));
}
