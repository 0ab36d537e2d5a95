//! Tests of the balancer: ejection in and out of the policy, exclusion, slow start, retries,
//! hedging's room check, and that with nothing to do it leaves the policy's decisions alone.

use std::time::Duration;

use super::*;
use crate::PolicyConfig;
use crate::hedge::HedgeConfig;
use crate::outlier::OutlierConfig;
use crate::retry_budget::RetryBudgetConfig;
use crate::testing::rng;

fn ids(n: u32) -> Vec<ReplicaId> {
    (0..n).map(ReplicaId).collect()
}

fn balancer(policy: &str, config: &BalancerConfig, n: u32) -> Balancer {
    let policy = PolicyConfig::from_name(policy).unwrap().build().unwrap();
    let mut b = Balancer::new(policy, config).unwrap();
    b.set_replicas(&ids(n), Time::ZERO);
    b
}

fn query(id: u64) -> Query {
    Query {
        id: QueryId(id),
        hint: None,
    }
}

fn done(id: u64, outcome: Outcome) -> Completion {
    Completion {
        query: QueryId(id),
        latency: Duration::from_millis(1),
        outcome,
    }
}

/// One try of query `id`, picked and dispatched at `now` without exclusion.
fn try_once(b: &mut Balancer, id: u64, now: Time, r: &mut impl RngCore) -> ReplicaId {
    let pick = b.pick(&query(id), now, r);
    b.dispatch(pick, QueryId(id), (&[], Strict::No), now, r)
        .unwrap()
}

#[test]
fn without_ejection_or_exclusion_it_picks_as_the_policy_does() {
    let config = BalancerConfig {
        outlier_ejection: false,
        ..BalancerConfig::default()
    };
    let mut b = balancer("least-loaded-p2c", &config, 8);
    let mut plain = PolicyConfig::from_name("least-loaded-p2c")
        .unwrap()
        .build()
        .unwrap();
    ids(8).into_iter().for_each(|id| {
        plain.on_replica_change(ReplicaChange::Insert(id), Time::ZERO);
    });
    let (mut r1, mut r2) = (rng(3), rng(3));
    for i in 0..500 {
        let now = Time::from_millis(i);
        let got = try_once(&mut b, i, now, &mut r1);
        let Pick::Replica(want) = plain.pick(&query(i), now, &mut r2) else {
            panic!()
        };
        plain.on_dispatch(want, QueryId(i), now);
        assert_eq!(got, want);
        if i % 3 == 0 {
            let c = done(i, Outcome::Error);
            b.on_complete(got, &c, None, now);
            plain.on_complete(want, &c, now);
        }
    }
    assert_eq!(b.ejected_count(), 0);
}

#[test]
fn a_failing_replica_leaves_the_policy_and_comes_back_when_its_ejection_ends() {
    let mut b = balancer("round-robin", &BalancerConfig::default(), 4);
    let mut r = rng(1);
    let now = Time::from_secs(1);
    let mut ejection = None;
    for i in 0..5 {
        ejection = b.on_complete(ReplicaId(2), &done(i, Outcome::Error), None, now);
    }
    let ejection = ejection.expect("five failures in a row eject");
    assert_eq!(ejection.duration, Duration::from_secs(5));
    assert!(b.is_ejected(ReplicaId(2)));
    assert_eq!((b.ejected_count(), b.usable_count()), (1, 3));
    for i in 0..40 {
        assert_ne!(try_once(&mut b, 100 + i, now, &mut r), ReplicaId(2));
    }
    // The timer is the ejection's end; before it nothing comes back.
    let end = now + Duration::from_secs(5);
    assert_eq!(b.poll_timeout(), Some(end));
    assert!(
        b.handle_timeout(end - Duration::from_millis(1), &mut r)
            .is_empty()
    );
    assert_eq!(b.handle_timeout(end, &mut r), [ReplicaId(2)]);
    assert!(!b.is_ejected(ReplicaId(2)) && b.poll_timeout().is_none());
    let back = (0..8).any(|i| try_once(&mut b, 200 + i, end, &mut r) == ReplicaId(2));
    assert!(back, "round robin reaches it again");
}

#[test]
fn a_replica_removed_while_ejected_is_forgotten() {
    let mut b = balancer("random", &BalancerConfig::default(), 3);
    for i in 0..5 {
        b.on_complete(ReplicaId(0), &done(i, Outcome::Timeout), None, Time::ZERO);
    }
    assert_eq!(b.ejected_count(), 1);
    b.set_replicas(&[ReplicaId(1), ReplicaId(2)], Time::from_secs(1));
    assert_eq!((b.ejected_count(), b.usable_count()), (0, 2));
    assert_eq!(b.poll_timeout(), None);
    assert_eq!(b.replicas(), &[ReplicaId(1), ReplicaId(2)]);
}

