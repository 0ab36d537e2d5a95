use super::*;

const BRR: &str = include_str!("../../../../scenarios/beyond-round-robin.toml");

fn parse(text: &str) -> Result<Compiled, String> {
    Scenario::parse(text, Path::new("t.toml")).map_err(|e| e.to_string())
}

#[test]
fn shipped_beyond_round_robin_parses() {
    let c = parse(BRR).unwrap();
    assert_eq!(c.scenario.servers.count, 11);
    assert_eq!(c.end(), Time::from_secs(60));
    assert_eq!(c.phases[0].qps_at(Time::from_secs(3)), 1000.0);
}

#[test]
fn unknown_key_is_named_with_the_file() {
    let err = parse(&BRR.replace("[clients]", "[clients]\nburst = 3")).unwrap_err();
    assert!(err.starts_with("t.toml:"), "{err}");
    assert!(err.contains("burst"), "{err}");
}

#[test]
fn bad_values_name_their_key_path() {
    let cases = [
        (
            "servers = [10]",
            "servers = [11]",
            "servers.episodes[0].servers",
        ),
        ("end = \"45s\"", "end = \"5s\"", "servers.episodes[0].end"),
        (
            "end = \"45s\"",
            "end = \"45s\"\ncapacity_loss = 0.5",
            "servers.episodes[0].capacity_loss",
        ),
        ("count = 1\n", "count = 0\n", "clients.count"),
        (
            "latency_objective = \"1s\"",
            "latency_objective = \"0s\"",
            "latency_objective",
        ),
        (
            "[clients]",
            "[experiment]\ntimeout = \"0s\"\n[clients]",
            "experiment.timeout",
        ),
        // Counts that would abort the process allocating them.
        ("count = 1\n", "count = 1000000000\n", "clients.count"),
        ("count = 11\n", "count = 1000000000\n", "servers.count"),
        ("level = 1000.0", "level = -1.0", "load.steps[0].level"),
        // A load longer than a day: its per-second histograms alone would take gigabytes.
        ("duration = \"60s\"", "duration = \"2days\"", "load"),
        (
            "level = 1000.0",
            "level = 1.0, unit = \"allocation\"",
            "load.steps[0].level",
        ),
        (
            "\"prequal\"]",
            "{ name = \"prequal\", q_rif = 7.0 }]",
            "contenders[3]",
        ),
        // The same contender twice: the same run twice, under the same label.
        (
            "\"prequal\"]",
            "\"prequal\", { name = \"prequal\" }]",
            "repeats contenders[3]",
        ),
    ];
    for (from, to, key) in cases {
        let text = BRR.replacen(from, to, 1);
        assert_ne!(text, BRR, "{from}");
        let err = parse(&text).unwrap_err();
        assert!(err.contains(key), "{key}: {err}");
    }
}

#[test]
fn wrong_type_names_the_key() {
    let err = parse(&BRR.replace("seed = 1", "seed = \"one\"")).unwrap_err();
    assert!(err.contains("seed"), "{err}");
    let err = parse(&BRR.replace("\"round-robin\",", "\"round-robbin\",")).unwrap_err();
    assert!(
        err.contains("round-robbin") && err.contains("contenders"),
        "{err}"
    );
}

#[test]
fn allocation_unit_converts_through_mean_cost() {
    let text = r#"
contenders = ["random"]
[servers]
count = 10
[servers.capacity]
cost = { kind = "constant", value = "10ms" }
allocation_cores = 2.0
[clients]
count = 2
[load]
ramp = { start = 0.5, factor = 2.0, steps = 2, step_duration = "1s", unit = "allocation" }
"#;
    let c = parse(text).unwrap();
    // 0.5 × 10 replicas × 2 cores / 10 ms = 1000 qps, then 2000.
    assert_eq!(c.phases.len(), 2);
    assert!((c.phases[0].qps_start - 1000.0).abs() < 1e-6);
    assert!((c.phases[1].qps_start - 2000.0).abs() < 1e-6);
    assert_eq!(c.phases[1].label, "1.00x");
}

