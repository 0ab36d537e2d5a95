//! The per-query cost of every policy in the catalog: pick, dispatch, completion, and answering
//! every probe the policy asks for, at 10, 100 and 1000 replicas.
//!
//! Each iteration is one query in a steady state: virtual time moves 100 us (10k queries a second
//! at this client), a new query is picked and dispatched, the oldest of 8 queries in flight
//! completes, probes are answered at once from the shared toy model, and the policy's timer is
//! served when due. Target: `prequal` under 1 us per query at 100 replicas.
//!
//! Run: `cargo bench -p prequal-core --bench policies -- --warm-up-time 1 --measurement-time 3`

// criterion_group! expands to an undocumented public function.
#![allow(missing_docs)]

#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use common::{Model, build};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use prequal_core::{
    Completion, Outcome, Pick, Policy, Query, QueryId, ReplicaChange, ReplicaId, Time, catalog,
};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

/// Queries kept in flight at this client.
const CONCURRENCY: usize = 8;
/// Virtual time between queries.
const GAP: Duration = Duration::from_micros(100);

/// One policy in a steady state of queries, completions and probe replies.
struct SteadyState {
    policy: Box<dyn Policy>,
    rng: Pcg64Mcg,
    now: Time,
    next_query: u64,
    server_rif: Vec<u32>,
    in_flight: VecDeque<(ReplicaId, QueryId, Time)>,
}

impl SteadyState {
    fn new(name: &str, replicas: u32) -> Self {
        let mut policy = build(name);
        for id in 0..replicas {
            policy.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
        }
        let mut state = Self {
            policy,
            rng: Pcg64Mcg::seed_from_u64(1),
            now: Time::ZERO,
            next_query: 0,
            server_rif: vec![0; replicas as usize],
            in_flight: VecDeque::with_capacity(CONCURRENCY + 1),
        };
        // Warm up: fill pools, EWMAs and the in-flight window.
        for _ in 0..1_000 {
            state.round();
        }
        state
    }

    /// One query's worth of events.
    fn round(&mut self) {
        self.now = self.now + GAP;
        if let Some(at) = self.policy.poll_timeout()
            && at <= self.now
        {
            self.policy.handle_timeout(self.now, &mut self.rng);
        }
        let id = QueryId(self.next_query);
        self.next_query += 1;
        let query = Query { id, hint: None };
        let mut pick = self.policy.pick(&query, self.now, &mut self.rng);
        self.answer_probes();
        if pick == Pick::Pending {
            pick = self.resolve(id);
        }
        if let Pick::Replica(replica) = pick {
            self.policy.on_dispatch(replica, id, self.now);
            self.server_rif[replica.0 as usize] += 1;
            self.in_flight.push_back((replica, id, self.now));
        }
        if self.in_flight.len() > CONCURRENCY
            && let Some((replica, query, sent)) = self.in_flight.pop_front()
        {
            self.complete(replica, query, sent);
        }
        self.answer_probes();
    }

    fn resolve(&mut self, id: QueryId) -> Pick {
        while let Some((resolved, pick)) = self.policy.poll_pick(self.now, &mut self.rng) {
            if resolved == id {
                return pick;
            }
        }
        Pick::NoReplica
    }

    fn complete(&mut self, replica: ReplicaId, query: QueryId, sent: Time) {
        let rif = &mut self.server_rif[replica.0 as usize];
        *rif = rif.saturating_sub(1);
        let completion = Completion {
            query,
            latency: self.now.saturating_since(sent),
            outcome: Outcome::Success,
        };
        self.policy.on_complete(replica, &completion, self.now);
    }

    fn answer_probes(&mut self) {
        while let Some(probe) = self.policy.poll_probe(self.now, &mut self.rng) {
            let rif = self.server_rif[probe.replica.0 as usize];
            let report = Model::report(probe.replica, rif);
            self.policy
                .on_probe_reply(&probe, &report, self.now, &mut self.rng);
        }
    }
}

fn policies(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy");
    for info in catalog() {
        for replicas in [10, 100, 1_000] {
            let mut state = SteadyState::new(info.name, replicas);
            group.bench_function(BenchmarkId::new(info.name, replicas), |b| {
                b.iter(|| {
                    state.round();
                    black_box(state.now)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, policies);
criterion_main!(benches);