#[test]
fn cancelled_tries_say_nothing_against_a_replica() {
    let mut b = balancer("random", &BalancerConfig::default(), 3);
    for i in 0..50 {
        let ejected = b.on_complete(ReplicaId(1), &done(i, Outcome::Cancelled), None, Time::ZERO);
        assert_eq!(ejected, None);
    }
}

#[test]
fn exclusion_sends_a_retry_elsewhere_and_strict_never_falls_back() {
    let mut b = balancer("round-robin", &BalancerConfig::default(), 2);
    let mut r = rng(5);
    let all = ids(2);
    let pick = Pick::Replica(ReplicaId(0));
    let one = [ReplicaId(0)];
    let now = Time::ZERO;
    assert_eq!(
        b.dispatch(pick, QueryId(1), (&one, Strict::Yes), now, &mut r),
        Some(ReplicaId(1))
    );
    // Every replica tried: a retry may go back to the policy's choice, a hedge nowhere.
    assert_eq!(
        b.dispatch(pick, QueryId(2), (&all, Strict::No), now, &mut r),
        Some(ReplicaId(0))
    );
    assert_eq!(
        b.dispatch(pick, QueryId(3), (&all, Strict::Yes), now, &mut r),
        None
    );
    assert!(b.has_untried(&one) && !b.has_untried(&all));
    // No decision from the policy: any usable replica.
    assert!(
        b.dispatch(Pick::NoReplica, QueryId(4), (&[], Strict::No), now, &mut r)
            .is_some()
    );
}

#[test]
fn a_late_replica_ramps_up_and_the_starting_set_does_not() {
    let mut b = balancer("least-loaded", &BalancerConfig::default(), 3);
    let joined = Time::from_secs(10);
    b.set_replicas(&ids(4), joined);
    assert!(!b.is_ramping(ReplicaId(0), joined));
    assert!(b.is_ramping(ReplicaId(3), joined));
    assert!(!b.is_ramping(ReplicaId(3), joined + Duration::from_secs(30)));
    // The policy keeps choosing the new replica (least loaded: nothing in flight); at the
    // floor (factor 0.1) about nine in ten of those choices go elsewhere.
    let mut r = rng(9);
    let pick = Pick::Replica(ReplicaId(3));
    let kept = (0..2000)
        .filter(|&i| {
            let got = b.dispatch(pick, QueryId(i), (&[], Strict::No), joined, &mut r);
            got == Some(ReplicaId(3))
        })
        .count();
    assert!((150..250).contains(&kept), "{kept}");
}

#[test]
fn retries_stop_at_max_attempts_and_at_the_budget() {
    let config = BalancerConfig {
        max_attempts: 2,
        retry_budget: RetryBudgetConfig {
            ratio: 0.5,
            min_per_second: 0.0,
            ..RetryBudgetConfig::default()
        },
        ..BalancerConfig::default()
    };
    let mut b = balancer("random", &config, 3);
    let now = Time::from_secs(1);
    (0..4).for_each(|_| b.on_request(now));
    assert_eq!(b.try_retry(2, now), RetryDecision::NoAttemptsLeft);
    assert_eq!(b.try_retry(1, now), RetryDecision::Retry);
    assert_eq!(b.try_retry(1, now), RetryDecision::Retry);
    assert_eq!(b.try_retry(1, now), RetryDecision::OverBudget);
    assert_eq!(b.max_attempts(), 2);
}

#[test]
fn hedges_need_a_second_usable_replica_and_an_untried_one() {
    let config = BalancerConfig {
        hedge: HedgeConfig {
            delay: Some(Duration::from_millis(10)),
            idle_only: false,
            ..HedgeConfig::default()
        },
        ..BalancerConfig::default()
    };
    let mut b = balancer("random", &config, 2);
    let start = Time::from_secs(1);
    assert_eq!(b.hedge_plan(start), Some(start + Duration::from_millis(10)));
    let due = start + Duration::from_millis(10);
    let tried = [ReplicaId(0)];
    assert_eq!(
        b.poll_hedge(start, 0, &tried, due),
        Some(HedgeDecision::Now)
    );
    assert_eq!(b.poll_hedge(start, 0, &ids(2), due), None);
    // With one of the two ejected, no request is hedged.
    for i in 0..5 {
        b.on_complete(ReplicaId(1), &done(i, Outcome::Error), None, start);
    }
    assert_eq!(b.usable_count(), 1);
    assert_eq!(b.hedge_plan(start), None);
}

