//! Behaviour of the async engine with the HCL rule: the properties the Prequal paper promises.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngCore;

use super::*;
use crate::policies::probing::params::b_reuse;
use crate::policy::{
    Completion, LoadReport, Outcome, Pick, Policy, ProbeId, ProbeRequest, Query, QueryId,
};
use crate::replica::{ReplicaChange, ReplicaId};
use crate::testing::rng;
use crate::time::Time;

pub(super) use crate::testing::{probe, report};

/// Query `id` of this client, finished successfully after `latency_ms`.
pub(super) fn success(id: u64, latency_ms: u64) -> Completion {
    Completion {
        query: QueryId(id),
        latency: Duration::from_millis(latency_ms),
        outcome: Outcome::Success,
    }
}

pub(super) fn query(id: u64) -> Query {
    Query {
        id: QueryId(id),
        hint: None,
    }
}

/// A `prequal` instance over replicas `0..n` built from `config`.
pub(super) fn policy(config: &Config, n: u32) -> Prequal {
    let mut p = Prequal::new(config.probing(), config.rule());
    for id in 0..n {
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
    }
    p
}

pub(super) fn pick_id(p: &mut dyn Policy, q: u64, now: Time, rng: &mut dyn RngCore) -> ReplicaId {
    match p.pick(&query(q), now, rng) {
        Pick::Replica(id) => id,
        other => panic!("expected a replica, got {other:?}"),
    }
}

/// A policy over two replicas, each of which answered a probe at `at` with (RIF, latency in
/// ms) from `replies`, nothing hot (`q_rif = 1`), no band, no removal and no wait: the pick is
/// the lowest ranked latency. With its generator.
fn answered(config: Config, replies: [(u32, u64); 2], at: Time) -> (Prequal, rand_pcg::Pcg64Mcg) {
    let config = Config {
        q_rif: 1.0,
        latency_band: 0.0,
        remove_rate: 0.0,
        wait_when_stale: false,
        ..config
    };
    let mut p = policy(&config, 2);
    let mut rng = rng(5);
    for (replica, (rif, ms)) in (0..).zip(replies) {
        p.on_probe_reply(&probe(replica), &report(rif, ms), at, &mut rng);
    }
    (p, rng)
}

/// Drains queued probes without answering them.
pub(super) fn drop_probes(p: &mut dyn Policy, rng: &mut dyn RngCore) -> Vec<ProbeRequest> {
    std::iter::from_fn(|| p.poll_probe(Time::ZERO, rng)).collect()
}

#[test]
fn b_reuse_matches_the_paper_and_is_bounded() {
    let b = b_reuse(16, 100, 3.0, 1.0, 1.0);
    assert!((b - 1.3158).abs() < 1e-3, "{b}");
    assert_eq!(b_reuse(16, 11, 3.0, 1.0, 1.0), 16.0, "n < m: capped at m");
    assert_eq!(b_reuse(16, 100, 1.0, 1.0, 1.0), 16.0, "denominator < 0");
    assert_eq!(
        b_reuse(16, 1000, 1.0, 0.99, 1.0),
        16.0,
        "tiny denominator capped"
    );
    assert_eq!(b_reuse(16, 1000, 10.0, 0.0, 1.0), 1.0, "never below one");
    let p = policy(&Config::default(), 100);
    assert!((p.current_b_reuse() - 1.3158).abs() < 1e-3);
    let values = p.snapshot(Time::ZERO).values;
    assert!(
        values
            .iter()
            .any(|(k, v)| *k == "b_reuse" && (v - 1.3158).abs() < 1e-3)
    );
}

#[test]
fn fractional_probe_rate_gives_the_exact_long_run_count() {
    let config = Config {
        probe_rate: 0.7,
        ..Config::default()
    };
    let mut p = policy(&config, 10);
    let mut rng = rng(1);
    let mut sent = 0;
    for q in 0..1000 {
        pick_id(&mut p, q, Time::ZERO, &mut rng);
        sent += drop_probes(&mut p, &mut rng).len();
    }
    assert_eq!(sent, 700);
}

#[test]
fn probe_targets_are_distinct_and_cover_the_set() {
    let config = Config {
        probe_rate: 5.0,
        ..Config::default()
    };
    let mut p = policy(&config, 8);
    let mut rng = rng(2);
    let mut seen = BTreeSet::new();
    for q in 0..50 {
        pick_id(&mut p, q, Time::ZERO, &mut rng);
        let targets: Vec<u32> = drop_probes(&mut p, &mut rng)
            .iter()
            .map(|p| p.replica.0)
            .collect();
        assert_eq!(targets.len(), 5);
        let distinct: BTreeSet<u32> = targets.iter().copied().collect();
        assert_eq!(distinct.len(), 5, "{targets:?}");
        seen.extend(distinct);
    }
    assert_eq!(seen.len(), 8);
}

/// Picks once from a pool holding exactly `replies` (replicas 0..), with no removal, by the
/// paper's HCL rule (no latency band).
fn choose_with(q_rif: f64, replies: &[(u32, u64)]) -> ReplicaId {
    choose_banded(q_rif, 0.0, replies)
}

/// Like [`choose_with`], with a latency band.
fn choose_banded(q_rif: f64, latency_band: f64, replies: &[(u32, u64)]) -> ReplicaId {
    let config = Config {
        q_rif,
        latency_band,
        remove_rate: 0.0,
        pool_share: 1.0,
        ..Config::default()
    };
    let mut p = policy(&config, replies.len() as u32);
    let mut rng = rng(3);
    for (i, (rif, ms)) in replies.iter().enumerate() {
        p.on_probe_reply(&probe(i as u32), &report(*rif, *ms), Time::ZERO, &mut rng);
    }
    pick_id(&mut p, 0, Time::ZERO, &mut rng)
}

#[test]
fn q_rif_zero_is_rif_only_and_one_is_latency_only() {
    let replies = [(5, 1), (1, 50), (3, 10), (9, 2)];
    assert_eq!(choose_with(0.0, &replies), ReplicaId(1), "lowest RIF");
    assert_eq!(choose_with(1.0, &replies), ReplicaId(0), "lowest latency");
    // Default quantile (nearest rank 6 of 7) over RIFs {1, ..., 6, 9}: threshold 6, so only
    // the RIF-9 reply is hot, and the fastest cold reply wins over the faster hot one.
    let replies = [(9, 1), (5, 4), (1, 6), (2, 7), (3, 8), (4, 9), (6, 10)];
    assert_eq!(choose_with(Q_RIF_DEFAULT, &replies), ReplicaId(1));
}

const Q_RIF_DEFAULT: f64 = params::Q_RIF;

