//! Engine-level tests of hedging, of fault episodes, and of the balancer's ejection and
//! retries.

mod hedge_tests {
    use std::path::Path;

    use prequal_core::HedgeConfig;

    use super::super::*;
    use crate::scenario::Scenario;

    /// The scenario's balancer, hedging with `hedge`.
    fn balancer(compiled: &Compiled, hedge: Option<&HedgeConfig>) -> BalancerConfig {
        compiled.scenario.clients.balancer_keys().config(hedge)
    }

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
        let config = balancer(compiled, hedge);
        let mut sim = Sim::new(compiled, &policy, &config, 1.0).unwrap();
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
            let snapshot = client.balancer.snapshot(now);
            assert!(snapshot.replicas.iter().all(|r| r.local_rif == 0));
            assert!(client.is_idle());
        }
    }

    /// Round robin over four replicas: 0 never answers, 1 refuses every query, 2 and 3 are
    /// healthy. A query must never be left waiting on replica 0 because its other try failed:
    /// a failed try is retried at once beside the hung one, as in the proxy. Without ejection,
    /// so that only hedges and retries act.
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
max_attempts = 4
outlier_ejection = false
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
        let config = balancer(compiled, Some(&config));
        let mut sim = Sim::new(compiled, &policy, &config, 1.0).unwrap();
        sim.start();
        sim.drive();
        let summary = sim.recorder.finish().summary;
        assert!(summary.queries > 90, "{summary:?}");
        assert_eq!(summary.timeouts, 0, "{summary:?} {:?}", sim.hedge_summary());
        assert_eq!(summary.errors, 0, "{summary:?}");
        assert_eq!(summary.successes, summary.queries, "{summary:?}");
    }

    /// Two thread-pool replicas of one worker, 10 ms per query, at 40% of capacity; every
    /// query hedged after 2 ms, so about every query has a loser to cancel.
    const POOL: &str = r#"
