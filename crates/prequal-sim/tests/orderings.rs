//! The orderings that define each reproduced result, on scaled-down scenarios in virtual time.

// Test helpers outside #[test] functions may unwrap: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use prequal_core::PolicyConfig;
use prequal_sim::report::{self, Report};
use prequal_sim::scenario::{Compiled, Contender, Scenario};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

fn run(compiled: &Compiled) -> Report {
    let plans = report::plan(compiled).unwrap();
    report::run_all(compiled, &plans, &|_| {}).unwrap()
}

fn with_contenders(names: &[&str]) -> Vec<Contender> {
    names
        .iter()
        .map(|n| PolicyConfig::from_name(n).unwrap().into())
        .collect()
}

/// Share of queries not answered successfully within the objective, in percent.
fn slow_pct(report: &Report, label: &str) -> f64 {
    let run = report.runs.iter().find(|r| r.label == label).unwrap();
    100.0 * (1.0 - run.output.measured.summary.within_objective)
}

/// Beyond Round Robin, half as long (30 s, the slow replica for the middle half): round
/// robin sends 1/11 of the queries to the 2 s replica half of the time, so about 4.5% are slow;
/// Prequal and peak EWMA steer away from it far better than least-loaded does.
#[test]
fn beyond_round_robin_orderings() {
    let compiled = Scenario::load_adjusted(&scenario("beyond-round-robin.toml"), |s| {
        s.scale_time(0.5);
        s.contenders = with_contenders(&["round-robin", "least-loaded", "peak-ewma", "prequal"]);
    })
    .unwrap();
    let report = run(&compiled);
    let rr = slow_pct(&report, "round-robin");
    let ll = slow_pct(&report, "least-loaded");
    let ewma = slow_pct(&report, "peak-ewma");
    let prequal = slow_pct(&report, "prequal");
    eprintln!("slow %: rr {rr:.3} ll {ll:.3} peak-ewma {ewma:.3} prequal {prequal:.3}");
    let expected = 100.0 / 11.0 * 0.5;
    assert!(
        (rr - expected).abs() < 0.5,
        "round robin {rr:.3}% vs {expected:.3}%"
    );
    assert!(
        ll < rr / 2.0,
        "least-loaded {ll:.3}% vs round robin {rr:.3}%"
    );
    assert!(
        prequal < ll / 2.0,
        "prequal {prequal:.3}% vs least-loaded {ll:.3}%"
    );
    assert!(
        ewma < ll / 2.0,
        "peak-ewma {ewma:.3}% vs least-loaded {ll:.3}%"
    );
}

/// Beyond Round Robin, half as long: once the 2 s episode ends, prequal must give the replica
/// traffic again. With the paper's HCL rule (no latency band, replies ranked by their reported
/// latency for every use) it is shunned while its stale 2 s estimate stands,
/// so only the stale decay brings it back; with the decay off it gets nothing after its
/// episode. (With the default latency band it also keeps a trickle of queries during the
/// episode, whose fast answers at the end bring it back without the decay.)
#[test]
fn prequal_returns_traffic_to_a_replica_after_its_slow_episode() {
    let queries_after_episode = |half_life_ms: u64| {
        let compiled = Scenario::load_adjusted(&scenario("beyond-round-robin.toml"), |s| {
            s.scale_time(0.5);
            s.contenders = vec![
                PolicyConfig::Prequal(prequal_core::policies::prequal::Config {
                    latency_band: 0.0,
                    own_queries_raise_latency: false,
                    ..Default::default()
                })
                .into(),
            ];
            s.estimator.stale_half_life = std::time::Duration::from_millis(half_life_ms);
        })
        .unwrap();
        let report = run(&compiled);
        let seconds = &report.runs[0].output.measured.per_second;
        // The episode covers 7.5 s to 22.5 s; count what the slow replica got from 25 s on.
        seconds[25..].iter().map(|s| s.replicas[10]).sum::<u64>()
    };
    let with_decay = queries_after_episode(1_000);
    let without = queries_after_episode(0);
    eprintln!("replica 10 after its episode: {with_decay} with decay, {without} without");
    assert!(with_decay > 50, "only {with_decay} queries with decay");
    assert_eq!(without, 0);
}

/// The Prequal load ramp on 20 replicas and 10 clients, 3.3 s per step: WRR hits the 5 s
/// deadline at the top steps, Prequal never does.
#[test]
fn ramp_prequal_has_no_timeouts_where_wrr_does() {
    let compiled = Scenario::load_adjusted(&scenario("prequal-ramp.toml"), |s| {
        s.scale_time(0.05);
        s.servers.count = 20;
        s.clients.count = 10;
    })
    .unwrap();
    let report = run(&compiled);
    let timeouts = |label: &str| -> Vec<u64> {
        let run = report.runs.iter().find(|r| r.label == label).unwrap();
        run.output
            .measured
            .phases
            .iter()
            .map(|p| p.summary.timeouts)
            .collect()
    };
    let (wrr, prequal) = (timeouts("weighted-round-robin"), timeouts("prequal"));
    eprintln!("timeouts per step: wrr {wrr:?} prequal {prequal:?}");
    assert_eq!(
        prequal.iter().sum::<u64>(),
        0,
        "prequal timed out: {prequal:?}"
    );
    assert!(
        wrr[7] > 0 && wrr[8] > 0,
        "wrr should time out at the top steps: {wrr:?}"
    );
}

