//! Tests of the hedging decision: unit cases and property tests of the budget bound.

use super::*;
use proptest::prelude::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn never_hedges_when_disabled() {
    let config = HedgeConfig {
        enabled: false,
        delay: Some(Duration::ZERO),
        ..HedgeConfig::default()
    };
    let mut h = Hedger::new(&config).unwrap();
    for i in 0..1000 {
        let now = Time::from_millis(i);
        h.on_request(now);
        h.on_response(ms(20), false);
        assert_eq!(h.poll_hedge(Time::ZERO, 0, now), HedgeDecision::Never);
        assert_eq!(h.next_hedge_at(Time::ZERO, 0), None);
    }
    assert_eq!(h.stats().sent + h.stats().refused, 0);
}

#[test]
fn learns_the_delay_then_waits_for_it() {
    let mut h = Hedger::new(&HedgeConfig::default()).unwrap();
    let start = Time::from_secs(1);
    // While learning there is no delay: ask again after the floor.
    assert_eq!(h.delay(), None);
    assert_eq!(
        h.poll_hedge(start, 0, start),
        HedgeDecision::At(start + ms(5))
    );
    for i in 0..100 {
        h.on_request(start);
        h.on_response(ms(10 + i % 20), false);
    }
    let delay = h.delay().unwrap();
    assert!(delay >= ms(28) && delay <= ms(30), "{delay:?}");
    assert_eq!(
        h.poll_hedge(start, 0, start),
        HedgeDecision::At(start + delay)
    );
    assert_eq!(h.poll_hedge(start, 0, start + delay), HedgeDecision::Now);
    assert_eq!(h.poll_hedge(start, 1, start + delay), HedgeDecision::Never);
}

#[test]
fn learned_delay_tracks_a_changing_distribution() {
    let config = HedgeConfig {
        samples: 200,
        ..HedgeConfig::default()
    };
    let mut h = Hedger::new(&config).unwrap();
    (0..500).for_each(|i| h.on_response(ms(20 + i % 10), false));
    assert!(h.delay().unwrap() < ms(31));
    (0..200).for_each(|i| h.on_response(ms(200 + i % 10), false));
    let slow = h.delay().unwrap();
    assert!(slow >= ms(209) && slow <= ms(216), "{slow:?}");
}

#[test]
fn floor_applies_to_fixed_and_learned_delays() {
    let config = HedgeConfig {
        delay: Some(ms(1)),
        ..HedgeConfig::default()
    };
    assert_eq!(Hedger::new(&config).unwrap().delay(), Some(ms(5)));
    let mut h = Hedger::new(&HedgeConfig::default()).unwrap();
    (0..50).for_each(|_| h.on_response(Duration::from_micros(300), false));
    assert_eq!(h.delay(), Some(ms(5)));
}

#[test]
fn second_hedge_waits_a_second_delay_and_budget_refusal_is_counted() {
    let config = HedgeConfig {
        delay: Some(ms(10)),
        max_hedges: 2,
        ratio: 0.0,
        min_per_second: 0.1, // one hedge per 10 s window
        ..HedgeConfig::default()
    };
    let mut h = Hedger::new(&config).unwrap();
    let t = Time::ZERO;
    assert_eq!(h.poll_hedge(t, 0, t + ms(10)), HedgeDecision::Now);
    assert_eq!(
        h.poll_hedge(t, 1, t + ms(10)),
        HedgeDecision::At(t + ms(20))
    );
    assert_eq!(h.poll_hedge(t, 1, t + ms(20)), HedgeDecision::Never);
    assert_eq!(
        h.stats(),
        HedgeStats {
            requests: 0,
            sent: 1,
            won: 0,
            refused: 1
        }
    );
}

#[test]
fn a_loser_that_outlived_the_delay_counts_as_a_timeout() {
    let config = HedgeConfig {
        delay: Some(ms(50)),
        ..HedgeConfig::default()
    };
    let h = Hedger::new(&config).unwrap();
    assert_eq!(h.loser_outcome(ms(20)), Outcome::Cancelled);
    assert_eq!(h.loser_outcome(ms(120)), Outcome::Timeout);
    // While the delay is unknown, nothing is held against a replica.
    let learning = Hedger::new(&HedgeConfig::default()).unwrap();
    assert_eq!(learning.loser_outcome(ms(10_000)), Outcome::Cancelled);
}

