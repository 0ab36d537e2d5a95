//! The proxy's time is tokio's (`src/clock.rs`): with tokio's clock paused, a cluster's timer
//! ends a 5-second outlier ejection as soon as the runtime has nothing else to do, so the test
//! takes no real time, and what it checks does not depend on how busy the machine is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use prequal_core::Outcome;
use prequal_proxy::ProxyConfig;
use prequal_proxy::clock::Clock;
use prequal_proxy::cluster::Ending;
use prequal_proxy::cluster::{Attempt, Cluster, Strict};
use prequal_proxy::metrics::Metrics;
use tokio::time::Instant;

const BAD: &str = "127.0.0.1:1";

/// A round-robin cluster over three replicas (never connected to: the test reports the tries'
/// ends itself), with its timer running.
fn cluster() -> Arc<Cluster> {
    let text = format!(
        r#"
        [clusters.c]
        upstreams = ["{BAD}", "127.0.0.1:2", "127.0.0.1:3"]
        policy = "round-robin"
        "#
    );
    let config = ProxyConfig::from_toml(&text, "paused.toml").unwrap();
    let metrics = Arc::new(Metrics::new());
    let (cluster, background) = Cluster::new(
        "c",
        &config.clusters["c"],
        None,
        Clock::start(),
        &metrics,
        1,
    )
    .unwrap();
    for task in background.into_tasks() {
        tokio::spawn(task);
    }
    cluster.set_members(&config.clusters["c"].upstreams);
    cluster
}

/// The admin view's entry for `address`.
fn replica(cluster: &Cluster, address: &str) -> serde_json::Value {
    let view = cluster.view();
    let replicas = view["replicas"].as_array().unwrap();
    let found = replicas.iter().find(|r| r["address"] == address);
    found.cloned().expect("the replica is in the view")
}

fn ejected(cluster: &Cluster, address: &str) -> bool {
    replica(cluster, address)["ejected"].as_bool().unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_ejection_ends_at_the_cluster_timer_in_paused_time() {
    let cluster = cluster();
    // Every try to the bad replica fails; five in a row (outlier.consecutive_failures'
    // default) eject it for outlier.base_ejection, 5 s by default.
    let attempt = Attempt {
        first: true,
        plan_hedge: false,
        exclude: &[],
        strict: Strict::No,
    };
    let mut tries = 0;
    while !ejected(&cluster, BAD) {
        tries += 1;
        assert!(tries <= 100, "the failing replica is never ejected");
        let chosen = cluster.pick(0, attempt).await.unwrap();
        let outcome = match chosen.authority.as_str() == BAD {
            true => Outcome::Error,
            false => Outcome::Success,
        };
        let took = Duration::from_millis(1);
        cluster.complete(
            chosen.replica,
            chosen.query,
            (took, Some(took), Some(took)),
            Ending {
                outcome,
                client_fault: false,
                lost: false,
            },
            None,
            0,
        );
    }
    let ejected_at = Instant::now();
    let view = cluster.view();
    let outlier = view["outlier"].as_array().unwrap();
    let record = outlier.iter().find(|r| r["address"] == BAD).unwrap();
    assert_eq!(record["ejected_for"], "5s");

    // Nothing but the cluster's timer puts the replica back; with the clock paused, each sleep
    // here lets the runtime jump to the next timer instead of waiting for it.
    while ejected(&cluster, BAD) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(ejected_at.elapsed() < Duration::from_secs(60), "never back");
    }
    let back_after = ejected_at.elapsed();
    assert!(
        (Duration::from_secs(5)..=Duration::from_millis(5_100)).contains(&back_after),
        "back after {back_after:?} of tokio time, not at the end of its 5 s ejection"
    );
    assert!(cluster.is_ready());
}
