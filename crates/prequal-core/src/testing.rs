//! Helpers for the core's own unit tests: a seeded RNG and short drivers.

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use std::time::Duration;

use crate::policy::{LoadReport, Pick, Policy, ProbeId, ProbeRequest, Query, QueryId};
use crate::replica::{ReplicaChange, ReplicaId};
use crate::time::Time;

/// A deterministic RNG for tests.
pub fn rng(seed: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(seed)
}

/// A probe reply reporting `rif` queries in flight and a latency of `latency_ms`.
pub fn report(rif: u32, latency_ms: u64) -> LoadReport {
    LoadReport {
        rif,
        latency: Duration::from_millis(latency_ms),
        ..LoadReport::default()
    }
}

/// A probe to `replica` (id 0, no query or hint).
pub fn probe(replica: u32) -> ProbeRequest {
    ProbeRequest {
        id: ProbeId(0),
        replica: ReplicaId(replica),
        query: None,
        hint: None,
    }
}

/// Adds replicas with the given ids to a freshly built policy.
pub fn with_replicas(
    mut policy: Box<dyn Policy>,
    ids: impl IntoIterator<Item = u32>,
) -> Box<dyn Policy> {
    for id in ids {
        policy.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
    }
    policy
}

/// Picks `n` times at time zero with a fixed seed, returning the chosen ids (panics on a
/// non-replica answer, which is what a test wants).
pub fn pick_n(policy: &mut dyn Policy, n: usize) -> Vec<u32> {
    let mut rng = rng(7);
    (0..n)
        .map(|i| {
            let query = Query {
                id: QueryId(i as u64),
                hint: None,
            };
            match policy.pick(&query, Time::ZERO, &mut rng) {
                Pick::Replica(id) => id.0,
                other => panic!("expected a replica, got {other:?}"),
            }
        })
        .collect()
}