#[test]
fn the_default_latency_band_prefers_the_lower_rif_among_comparable_latencies() {
    // (RIF, ms): the fastest is busy; all four are within 3.5 times its latency, and with no
    // query of this client finished no replica's speed is known, so they rank by RIF and the
    // faster of the two idle ones wins the tie.
    let replies = [(4, 10), (0, 18), (0, 25), (6, 12)];
    assert_eq!(
        choose_with(1.0, &replies),
        ReplicaId(0),
        "paper: lowest latency"
    );
    assert_eq!(
        choose_banded(1.0, params::LATENCY_BAND, &replies),
        ReplicaId(1),
        "band: lowest RIF within 3.5 × 10 ms, speeds unknown"
    );
    assert_eq!(Config::default().latency_band, 2.5);
}

/// Which of two replicas `config` picks (with nothing hot and no reply removed) once this
/// client has seen each answer [`hcl::MIN_OBSERVED`] queries in `observed_ms` (so both speeds
/// are known), and both report 10 ms, replica 0 idle and replica 1 with `rif` queries.
fn choose_between_known_replicas(config: Config, observed_ms: [u64; 2], rif: u32) -> ReplicaId {
    let config = Config {
        q_rif: 1.0,
        remove_rate: 0.0,
        ..config
    };
    let mut p = policy(&config, 2);
    let mut rng = rng(3);
    let seen = Time::from_millis(100);
    for (replica, ms) in observed_ms.into_iter().enumerate() {
        for q in 0..u64::from(hcl::MIN_OBSERVED) {
            let finished = success(100 * replica as u64 + q, ms);
            p.on_complete(ReplicaId(replica as u32), &finished, seen);
        }
    }
    let at = Time::from_millis(110);
    p.on_probe_reply(&probe(0), &report(0, 10), at, &mut rng);
    p.on_probe_reply(&probe(1), &report(rif, 10), at, &mut rng);
    pick_id(&mut p, 1, at, &mut rng)
}

#[test]
fn the_band_ranks_by_expected_delay_unless_asked_to_rank_by_rif() {
    // Both replicas report 10 ms, so both are in the band. This client saw replica 0 answer in
    // 30 ms and replica 1 in 5 ms. Replica 0 is idle, replica 1 has one query: by expected
    // delay (observed latency x (1 + RIF / 2)) replica 1 wins, 7.5 against 30; by RIF,
    // replica 0.
    // (Without hot_by_work: with it, the band ranking by RIF reads replica 1's one query as
    // round(1 x 5 / 17.5) = 0 typical queries of work, a tie.)
    let choose = |band_ranks_by_delay: bool| {
        let config = Config {
            band_ranks_by_delay,
            hot_by_work: false,
            ..Config::default()
        };
        choose_between_known_replicas(config, [30, 5], 1)
    };
    assert_eq!(choose(true), ReplicaId(1));
    assert_eq!(choose(false), ReplicaId(0));
    assert!(Config::default().band_ranks_by_delay);
}

#[test]
fn the_expected_delay_works_the_queries_ahead_off_delay_concurrency_at_a_time() {
    // This client saw replica 0 answer in 10 ms and replica 1 in 4 ms; replica 1 has two
    // queries in flight: its expected delay is 4 x (1 + 2 / c), 12 ms against 10 one at a
    // time (replica 0 wins), 8 ms two at a time and 6 ms four at a time (replica 1 wins).
    let choose = |delay_concurrency: f64| {
        let config = Config {
            delay_concurrency,
            ..Config::default()
        };
        choose_between_known_replicas(config, [10, 4], 2)
    };
    assert_eq!(choose(1.0), ReplicaId(0));
    assert_eq!(choose(2.0), ReplicaId(1));
    assert_eq!(choose(4.0), ReplicaId(1));
    assert_eq!(Config::default().delay_concurrency, 2.0);
}

#[test]
fn hot_by_work_weighs_each_rif_by_its_replica_speed() {
    // This client saw replica 0 answer in 30 ms and replica 1 in 5 ms (a mean of 17.5 ms).
    // Ten times each, replica 0 reports 1 query in flight and replica 1 three, both at 10 ms.
    // By the raw RIF the history holds ten 1s and ten 3s: its median (q_rif = 0.5) is 1, so
    // replica 1 is hot and replica 0, the only cold one, is picked. Read as work queued, the
    // slow replica's one query is round(1 x 30 / 17.5) = 2 typical queries and the fast
    // replica's three are round(3 x 5 / 17.5) = 1: replica 0 is hot, and replica 1 is picked.
    let choose = |hot_by_work: bool| {
        let config = Config {
            hot_by_work,
            q_rif: 0.5,
            remove_rate: 0.0,
            ..Config::default()
        };
        let mut p = policy(&config, 2);
        let mut rng = rng(3);
        let seen = Time::from_millis(100);
        for (replica, ms) in [30, 5].into_iter().enumerate() {
            for q in 0..u64::from(hcl::MIN_OBSERVED) {
                let finished = success(100 * replica as u64 + q, ms);
                p.on_complete(ReplicaId(replica as u32), &finished, seen);
            }
        }
        let at = Time::from_millis(110);
        for _ in 0..10 {
            p.on_probe_reply(&probe(0), &report(1, 10), at, &mut rng);
            p.on_probe_reply(&probe(1), &report(3, 10), at, &mut rng);
        }
        pick_id(&mut p, 1, at, &mut rng)
    };
    assert_eq!(choose(false), ReplicaId(0));
    assert_eq!(choose(true), ReplicaId(1));
    assert!(Config::default().hot_by_work);
}

#[test]
fn own_rif_live_counts_this_clients_queries_a_reply_could_not_see() {
    // This client sent a query to replica 0 that had not reached it when both replicas
    // answered a probe with nothing in flight, replica 0 a little faster. As reported, both
    // are idle and the faster one is picked; with own_rif_live, replica 0's reply counts this
    // client's query still in flight there, and the idle replica 1 is picked. Then a second
    // query goes to replica 0 by another route (as a fallback or a retry would): only
    // own_rif_live counts it, and takes it off again when it finishes.
    let run = |own_rif_live: bool| {
        let config = Config {
            own_rif_live,
            q_rif: 0.0,
            remove_rate: 0.0,
            ..Config::default()
        };
        let mut p = policy(&config, 2);
        let mut rng = rng(5);
        p.on_dispatch(ReplicaId(0), QueryId(1), Time::from_millis(100));
        let at = Time::from_millis(101);
        p.on_probe_reply(&probe(0), &report(0, 10), at, &mut rng);
        p.on_probe_reply(&probe(1), &report(0, 12), at, &mut rng);
        let picked = pick_id(&mut p, 2, at, &mut rng);
        p.on_dispatch(picked, QueryId(2), at);
        let rif_of = |p: &Prequal, replica: u32, now: Time| {
            p.snapshot(now)
                .pool
                .iter()
                .find(|e| e.replica == ReplicaId(replica))
                .map_or(u32::MAX, |e| e.rif)
        };
        let sent = Time::from_millis(102);
        p.on_dispatch(ReplicaId(0), QueryId(3), sent);
        let in_flight = (rif_of(&p, 0, sent), rif_of(&p, 1, sent));
        let done = Time::from_millis(103);
        p.on_complete(ReplicaId(0), &success(3, 1), done);
        (picked, in_flight, rif_of(&p, 0, done))
    };
    assert_eq!(run(false), (ReplicaId(0), (1, 0), 0));
    assert_eq!(run(true), (ReplicaId(1), (2, 1), 1));
    assert!(Config::default().own_rif_live);
}