/// Three replicas behind round robin, a fixed hedge delay of 30 ms and `idle_only` (the
/// default), each replica seen to answer in `usual_ms` at time zero.
fn idle_only_balancer(usual_ms: [u64; 3]) -> Balancer {
    let config = BalancerConfig {
        hedge: HedgeConfig {
            delay: Some(Duration::from_millis(30)),
            ..HedgeConfig::default()
        },
        outlier_ejection: false,
        ..BalancerConfig::default()
    };
    let mut b = balancer("round-robin", &config, 3);
    for (i, ms) in usual_ms.into_iter().enumerate() {
        let completion = Completion {
            query: QueryId(100 + i as u64),
            latency: Duration::from_millis(ms),
            outcome: Outcome::Success,
        };
        b.dispatched(ReplicaId(i as u32), completion.query, Time::ZERO);
        b.on_complete(ReplicaId(i as u32), &completion, None, Time::ZERO);
    }
    b
}

#[test]
fn a_hedge_goes_only_to_an_idle_replica_and_waits_uncharged_while_none_is() {
    let mut b = idle_only_balancer([20, 20, 20]);
    let mut r = rng(1);
    let ms = Duration::from_millis;
    let start = Time::ZERO;
    let (first, other, idle) = (ReplicaId(0), ReplicaId(1), ReplicaId(2));
    b.dispatched(first, QueryId(1), start);
    b.dispatched(other, QueryId(2), start);
    let tried = [first];
    // Due at 30 ms, and replica 2 is idle: the hedge goes, and there even when the policy
    // picks the busy replica 1.
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(30)),
        Some(HedgeDecision::Now)
    );
    let hedge = (&tried[..], Strict::Hedge(start));
    assert_eq!(
        b.resolve(Pick::Replica(other), hedge, start + ms(30), &mut r),
        Some(idle)
    );
    assert_eq!(b.hedger().stats().sent, 1);
    // Every untried replica busy: held back, uncharged, asked again a step (`min_delay`) on.
    b.dispatched(idle, QueryId(3), start);
    let held = b.poll_hedge(start, 0, &tried, start + ms(30));
    assert_eq!(held, Some(HedgeDecision::At(start + ms(35))));
    assert_eq!(b.hedger().stats().sent, 1);
    // Past four times the shorter of the first replica's usual 20 ms and the 30 ms delay: a
    // stalled try, hedged to the policy's pick whatever its load.
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(81)),
        Some(HedgeDecision::Now)
    );
    assert_eq!(
        b.resolve(Pick::Replica(other), hedge, start + ms(81), &mut r),
        Some(other)
    );
    // With `idle_only` off, the same busy cluster hedges at once.
    let mut off = idle_only_balancer([20, 20, 20]);
    off.hedger = Hedger::new(&HedgeConfig {
        delay: Some(ms(30)),
        idle_only: false,
        ..HedgeConfig::default()
    })
    .unwrap();
    for (i, replica) in ids(3).into_iter().enumerate() {
        off.dispatched(replica, QueryId(i as u64), start);
    }
    assert_eq!(
        off.poll_hedge(start, 0, &tried, start + ms(30)),
        Some(HedgeDecision::Now)
    );
}

