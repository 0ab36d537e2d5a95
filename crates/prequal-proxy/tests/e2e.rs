//! End-to-end tests over loopback: a real proxy in front of real backends, each test written
//! once and run over HTTP/1.1 and over HTTP/2 (client to proxy and proxy to replicas).
//! Assertions are on counts and orderings, never on wall-clock times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use prequal_core::catalog;
use prequal_proxy::ProxyConfig;

async fn every_policy_routes(proto: Proto) {
    let backends = [
        Backend::start().await,
        Backend::start().await,
        Backend::start().await,
    ];
    let refs: Vec<&Backend> = backends.iter().collect();
    let client = client(proto);
    for info in catalog() {
        let before: u64 = backends.iter().map(Backend::hits).sum();
        let policy = format!("\"{}\"", info.name);
        let mut proxy = start_proxy(&config_text(&refs, proto, &policy, NO_HEDGING)).await;
        let ok = load(&client, proxy.addr, 30, 3).await;
        assert_eq!(ok, 30, "policy {} answered every request", info.name);
        let after: u64 = backends.iter().map(Backend::hits).sum();
        assert_eq!(
            after - before,
            30,
            "policy {}: one try per request",
            info.name
        );
        proxy.shutdown();
        proxy.task.await.unwrap();
    }
}
over_h1_and_h2!(every_policy_routes_every_request, every_policy_routes);

async fn prequal_avoids_slow_replica(proto: Proto) {
    let backends: Vec<Backend> = futures_join(5).await;
    backends[0].set_delay_ms(150);
    for b in &backends[1..] {
        b.set_delay_ms(2);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, NO_HEDGING)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 200, 8).await, 200);
    let slow_before = backends[0].hits();
    let total_before: u64 = backends.iter().map(Backend::hits).sum();
    assert_eq!(load(&client, proxy.addr, 200, 8).await, 200);
    let slow = backends[0].hits() - slow_before;
    let total: u64 = backends.iter().map(Backend::hits).sum::<u64>() - total_before;
    assert_eq!(total, 200);
    assert!(
        slow < 20,
        "slow replica got {slow} of the last 200 requests"
    );
}
over_h1_and_h2!(
    prequal_moves_traffic_away_from_slow_replica,
    prequal_avoids_slow_replica
);