#[test]
fn own_rif_live_settles_finished_queries_even_without_completions_lower_rif() {
    // Replica 0 reports 2 queries at 10 ms, replica 1 none at 12 ms; with nothing hot and no
    // band the faster wins. Once this client's query on replica 0's reply has finished, the
    // reply's latency must no longer be raised for it: replica 0 wins again. Counted as still
    // out, it would rank at 10 x 3 / 2 = 15 ms and lose to replica 1.
    let config = Config {
        completions_lower_rif: false,
        ..Config::default()
    };
    let at = Time::from_millis(10);
    let (mut p, mut rng) = answered(config, [(2, 10), (0, 12)], at);
    let first = pick_id(&mut p, 1, at, &mut rng);
    assert_eq!(first, ReplicaId(0));
    p.on_dispatch(first, QueryId(1), Time::from_millis(11));
    p.on_complete(first, &success(1, 5), Time::from_millis(16));
    assert_eq!(
        pick_id(&mut p, 2, Time::from_millis(16), &mut rng),
        ReplicaId(0)
    );
}

#[test]
fn a_pick_sent_elsewhere_gives_its_use_back() {
    // Replica 0 reports 2 queries at 10 ms, replica 1 none at 12 ms; with nothing hot and no
    // band the faster wins. The balancer sends that query to replica 1 instead (a hedge on a
    // replica already tried, an ejection): with own_rif_live the pick's use of replica 0's
    // reply is given back, so the reply is not ranked as if this client had a query there
    // (10 x 3 / 2 = 15 ms, behind replica 1) and replica 0 wins the next pick. Without it, the
    // older accounting keeps the use until the reply leaves the pool.
    let run = |own_rif_live: bool| {
        let config = Config {
            own_rif_live,
            ..Config::default()
        };
        let at = Time::from_millis(10);
        let (mut p, mut rng) = answered(config, [(2, 10), (0, 12)], at);
        let first = pick_id(&mut p, 1, at, &mut rng);
        p.on_dispatch(ReplicaId(1), QueryId(1), at);
        let rif_of_0 = p
            .snapshot(at)
            .pool
            .iter()
            .find(|e| e.replica == ReplicaId(0))
            .map(|e| e.rif);
        (first, rif_of_0, pick_id(&mut p, 2, at, &mut rng))
    };
    assert_eq!(run(true), (ReplicaId(0), Some(2), ReplicaId(0)));
    assert_eq!(run(false), (ReplicaId(0), Some(3), ReplicaId(1)));
}

#[test]
fn picks_made_again_for_one_query_give_back_all_but_the_one_dispatched() {
    // As a driver does when the endpoint picked is not ready: query 1 is picked twice (replica
    // 0, idle at 10 ms, then replica 1, 1 query at 12 ms, since the first use raised replica
    // 0's reply to 10 x 2 / 1 = 20 ms) and dispatched to the second (now 12 x 3 / 2 = 18 ms).
    // The first use is given back, so replica 0 (10 ms again) wins query 2; kept, it would
    // lose at 20 ms.
    let at = Time::from_millis(10);
    let (mut p, mut rng) = answered(Config::default(), [(0, 10), (1, 12)], at);
    assert_eq!(pick_id(&mut p, 1, at, &mut rng), ReplicaId(0));
    assert_eq!(pick_id(&mut p, 1, at, &mut rng), ReplicaId(1));
    p.on_dispatch(ReplicaId(1), QueryId(1), at);
    assert_eq!(pick_id(&mut p, 2, at, &mut rng), ReplicaId(0));
}

#[test]
fn own_rif_live_splits_a_piggybacked_report_too() {
    // A reply from replica 0 counts this client's one query there. A report that query's
    // neighbour carried back says 3 in flight, one of them this client's: the other clients
    // have 2, which is what is left once this client's query finishes.
    let config = Config {
        remove_rate: 0.0,
        ..Config::default()
    };
    let mut p = policy(&config, 2);
    let mut rng = rng(5);
    p.on_dispatch(ReplicaId(0), QueryId(1), Time::from_millis(100));
    p.on_probe_reply(&probe(0), &report(1, 10), Time::from_millis(101), &mut rng);
    p.on_load_report(ReplicaId(0), &report(3, 10), Time::from_millis(102));
    p.on_complete(ReplicaId(0), &success(1, 3), Time::from_millis(103));
    let rif = p
        .snapshot(Time::from_millis(103))
        .pool
        .iter()
        .find(|e| e.replica == ReplicaId(0))
        .map(|e| e.rif);
    assert_eq!(rif, Some(2));
}

#[test]
fn with_delay_power_two_a_queue_at_a_fast_replica_weighs_its_square() {
    // This client saw replica 0 answer in 20 ms and replica 1 in 6 ms; replica 1 has four
    // queries in flight. At power 1 its expected delay is 6 x (1 + 4 / 2) = 18 ms against
    // 20 (replica 1 wins); at power 2 it is 6 x 3^2 = 54 ms, the delay this query adds in all
    // (replica 0 wins, idle, where the square is 1).
    let choose = |delay_power: f64| {
        let config = Config {
            delay_power,
            ..Config::default()
        };
        choose_between_known_replicas(config, [20, 6], 4)
    };
    assert_eq!(choose(1.0), ReplicaId(1));
    assert_eq!(choose(2.0), ReplicaId(0));
    assert_eq!(Config::default().delay_power, 1.0);
}

