//! End-to-end tests of the emulated backend over real loopback sockets, each run over
//! HTTP/1.1 and HTTP/2. Timing is only ever used as a lower bound the emulation guarantees
//! (a timer never fires early), never as an upper bound on how fast the machine is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use http::StatusCode;
use prequal_core::{EstimatorConfig, LoadReport, Time};
use prequal_model::model::ServersSpec;
use prequal_testbed::backend::{Backend, BackendSpec, Bind, REPLICA_HEADER};

use common::*;

/// Slow episode on replica 0: 2 ms queries become 40 ms from 300 ms after the start. Probe
/// replies must report at least 40 ms within 16 completions (the estimator's `min_samples`)
/// of the episode's start.
async fn slow_episode_shows_in_probe_replies(proto: Proto) {
    let backend = start(
        r#"count = 2
           latency = { kind = "constant", value = "2ms" }
           [[episodes]]
           servers = [0]
           start = "300ms"
           end = "1h"
           slow = 20.0"#,
        Some(2),
    )
    .await;
    let addr = backend.addrs()[0];
    let tracker = backend.replicas().next().unwrap().tracker();
    let client = client(proto);
    for _ in 0..20 {
        let (status, headers, _) = get(&client, proto, addr, "/q").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get(REPLICA_HEADER).unwrap(), "0");
    }
    let before = probe(&client, proto, addr).await;
    if tracker.clock().now() < Time::from_millis(300) {
        // Only meaningful if the machine was quick enough to finish before the episode.
        assert!(before.latency < Duration::from_millis(40), "{before:?}");
    }
    // Wait for the episode (sleeps never return early, and the backend's clock started
    // before `start` returned).
    while tracker.clock().now() < Time::from_millis(300) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut completions = 0;
    let report = loop {
        get(&client, proto, addr, "/q").await;
        completions += 1;
        let report = probe(&client, proto, addr).await;
        if report.latency >= Duration::from_millis(40) || completions >= 40 {
            break report;
        }
    };
    assert!(report.latency >= Duration::from_millis(40), "{report:?}");
    eprintln!("slow episode visible after {completions} completions");
    assert!(completions <= 16, "took {completions} completions");
    backend.shutdown().await;
}
both_protocols!(slow_episode_shows_in_probe_replies);

/// Capacity model: four 100 ms queries on one virtual core share it: all four are in flight
/// at once, the core is fully used, and the last finishes no sooner than 400 ms.
async fn capacity_model_shares_the_cpu(proto: Proto) {
    let backend = start(
        r#"count = 1
           [capacity]
           cost = { kind = "constant", value = "100ms" }
           allocation_cores = 1.0"#,
        Some(1),
    )
    .await;
    let addr = backend.addrs()[0];
    let client = client(proto);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let (status, _, _) = get(&client, proto, addr, "/work").await;
                (status, start.elapsed())
            })
        })
        .collect();
    let mut busiest = LoadReport::default();
    let deadline = Instant::now() + BOUND;
    while Instant::now() < deadline {
        let report = probe(&client, proto, addr).await;
        if report.rif == 4 && report.utilization.is_some_and(|u| u >= 0.9) {
            busiest = report;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(busiest.rif, 4, "{busiest:?}");
    let mut last = Duration::ZERO;
    for task in tasks {
        let (status, elapsed) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        last = last.max(elapsed);
    }
    // One core does 4 x 100 ms of work no faster than in 400 ms (1 ms slack for the model's
    // rounding), whenever the queries arrived.
    assert!(last >= Duration::from_millis(399), "{last:?}");
    backend.shutdown().await;
}
both_protocols!(capacity_model_shares_the_cpu);

/// An error episode answers 500 and shows in the probe's error rate; a speed multiplier
/// slows its replica.
async fn error_episode_and_speed(proto: Proto) {
    let backend = start(
        r#"count = 2
           latency = { kind = "constant", value = "20ms" }
           [[speed]]
           servers = [1]
           factor = 0.5
           [[episodes]]
           servers = [0]
           start = "0s"
           end = "1h"
           error_rate = 1.0
           error_latency = "1ms""#,
        Some(2),
    )
    .await;
    let (failing, slow) = (backend.addrs()[0], backend.addrs()[1]);
    let client = client(proto);
    for _ in 0..3 {
        assert_eq!(
            get(&client, proto, failing, "/").await.0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    let report = probe(&client, proto, failing).await;
    assert_eq!(report.error_rate, Some(1.0));
    let start = Instant::now();
    assert_eq!(get(&client, proto, slow, "/").await.0, StatusCode::OK);
    assert!(
        start.elapsed() >= Duration::from_millis(40),
        "half speed doubles 20 ms"
    );
    backend.shutdown().await;
}
both_protocols!(error_episode_and_speed);

#[tokio::test]
async fn asking_for_more_replicas_than_the_spec_is_an_error() {
    let servers: ServersSpec =
        toml::from_str("count = 2\nlatency = { kind = \"constant\", value = \"1ms\" }").unwrap();
    let spec = BackendSpec::new(servers, EstimatorConfig::default(), 1, Path::new(".")).unwrap();
    let bind = Bind {
        host: IpAddr::V4(Ipv4Addr::LOCALHOST),
        base_port: 0,
        first: 1,
        replicas: 2,
        drain: Duration::ZERO,
        piggyback: false,
    };
    let err = Backend::start(&spec, bind).await.unwrap_err();
    assert!(err.to_string().contains("servers.count"), "{err}");
}

/// A trace replayed for a subset of replicas served by this process: replicas 1 and 2 of 3,
/// every query taking the trace's only latency, 30 ms.
#[tokio::test]
async fn trace_replay_on_a_subset_of_replicas() {
    let dir = std::env::temp_dir().join(format!("prequal-backend-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("trace.txt"), "# latencies\n30ms\n30\n").unwrap();
    let servers: ServersSpec =
        toml::from_str("count = 3\nlatency = { kind = \"trace\", file = \"trace.txt\" }").unwrap();
    let spec = BackendSpec::new(servers, EstimatorConfig::default(), 1, &dir).unwrap();
    let bind = Bind {
        host: IpAddr::V4(Ipv4Addr::LOCALHOST),
        base_port: 0,
        first: 1,
        replicas: 2,
        drain: Duration::ZERO,
        piggyback: false,
    };
    let backend = Backend::start(&spec, bind).await.unwrap();
    let client = client(Proto::Http1);
    for (addr, index) in backend.addrs().into_iter().zip(["1", "2"]) {
        let start = Instant::now();
        let (status, headers, _) = get(&client, Proto::Http1, addr, "/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get(REPLICA_HEADER).unwrap(), index);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A capacity-loss episode halves the cores from 200 ms on: a 50 ms query that arrives after
/// that takes at least 100 ms.
#[tokio::test]
async fn capacity_loss_episode_slows_cpu_work() {
    let backend = start(
        r#"count = 1
           [capacity]
           cost = { kind = "constant", value = "50ms" }
           allocation_cores = 1.0
           [[episodes]]
           servers = [0]
           start = "200ms"
           end = "1h"
           capacity_loss = 0.5"#,
        Some(1),
    )
    .await;
    let tracker = backend.replicas().next().unwrap().tracker();
    while tracker.clock().now() < Time::from_millis(200) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = client(Proto::Http1);
    let start = Instant::now();
    let (status, _, _) = get(&client, Proto::Http1, backend.addrs()[0], "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        start.elapsed() >= Duration::from_millis(99),
        "{:?}",
        start.elapsed()
    );
    backend.shutdown().await;
}