async fn late_probes_keep_connections(proto: Proto) {
    let backend = Backend::start().await;
    // Every probe answers after the policy has given up on it.
    backend.set_probe_delay_ms(15);
    let policy = r#"{ name = "prequal", probe_timeout = "2ms" }"#;
    let proxy = start_proxy(&config_text(&[&backend], proto, policy, "")).await;
    let client = client(proto);
    for _ in 0..20 {
        assert_eq!(get(&client, proxy.addr, "/").await.0, 200);
        // Long enough for the late probe to finish before the next request probes again.
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    let failed = metric(
        &metrics,
        "prequal_proxy_probes_total{cluster=\"test\",result=\"failed\"}",
    );
    let opened = metric(
        &metrics,
        "prequal_proxy_upstream_connections_total{cluster=\"test\",purpose=\"probe\"}",
    );
    assert!(failed >= 10.0, "only {failed} probes were late");
    // A late probe is still read to its end, so its connection serves the next probe.
    assert!(
        opened <= 4.0,
        "{opened} connections for {failed} late probes"
    );
}
over_h1_and_h2!(
    late_probes_keep_their_connections,
    late_probes_keep_connections
);

async fn killed_replica_is_retried(proto: Proto) {
    let backends = futures_join(3).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = format!("outlier_ejection = false\n{NO_HEDGING}");
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", &extra)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 9, 1).await, 9);
    backends[1].kill();
    let hits_before = backends[0].hits() + backends[2].hits();
    assert_eq!(
        load(&client, proxy.addr, 60, 2).await,
        60,
        "every GET succeeded"
    );
    assert_eq!(backends[0].hits() + backends[2].hits() - hits_before, 60);
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    let retries = metric(&metrics, "prequal_proxy_retries_total{cluster=\"test\"}");
    assert!(
        retries >= 15.0,
        "about a third of the requests were retried: {retries}"
    );
}
over_h1_and_h2!(
    idempotent_requests_to_a_killed_replica_succeed_by_retry,
    killed_replica_is_retried
);

async fn retries_stop_at_budget(proto: Proto) {
    let backend = Backend::start().await;
    backend.set_status(503);
    let extra = "outlier_ejection = false\nmax_attempts = 3\n\
                 retry_budget = { ratio = 0.25, min_per_second = 0.0, window = \"60s\" }";
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    let ok = load(&client, proxy.addr, 80, 1).await;
    assert_eq!(ok, 0, "every answer was the replica's 503");
    let hits = backend.hits();
    // 80 originals; retries at most 25% of them.
    assert!(hits > 80, "some retries were sent: {hits}");
    assert!(hits <= 100, "retries stayed within the budget: {hits}");
    let metrics = get(&client, proxy.admin, "/metrics").await.1;
    let refused = metric(
        &metrics,
        "prequal_proxy_retries_refused_total{cluster=\"test\"}",
    );
    assert!(refused > 0.0, "the budget refused some retries");
}
over_h1_and_h2!(retries_stop_at_the_budget, retries_stop_at_budget);

async fn fast_errors_do_not_swallow(proto: Proto) {
    fast_errors_case(proto, "").await;
}

/// The same with outlier ejection off: the core's error aversion alone keeps it out.
async fn fast_errors_aversion_only(proto: Proto) {
    fast_errors_case(proto, "outlier_ejection = false").await;
}
over_h1_and_h2!(
    error_aversion_alone_keeps_a_fast_5xx_replica_from_swallowing_traffic,
    fast_errors_aversion_only
);

async fn fast_errors_case(proto: Proto, extra: &str) {
    let backends = futures_join(4).await;
    backends[0].set_delay_ms(0);
    backends[0].set_status(500);
    for b in &backends[1..] {
        b.set_delay_ms(3);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, extra)).await;
    let client = client(proto);
    let ok = load(&client, proxy.addr, 200, 8).await;
    assert!(ok >= 190, "retries hid the failing replica: {ok} of 200");
    let bad_before = backends[0].hits();
    let total_before: u64 = backends.iter().map(Backend::hits).sum();
    assert_eq!(load(&client, proxy.addr, 200, 8).await, 200);
    let bad = backends[0].hits() - bad_before;
    let total: u64 = backends.iter().map(Backend::hits).sum::<u64>() - total_before;
    assert!(
        bad * 10 < total,
        "failing replica got {bad} of {total} tries"
    );
}
over_h1_and_h2!(
    a_fast_5xx_replica_does_not_swallow_traffic,
    fast_errors_do_not_swallow
);

async fn reload_under_load(proto: Proto) {
    let backends = futures_join(3).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    let policies = ["\"round-robin\"", PREQUAL, "\"least-loaded\"", "\"random\""];
    let texts: Vec<String> = policies
        .iter()
        .map(|p| config_text(&refs, proto, p, ""))
        .collect();
    let proxy = start_proxy(&texts[0]).await;
    let client = client(proto);
    let addr = proxy.addr;
    let loader = tokio::spawn(async move { load(&client, addr, 400, 4).await });
    for i in 0..12 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let config = ProxyConfig::from_toml(&texts[i % texts.len()], "test.toml").unwrap();
        proxy.handle.reload(&config).unwrap();
    }
    assert_eq!(
        loader.await.unwrap(),
        400,
        "no request was dropped by a reload"
    );
    // A bad config on reload is refused and the running one stays.
    let bad = config_text(&refs, proto, "\"no-such-policy\"", "");
    assert!(ProxyConfig::from_toml(&bad, "bad.toml").is_err());
    let broken = ProxyConfig::from_toml(&texts[0], "t.toml").map(|mut c| {
        c.routes.push(prequal_proxy::RouteConfig {
            host: None,
            path_prefix: "/".into(),
            cluster: "missing".into(),
        });
        c
    });
    assert!(proxy.handle.reload(&broken.unwrap()).is_err());
    assert_eq!(get(&client_again(proto), proxy.addr, "/").await.0, 200);
}
over_h1_and_h2!(reload_under_load_drops_nothing, reload_under_load);

