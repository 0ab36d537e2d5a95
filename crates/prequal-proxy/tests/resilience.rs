//! Resilience end to end, over HTTP/1.1 and HTTP/2: outlier ejection, per-try timeouts, and
//! reload when the config file changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use prequal_proxy::ProxyConfig;

async fn outlier_ejection(proto: Proto) {
    let backends = futures_join(3).await;
    backends[0].set_status(502);
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "outlier = { consecutive_failures = 3, base_ejection = \"60s\" }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    // Round robin sends it every third try until three failures in a row eject it; retries
    // hide each failure from the client.
    assert_eq!(load(&client, proxy.addr, 30, 1).await, 30);
    let failing = backends[0].hits();
    assert_eq!(failing, 3, "ejected after exactly three failures");
    assert_eq!(load(&client, proxy.addr, 100, 2).await, 100);
    assert_eq!(
        backends[0].hits(),
        failing,
        "an ejected replica gets no traffic"
    );
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    assert_eq!(ejected_replicas(&metrics), 1.0);
    let view = get(&admin, proxy.admin, "/clusters/test").await.1;
    assert!(view.contains("\"ejected\": true"), "{view}");
}
over_h1_and_h2!(
    outlier_ejection_stops_traffic_to_a_failing_replica,
    outlier_ejection
);

async fn slow_try_is_retried(proto: Proto) {
    let backends = futures_join(2).await;
    backends[0].set_delay_ms(5_000);
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "try_timeout = \"100ms\"\noutlier_ejection = false";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    assert_eq!(
        load(&client, proxy.addr, 8, 1).await,
        8,
        "every GET succeeded"
    );
    assert_eq!(backends[1].hits(), 8);
    assert!(
        backends[0].hits() >= 3,
        "the slow replica was tried and timed out"
    );
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    let timeouts = metrics
        .lines()
        .filter(|l| l.contains("upstream_tries_total") && l.contains("outcome=\"timeout\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(timeouts, backends[0].hits() as f64);
}
over_h1_and_h2!(a_timed_out_try_is_retried_elsewhere, slow_try_is_retried);

async fn file_change_reloads(proto: Proto) {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let path = std::env::temp_dir().join(format!(
        "prequal-proxy-reload-{proto:?}-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, config_text(&[&a], proto, "\"round-robin\"", "")).unwrap();
    let config = ProxyConfig::from_file(&path).unwrap();
    let proxy_server = prequal_proxy::Proxy::bind(&config).await.unwrap();
    let addr = proxy_server.local_addr().unwrap();
    let handle = proxy_server.handle();
    let watcher = tokio::spawn(prequal_proxy::reload::watch_file(
        handle,
        path.clone(),
        Duration::from_millis(20),
    ));
    let server = tokio::spawn(proxy_server.run(std::future::pending()));
    let client = client(proto);
    assert_eq!(load(&client, addr, 10, 1).await, 10);
    assert_eq!((a.hits(), b.hits()), (10, 0));
    // A broken file is refused: traffic keeps going to A.
    std::fs::write(&path, "[clusters.test]\nupstreams = [\"not an address\"]\n").unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(load(&client, addr, 10, 1).await, 10);
    assert_eq!((a.hits(), b.hits()), (20, 0));
    // A good file moves the cluster to B (the ports stay as bound).
    std::fs::write(&path, config_text(&[&b], proto, "\"round-robin\"", "")).unwrap();
    let mut moved = false;
    for _ in 0..200 {
        if get(&client, addr, "/probe-move").await.0 == 200 && b.hits() > 0 {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(moved, "the edited file was applied");
    let a_before = a.hits();
    assert_eq!(load(&client, addr, 10, 1).await, 10);
    assert_eq!(a.hits(), a_before, "all traffic follows the new file");
    watcher.abort();
    server.abort();
    let _ = std::fs::remove_file(&path);
}
over_h1_and_h2!(
    a_config_file_change_reloads_and_a_bad_file_is_refused,
    file_change_reloads
);