#[test]
fn trace_files_resolve_next_to_the_scenario() {
    let dir = std::env::temp_dir().join(format!("prequal-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lat.txt"), "# ms\n10\n20ms\n").unwrap();
    let text = BRR.replace(
        "latency = { kind = \"normal\", mean = \"167ms\", sd = \"5ms\" }",
        "latency = { kind = \"trace\", file = \"lat.txt\" }",
    );
    let c = Scenario::parse(&text, &dir.join("s.toml")).unwrap();
    assert!((c.service.mean_nanos() - 15e6).abs() < 1.0);
    let err = Scenario::parse(&text.replace("lat.txt", "nope.txt"), &dir.join("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope.txt"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `prequal experiment` hands the scenario to its replicas by writing it back as TOML, so every
/// shipped scenario must survive the round trip unchanged.
#[test]
fn shipped_scenarios_round_trip_through_toml() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let first = Scenario::load(&path).unwrap();
        let text = toml::to_string(&first.scenario).unwrap();
        let second = Scenario::parse(&text, &path).unwrap();
        assert_eq!(first.phases, second.phases, "{}", path.display());
        assert_eq!(
            toml::to_string(&second.scenario).unwrap(),
            text,
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 8, "found {seen} scenarios in {}", dir.display());
}

#[test]
fn hedging_is_set_per_contender_or_for_all_clients() {
    let text = BRR.replace(
        "contenders = [\"round-robin\", \"least-loaded\", \"peak-ewma\", \"prequal\"]",
        "contenders = [\"prequal\", { name = \"prequal\", q_rif = 0.5, hedge = { delay = \"200ms\" } }]",
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.scenario.contenders[0].hedge, None);
    let hedge = c.scenario.contenders[1].hedge.as_ref().unwrap();
    assert_eq!(hedge.delay, Some(Duration::from_millis(200)));
    assert_eq!(c.scenario.contenders[1].policy.name(), "prequal");
    let c = parse(&BRR.replace("[clients]", "[clients.hedge]\nratio = 0.1\n[clients]")).unwrap();
    assert_eq!(c.scenario.clients.hedge.as_ref().unwrap().ratio, 0.1);
    let err =
        parse(&BRR.replace("[clients]", "[clients.hedge]\nratio = -1.0\n[clients]")).unwrap_err();
    assert!(err.contains("clients.hedge.ratio"), "{err}");
    let err = parse(&text.replace("delay = \"200ms\"", "dealy = \"200ms\"")).unwrap_err();
    assert!(err.contains("dealy") && err.contains("contenders"), "{err}");
}

#[test]
fn balancer_keys_are_set_per_contender_over_the_clients_keys() {
    let text = BRR
        .replace(
            "contenders = [\"round-robin\", \"least-loaded\", \"peak-ewma\", \"prequal\"]",
            "contenders = [\"prequal\", { name = \"prequal\", max_attempts = 1, \
             outlier = { base_ejection = \"1s\" } }]",
        )
        .replace(
            "[clients]",
            "[clients.outlier]\nconsecutive_failures = 3\n[clients]\noutlier_ejection = false",
        );
    let c = parse(&text).unwrap();
    let clients = c.scenario.clients.balancer_keys();
    assert_eq!(clients.outlier_ejection, Some(false));
    assert_eq!(clients.outlier.as_ref().unwrap().consecutive_failures, 3);
    let own = &c.scenario.contenders[1].balancer;
    assert_eq!(c.scenario.contenders[1].policy.name(), "prequal");
    assert!(c.scenario.contenders[0].balancer.is_empty());
    // A contender's key replaces the clients' key of the same name (a table as a whole);
    // unset keys take the proxy's defaults.
    let config = own.over(&clients).config(None);
    assert_eq!((config.max_attempts, config.outlier_ejection), (1, false));
    assert_eq!(config.outlier.base_ejection, Duration::from_secs(1));
    assert_eq!(config.outlier.consecutive_failures, 5);
    assert!(!config.hedge.enabled);
    assert_eq!(BalancerKeys::default().config(None).max_attempts, 3);
    assert_eq!(
        own.label(),
        " +max_attempts=1 +outlier (base_ejection=\"1s\")"
    );
    // Errors name the key where it was set.
    let bad = text.replace("max_attempts = 1", "max_attempts = 0");
    let err = parse(&bad).unwrap_err();
    assert!(err.contains("contenders[1].max_attempts"), "{err}");
    let bad = text.replace("consecutive_failures = 3", "consecutive_failures = 0");
    let err = parse(&bad).unwrap_err();
    assert!(
        err.contains("clients.outlier.consecutive_failures"),
        "{err}"
    );
    let bad = text.replace("base_ejection", "base_ejectoin");
    let err = parse(&bad).unwrap_err();
    assert!(
        err.contains("base_ejectoin") && err.contains("contenders"),
        "{err}"
    );
}

#[test]
fn shipped_faults_parses_with_one_hedged_contender() {
    let c = parse(include_str!("../../../../scenarios/faults.toml")).unwrap();
    assert_eq!(c.scenario.servers.count, 10);
    assert_eq!(c.scenario.servers.episodes.len(), 4);
    let hedged: Vec<_> = c
        .scenario
        .contenders
        .iter()
        .map(|c| c.hedge.is_some())
        .collect();
    assert_eq!(hedged, [false, false, false, false, true]);
}

const HETERO: &str = include_str!("../../../../scenarios/heterogeneous-70.toml");

#[test]
fn capacity_unit_weights_thread_pool_replicas_by_speed() {
    let c = parse(HETERO).unwrap();
    // Speeds 4 × 3 + 2 × 2.5 + 2 × 1.5 + 2 × 1 = 22; 0.7 × 22 × 4 workers / 20 ms = 3080 qps.
    assert!(
        (c.phases[0].qps_start - 3080.0).abs() < 1e-6,
        "{:?}",
        c.phases
    );
    let text = HETERO.replace("unit = \"capacity\"", "unit = \"allocation\"");
    // 0.7 × 10 replicas × 4 workers / 20 ms = 1400 qps.
    assert!((parse(&text).unwrap().phases[0].qps_start - 1400.0).abs() < 1e-6);
}

#[test]
fn thread_pool_errors_name_their_key() {
    let cases = [
        ("workers = 4", "workers = 0", "servers.thread_pool.workers"),
        (
            "workers = 4",
            "workers = 4000000000",
            "servers.thread_pool.workers",
        ),
        (
            "mean = \"20ms\"",
            "mean = \"0ms\"",
            "servers.thread_pool.service",
        ),
        ("workers = 4", "workers = 4\nqueue_limt = 3", "queue_limt"),
        (
            "[servers.thread_pool]",
            "latency = { kind = \"constant\", value = \"1ms\" }\n[servers.thread_pool]",
            "exactly one",
        ),
    ];
    for (from, to, key) in cases {
        let text = HETERO.replacen(from, to, 1);
        assert_ne!(text, HETERO, "{from}");
        let err = parse(&text).unwrap_err();
        assert!(err.contains(key), "{key}: {err}");
    }
}
