//! Property tests of the async engine with the HCL rule over random event sequences.

use std::time::Duration;

use proptest::prelude::*;
use rand::RngCore;

use super::tests::{drop_probes, pick_id, policy, probe, query, report};
use super::*;
use crate::policies::probing::engine::Rule;
use crate::policy::{Completion, Outcome, Policy, PoolEntryView, QueryId};
use crate::replica::{ReplicaChange, ReplicaId};
use crate::testing::rng;
use crate::time::Time;

#[derive(Clone, Debug)]
enum Event {
    Pick,
    Reply(u32, u32, u64),
    Advance(u64),
    Complete(u32, bool),
    Remove(u32),
    Insert(u32),
    Idle,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => Just(Event::Pick),
        4 => (0u32..8, 0u32..10, 0u64..50).prop_map(|(r, rif, ms)| Event::Reply(r, rif, ms)),
        2 => (0u64..40).prop_map(Event::Advance),
        1 => (0u32..8, any::<bool>()).prop_map(|(r, ok)| Event::Complete(r, ok)),
        1 => (0u32..8).prop_map(Event::Remove),
        1 => (0u32..8).prop_map(Event::Insert),
        1 => Just(Event::Idle),
    ]
}

fn apply(p: &mut Prequal, ev: &Event, now: &mut Time, q: &mut u64, rng: &mut dyn RngCore) {
    match *ev {
        Event::Pick => {
            *q += 1;
            let _ = p.pick(&query(*q), *now, rng);
            drop_probes(p, rng);
        }
        Event::Reply(r, rif, ms) => p.on_probe_reply(&probe(r), &report(rif, ms), *now, rng),
        Event::Advance(ms) => *now = *now + Duration::from_millis(ms),
        Event::Complete(r, ok) => {
            let outcome = if ok { Outcome::Success } else { Outcome::Error };
            let done = Completion {
                query: QueryId(0),
                latency: Duration::from_millis(3),
                outcome,
            };
            p.on_complete(ReplicaId(r), &done, *now);
        }
        Event::Remove(r) => p.on_replica_change(ReplicaChange::Remove(ReplicaId(r)), *now),
        Event::Insert(r) => p.on_replica_change(ReplicaChange::Insert(ReplicaId(r)), *now),
        Event::Idle => p.handle_timeout(*now, rng),
    }
}