async fn shutdown_drains(proto: Proto) {
    let backend = Backend::start().await;
    backend.set_delay_ms(300);
    let mut proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let client = client(proto);
    let addr = proxy.addr;
    let in_flight = tokio::spawn(async move { get(&client, addr, "/slow").await });
    // Wait (bounded) until the backend holds the request, then begin shutdown.
    for _ in 0..500 {
        if backend.in_flight.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(backend.in_flight.load(Ordering::SeqCst), 1);
    proxy.shutdown();
    let (status, body) = in_flight.await.unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, "ok"),
        "the in-flight request completed"
    );
    tokio::time::timeout(Duration::from_secs(10), &mut proxy.task)
        .await
        .expect("proxy stopped after draining")
        .unwrap();
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert!(refused.is_err(), "the listener is closed after shutdown");
}
over_h1_and_h2!(shutdown_drains_in_flight_requests, shutdown_drains);

async fn admin_views(proto: Proto) {
    let backends = futures_join(3).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, "")).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 40, 2).await, 40);
    let admin = client_again(Proto::H1);
    assert_eq!(get(&admin, proxy.admin, "/live").await.0, 200);
    assert_eq!(get(&admin, proxy.admin, "/ready").await.0, 200);
    let (status, text) = get(&admin, proxy.admin, "/clusters").await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cluster = &json[0];
    assert_eq!(cluster["name"], "test");
    assert_eq!(cluster["policy"], "prequal");
    assert_eq!(cluster["replicas"].as_array().unwrap().len(), 3);
    assert!(cluster["snapshot"]["pool"].is_array(), "{cluster}");
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    assert_eq!(
        metric(&metrics, "prequal_proxy_requests_total{cluster=\"test\"}"),
        40.0
    );
    assert!(
        metric(
            &metrics,
            "prequal_proxy_probes_total{cluster=\"test\",result=\"ok\"}"
        ) > 0.0
    );
    let probes = Arc::new(metrics);
    assert!(probes.contains("prequal_proxy_request_duration_seconds_bucket"));
    assert_eq!(get(&admin, proxy.admin, "/clusters/nope").await.0, 404);
    // The dashboard: one self-contained page that reads /clusters, at / and /dashboard.
    let (status, page) = get(&admin, proxy.admin, "/dashboard").await;
    assert_eq!(status, 200);
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(page.contains("fetch(\"/clusters\""));
    for external in ["http://", "https://", "src=", "href=", "@import"] {
        assert!(!page.contains(external), "the page loads {external}");
    }
    for shown in ["local_rif", "pool", "hot", "picks", "ejected", "latency_us"] {
        assert!(page.contains(shown), "the page does not show {shown}");
    }
    assert_eq!(get(&admin, proxy.admin, "/").await, (200, page));
}
over_h1_and_h2!(admin_serves_metrics_health_and_cluster_views, admin_views);

/// The admin view of each replica of cluster `test`.
async fn replica_views(admin: &TestClient, at: std::net::SocketAddr) -> Vec<serde_json::Value> {
    let json: serde_json::Value =
        serde_json::from_str(&get(admin, at, "/clusters/test").await.1).unwrap();
    json["replicas"].as_array().unwrap().clone()
}

/// What the admin view says each replica's probes get back instead of a reply, by address.
async fn probes_refused(admin: &TestClient, at: std::net::SocketAddr) -> Vec<(String, String)> {
    let views = replica_views(admin, at).await;
    let refused = views.iter().filter_map(|r| {
        let refused = r["probes_refused"].as_str()?;
        Some((r["address"].as_str()?.to_owned(), refused.to_owned()))
    });
    refused.collect()
}