#[test]
fn same_seed_gives_byte_identical_json_and_another_seed_does_not() {
    let load = |seed: u64| {
        Scenario::load_adjusted(&scenario("beyond-round-robin.toml"), |s| {
            s.scale_time(0.1);
            s.seed = seed;
            s.contenders = with_contenders(&["round-robin", "prequal"]);
        })
        .unwrap()
    };
    let a = run(&load(7)).to_json().unwrap();
    let b = run(&load(7)).to_json().unwrap();
    let c = run(&load(8)).to_json().unwrap();
    assert!(a == b, "same seed, different JSON");
    assert_ne!(a, c);
}

#[test]
fn bad_file_error_names_file_and_key() {
    let dir = std::env::temp_dir().join(format!("prequal-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    let text = std::fs::read_to_string(scenario("beyond-round-robin.toml")).unwrap();
    std::fs::write(&path, text.replace("count = 11", "count = 11\nspeeed = 2")).unwrap();
    let err = Scenario::load(&path).unwrap_err().to_string();
    assert!(err.contains("bad.toml") && err.contains("speeed"), "{err}");
    std::fs::write(&path, text.replace("start = \"15s\"", "start = \"50s\"")).unwrap();
    let err = Scenario::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("bad.toml") && err.contains("servers.episodes[0].end"),
        "{err}"
    );
    let err = Scenario::load(&dir.join("missing.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing.toml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Probes slower than the policy's probe timeout are reported as failures; Prequal then has no
/// pool to choose from and picks at random, so it still serves every query. Every replica's
/// streak of failed probes makes it avoided until one of its queries succeeds, so the random
/// pick keeps to the replicas whose queries come back, and the slow replica, whose queries take
/// 2 s, is still mostly avoided (round robin leaves about 4.5% of queries slow).
#[test]
fn probes_past_their_timeout_fail_and_every_query_is_still_served() {
    let compiled = Scenario::load_adjusted(&scenario("beyond-round-robin.toml"), |s| {
        s.scale_time(0.25);
        s.contenders = with_contenders(&["prequal"]);
        s.network.probe_delay = Some(prequal_sim::model::DistSpec::Constant {
            value: std::time::Duration::from_millis(5),
        });
    })
    .unwrap();
    let report = run(&compiled);
    let s = &report.runs[0].output.measured.summary;
    assert_eq!(s.successes, s.queries);
    let slow = slow_pct(&report, "prequal");
    assert!(
        slow < 1.0,
        "without probe replies prequal still keeps away from the slow replica: {slow:.3}%"
    );
}

/// With `piggyback_reports`, responses carry the replica's load report to the policy; C3 uses
/// them, so its decisions (and the run) change.
#[test]
fn piggybacked_reports_reach_the_policy() {
    let load = |piggyback: bool| {
        Scenario::load_adjusted(&scenario("power-of-two-high.toml"), |s| {
            s.scale_time(0.1);
            s.contenders = with_contenders(&["c3"]);
            s.clients.piggyback_reports = piggyback;
        })
        .unwrap()
    };
    let (off, on) = (run(&load(false)), run(&load(true)));
    let servers = |r: &Report| -> Vec<u64> {
        r.runs[0]
            .output
            .measured
            .servers
            .iter()
            .map(|s| s.queries)
            .collect()
    };
    assert_ne!(servers(&off), servers(&on));
}

/// The same at full length with the defaults (latency band on): the replica gets its traffic
/// back within seconds of the episode's end (45 s).
#[test]
fn default_prequal_returns_traffic_to_a_replica_after_its_slow_episode() {
    let compiled = Scenario::load_adjusted(&scenario("beyond-round-robin.toml"), |s| {
        s.contenders = with_contenders(&["prequal"]);
    })
    .unwrap();
    let report = run(&compiled);
    let seconds = &report.runs[0].output.measured.per_second;
    let after: u64 = seconds[52..].iter().map(|s| s.replicas[10]).sum();
    assert!(after > 50, "only {after} queries after the episode");
}

/// Every shipped scenario, the held-out ones included, loads and compiles; each held-out one
/// also runs, scaled down, with a result for every contender.
#[test]
fn every_shipped_scenario_loads_and_the_held_out_ones_run() {
    let mut held_out = 0;
    for dir in [scenario(""), scenario("held-out")] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        paths.sort();
        assert!(!paths.is_empty(), "no scenarios in {}", dir.display());
        for path in paths {
            if let Err(e) = Scenario::load(&path) {
                panic!("{}: {e}", path.display());
            }
            if dir.ends_with("held-out") {
                held_out += 1;
                let compiled = Scenario::load_adjusted(&path, |s| s.scale_time(0.05)).unwrap();
                let report = run(&compiled);
                assert_eq!(
                    report.runs.len(),
                    compiled.scenario.contenders.len(),
                    "{}",
                    path.display()
                );
                assert!(
                    report
                        .runs
                        .iter()
                        .all(|r| r.output.measured.summary.queries > 0),
                    "{}: a contender served no query",
                    path.display()
                );
            }
        }
    }
    assert_eq!(
        held_out, 8,
        "scenarios/held-out should hold the eight held-out scenarios"
    );
}