proptest! {
    /// After any event the pool holds at most m replies, none past its age limit or reuse
    /// budget, and none from a replica that left.
    #[test]
    fn pool_stays_within_its_bounds(
        events in proptest::collection::vec(event(), 1..200),
        pool_size in 1u32..6,
        probe_rate in 0.1f64..4.0,
        remove_rate in 0.0f64..2.0,
        seed in any::<u64>(),
    ) {
        let config = Config {
            pool_size,
            probe_rate,
            remove_rate,
            max_age: Duration::from_millis(60),
            ..Config::default()
        };
        let mut p = policy(&config, 6);
        let mut rng = rng(seed);
        let (mut now, mut q) = (Time::ZERO, 0);
        for ev in &events {
            apply(&mut p, ev, &mut now, &mut q, &mut rng);
            prop_assert!(p.pool().len() <= pool_size as usize);
            // Time passing is not an event the policy sees; it expires replies at its next one.
            let seen = !matches!(ev, Event::Advance(_));
            for e in p.pool().iter() {
                prop_assert!(!seen || e.age(now) <= config.max_age, "{:?} at {:?}", e, now);
                prop_assert!(e.uses < e.budget, "{:?}", e);
                let present = p.snapshot(now).replicas.iter().any(|r| r.id == Some(e.replica));
                prop_assert!(present, "{:?}", e);
            }
        }
    }

    /// With any cold reply in the pool no slower than `max_cold_slowdown` times the fastest
    /// hot one (any cold reply at all under the paper's rule, 0), the policy never picks a
    /// replica that only has hot replies (and picks the lowest RIF in the latency band, where
    /// no replica's speed is known yet);
    /// otherwise it picks a hot one with the lowest RIF.
    #[test]
    fn hcl_never_picks_hot_when_cold_exists(
        replies in proptest::collection::vec((0u32..6, 0u32..12, 1u64..100), 2..16),
        q_rif in 0.05f64..0.95,
        max_cold_slowdown in prop_oneof![Just(0.0), Just(10.0), 1.0f64..20.0],
        seed in any::<u64>(),
    ) {
        let config = Config { q_rif, remove_rate: 0.0, max_cold_slowdown, ..Config::default() };
        let mut p = policy(&config, 6);
        let mut rng = rng(seed);
        for (r, rif, ms) in &replies {
            p.on_probe_reply(&probe(*r), &report(*rif, *ms), Time::ZERO, &mut rng);
        }
        let pool = p.snapshot(Time::ZERO).pool;
        // One reply per replica: repeated replicas may leave fewer than two, the random case.
        prop_assume!(pool.len() >= 2);
        let chosen = pick_id(&mut p, 1, Time::ZERO, &mut rng);
        // Hot by the threshold alone (the snapshot's `hot` also marks cold replies past the
        // slowdown limit, which rank with the hot ones).
        let threshold = p.rule().context_for(p.pool()).threshold;
        let is_hot = |e: &PoolEntryView| threshold.is_hot(e.rif);
        let fastest_hot = pool.iter().filter(|e| is_hot(e)).map(|e| e.latency_us).min();
        let limit = fastest_hot
            .filter(|_| max_cold_slowdown > 0.0)
            .map(|us| us as f64 * max_cold_slowdown);
        let all_cold: Vec<_> = pool.iter().filter(|e| !is_hot(e)).collect();
        let cold: Vec<_> = all_cold
            .iter()
            .filter(|e| limit.is_none_or(|limit| e.latency_us as f64 <= limit))
            .collect();
        for e in &pool {
            prop_assert_eq!(e.hot, is_hot(e) || !cold.iter().any(|c| c.replica == e.replica));
        }
        if cold.is_empty() {
            let min_rif = pool.iter().filter(|e| is_hot(e)).map(|e| e.rif).min().unwrap_or(0);
            prop_assert!(pool.iter().any(|e| is_hot(e) && e.replica == chosen && e.rif == min_rif));
        } else {
            // The latency band: cold replies within (1 + latency_band) of the fastest cold one
            // rank first, by expected delay; with no query of this client finished yet no
            // replica's speed is known, all count as equally fast, and the lowest RIF wins.
            let best = all_cold.iter().map(|e| e.latency_us).min().unwrap_or(0);
            let ceiling = best as f64 * (1.0 + config.latency_band);
            let band: Vec<_> = cold.iter().filter(|e| e.latency_us as f64 <= ceiling).collect();
            let min_rif = band.iter().map(|e| e.rif).min().unwrap_or(0);
            prop_assert!(band.iter().any(|e| e.replica == chosen && e.rif == min_rif));
        }
    }
}

proptest! {
    /// A reply that `probe_reply_is_quiet` calls quiet leaves nothing to poll, does not move
    /// the timer, and leaves the policy quiet: what lets the simulator apply it late.
    #[test]
    fn a_quiet_reply_leaves_nothing_to_poll(
        events in proptest::collection::vec(event(), 1..200),
        wait_when_stale in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let config = Config {
            wait_when_stale,
            max_age: Duration::from_millis(60),
            ..Config::default()
        };
        let mut p = policy(&config, 6);
        let mut rng = rng(seed);
        let (mut now, mut q) = (Time::ZERO, 0);
        for ev in &events {
            let quiet = p.probe_reply_is_quiet();
            let timeout = p.poll_timeout();
            apply(&mut p, ev, &mut now, &mut q, &mut rng);
            if quiet && matches!(ev, Event::Reply(..)) {
                prop_assert!(p.poll_pick(now, &mut rng).is_none());
                prop_assert!(p.poll_probe(now, &mut rng).is_none());
                prop_assert_eq!(p.poll_timeout(), timeout);
                prop_assert!(p.probe_reply_is_quiet());
            }
            // A driver drains what an event left.
            while p.poll_pick(now, &mut rng).is_some() {}
            drop_probes(&mut p, &mut rng);
        }
    }
}