#[test]
fn rejects_bad_config_by_key() {
    let key = |c: HedgeConfig| Hedger::new(&c).unwrap_err().key;
    let d = HedgeConfig::default;
    assert_eq!(
        key(HedgeConfig {
            percentile: 0.0,
            ..d()
        }),
        "percentile"
    );
    assert_eq!(
        key(HedgeConfig {
            min_samples: 2000,
            ..d()
        }),
        "min_samples"
    );
    assert_eq!(
        key(HedgeConfig {
            max_hedges: 0,
            ..d()
        }),
        "max_hedges"
    );
    let err = Hedger::new(&HedgeConfig { ratio: -1.0, ..d() }).unwrap_err();
    assert_eq!((err.component, err.key), ("hedge", "ratio"));
    let parsed: HedgeConfig = toml::from_str("delay = \"40ms\"\nratio = 0.1").unwrap();
    assert_eq!(parsed.delay, Some(ms(40)));
    assert_eq!(parsed.percentile, 0.95);
    assert!(toml::from_str::<HedgeConfig>("dealy = \"1s\"").is_err());
    let back: HedgeConfig =
        toml::from_str(&toml::to_string(&HedgeConfig::default()).unwrap()).unwrap();
    assert_eq!(back, HedgeConfig::default());
}

/// One step of a random event sequence for the property tests.
#[derive(Clone, Debug)]
enum Step {
    Request,
    Response(u64),
    Poll { age_ms: u64, sent: u32 },
}

fn step() -> impl Strategy<Value = (u64, Step)> {
    let kind = prop_oneof![
        Just(Step::Request),
        (1u64..400).prop_map(Step::Response),
        (0u64..600, 0u32..3).prop_map(|(age_ms, sent)| Step::Poll { age_ms, sent }),
    ];
    (0u64..300, kind)
}

/// Runs `steps`, returning every decision and, at each admitted hedge, the time and the
/// requests counted so far.
fn drive(config: &HedgeConfig, steps: &[(u64, Step)]) -> (Vec<HedgeDecision>, Vec<Time>) {
    let mut h = Hedger::new(config).unwrap();
    let (mut now, mut decisions, mut hedges) = (Time::ZERO, Vec::new(), Vec::new());
    for (gap_ms, s) in steps {
        now = now + ms(*gap_ms);
        match s {
            Step::Request => h.on_request(now),
            Step::Response(l) => h.on_response(ms(*l), false),
            Step::Poll { age_ms, sent } => {
                let d = h.poll_hedge(now - ms(*age_ms), *sent, now);
                if d == HedgeDecision::Now {
                    hedges.push(now);
                }
                decisions.push(d);
            }
        }
    }
    (decisions, hedges)
}

proptest! {
    /// Whatever the events: hedges never exceed `ratio` × requests plus the floor, both
    /// over every window ending at a hedge and over the whole run (where the floor buys
    /// `min_per_second` × (elapsed + window): a full window of floor is there at once).
    #[test]
    fn budget_bound_holds_over_any_event_sequence(
        steps in prop::collection::vec(step(), 1..500),
        ratio in 0.0f64..0.5,
        floor in 0.0f64..3.0,
        fixed in prop::option::of(0u64..100),
    ) {
        let window = Duration::from_secs(2);
        let config = HedgeConfig {
            delay: fixed.map(ms),
            min_delay: Duration::ZERO,
            min_samples: 5,
            ratio,
            min_per_second: floor,
            window,
            max_hedges: 2,
            ..HedgeConfig::default()
        };
        let (_, hedges) = drive(&config, &steps);
        let mut now = Time::ZERO;
        let mut requests = Vec::new();
        for (gap_ms, s) in &steps {
            now = now + ms(*gap_ms);
            if matches!(s, Step::Request) {
                requests.push(now);
            }
        }
        for &t in &hedges {
            let start = t - window;
            let inside = |x: &&Time| **x <= t && (**x > start || start == Time::ZERO);
            let n_req = requests.iter().filter(inside).count() as f64;
            let n_hedge = hedges.iter().filter(inside).count() as f64;
            prop_assert!(n_hedge <= ratio * n_req + floor * 2.0 + 1e-9,
                "{n_hedge} hedges vs {n_req} requests in the window ending {t:?}");
        }
        let elapsed = now.as_secs_f64();
        prop_assert!(hedges.len() as f64
            <= ratio * requests.len() as f64 + floor * (elapsed + 2.0) + 1e-9);
    }

    /// No clock, no randomness: the same events give the same decisions.
    #[test]
    fn same_events_same_decisions(steps in prop::collection::vec(step(), 1..300)) {
        let config = HedgeConfig { min_samples: 3, ..HedgeConfig::default() };
        prop_assert_eq!(drive(&config, &steps), drive(&config, &steps));
    }
}