/// A replica with no sidecar answers probes with a 404. Every request still succeeds, the
/// admin view names that replica and what its probes got, and the mark goes once it answers
/// probes again.
async fn refused_probes_are_shown(proto: Proto) {
    let backends = futures_join(2).await;
    backends[1].set_probe_status(404);
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, NO_HEDGING)).await;
    let client = client(proto);
    let admin = client_again(Proto::H1);
    assert_eq!(load(&client, proxy.addr, 40, 2).await, 40);
    let refused = probes_refused(&admin, proxy.admin).await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, backends[1].addr.to_string());
    assert!(refused[0].1.contains("404"), "{refused:?}");
    backends[1].set_probe_status(0);
    // Each round's queries probe both replicas; a reply from the second clears its mark.
    let mut rounds = 0;
    while !probes_refused(&admin, proxy.admin).await.is_empty() && rounds < 50 {
        assert_eq!(load(&client, proxy.addr, 10, 2).await, 10);
        rounds += 1;
    }
    assert!(
        probes_refused(&admin, proxy.admin).await.is_empty(),
        "still marked after {rounds} rounds of queries"
    );
}
over_h1_and_h2!(
    refused_probes_show_in_the_admin_view,
    refused_probes_are_shown
);

/// Replicas with no sidecar (every probe gets a 404): the policy is blind, and each pick goes
/// to the less loaded of two replicas by the proxy's own requests in flight. A slow replica
/// holding its requests gets few new ones, and the two fast ones share the rest. (With the
/// paper's random fallback, each replica's failed probes made it avoided until its next
/// success, and nearly every request crowded onto one fast replica.)
async fn blind_prequal_avoids_a_slow_replica(proto: Proto) {
    let backends = futures_join(3).await;
    backends[0].set_delay_ms(100);
    for b in &backends {
        b.set_probe_status(404);
    }
    for b in &backends[1..] {
        b.set_delay_ms(2);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, NO_HEDGING)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 150, 6).await, 150);
    let hits: Vec<u64> = backends.iter().map(Backend::hits).collect();
    assert!(hits[0] < 25, "the slow replica got too many: {hits:?}");
    assert!(
        hits[1] >= 30 && hits[2] >= 30,
        "the fast ones do not share: {hits:?}"
    );
}
over_h1_and_h2!(
    blind_prequal_moves_traffic_away_from_slow_replica,
    blind_prequal_avoids_a_slow_replica
);