#[test]
fn finished_queries_lower_their_replica_reply_unless_the_paper_pool_is_asked_for() {
    // Replica 0 reports RIF 4 and replica 1 RIF 2, same latency: replica 1 is chosen and its
    // reply rises to 3. Then two queries that were at replica 0 when it answered finish: by
    // default its reply falls to 2 and it is chosen next; in the paper's pool it stays at 4.
    // (Without own_rif_live, which would count this client's queries at replica 0, none
    // dispatched here, instead.)
    let choose_after_finishes = |completions_lower_rif: bool| {
        let config = Config {
            q_rif: 1.0,
            remove_rate: 0.0,
            completions_lower_rif,
            own_rif_live: false,
            own_queries_raise_latency: false,
            band_ranks_by_delay: false,
            ..Config::default()
        };
        let mut p = policy(&config, 2);
        let mut rng = rng(3);
        let at = Time::from_millis(10);
        p.on_probe_reply(&probe(0), &report(4, 10), at, &mut rng);
        p.on_probe_reply(&probe(1), &report(2, 10), at, &mut rng);
        assert_eq!(pick_id(&mut p, 1, at, &mut rng), ReplicaId(1));
        p.on_dispatch(ReplicaId(1), QueryId(1), at);
        let done = Time::from_millis(20);
        for q in [90, 91] {
            let finished = success(q, 15);
            p.on_complete(ReplicaId(0), &finished, done);
        }
        pick_id(&mut p, 2, done, &mut rng)
    };
    assert_eq!(choose_after_finishes(true), ReplicaId(0));
    assert_eq!(choose_after_finishes(false), ReplicaId(1));
    assert!(Config::default().completions_lower_rif);
}

#[test]
fn a_piggybacked_report_refreshes_the_pool_unless_the_paper_pool_is_asked_for() {
    // Replica 0 reports RIF 1 and replica 1 RIF 3, same latency: replica 0 is chosen. Its
    // response then carries RIF 6 (others' queries arrived meanwhile): by default that report
    // takes its reply's place and the next query goes to replica 1; in the paper's pool, which
    // holds probe replies alone, replica 0's reply still says RIF 1 (2 with the use, 1 again
    // once the query finished). A report from a replica with no reply held adds none.
    let next_pick = |reports_refresh_pool: bool| {
        let config = Config {
            q_rif: 1.0,
            remove_rate: 0.0,
            own_queries_raise_latency: false,
            reports_refresh_pool,
            ..Config::default()
        };
        let mut p = policy(&config, 3);
        let mut rng = rng(3);
        let at = Time::from_millis(10);
        p.on_probe_reply(&probe(0), &report(1, 10), at, &mut rng);
        p.on_probe_reply(&probe(1), &report(3, 10), at, &mut rng);
        assert_eq!(pick_id(&mut p, 1, at, &mut rng), ReplicaId(0));
        p.on_dispatch(ReplicaId(0), QueryId(1), at);
        let done = Time::from_millis(20);
        let finished = success(1, 10);
        p.on_complete(ReplicaId(0), &finished, done);
        p.on_load_report(ReplicaId(0), &report(6, 10), done);
        p.on_load_report(ReplicaId(2), &report(0, 1), done);
        assert_eq!(p.snapshot(done).pool.len(), 2, "replica 2 was never probed");
        pick_id(&mut p, 2, done, &mut rng)
    };
    assert_eq!(next_pick(true), ReplicaId(1));
    assert_eq!(next_pick(false), ReplicaId(0));
    assert!(Config::default().reports_refresh_pool);
}

#[test]
fn a_report_that_refreshed_the_pool_spares_one_probe_of_the_next_query_but_never_its_last() {
    // Three probes per query. Each query's response carries a report from the replica it went
    // to, whose reply is held: with `reports_replace_probes` that report spares one probe of the
    // next query. Three more reports in a row bank at most three: the next query still sends
    // one probe, and the one after it spends the last spared one. A report from a replica with
    // no reply held (it refreshed nothing) spares none, nor does any report with
    // `reports_replace_probes = false` (the default, and the paper's probe rate), or when
    // reports do not refresh the pool.
    let probes_sent = |refresh: bool, replace: bool| {
        let config = Config {
            remove_rate: 0.0,
            reports_refresh_pool: refresh,
            reports_replace_probes: replace,
            ..Config::default()
        };
        let mut p = policy(&config, 8);
        let mut rng = rng(5);
        let at = Time::from_millis(10);
        for id in 0..4 {
            p.on_probe_reply(&probe(id), &report(id, 10), at, &mut rng);
        }
        let mut sent = Vec::new();
        for q in 0..3 {
            let chosen = pick_id(&mut p, q, at, &mut rng);
            sent.push(drop_probes(&mut p, &mut rng).len());
            p.on_load_report(chosen, &report(0, 10), at);
        }
        for _ in 0..3 {
            p.on_load_report(ReplicaId(0), &report(0, 10), at);
        }
        for q in 3..5 {
            pick_id(&mut p, q, at, &mut rng);
            sent.push(drop_probes(&mut p, &mut rng).len());
        }
        p.on_load_report(ReplicaId(7), &report(0, 10), at);
        pick_id(&mut p, 5, at, &mut rng);
        sent.push(drop_probes(&mut p, &mut rng).len());
        sent
    };
    assert_eq!(probes_sent(true, true), vec![3, 2, 2, 1, 2, 3]);
    assert_eq!(probes_sent(true, false), vec![3, 3, 3, 3, 3, 3]);
    assert_eq!(probes_sent(false, true), vec![3, 3, 3, 3, 3, 3]);
    assert!(!Config::default().reports_replace_probes);
}

#[test]
fn own_queries_raise_a_reply_latency_unless_the_paper_rule_is_asked_for() {
    // Replica 0 reports 10 ms at RIF 1, replica 1 14 ms at RIF 1 (latency alone decides). The
    // first query goes to replica 0; by default its reply now ranks at 10 × 3/2 = 15 ms, so
    // the second goes to replica 1. The paper's rule keeps replica 0 at 10 ms. Once the first
    // query has finished, replica 0 is back at its reported 10 ms.
    let picks = |own_queries_raise_latency: bool| {
        let config = Config {
            q_rif: 1.0,
            latency_band: 0.0,
            remove_rate: 0.0,
            own_queries_raise_latency,
            ..Config::default()
        };
        let mut p = policy(&config, 2);
        let mut rng = rng(3);
        let at = Time::from_millis(10);
        p.on_probe_reply(&probe(0), &report(1, 10), at, &mut rng);
        p.on_probe_reply(&probe(1), &report(1, 14), at, &mut rng);
        let first = pick_id(&mut p, 1, at, &mut rng);
        p.on_dispatch(first, QueryId(1), at);
        let second = pick_id(&mut p, 2, at, &mut rng);
        let done = Time::from_millis(20);
        let finished = success(1, 10);
        p.on_complete(first, &finished, done);
        let third = pick_id(&mut p, 3, done, &mut rng);
        (first, second, third)
    };
    let (a, b) = (ReplicaId(0), ReplicaId(1));
    assert_eq!(picks(true), (a, b, a));
    assert_eq!(picks(false), (a, a, a));
    assert!(Config::default().own_queries_raise_latency);
}