#[test]
fn an_idle_replica_that_is_silent_or_slow_takes_no_hedge() {
    let ms = Duration::from_millis;
    let mut r = rng(1);
    let (first, busy, quiet) = (ReplicaId(0), ReplicaId(1), ReplicaId(2));
    let tried = [first];
    let probe = |replica| ProbeRequest {
        id: crate::policy::ProbeId(1),
        replica,
        query: None,
        hint: None,
    };
    let (report, loaded) = (
        LoadReport::default(),
        LoadReport {
            rif: 2,
            ..LoadReport::default()
        },
    );
    // Replica 2 is idle but has shown no life since the request started at 5 ms (a black
    // hole whose tries timed out): it is no place for the hedge. (The first try's replica
    // and the busy one answer probes: they are alive, and the first try is not stalled.)
    let mut b = idle_only_balancer([20, 20, 20]);
    let start = Time::ZERO + ms(5);
    b.dispatched(first, QueryId(1), start);
    b.dispatched(busy, QueryId(2), start);
    b.on_probe_reply(&probe(first), &loaded, start + ms(1), &mut r);
    b.on_probe_reply(&probe(busy), &loaded, start + ms(1), &mut r);
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(30)),
        Some(HedgeDecision::At(start + ms(35)))
    );
    // Once it answers a probe (reporting nothing in flight) it is alive again, and takes the
    // hedge; a report of other clients' requests there would keep it busy.
    b.on_probe_reply(&probe(quiet), &loaded, start + ms(31), &mut r);
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(32)),
        Some(HedgeDecision::At(start + ms(37)))
    );
    b.on_probe_reply(&probe(quiet), &report, start + ms(33), &mut r);
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(34)),
        Some(HedgeDecision::Now)
    );
    let hedge = (&tried[..], Strict::Hedge(start));
    assert_eq!(
        b.resolve(Pick::Replica(busy), hedge, start + ms(34), &mut r),
        Some(quiet)
    );
    // An idle replica whose usual try (130 ms) is over four times the hedge delay (30 ms) is
    // idle for being slow: the hedge waits for a stall instead.
    let mut b = idle_only_balancer([20, 20, 130]);
    let start = Time::ZERO;
    b.dispatched(first, QueryId(1), start);
    b.dispatched(busy, QueryId(2), start);
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(30)),
        Some(HedgeDecision::At(start + ms(35)))
    );
    // A first try whose replica, one that answers probes, has shown no life since it was
    // sent (a host stopped) has stalled: its hedge goes when due, idle replica or not.
    let mut b = idle_only_balancer([20, 20, 130]);
    b.on_probe_reply(&probe(first), &loaded, Time::ZERO, &mut r);
    let start = Time::ZERO + ms(5);
    b.dispatched(first, QueryId(1), start);
    b.dispatched(busy, QueryId(2), start);
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(10)),
        Some(HedgeDecision::At(start + ms(30)))
    );
    assert_eq!(
        b.poll_hedge(start, 0, &tried, start + ms(30)),
        Some(HedgeDecision::Now)
    );
}

#[test]
fn bad_config_names_its_key() {
    let bad = BalancerConfig {
        max_attempts: 0,
        ..BalancerConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().key, "max_attempts");
    let bad = BalancerConfig {
        outlier: OutlierConfig {
            consecutive_failures: 0,
            ..OutlierConfig::default()
        },
        ..BalancerConfig::default()
    };
    let err = bad.validate().unwrap_err();
    assert_eq!(
        (err.component, err.key),
        ("outlier", "consecutive_failures")
    );
    let parsed: BalancerConfig =
        toml::from_str("max_attempts = 1\n[outlier]\nbase_ejection = \"1s\"").unwrap();
    assert_eq!(parsed.max_attempts, 1);
    assert_eq!(parsed.outlier.base_ejection, Duration::from_secs(1));
    assert!(parsed.outlier_ejection);
}

/// The defaults with a fixed hedge delay of 50 ms.
fn hedge_delay_50ms() -> BalancerConfig {
    BalancerConfig {
        hedge: HedgeConfig {
            delay: Some(Duration::from_millis(50)),
            ..HedgeConfig::default()
        },
        ..BalancerConfig::default()
    }
}

#[test]
fn a_loser_counts_against_its_replica_only_past_twice_its_usual_time() {
    let config = hedge_delay_50ms();
    let mut b = balancer("round-robin", &config, 2);
    let (fast, slow) = (ReplicaId(0), ReplicaId(1));
    // The fast replica usually answers in 20 ms, the slow one (healthy, a slower machine) in
    // 80 ms: both beyond or near the cluster's hedge delay of 50 ms.
    for (replica, ms) in [(fast, 20), (slow, 80)] {
        let completion = Completion {
            query: QueryId(1),
            latency: Duration::from_millis(ms),
            outcome: Outcome::Success,
        };
        b.on_complete(replica, &completion, None, Time::ZERO);
    }
    let ms = Duration::from_millis;
    // Younger than the delay: cancelled, whoever held it.
    assert_eq!(b.loser_outcome(fast, ms(30)), Outcome::Cancelled);
    // Past the delay and past twice its usual 20 ms: the fast replica failed to answer.
    assert_eq!(b.loser_outcome(fast, ms(60)), Outcome::Timeout);
    // The slow replica's normal answers outlast the delay: not held against it...
    assert_eq!(b.loser_outcome(slow, ms(120)), Outcome::Cancelled);
    // ...until it outlives twice its own usual time.
    assert_eq!(b.loser_outcome(slow, ms(170)), Outcome::Timeout);
    // A replica with no success yet is judged by the delay alone.
    let fresh = balancer("round-robin", &config, 1);
    assert_eq!(fresh.loser_outcome(fast, ms(60)), Outcome::Timeout);
}