contenders = ["round-robin"]
latency_objective = "1s"
[servers]
count = 2
cancelled_work = "WORK"
[servers.thread_pool]
workers = 1
service = { kind = "constant", value = "10ms" }
[clients]
count = 1
deadline = "5s"
[load]
steps = [{ duration = "4s", level = 0.4, unit = "capacity" }]
"#;

    /// Runs [`POOL`] with `work` as `cancelled_work`, hedging every query after 2 ms.
    fn run_pool(work: &str) -> Sim<'static> {
        let compiled = Box::leak(Box::new(
            Scenario::parse(&POOL.replace("WORK", work), Path::new("t.toml")).unwrap(),
        ));
        let policy = PolicyConfig::from_name("round-robin").unwrap();
        let hedge = HedgeConfig {
            delay: Some(Duration::from_millis(2)),
            ratio: 1.0,
            idle_only: false,
            ..HedgeConfig::default()
        };
        let config = balancer(compiled, Some(&hedge));
        let mut sim = Sim::new(compiled, &policy, &config, 1.0).unwrap();
        sim.start();
        sim.drive();
        sim
    }

    #[test]
    fn a_replica_that_finishes_cancelled_work_stays_busy_and_answers_no_one() {
        let (mut dropped, mut finished) = (run_pool("drop"), run_pool("finish"));
        let busy = |s: &Sim| -> f64 {
            let servers = s.recorder.finish().servers;
            servers
                .iter()
                .filter_map(|r| r.mean_utilization)
                .sum::<f64>()
                / 2.0
        };
        let (busy_dropped, busy_finished) = (busy(&dropped), busy(&finished));
        // Each hedge's loser holds its worker to the end of its 10 ms instead of letting it go.
        assert!(
            busy_finished > 1.25 * busy_dropped,
            "{busy_dropped} {busy_finished}"
        );
        for sim in [&mut dropped, &mut finished] {
            let summary = sim.recorder.finish().summary;
            let hedges = sim.hedge_summary().unwrap();
            assert!(hedges.sent > summary.queries / 2, "{hedges:?}");
            // A finished loser's answer goes nowhere: every query answered once, none failed.
            assert_eq!(summary.successes, summary.queries, "{summary:?}");
            let now = sim.now;
            for client in &mut sim.clients {
                assert!(
                    client
                        .balancer
                        .snapshot(now)
                        .replicas
                        .iter()
                        .all(|r| r.local_rif == 0)
                );
                assert!(client.is_idle());
            }
        }
        // The replicas' queues grow with the extra work, so queries wait longer.
        let mean = |s: &Sim| s.recorder.finish().summary.latency_ms.mean;
        assert!(
            mean(&finished) > mean(&dropped),
            "{} {}",
            mean(&dropped),
            mean(&finished)
        );
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
    /// to 2 s. Returns each contender's summary and replica 3's queries in seconds 0..4. The
    /// faults as the policy meets them: without the balancer's retries and ejection.
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
max_attempts = 1
outlier_ejection = false
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

mod balancer_tests {
    use std::path::Path;

    use crate::report::{self, Report};
    use crate::scenario::Scenario;

    /// Four replicas at ~10 ms, two clients at 400 queries/s for 4 s; from 1 s on, replica 0
    /// answers every query with an error after 1 ms (a fast-5xx sinkhole). `CONTENDERS` and
    /// `CLIENT_KEYS` are filled in by each test.
    const SINKHOLE: &str = r#"
contenders = CONTENDERS
latency_objective = "100ms"
[servers]
count = 4
latency = { kind = "normal", mean = "10ms", sd = "1ms" }
[[servers.episodes]]
servers = [0]
start = "1s"
end = "4s"
error_rate = 1.0
error_latency = "1ms"
[clients]
count = 2
CLIENT_KEYS
[load]
steps = [{ duration = "4s", level = 400.0 }]
"#;

    fn run(contenders: &str, client_keys: &str) -> Report {
        let text = SINKHOLE
            .replace("CONTENDERS", contenders)
            .replace("CLIENT_KEYS", client_keys);
        run_text(&text)
    }

    /// Every run of the scenario `text`.
    fn run_text(text: &str) -> Report {
        let compiled = Scenario::parse(text, Path::new("t.toml")).unwrap();
        let plans = report::plan(&compiled).unwrap();
        report::run_all(&compiled, &plans, &|_| {}).unwrap()
    }

    /// The first contender's run of the scenario `text`.
    fn first_run(text: &str) -> crate::engine::RunOutput {
        run_text(text).runs.swap_remove(0).output
    }

    #[test]
    fn ejection_keeps_a_sinkhole_from_swallowing_queries() {
        // Least-loaded sees the sinkhole's fast errors as little load: without ejection it
        // sends it more than its share. Retries off, so that only ejection acts.
        let contenders = r#"[{ name = "least-loaded", outlier_ejection = false }, "least-loaded"]"#;
        let report = run(contenders, "max_attempts = 1");
        let labels: Vec<&str> = report.runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            ["least-loaded +outlier_ejection=false", "least-loaded"]
        );
        let (without, with) = (&report.runs[0].output, &report.runs[1].output);
        let errors = |o: &crate::engine::RunOutput| o.measured.summary.errors;
        assert!(errors(without) > 300, "{:?}", without.measured.summary);
        assert!(without.balancer.is_none());
        // Each client ejects it after five errors in a row (for 5 s, past the end); queries
        // already on their way still fail.
        let summary = with.balancer.unwrap();
        assert_eq!(summary.ejections, 2, "{summary:?}");
        assert!(errors(with) < 30, "{:?}", with.measured.summary);
        assert_eq!(summary.retries, 0);
        // The table says so, for the run that ejected only.
        let table = report.table();
        let rows: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("retries and ejections"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(rows.len(), 1, "{table}");
        assert!(
            rows[0].starts_with("least-loaded ") && rows[0].ends_with(" 2"),
            "{table}"
        );
    }

    /// A response leaves its replica when the query finishes, whatever else is queued: with
    /// sparse traffic (one query every 50 ms) and idle workers, every query takes exactly its
    /// service time and the two network trips. (The event queue once held an event scheduled
    /// by a replica's completion back to the next event already queued, here the next arrival,
    /// and at the end of a run the drain's deadline, seconds later.)
    #[test]
    fn sparse_queries_take_their_service_time_and_nothing_more() {
        let text = r#"
contenders = ["least-loaded", "round-robin"]
latency_objective = "100ms"
[servers]
count = 2
[servers.thread_pool]
workers = 4
service = { kind = "constant", value = "10ms" }
[clients]
count = 1
arrivals = "constant"
deadline = "5s"
[network]
delay = { kind = "constant", value = "100us" }
[load]
steps = [{ duration = "2s", level = 20.0 }]
"#;
        for run in run_text(text).runs {
            let s = &run.output.measured.summary;
            assert!(s.queries >= 39, "{}: {s:?}", run.label);
            assert!(
                s.latency_ms.p50 >= 10.1 && s.latency_ms.max < 10.3,
                "{}: {:?}",
                run.label,
                s.latency_ms
            );
        }
    }

    #[test]
    fn retries_turn_errors_into_successes_within_the_budget() {
        // Round robin sends the sinkhole a quarter of the queries; each failed try is retried
        // on another replica while each client's budget (20% of its queries plus 10 a second
        // over 10 s) lasts. Ejection off, so that only retries act.
        let contenders = r#"[{ name = "round-robin", max_attempts = 1 }, "round-robin"]"#;
        let report = run(contenders, "outlier_ejection = false");
        let (once, retried) = (&report.runs[0].output, &report.runs[1].output);
        assert_eq!(report.runs[0].label, "round-robin +max_attempts=1");
        let s = &retried.measured.summary;
        assert!(once.measured.summary.errors > 250, "{:?}", once.measured);
        let balancer = retried.balancer.unwrap();
        assert!(balancer.retries > 250, "{balancer:?}");
        // Every retry went to a healthy replica: none failed, so no query did.
        assert_eq!(
            (s.errors, s.successes),
            (0, s.queries),
            "{s:?} {balancer:?}"
        );
        // The budget bounds them: 20% of the queries plus 10 per second per client.
        let bound = 0.2 * s.queries as f64 + 10.0 * 4.0 * 2.0;
        assert!((balancer.retries as f64) <= bound, "{balancer:?} > {bound}");
    }

    #[test]
    fn a_tight_budget_refuses_retries() {
        let contenders =
            r#"[{ name = "round-robin", retry_budget = { ratio = 0.0, min_per_second = 1.0 } }]"#;
        let report = run(contenders, "outlier_ejection = false");
        assert_eq!(
            report.runs[0].label,
            "round-robin +retry_budget (min_per_second=1.0, ratio=0.0)"
        );
        let output = &report.runs[0].output;
        let balancer = output.balancer.unwrap();
        // One retry per second per client, counted over a 10 s window: at most 20 in all.
        assert!(balancer.retries <= 20, "{balancer:?}");
        assert!(balancer.retries_refused > 250, "{balancer:?}");
        assert_eq!(output.measured.summary.errors, balancer.retries_refused);
    }

    /// Replica 0 is redeployed from 1 s to 2 s and serves ten times slower for its first 2 s
    /// back (cold caches). With slow start its share comes back over `window`; with a zero
    /// window at once.
    const REDEPLOY_COLD: &str = r#"
[[servers.episodes]]
servers = [0]
start = "1s"
end = "2s"
fault = "redeployed"
[[servers.episodes]]
servers = [0]
start = "2s"
end = "4s"
slow = 10.0"#;

    #[test]
    fn slow_start_ramps_a_redeployed_replica_back_in() {
        let window = |w: &str| format!("slow_start = {{ window = \"{w}\" }}");
        let (a, at_once) = replica_0_per_second(REDEPLOY_COLD, &window("0s"));
        let (r, ramped) = replica_0_per_second(REDEPLOY_COLD, &window("4s"));
        // Out of discovery for the second 1..2: only queries already on their way reach it.
        assert!(a[1] < 10 && r[1] < 10, "{a:?} {r:?}");
        // Back at 2 s: a full quarter of the queries at once, or a ramp from a tenth.
        assert!(a[2] > 80, "{a:?}");
        assert!(r[2] < a[2] / 2, "{a:?} {r:?}");
        // Past the window it has its full share again.
        assert!(r[5] > 80, "{r:?}");
        // Fewer queries meet the cold replica, so more are within the objective.
        let within = |o: &crate::engine::RunOutput| o.measured.summary.within_objective;
        assert!(
            within(&ramped) > within(&at_once),
            "{} {}",
            within(&ramped),
            within(&at_once)
        );
        assert_eq!(at_once.measured.summary.errors, 0);
    }

    /// Round robin over four replicas at ~10 ms, replica 0 a black hole throughout, no query
    /// deadline: each try may wait `try_timeout`, then fails as timed out and is retried.
    fn black_hole(client_keys: &str) -> crate::engine::RunOutput {
        let text = format!(
            r#"
contenders = ["round-robin"]
latency_objective = "1s"
[servers]
count = 4
latency = {{ kind = "normal", mean = "10ms", sd = "1ms" }}
[[servers.episodes]]
servers = [0]
start = "0s"
end = "30s"
fault = "black-hole"
[clients]
count = 1
outlier_ejection = false
{client_keys}
[load]
steps = [{{ duration = "2s", level = 100.0 }}]
"#
        );
        first_run(&text)
    }

    #[test]
    fn a_hung_try_times_out_and_is_retried() {
        let quick = black_hole("try_timeout = \"200ms\"");
        let s = &quick.measured.summary;
        // Every query succeeds: a quarter wait 200 ms on the black hole, then are retried.
        assert_eq!(
            (s.successes, s.timeouts, s.errors),
            (s.queries, 0, 0),
            "{s:?}"
        );
        let retries = quick.balancer.unwrap().retries;
        assert!((30..=80).contains(&retries), "{retries} of {}", s.queries);
        assert!((200.0..300.0).contains(&s.latency_ms.max), "{s:?}");
        // With the default 10 s, the same queries wait 10 s before their retry.
        let default = black_hole("");
        let s = &default.measured.summary;
        assert_eq!(s.successes, s.queries, "{s:?}");
        assert!((10_000.0..10_100.0).contains(&s.latency_ms.max), "{s:?}");
        // A try never outlives the query's deadline: with a 1 s deadline they time out.
        let deadline = black_hole("deadline = \"1s\"");
        let s = &deadline.measured.summary;
        assert!(s.timeouts >= 30 && s.errors == 0, "{s:?}");
        assert_eq!(deadline.balancer.map_or(0, |b| b.retries), 0);
    }

    /// Round robin, four replicas at ~10 ms, 400 queries/s for 6 s from two clients, with
    /// `episodes` (TOML `[[servers.episodes]]` tables) and the client keys `keys`; the
    /// queries replica 0 took in each second, and the run.
    fn replica_0_per_second(episodes: &str, keys: &str) -> (Vec<u64>, crate::engine::RunOutput) {
        let text = format!(
            r#"
contenders = ["round-robin"]
latency_objective = "50ms"
[servers]
count = 4
latency = {{ kind = "normal", mean = "10ms", sd = "1ms" }}
{episodes}
[clients]
count = 2
{keys}
[load]
steps = [{{ duration = "6s", level = 400.0 }}]
"#
        );
        let output = first_run(&text);
        let per_second = output
            .measured
            .per_second
            .iter()
            .map(|s| s.replicas[0])
            .collect();
        (per_second, output)
    }

    const REDEPLOY_AT_ZERO: &str = r#"
[[servers.episodes]]
servers = [0]
start = "0s"
end = "2s"
fault = "redeployed""#;

    #[test]
    fn a_redeploy_from_time_zero_starts_out_of_the_set() {
        let (per_second, _) = replica_0_per_second(REDEPLOY_AT_ZERO, "");
        assert_eq!(&per_second[..2], [0, 0], "{per_second:?}");
        assert!(per_second[3] > 0, "{per_second:?}");
    }

    #[test]
    fn another_fault_inside_a_deploy_does_not_bring_the_replica_back() {
        let episodes = r#"
[[servers.episodes]]
servers = [0]
start = "1s"
end = "4s"
fault = "redeployed"
[[servers.episodes]]
servers = [0]
start = "2s"
end = "3s"
fault = "killed""#;
        let (per_second, _) = replica_0_per_second(episodes, "");
        assert!(per_second[1..4].iter().all(|&n| n < 10), "{per_second:?}");
        assert!(per_second[4] > 0, "{per_second:?}");
    }

    #[test]
    fn the_old_process_failures_are_not_held_against_the_new_one() {
        // Replica 0 answers in 1.5 s until 2 s, so it still holds queries when its deploy
        // ends and the old process is stopped: those fail, but were sent to a process the
        // balancers forgot, so no client ejects the rejoined replica for them.
        let episodes = r#"
[[servers.episodes]]
servers = [0]
start = "0s"
end = "2s"
latency = "1500ms"
[[servers.episodes]]
servers = [0]
start = "1s"
end = "2s"
fault = "redeployed""#;
        let (per_second, output) = replica_0_per_second(episodes, "max_attempts = 1");
        let balancer = output.balancer.unwrap_or_default();
        assert_eq!(balancer.ejections, 0, "{balancer:?}");
        assert!(
            output.measured.summary.errors > 20,
            "{:?}",
            output.measured.summary
        );
        // Back in, at slow start's share (a tenth and growing), not ejected.
        assert!(per_second[2..].iter().all(|&n| n > 0), "{per_second:?}");
    }

    #[test]
    fn retries_in_hedged_queries_are_not_counted_as_hedges() {
        // Replica 0 fails every query at once; a hedge is due only after 5 s, so every extra
        // try is a retry, which the balancer counts, not the hedging summary.
        let episodes = r#"
[[servers.episodes]]
servers = [0]
start = "0s"
end = "5s"
error_rate = 1.0
error_latency = "1ms""#;
        let keys = "outlier_ejection = false\nhedge = { delay = \"5s\" }";
        let (_, output) = replica_0_per_second(episodes, keys);
        let hedging = output.hedging.unwrap();
        let retries = output.balancer.unwrap_or_default().retries;
        assert!(retries > 300, "{retries}");
        assert_eq!((hedging.sent, hedging.won), (0, 0), "{hedging:?}");
        assert_eq!(hedging.tries, hedging.queries, "{hedging:?}");
    }
}

mod drain_tests {
    use std::path::Path;

    use super::super::*;
    use crate::scenario::Scenario;

    /// A second of load on four 10 ms replicas, probed by `prequal`, with `deadline`.
    fn with_deadline(deadline: &str) -> RunOutput {
        let text = format!(
            r#"
contenders = ["prequal"]
[servers]
count = 4
latency = "10ms"
[clients]
count = 2
deadline = "{deadline}"
[load]
steps = [{{ duration = "1s", level = 200.0 }}]
"#
        );
        let compiled = Scenario::parse(&text, Path::new("t.toml")).unwrap();
        run(&compiled, &PolicyConfig::from_name("prequal").unwrap(), 1.0).unwrap()
    }

    /// Past the end of its load a run goes on only while a query is in flight: the idle
    /// probes after that measure nothing, and with a long deadline would go on for as long.
    #[test]
    fn a_run_ends_once_its_queries_are_answered_however_long_the_deadline() {
        let short = with_deadline("2s");
        let long = with_deadline("1h");
        assert!(short.measured.summary.queries > 100);
        assert_eq!(short, long, "the same run, events included");
    }
}

/// Holding quiet probe replies back (`Sim::deliver_probe_report`) changes nothing a run
/// produces, events counted included.
mod held_reply_tests {
    use std::path::Path;

    use super::super::*;
    use crate::scenario::Scenario;

    /// One reply held back per instant: a second one for the same instant, or one whose slot
    /// another instant has, is refused until the first is applied or queued.
    #[test]
    fn one_reply_is_held_back_per_instant() {
        let mut held = HeldAt::new();
        let at = Time::from_nanos(1_234_567);
        assert!(held.take(at));
        assert!(!held.take(at), "a second reply for the same instant");
        let same_slot = Time::from_nanos(1_234_567 + HeldAt::SLOTS as u64);
        assert!(!held.take(same_slot), "another instant in the same slot");
        assert!(held.take(Time::from_nanos(1_234_568)));
        held.free(at);
        assert!(held.take(same_slot));
    }

    /// Processor sharing with probe costs and antagonists, a load past the allocation,
    /// deadlines, a replica killed and another redeployed.
    const CAPACITY: &str = r#"
contenders = ["prequal"]
latency_objective = "200ms"
[servers]
count = 30
probe_cost = "20us"
[servers.capacity]
cost = { kind = "normal", mean = "10ms", sd = "10ms" }
allocation_cores = 1.0
machine_cores = 10.0
per_query_cores = 1.0
[servers.capacity.antagonist]
period = "1s"
mean_low = 0.5
mean_high = 0.95
jitter = 0.1
[[servers.episodes]]
servers = [2]
start = "1s"
end = "2s"
fault = "killed"
[[servers.episodes]]
servers = [5]
start = "2s"
end = "3s"
fault = "redeployed"
[clients]
count = 30
arrivals = "poisson"
deadline = "300ms"
[network]
delay = { kind = "uniform", low = "100us", high = "300us" }
[load]
ramp = { start = 0.9, factor = 1.2, steps = 4, step_duration = "1s", unit = "allocation" }
"#;

    /// Constant delays, so that many events fall at one instant, whole-replica faults, and
    /// queries that wait for replies while some are held back.
    const TIES: &str = r#"
contenders = ["prequal"]
latency_objective = "1s"
[servers]
count = 6
latency = { kind = "normal", mean = "20ms", sd = "2ms" }
[[servers.episodes]]
servers = [0]
start = "1s"
end = "2s"
fault = "black-hole"
[[servers.episodes]]
servers = [1]
start = "1s"
end = "3s"
fault = "host-down"
[[servers.episodes]]
servers = [3]
start = "2s"
end = "3s"
fault = "redeployed"
[clients]
count = 3
deadline = "1s"
[network]
delay = { kind = "constant", value = "250us" }
[load]
steps = [{ duration = "4s", level = 600.0 }]
"#;

    /// The run's output, and how many replies were held back and released, with holding on
    /// or off.
    fn run(scenario: &str, contender: &str, hold: bool) -> (RunOutput, (u64, u64)) {
        let compiled = Scenario::parse(scenario, Path::new("t.toml")).unwrap();
        let policy = PolicyConfig::from_name(contender).unwrap();
        let config = compiled.scenario.clients.balancer_keys().config(None);
        let mut sim = Sim::new(&compiled, &policy, &config, 1.0).unwrap();
        sim.hold_replies = hold;
        sim.start();
        sim.drive();
        let output = RunOutput {
            events: sim.events,
            measured: sim.recorder.finish(),
            hedging: sim.hedge_summary(),
            balancer: sim.balancer_summary(),
        };
        (output, sim.held)
    }

    /// Returns how many replies were held back and released.
    fn assert_unchanged(scenario: &str, contender: &str) -> (u64, u64) {
        let (held, counts) = run(scenario, contender, true);
        let (queued, none) = run(scenario, contender, false);
        assert_eq!(none, (0, 0));
        assert!(counts.0 > 0, "{contender}: nothing held back");
        assert_eq!(held, queued, "{contender}");
        counts
    }

    #[test]
    fn holding_replies_changes_nothing_under_processor_sharing() {
        for contender in ["prequal", "linear", "c3"] {
            assert_unchanged(CAPACITY, contender);
        }
    }

    #[test]
    fn holding_replies_changes_nothing_when_events_tie() {
        let mut released = 0;
        for contender in ["prequal", "linear", "c3"] {
            released += assert_unchanged(TIES, contender).1;
        }
        // Queries began to wait for replies while some were held: those were queued after all.
        assert!(released > 0);
    }
}