#[test]
fn a_cold_reply_far_slower_than_a_hot_one_ranks_after_it_unless_the_paper_rule_is_asked_for() {
    // Replica 0 is idle (RIF 0; with q_rif = 0.25 of the RIFs 0, 4, 4, 4 the threshold is 0,
    // so it is the only cold reply) but answers in `slow_ms`;
    // replicas 1-3 are busier (RIF 4, hot) and answer in 20-22 ms. The paper's rule takes the
    // cold one whatever its latency; by default a cold reply more than 10 times slower than the
    // fastest hot one (here above 200 ms) ranks after the hot ones, which go by RIF, then
    // latency.
    let pick = |max_cold_slowdown: f64, slow_ms: u64| {
        let config = Config {
            q_rif: 0.25,
            remove_rate: 0.0,
            max_cold_slowdown,
            ..Config::default()
        };
        let mut p = policy(&config, 4);
        let mut rng = rng(3);
        let at = Time::from_millis(10);
        p.on_probe_reply(&probe(0), &report(0, slow_ms), at, &mut rng);
        for (i, ms) in [(1, 20), (2, 21), (3, 22)] {
            p.on_probe_reply(&probe(i), &report(4, ms), at, &mut rng);
        }
        pick_id(&mut p, 1, at, &mut rng)
    };
    let default = Config::default().max_cold_slowdown;
    assert_eq!(default, 10.0);
    assert_eq!(pick(default, 1000), ReplicaId(1));
    assert_eq!(
        pick(default, 190),
        ReplicaId(0),
        "within the limit, cold still wins"
    );
    assert_eq!(pick(0.0, 1000), ReplicaId(0), "the paper's rule");
}

#[test]
fn the_latency_band_shrinks_when_the_pool_samples_a_large_cluster() {
    // 100 replicas, a pool of 16: the band is 1.0 × 16/100, so 18 ms is not within 11.6 ms.
    let config = Config {
        q_rif: 1.0,
        remove_rate: 0.0,
        ..Config::default()
    };
    let mut p = policy(&config, 100);
    let mut rng = rng(3);
    for (i, (rif, ms)) in [(4, 10), (0, 18), (0, 25)].iter().enumerate() {
        p.on_probe_reply(&probe(i as u32), &report(*rif, *ms), Time::ZERO, &mut rng);
    }
    assert_eq!(pick_id(&mut p, 0, Time::ZERO, &mut rng), ReplicaId(0));
}

#[test]
fn fewer_than_two_replies_falls_back_to_random_with_the_paper_fallback() {
    let config = Config {
        remove_rate: 0.0,
        fallback_by_local_rif: false,
        ..Config::default()
    };
    let mut p = policy(&config, 4);
    let mut rng = rng(4);
    p.on_probe_reply(&probe(0), &report(0, 1), Time::ZERO, &mut rng);
    let mut chosen = BTreeSet::new();
    for q in 0..40 {
        chosen.insert(pick_id(&mut p, q, Time::ZERO, &mut rng).0);
        drop_probes(&mut p, &mut rng);
    }
    assert_eq!(chosen.len(), 4, "uniform fallback reaches every replica");
    assert_eq!(p.pool().len(), 1, "the lone reply is not used");
}

/// Every probe fails (no sidecar, or a probe timeout shorter than the round trip): the pool
/// stays empty, and each pick goes to the less loaded of two replicas by this client's
/// queries in flight, none avoided for its failed probes, since every replica has them. The
/// paper's fallback picks uniformly at random.
#[test]
fn with_no_probe_answered_picks_go_to_the_less_loaded_of_two() {
    let picks = |fallback_by_local_rif: bool| {
        let config = Config {
            fallback_by_local_rif,
            ..Config::default()
        };
        let mut p = policy(&config, 2);
        let mut rng = rng(5);
        let now = Time::from_millis(5);
        for q in 0..5 {
            p.on_dispatch(ReplicaId(0), QueryId(100 + q), now);
        }
        // Blind from the first pick on: a probe has failed and none has been answered.
        p.on_probe_failure(&probe(1), now);
        let mut chosen = [0u32; 2];
        for q in 0..40 {
            for sent in drop_probes(&mut p, &mut rng) {
                p.on_probe_failure(&sent, now);
            }
            chosen[pick_id(&mut p, q, now, &mut rng).0 as usize] += 1;
        }
        assert!(p.pool().is_empty());
        chosen
    };
    assert_eq!(picks(true), [0, 40], "replica 0 has five queries in flight");
    let random = picks(false);
    assert!(random[0] > 5 && random[1] > 5, "{random:?}");
}

#[test]
fn a_pool_share_below_one_caps_the_pool_in_small_clusters() {
    let capacity = |config: &Config, n: usize| {
        crate::policies::probing::params::pool_capacity(&config.probing(), n)
    };
    let paper = Config::default();
    assert_eq!(
        capacity(&paper, 6),
        16,
        "the paper's m, whatever the replica count"
    );
    let half = Config {
        pool_share: 0.5,
        ..Config::default()
    };
    assert_eq!(capacity(&half, 0), 16);
    assert_eq!(capacity(&half, 1), 2, "at least two");
    assert_eq!(capacity(&half, 6), 3);
    assert_eq!(capacity(&half, 11), 6, "rounded up");
    assert_eq!(capacity(&half, 100), 16, "the paper's m with many replicas");
    // The policy resizes its pool as replicas come and go, oldest replies leaving first.
    let mut p = policy(&half, 6);
    let mut rng = rng(2);
    for id in 0..6 {
        p.on_probe_reply(
            &probe(id),
            &report(1, 5),
            Time::from_millis(id.into()),
            &mut rng,
        );
    }
    assert_eq!(p.pool().capacity(), 3);
    assert_eq!(p.pool().len(), 3);
    for id in 6..10 {
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::from_millis(7));
    }
    assert_eq!(p.pool().capacity(), 5);
    let bad = Config {
        pool_share: 0.0,
        ..Config::default()
    };
    let err = bad.validate().expect_err("pool_share 0");
    assert!(err.to_string().contains("pool_share"), "{err}");
}

