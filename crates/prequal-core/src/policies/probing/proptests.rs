//! Property tests of the engine under every rule it serves: random sequences of replies, picks,
//! dispatches, finishes (some failed, so replicas are avoided and the ranking reads the load)
//! and probe failures. The engine's debug assertions are the properties: in a debug build each
//! worst-reply removal that reuses the pick's pass is held to a pass of its own
//! (`AsyncProbing::worst_after_use`), so a wrong removal fails these tests.

use std::time::Duration;

use proptest::prelude::*;

use crate::config::build_policy::BuildPolicy;
use crate::policies::{c3, linear, prequal};
use crate::policy::{Completion, Outcome, Pick, Policy, Query, QueryId};
use crate::replica::{ReplicaChange, ReplicaId};
use crate::testing::{probe, report, rng};
use crate::time::Time;

const REPLICAS: u32 = 12;

#[derive(Clone, Debug)]
enum Event {
    Pick,
    Reply { replica: u32, rif: u32, ms: u64 },
    Finish { replica: u32, ok: bool, ms: u64 },
    ProbeFailed(u32),
    Advance(u64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => Just(Event::Pick),
        // Few distinct RIFs and latencies, so that keys tie often.
        6 => (0..REPLICAS, 0u32..6, 1u64..6).prop_map(|(replica, rif, ms)| Event::Reply {
            replica,
            rif,
            ms: ms * 5,
        }),
        2 => (0..REPLICAS, prop::bool::weighted(0.8), 1u64..40)
            .prop_map(|(replica, ok, ms)| Event::Finish { replica, ok, ms }),
        1 => (0..REPLICAS).prop_map(Event::ProbeFailed),
        1 => (0u64..20).prop_map(Event::Advance),
    ]
}

/// Every rule the engine serves, with the HCL rule's options both ways; each with the pool
/// covering the cluster (so a reply serves up to `pool_size` queries) and with a small pool
/// whose replies are mostly spent by their first use (b_reuse = 1.1: δ = 0.1, and
/// (1 − 4/12)·3 − 1 = 1), so a pick's reply often leaves the pool before the removal.
fn policies() -> Vec<Box<dyn Policy>> {
    let hcl_plain = prequal::Config {
        own_queries_raise_latency: false,
        band_ranks_by_delay: false,
        wait_when_stale: false,
        own_rif_live: false,
        hot_by_work: false,
        ..prequal::Config::default()
    };
    let hcl_two_removals = prequal::Config {
        remove_rate: 2.0,
        ..prequal::Config::default()
    };
    let small = |hcl: prequal::Config| prequal::Config {
        pool_size: 4,
        delta: 0.1,
        ..hcl
    };
    vec![
        prequal::Config::default().build(),
        hcl_plain.build(),
        hcl_two_removals.build(),
        small(prequal::Config::default()).build(),
        small(hcl_plain).build(),
        linear::Config::default().build(),
        linear::Config {
            pool_size: 4,
            delta: 0.1,
            ..linear::Config::default()
        }
        .build(),
        c3::Config::default().build(),
        c3::Config {
            pool_size: 4,
            delta: 0.1,
            ..c3::Config::default()
        }
        .build(),
    ]
}

proptest! {
    #[test]
    fn every_rule_removes_the_reply_a_pass_of_its_own_would(
        events in proptest::collection::vec(event(), 1..300),
        seed in any::<u64>(),
    ) {
        for mut p in policies() {
            let mut rng = rng(seed);
            let mut now = Time::ZERO;
            let mut query = 0;
            for id in 0..REPLICAS {
                p.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), now);
            }
            for ev in &events {
                match *ev {
                    Event::Pick => {
                        query += 1;
                        let pick = p.pick(&Query { id: QueryId(query), hint: None }, now, &mut rng);
                        if let Pick::Replica(id) = pick {
                            p.on_dispatch(id, QueryId(query), now);
                        }
                        while p.poll_probe(now, &mut rng).is_some() {}
                    }
                    Event::Reply { replica, rif, ms } => {
                        p.on_probe_reply(&probe(replica), &report(rif, ms), now, &mut rng);
                    }
                    Event::Finish { replica, ok, ms } => {
                        let done = Completion {
                            query: QueryId(0),
                            latency: Duration::from_millis(ms),
                            outcome: if ok { Outcome::Success } else { Outcome::Error },
                        };
                        p.on_complete(ReplicaId(replica), &done, now);
                    }
                    Event::ProbeFailed(replica) => p.on_probe_failure(&probe(replica), now),
                    Event::Advance(ms) => {
                        now = now + Duration::from_millis(ms);
                        p.handle_timeout(now, &mut rng);
                    }
                }
                while let Some((_, pick)) = p.poll_pick(now, &mut rng) {
                    if let Pick::Replica(id) = pick {
                        p.on_dispatch(id, QueryId(0), now);
                    }
                }
            }
        }
    }
}