#[test]
fn a_try_whose_client_left_counts_only_against_a_replica_that_showed_no_life_since() {
    let config = hedge_delay_50ms();
    let mut b = balancer("round-robin", &config, 2);
    let (alive, hung) = (ReplicaId(0), ReplicaId(1));
    let ms = Duration::from_millis;
    let at = |v: u64| Time::ZERO + ms(v);
    let success = Completion {
        query: QueryId(1),
        latency: ms(20),
        outcome: Outcome::Success,
    };
    // Both usually answer in 20 ms; the last success of each ends at 1 s.
    b.on_complete(alive, &success, None, at(1000));
    b.on_complete(hung, &success, None, at(1000));
    // Then, at 1.5 s, another try on the first replica succeeds; the second ends nothing more.
    b.on_complete(alive, &success, None, at(1500));
    // A try sent at 1.2 s whose client left at 2 s: the first replica ended a try since, so it
    // is alive and the request merely slow (cancelled); the second ended none (a timeout, as a
    // loser of that age would be).
    assert_eq!(
        b.abandoned_outcome(alive, ms(800), at(2000)),
        Outcome::Cancelled
    );
    assert_eq!(
        b.abandoned_outcome(hung, ms(800), at(2000)),
        Outcome::Timeout
    );
    assert_eq!(b.loser_outcome(alive, ms(800)), Outcome::Timeout);
    // Sent at 1.6 s, after the first replica's latest success: nothing shows it alive since.
    assert_eq!(
        b.abandoned_outcome(alive, ms(400), at(2000)),
        Outcome::Timeout
    );
    // Young tries stay cancelled, as losers do.
    assert_eq!(
        b.abandoned_outcome(hung, ms(30), at(2000)),
        Outcome::Cancelled
    );
    // A probe answered, or a load report sent, shows a replica alive as well.
    let probe = ProbeRequest {
        id: crate::ProbeId(1),
        replica: hung,
        query: None,
        hint: None,
    };
    let report = LoadReport::default();
    b.on_probe_end(&probe, ProbeEnd::Reply(&report), at(2100), &mut rng(1));
    assert_eq!(
        b.abandoned_outcome(hung, ms(800), at(2200)),
        Outcome::Cancelled
    );
    b.on_load_report(alive, &LoadReport::default(), at(2300));
    assert_eq!(
        b.abandoned_outcome(alive, ms(200), at(2400)),
        Outcome::Cancelled
    );
    // Sent at the very time of that report, or after it: nothing since.
    assert_eq!(
        b.abandoned_outcome(alive, ms(100), at(2400)),
        Outcome::Timeout
    );
    assert_eq!(
        b.abandoned_outcome(alive, ms(80), at(2400)),
        Outcome::Timeout
    );
    // A replica with no success yet is judged as a loser.
    let fresh = balancer("round-robin", &config, 1);
    assert_eq!(
        fresh.abandoned_outcome(alive, ms(60), at(60)),
        Outcome::Timeout
    );
}

/// A load report piggybacked on a query's response goes with that query's end: the policy
/// hears the end first, so Prequal's refreshed reply carries the report's RIF exactly (the
/// report leaves the finished query out already).
#[test]
fn a_piggybacked_report_reaches_the_policy_after_its_query_ends() {
    let config = BalancerConfig {
        outlier_ejection: false,
        ..BalancerConfig::default()
    };
    // No removal per query, so the chosen reply stays in the pool.
    let policy = PolicyConfig::Prequal(crate::policies::prequal::Config {
        remove_rate: 0.0,
        ..Default::default()
    });
    let mut b = Balancer::new(policy.build().unwrap(), &config).unwrap();
    b.set_replicas(&ids(2), Time::ZERO);
    let mut r = rng(5);
    let at = Time::from_millis(10);
    for replica in [0, 1] {
        let probe = ProbeRequest {
            id: crate::ProbeId(replica.into()),
            replica: ReplicaId(replica),
            query: None,
            hint: None,
        };
        let report = LoadReport {
            rif: 1 + replica,
            latency: Duration::from_millis(10),
            ..LoadReport::default()
        };
        b.on_probe_reply(&probe, &report, at, &mut r);
    }
    let chosen = try_once(&mut b, 1, at, &mut r);
    let end = Time::from_millis(20);
    let report = LoadReport {
        rif: 5,
        latency: Duration::from_millis(10),
        ..LoadReport::default()
    };
    let _ = b.on_complete(chosen, &done(1, Outcome::Success), Some(&report), end);
    let pool = b.snapshot(end).pool;
    let refreshed = pool.iter().find(|e| e.replica == chosen).unwrap();
    assert_eq!(refreshed.rif, 5, "{pool:?}");
}