#[test]
fn removals_alternate_oldest_and_worst() {
    let config = Config {
        q_rif: 1.0,
        latency_band: 0.0,
        probe_rate: 0.001,
        pool_share: 1.0,
        ..Config::default()
    };
    let mut p = policy(&config, 6);
    let mut rng = rng(5);
    for (i, (replica, ms)) in [(0, 5), (1, 90), (2, 10), (3, 20), (4, 30), (5, 40)]
        .iter()
        .enumerate()
    {
        let at = Time::from_millis(i as u64);
        p.on_probe_reply(&probe(*replica), &report(1, *ms), at, &mut rng);
    }
    let now = Time::from_millis(10);
    let latencies = |p: &Prequal| -> Vec<u64> {
        p.pool()
            .iter()
            .map(|e| e.latency.as_millis() as u64)
            .collect()
    };
    assert_eq!(pick_id(&mut p, 1, now, &mut rng), ReplicaId(0));
    assert_eq!(
        latencies(&p),
        vec![90, 10, 20, 30, 40],
        "oldest (5 ms) removed"
    );
    assert_eq!(pick_id(&mut p, 2, now, &mut rng), ReplicaId(2));
    assert_eq!(latencies(&p), vec![10, 20, 30, 40], "worst (90 ms) removed");
    assert_eq!(pick_id(&mut p, 3, now, &mut rng), ReplicaId(2));
    assert_eq!(latencies(&p), vec![20, 30, 40], "oldest again");
}

/// A reply to the latest probe this client queued, as if it came from `replica`: replies are
/// timed by their probe's id, and `wait_when_stale` needs their round trip.
fn answer_latest(sent: &[ProbeRequest], replica: u32) -> ProbeRequest {
    let mut probe = probe(replica);
    probe.id = sent.last().map_or(ProbeId(0), |s| s.id);
    probe
}

/// When a client's first query is sent in the wait tests.
const WAIT_T0: Time = Time::from_millis(10);
/// The probe round trip in the wait tests.
const WAIT_RTT: Duration = Duration::from_micros(200);

/// A client's first query at [`WAIT_T0`], whose probes time the round trip ([`WAIT_RTT`]) and
/// whose answer, from replica 0 after `latency_ms`, sets the typical latency; `replies` are the
/// first probes' answers.
fn warm_up(p: &mut Prequal, replies: &[(u32, LoadReport)], latency_ms: u64, rng: &mut dyn RngCore) {
    pick_id(p, 99, WAIT_T0, rng);
    let sent = drop_probes(p, rng);
    for (replica, r) in replies {
        let probe = answer_latest(&sent, *replica);
        p.on_probe_reply(&probe, r, WAIT_T0 + WAIT_RTT, rng);
    }
    p.on_dispatch(ReplicaId(0), QueryId(99), WAIT_T0);
    p.on_complete(
        ReplicaId(0),
        &success(99, latency_ms),
        WAIT_T0 + Duration::from_millis(latency_ms),
    );
    drop_probes(p, rng);
}

/// With `wait_when_stale`, a query that finds no two replies younger than the client's typical
/// latency waits: it is placed once two replies have come since (among those alone), or when
/// `probe_timeout` has passed (among what the pool holds). A fresh pool is used at once.
#[test]
fn a_stale_pool_makes_a_query_wait_for_fresh_replies() {
    let config = Config {
        wait_when_stale: true,
        ..Config::default()
    };
    let mut p = policy(&config, 3);
    let mut rng = rng(7);
    let (t0, rtt) = (WAIT_T0, WAIT_RTT);
    // The first query's probes; their replies come 200 µs later (replica 0 the best by far).
    pick_id(&mut p, 1, t0, &mut rng);
    let sent = drop_probes(&mut p, &mut rng);
    for (replica, r) in [(0, report(0, 1)), (1, report(5, 50)), (2, report(5, 50))] {
        let probe = answer_latest(&sent, replica);
        p.on_probe_reply(&probe, &r, t0 + rtt, &mut rng);
    }
    // Before any success the client has no typical latency: nothing is stale.
    assert_eq!(pick_id(&mut p, 2, t0 + rtt, &mut rng), ReplicaId(0));
    p.on_dispatch(ReplicaId(0), QueryId(2), t0 + rtt);
    let t1 = t0 + Duration::from_millis(10);
    p.on_complete(ReplicaId(0), &success(2, 10), t1);
    drop_probes(&mut p, &mut rng);
    // 40 ms later every reply is older than the typical 10 ms (fifty round trips).
    let t2 = t1 + Duration::from_millis(40);
    assert_eq!(p.pick(&query(3), t2, &mut rng), Pick::Pending);
    let sent = drop_probes(&mut p, &mut rng);
    assert_eq!(p.poll_pick(t2, &mut rng), None);
    assert_eq!(p.poll_timeout(), Some(t2 + Duration::from_millis(3)));
    // Two fresh replies: the better of them, not the old reply from replica 0.
    let t3 = t2 + rtt;
    let from_1 = answer_latest(&sent, 1);
    p.on_probe_reply(&from_1, &report(2, 20), t3, &mut rng);
    assert_eq!(p.poll_pick(t3, &mut rng), None, "one reply is not enough");
    let from_2 = answer_latest(&sent, 2);
    p.on_probe_reply(&from_2, &report(0, 20), t3, &mut rng);
    assert_eq!(
        p.poll_pick(t3, &mut rng),
        Some((QueryId(3), Pick::Replica(ReplicaId(2))))
    );
    // With two fresh replies in the pool the next query is placed at once.
    let from_0 = answer_latest(&sent, 0);
    p.on_probe_reply(&from_0, &report(1, 20), t3, &mut rng);
    assert!(matches!(p.pick(&query(4), t3, &mut rng), Pick::Replica(_)));
    drop_probes(&mut p, &mut rng);
    // Stale again, and no reply comes: placed at the probe timeout from what the pool holds.
    let t4 = t3 + Duration::from_millis(40);
    assert_eq!(p.pick(&query(5), t4, &mut rng), Pick::Pending);
    let end = t4 + Duration::from_millis(3);
    assert_eq!(p.poll_timeout(), Some(end));
    p.handle_timeout(end, &mut rng);
    assert!(matches!(
        p.poll_pick(end, &mut rng),
        Some((QueryId(5), Pick::Replica(_)))
    ));
    assert_eq!(p.poll_pick(end, &mut rng), None);
    // A query barely longer than a probe's round trip does not wait: a typical latency of
    // 1 ms is five round trips, under the ten the wait needs.
    let mut quick = policy(&config, 3);
    warm_up(
        &mut quick,
        &[(0, report(0, 1)), (1, report(0, 1))],
        1,
        &mut rng,
    );
    assert!(matches!(
        quick.pick(&query(10), t2, &mut rng),
        Pick::Replica(_)
    ));
    // The same stale pool, with the wait on and off (the paper's pool: used at once).
    let off = Config {
        wait_when_stale: false,
        ..Config::default()
    };
    for (config, waits) in [(&config, true), (&off, false)] {
        let mut p = policy(config, 3);
        warm_up(
            &mut p,
            &[(0, report(0, 1)), (1, report(0, 1))],
            10,
            &mut rng,
        );
        let pick = p.pick(&query(2), t2, &mut rng);
        assert_eq!(
            pick == Pick::Pending,
            waits,
            "wait_when_stale {waits}: {pick:?}"
        );
    }
}

