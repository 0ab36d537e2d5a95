//! Engine-level tests of hedging and of fault episodes.

mod hedge_tests {
    use std::path::Path;

    use super::super::*;
    use crate::scenario::Scenario;

    /// Four replicas at ~20 ms; replica 3 answers in 1 s for the middle second.
    const SCENARIO: &str = r#"
contenders = ["least-loaded"]
latency_objective = "200ms"
[servers]
count = 4
latency = { kind = "normal", mean = "20ms", sd = "2ms" }
[[servers.episodes]]
servers = [3]
start = "1s"
end = "2s"
latency = "1s"
[clients]
count = 2
deadline = "5s"
[load]
steps = [{ duration = "3s", level = 400.0 }]
"#;

    fn run(hedge: Option<&HedgeConfig>) -> Sim<'static> {
        let compiled = Box::leak(Box::new(
            Scenario::parse(SCENARIO, Path::new("t.toml")).unwrap(),
        ));
        let policy = PolicyConfig::from_name("least-loaded").unwrap();
        let mut sim = Sim::new(compiled, &policy, hedge, 1.0).unwrap();
        sim.start();
        sim.drive();
        sim
    }

    #[test]
    fn hedging_rescues_the_slow_replica_and_settles_every_try() {
        let config = HedgeConfig {
            ratio: 0.2,
            ..HedgeConfig::default()
        };
        let mut hedged = run(Some(&config));
        let plain = run(None);
        let within = |s: &Sim| s.recorder.finish().summary.within_objective;
        assert!(within(&hedged) > 0.999, "{}", within(&hedged));
        assert!(within(&plain) < within(&hedged));
        let summary = hedged.hedge_summary().unwrap();
        assert!(summary.sent > 0 && summary.won > 0, "{summary:?}");
        assert_eq!(summary.tries, summary.queries + summary.sent);
        assert!(plain.hedge_summary().is_none());
        // Every try was settled with the policy (losers as cancelled or timed out): no
        // client-local RIF is left over, and no query or request is left behind.
        let now = hedged.now;
        for client in &mut hedged.clients {
            let snapshot = client.policy.snapshot(now);
            assert!(snapshot.replicas.iter().all(|r| r.local_rif == 0));
            assert!(client.is_idle());
        }
    }

    /// Round robin over four replicas: 0 never answers, 1 refuses every query, 2 and 3 are
    /// healthy. A query must never be left waiting on replica 0 because its other try failed.
    const HUNG_AND_KILLED: &str = r#"
contenders = ["round-robin"]
latency_objective = "1s"
[servers]
count = 4
latency = { kind = "normal", mean = "10ms", sd = "1ms" }
[[servers.episodes]]
servers = [0]
start = "0s"
end = "10s"
fault = "black-hole"
[[servers.episodes]]
servers = [1]
start = "0s"
end = "10s"
fault = "killed"
[clients]
count = 1
deadline = "3s"
[load]
steps = [{ duration = "2s", level = 50.0 }]
"#;

    #[test]
    fn a_try_that_fails_fast_is_replaced_even_while_another_hangs() {
        let compiled = Box::leak(Box::new(
            Scenario::parse(HUNG_AND_KILLED, Path::new("t.toml")).unwrap(),
        ));
        let policy = PolicyConfig::from_name("round-robin").unwrap();
        let config = HedgeConfig {
            delay: Some(Duration::from_millis(30)),
            ratio: 1.0,
            ..HedgeConfig::default()
        };
        let mut sim = Sim::new(compiled, &policy, Some(&config), 1.0).unwrap();
        sim.start();
        sim.drive();
        let summary = sim.recorder.finish().summary;
        assert!(summary.queries > 90, "{summary:?}");
        assert_eq!(summary.timeouts, 0, "{summary:?} {:?}", sim.hedge_summary());
        assert_eq!(summary.errors, 0, "{summary:?}");
        assert_eq!(summary.successes, summary.queries, "{summary:?}");
    }

    #[test]
    fn same_seed_same_hedged_run() {
        let config = HedgeConfig::default();
        let a = run(Some(&config));
        let b = run(Some(&config));
        assert_eq!(a.recorder.finish(), b.recorder.finish());
        assert_eq!(a.hedge_summary(), b.hedge_summary());
    }
}

mod fault_tests {
    use std::path::Path;

    use crate::metrics::Summary;
    use crate::scenario::Scenario;

    /// Round robin and prequal over four replicas at ~10 ms; replica 3 meets `fault` from 1 s
    /// to 2 s. Returns each contender's summary and replica 3's queries in seconds 0..4.
    fn run(fault: &str) -> Vec<(Summary, Vec<u64>)> {
        let text = format!(
            r#"
contenders = ["round-robin", "prequal"]
latency_objective = "500ms"
[servers]
count = 4
latency = {{ kind = "normal", mean = "10ms", sd = "1ms" }}
[[servers.episodes]]
servers = [3]
start = "1s"
end = "2s"
fault = "{fault}"
[clients]
count = 1
deadline = "1s"
[load]
steps = [{{ duration = "4s", level = 400.0 }}]
"#
        );
        let compiled = Scenario::parse(&text, Path::new("t.toml")).unwrap();
        let plans = crate::report::plan(&compiled).unwrap();
        let report = crate::report::run_all(&compiled, &plans, &|_| {}).unwrap();
        report
            .runs
            .iter()
            .map(|r| {
                let m = &r.output.measured;
                let per_second = m.per_second.iter().map(|s| s.replicas[3]).collect();
                (m.summary.clone(), per_second)
            })
            .collect()
    }

    #[test]
    fn killed_replica_refuses_then_serves_again() {
        let runs = run("killed");
        let (rr, per_second) = &runs[0];
        // A quarter of a second's 400 queries are refused fast, none hang.
        assert!((60..=140).contains(&rr.errors), "{rr:?}");
        assert_eq!(rr.timeouts, 0);
        assert!(
            per_second[3] > 50,
            "restarted replica serves: {per_second:?}"
        );
        // Prequal learns from failed probes and errors and refuses fewer.
        assert!(runs[1].0.errors < rr.errors, "{:?}", runs[1].0);
    }

    #[test]
    fn host_down_swallows_queries_and_probes() {
        let runs = run("host-down");
        let (rr, _) = &runs[0];
        assert!((60..=140).contains(&rr.timeouts), "{rr:?}");
        assert_eq!(rr.errors, 0);
        // Probes to the host time out; prequal stops sending there.
        assert!(runs[1].0.timeouts < rr.timeouts / 2, "{:?}", runs[1].0);
    }

    #[test]
    fn black_hole_holds_queries_until_the_deadline() {
        let runs = run("black-hole");
        let (rr, _) = &runs[0];
        assert!((60..=140).contains(&rr.timeouts), "{rr:?}");
        // Its tracker's RIF grows with every query held, so prequal finds it hot.
        assert!(runs[1].0.timeouts < rr.timeouts / 2, "{:?}", runs[1].0);
    }
}