/// `wait_when_stale`: queries spaced wider than the replicas' latency (and that latency many
/// probe round trips) find the pool stale and wait for fresh replies (the cluster's pending decisions, as for `prequal-sync`); every one
/// is answered, with one try each, and none is left waiting.
async fn stale_pool_waits_and_answers(proto: Proto) {
    let backends = futures_join(3).await;
    // Queries of 20 ms, many probe round trips on loopback: worth waiting for.
    for b in &backends {
        b.set_delay_ms(20);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let policy = "{ name = \"prequal\", probe_timeout = \"200ms\", wait_when_stale = true }";
    let proxy = start_proxy(&config_text(&refs, proto, policy, NO_HEDGING)).await;
    let client = client(proto);
    for _ in 0..15 {
        assert_eq!(load(&client, proxy.addr, 2, 1).await, 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hits: u64 = backends.iter().map(Backend::hits).sum();
    assert_eq!(hits, 30, "one try per request");
    let admin = client_again(Proto::H1);
    let json: serde_json::Value =
        serde_json::from_str(&get(&admin, proxy.admin, "/clusters/test").await.1).unwrap();
    assert_eq!(json["waiting_for_decision"], 0, "{json}");
    let values = json["snapshot"]["values"].as_array().unwrap();
    let waited = values
        .iter()
        .find(|v| v[0] == "queries_waited")
        .and_then(|v| v[1].as_f64());
    assert!(
        waited.is_some_and(|n| n > 0.0),
        "no query waited: {values:?}"
    );
}
over_h1_and_h2!(
    stale_pool_waits_for_fresh_replies,
    stale_pool_waits_and_answers
);

/// How many probes in a row each replica answered only after the probe timeout, by address.
async fn probes_late(admin: &TestClient, at: std::net::SocketAddr) -> Vec<(String, u64)> {
    let views = replica_views(admin, at).await;
    let late = views.iter().map(|r| {
        let address = r["address"].as_str().unwrap().to_owned();
        (address, r["probes_late_in_a_row"].as_u64().unwrap())
    });
    late.collect()
}

/// A replica whose probe replies come after the probe timeout (a round trip longer than
/// `probe_timeout`): the admin view counts its late replies in a row, and the count goes back
/// to zero once a reply comes in time. Requests succeed throughout.
async fn late_probes_are_counted(proto: Proto) {
    let backends = futures_join(2).await;
    backends[1].set_probe_delay_ms(100);
    let refs: Vec<&Backend> = backends.iter().collect();
    let policy = "{ name = \"prequal\", probe_timeout = \"20ms\" }";
    let proxy = start_proxy(&config_text(&refs, proto, policy, NO_HEDGING)).await;
    let client = client(proto);
    let admin = client_again(Proto::H1);
    let slow = backends[1].addr.to_string();
    let late_at_slow = |late: &[(String, u64)]| {
        late.iter()
            .find(|(address, _)| *address == slow)
            .map_or(0, |(_, n)| *n)
    };
    // Each round's queries probe both replicas; at most two probes to the slow one are out at
    // once, each for about 100 ms.
    let mut rounds = 0;
    while late_at_slow(&probes_late(&admin, proxy.admin).await) < 20 && rounds < 500 {
        assert_eq!(load(&client, proxy.addr, 4, 2).await, 4);
        tokio::time::sleep(Duration::from_millis(10)).await;
        rounds += 1;
    }
    let late = probes_late(&admin, proxy.admin).await;
    assert!(late_at_slow(&late) >= 20, "after {rounds} rounds: {late:?}");
    backends[1].set_probe_delay_ms(0);
    // Probes already out still take their 100 ms: let them end before counting.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut rounds = 0;
    while late_at_slow(&probes_late(&admin, proxy.admin).await) > 0 && rounds < 500 {
        assert_eq!(load(&client, proxy.addr, 4, 2).await, 4);
        tokio::time::sleep(Duration::from_millis(10)).await;
        rounds += 1;
    }
    let late = probes_late(&admin, proxy.admin).await;
    assert_eq!(late_at_slow(&late), 0, "after {rounds} rounds: {late:?}");
}
over_h1_and_h2!(late_probes_show_in_the_admin_view, late_probes_are_counted);

/// Connections are dealt to three data-plane threads, each with its own upstream pools; requests
/// in flight on every thread complete when the proxy drains.
async fn worker_threads_serve_and_drain(proto: Proto) {
    let backend = Backend::start().await;
    backend.set_delay_ms(300);
    let text = config_text(&[&backend], proto, "\"round-robin\"", "")
        .replace("[server]\n", "[server]\nworker_threads = 3\n");
    let mut proxy = start_proxy(&text).await;
    let addr = proxy.addr;
    // One client per request: six downstream connections, two per thread.
    let requests: Vec<_> = (0..6)
        .map(|_| {
            let client = client_again(proto);
            tokio::spawn(async move { get(&client, addr, "/slow").await })
        })
        .collect();
    for _ in 0..1000 {
        if backend.in_flight.load(Ordering::SeqCst) == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(backend.in_flight.load(Ordering::SeqCst), 6);
    // Each thread opened its own upstream connections (HTTP/2 would share one otherwise).
    assert!(backend.connections.load(Ordering::SeqCst) >= 3);
    proxy.shutdown();
    for request in requests {
        let (status, body) = request.await.unwrap();
        assert_eq!((status, body.as_str()), (200, "ok"));
    }
    tokio::time::timeout(Duration::from_secs(10), &mut proxy.task)
        .await
        .expect("proxy stopped after every thread drained")
        .unwrap();
}
over_h1_and_h2!(
    worker_threads_serve_and_drain_together,
    worker_threads_serve_and_drain
);