/// In a cluster larger than the pool, a query whose fresh replies came is ranked over the
/// whole pool (the pool is a sample, and its breadth counts), not among those replies alone.
#[test]
fn a_wait_in_a_cluster_larger_than_the_pool_ranks_the_whole_pool() {
    let config = Config {
        wait_when_stale: true,
        ..Config::default()
    };
    let mut p = policy(&config, 20);
    assert!(p.pool().capacity() < 20);
    let mut rng = rng(9);
    let (t0, rtt) = (WAIT_T0, WAIT_RTT);
    // Replica 0 answers the first probes fast and idle.
    warm_up(&mut p, &[(0, report(0, 1))], 10, &mut rng);
    // 50 ms later the pool is stale: the query waits for two fresh replies, both slow, and
    // then goes to replica 0, the whole pool's best.
    let t1 = t0 + Duration::from_millis(50);
    assert_eq!(p.pick(&query(1), t1, &mut rng), Pick::Pending);
    let sent = drop_probes(&mut p, &mut rng);
    for replica in [1, 2] {
        let probe = answer_latest(&sent, replica);
        p.on_probe_reply(&probe, &report(9, 80), t1 + rtt, &mut rng);
    }
    assert_eq!(
        p.poll_pick(t1 + rtt, &mut rng),
        Some((QueryId(1), Pick::Replica(ReplicaId(0))))
    );
}

/// `wait_when_stale` at the edges: with one replica a single fresh reply is enough; a wait
/// that ends with one fresh reply is placed among the whole pool; a waiting query is answered
/// with no replica when the last replica leaves, and a timeout then does nothing.
#[test]
fn a_stale_pool_wait_at_the_edges() {
    let config = Config {
        wait_when_stale: true,
        ..Config::default()
    };
    let mut rng = rng(8);
    let (t0, rtt) = (WAIT_T0, WAIT_RTT);
    // One replica: its fresh reply alone places the query.
    let mut one = policy(&config, 1);
    warm_up(&mut one, &[(0, report(0, 5))], 10, &mut rng);
    let t1 = t0 + Duration::from_millis(50);
    assert_eq!(one.pick(&query(1), t1, &mut rng), Pick::Pending);
    let sent = drop_probes(&mut one, &mut rng);
    let probe = answer_latest(&sent, 0);
    one.on_probe_reply(&probe, &report(3, 10), t1 + rtt, &mut rng);
    assert_eq!(
        one.poll_pick(t1 + rtt, &mut rng),
        Some((QueryId(1), Pick::Replica(ReplicaId(0))))
    );
    // Three replicas: an old, fast reply from replica 0 and one slow fresh reply from 1 when
    // the wait ends: the pool's best, not the lone fresh reply.
    let mut p = policy(&config, 3);
    warm_up(
        &mut p,
        &[(0, report(0, 1)), (2, report(9, 90))],
        10,
        &mut rng,
    );
    assert_eq!(p.pick(&query(1), t1, &mut rng), Pick::Pending);
    let sent = drop_probes(&mut p, &mut rng);
    let probe = answer_latest(&sent, 1);
    p.on_probe_reply(&probe, &report(9, 80), t1 + rtt, &mut rng);
    let end = t1 + Duration::from_millis(3);
    p.handle_timeout(end, &mut rng);
    assert_eq!(
        p.poll_pick(end, &mut rng),
        Some((QueryId(1), Pick::Replica(ReplicaId(0))))
    );
    // The last replica leaves while a query waits.
    let mut q = policy(&config, 1);
    warm_up(&mut q, &[(0, report(0, 5))], 10, &mut rng);
    assert_eq!(q.pick(&query(2), t1, &mut rng), Pick::Pending);
    q.on_replica_change(ReplicaChange::Remove(ReplicaId(0)), t1);
    assert_eq!(
        q.poll_pick(t1, &mut rng),
        Some((QueryId(2), Pick::NoReplica))
    );
    q.handle_timeout(end, &mut rng);
    assert_eq!(q.poll_pick(end, &mut rng), None);
}

#[test]
fn idle_client_probes_on_a_timer() {
    let mut p = policy(&Config::default(), 3);
    let mut rng = rng(6);
    assert_eq!(p.poll_timeout(), Some(Time::ZERO), "warm-up probe at once");
    p.handle_timeout(Time::ZERO, &mut rng);
    assert_eq!(drop_probes(&mut p, &mut rng).len(), 1);
    assert_eq!(p.poll_timeout(), Some(Time::from_millis(100)));
    p.handle_timeout(Time::from_millis(50), &mut rng);
    assert!(drop_probes(&mut p, &mut rng).is_empty(), "not due yet");
    pick_id(&mut p, 1, Time::from_millis(60), &mut rng);
    assert_eq!(
        p.poll_timeout(),
        Some(Time::from_millis(160)),
        "a query's probes reset it"
    );
    assert_eq!(p.probe_timeout(), Some(Duration::from_millis(3)));
}

#[test]
fn departed_replicas_leave_the_pool_and_their_replies_are_dropped() {
    let mut p = policy(&Config::default(), 3);
    let mut rng = rng(7);
    p.on_probe_reply(&probe(1), &report(1, 1), Time::ZERO, &mut rng);
    p.on_probe_reply(&probe(2), &report(1, 1), Time::ZERO, &mut rng);
    p.on_replica_change(ReplicaChange::Remove(ReplicaId(1)), Time::ZERO);
    assert_eq!(p.pool().len(), 1);
    p.on_probe_reply(&probe(1), &report(1, 1), Time::ZERO, &mut rng);
    assert_eq!(p.pool().len(), 1, "reply from a departed replica");
}

/// Drives `queries` queries, one per millisecond, answering every probe at once with
/// `load(replica)` and completing every query at once with `outcome(replica)`.
fn drive(
    p: &mut dyn Policy,
    seed: u64,
    queries: u64,
    load: impl Fn(ReplicaId) -> LoadReport,
    outcome: impl Fn(ReplicaId) -> Outcome,
) -> Vec<ReplicaId> {
    let mut rng = rng(seed);
    let mut picks = Vec::new();
    for q in 0..queries {
        let now = Time::from_millis(q);
        if p.poll_timeout().is_some_and(|t| t <= now) {
            p.handle_timeout(now, &mut rng);
        }
        let id = pick_id(p, q, now, &mut rng);
        while let Some(probe) = p.poll_probe(now, &mut rng) {
            p.on_probe_reply(&probe, &load(probe.replica), now, &mut rng);
        }
        p.on_dispatch(id, QueryId(q), now);
        let done = Completion {
            query: QueryId(q),
            latency: load(id).latency,
            outcome: outcome(id),
        };
        p.on_complete(id, &done, now);
        picks.push(id);
    }
    picks
}

fn sinkhole_share(error_threshold: f64) -> f64 {
    let config = Config {
        error_threshold,
        ..Config::default()
    };
    let mut p = policy(&config, 5);
    let bad = ReplicaId(0);
    let picks = drive(
        &mut p,
        8,
        2000,
        |id| {
            if id == bad {
                report(0, 1)
            } else {
                report(2, 20)
            }
        },
        |id| {
            if id == bad {
                Outcome::Error
            } else {
                Outcome::Success
            }
        },
    );
    let late = &picks[1000..];
    let share = late.iter().filter(|id| **id == bad).count() as f64 / late.len() as f64;
    if error_threshold < 1.0 {
        let snapshot = p.snapshot(Time::from_millis(2000));
        assert!(snapshot.replicas[0].avoided);
        assert!(!snapshot.replicas[1].avoided);
    }
    share
}

#[test]
fn error_aversion_stops_sinkholing() {
    let without = sinkhole_share(1.0);
    assert!(
        without > 0.5,
        "without aversion the fast-failing replica sinkholes: {without}"
    );
    let with = sinkhole_share(params::ERROR_THRESHOLD);
    assert!(with < 0.02, "with aversion it is starved: {with}");
}

#[test]
fn same_seed_same_decisions() {
    let load = |id: ReplicaId| report(id.0 % 4, 5 + u64::from(id.0 * 7 % 11));
    let run = |seed| {
        let mut p = policy(&Config::default(), 20);
        drive(&mut p, seed, 500, load, |_| Outcome::Success)
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10), "the seed matters");
}

/// The async engine says it never reads a probe reply's rates (so the simulator may leave them
/// out), and indeed its decisions are the same with or without them.
#[test]
fn decisions_ignore_the_rates_of_probe_replies() {
    let load = |id: ReplicaId| report(id.0 % 4, 5 + u64::from(id.0 * 7 % 11));
    let with_rates = |id: ReplicaId| LoadReport {
        qps: Some(f64::from(id.0) * 10.0),
        utilization: Some(f64::from(id.0 % 3) / 2.0),
        error_rate: Some(f64::from(id.0 % 5) / 10.0),
        ..load(id)
    };
    let outcome = |id: ReplicaId| {
        if id.0.is_multiple_of(6) {
            Outcome::Error
        } else {
            Outcome::Success
        }
    };
    let mut p = policy(&Config::default(), 20);
    assert!(!p.reads_probe_rates());
    let without = drive(&mut p, 4, 500, load, outcome);
    let mut p = policy(&Config::default(), 20);
    assert_eq!(drive(&mut p, 4, 500, with_rates, outcome), without);
}

#[test]
fn snapshot_shows_pool_hot_flags_and_threshold() {
    let config = Config {
        q_rif: 0.5,
        pool_share: 1.0,
        ..Config::default()
    };
    let mut p = policy(&config, 4);
    let mut rng = rng(11);
    for (id, rif) in [(0, 1), (1, 2), (2, 3), (3, 4)] {
        p.on_probe_reply(&probe(id), &report(rif, 1), Time::ZERO, &mut rng);
    }
    let snapshot = p.snapshot(Time::from_millis(2));
    let hot: Vec<bool> = snapshot.pool.iter().map(|e| e.hot).collect();
    assert_eq!(hot, vec![false, false, true, true]);
    assert_eq!(snapshot.pool[0].age_us, 2000);
    assert_eq!(snapshot.pool[0].uses_left, 16);
    assert!(snapshot.values.contains(&("hot_rif_threshold", 2.0)));
    assert_eq!(snapshot.policy, "prequal");
}

#[test]
fn config_rejects_out_of_range_values_by_key() {
    let cases: Vec<(Config, &str)> = vec![
        (
            Config {
                q_rif: 1.5,
                ..Config::default()
            },
            "q_rif",
        ),
        (
            Config {
                pool_size: 0,
                ..Config::default()
            },
            "pool_size",
        ),
        (
            // A pool this large would take gigabytes up front (a config reload must reject it).
            Config {
                pool_size: u32::MAX,
                ..Config::default()
            },
            "pool_size",
        ),
        (
            Config {
                probe_rate: -1.0,
                ..Config::default()
            },
            "probe_rate",
        ),
        (
            Config {
                remove_rate: -0.5,
                ..Config::default()
            },
            "remove_rate",
        ),
        (
            Config {
                probe_rate: 1.0,
                ..Config::default()
            },
            "remove_rate",
        ),
        (
            Config {
                delay_concurrency: 0.0,
                ..Config::default()
            },
            "delay_concurrency",
        ),
        (
            Config {
                delay_concurrency: f64::INFINITY,
                ..Config::default()
            },
            "delay_concurrency",
        ),
        (
            Config {
                delay_power: 0.0,
                ..Config::default()
            },
            "delay_power",
        ),
        (
            Config {
                delay_power: f64::NAN,
                ..Config::default()
            },
            "delay_power",
        ),
        (
            Config {
                delta: 0.0,
                ..Config::default()
            },
            "delta",
        ),
        (
            Config {
                max_age: Duration::ZERO,
                ..Config::default()
            },
            "max_age",
        ),
        (
            Config {
                error_threshold: 2.0,
                ..Config::default()
            },
            "error_threshold",
        ),
    ];
    for (config, key) in cases {
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("prequal"), "{err}");
    }
    let parsed: Config = toml::from_str("max_age = \"250ms\"\nprobe_rate = 1.5").unwrap();
    assert_eq!(parsed.max_age, Duration::from_millis(250));
    assert_eq!(parsed.probe_rate, 1.5);
    assert!(toml::from_str::<Config>("qrif = 0.5").is_err());
}

#[test]
fn probes_not_sent_do_not_count_against_their_replica() {
    let mut p = policy(&Config::default(), 3);
    let busy = ReplicaId(0);
    let now = Time::from_millis(10);
    for _ in 0..10 {
        p.on_probe_not_sent(&probe(busy.0), now);
    }
    assert!(
        !p.snapshot(now).replicas[0].avoided,
        "a driver's bound on probes outstanding says nothing about the replica"
    );
    for _ in 0..crate::policies::probing::aversion::PROBE_FAILURES_TO_AVOID {
        p.on_probe_failure(&probe(busy.0), now);
    }
    assert!(p.snapshot(now).replicas[0].avoided, "failed probes do");
}
