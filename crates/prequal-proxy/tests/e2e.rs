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

/// Probes on a busy test machine can take longer than the datacenter default of 3 ms.
const PREQUAL: &str = "{ name = \"prequal\", probe_timeout = \"200ms\" }";

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
        let mut proxy = start_proxy(&config_text(&refs, proto, &policy, "")).await;
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
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, "")).await;
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

async fn futures_join(n: usize) -> Vec<Backend> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(Backend::start().await);
    }
    out
}

async fn killed_replica_is_retried(proto: Proto) {
    let backends = futures_join(3).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "outlier_ejection = false";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
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

/// The value of the first sample line starting with `series`.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

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
    let backends = futures_join(4).await;
    backends[0].set_delay_ms(0);
    backends[0].set_status(500);
    for b in &backends[1..] {
        b.set_delay_ms(3);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, proto, PREQUAL, "")).await;
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

fn client_again(proto: Proto) -> TestClient {
    client(proto)
}

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
}
over_h1_and_h2!(admin_serves_metrics_health_and_cluster_views, admin_views);

async fn trailers_pass_through(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let client = client(proto);
    let request = http::Request::post(format!("http://{}/trailers", proxy.addr))
        .header("te", "trailers")
        .header("content-type", "application/grpc")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let collected = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap();
    let trailers = collected.trailers().cloned().expect("trailers arrived");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(&collected.to_bytes()[..], b"payload");
}
over_h1_and_h2!(grpc_style_trailers_pass_through, trailers_pass_through);

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

async fn forwarding_headers(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let mut request = http::Request::get(format!("http://{}/echo-headers", proxy.addr))
        .header("host", "app.example")
        .header("x-forwarded-for", "10.1.2.3");
    if proto == Proto::H1 {
        // Connection-specific headers exist only in HTTP/1.1.
        request = request
            .header("connection", "x-private")
            .header("x-private", "secret")
            .header("keep-alive", "timeout=5");
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = client(proto).request(request).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let seen = String::from_utf8_lossy(&body).into_owned();
    assert!(
        seen.contains("x-forwarded-for: 10.1.2.3, 127.0.0.1"),
        "{seen}"
    );
    assert!(
        seen.contains("forwarded: for=127.0.0.1;proto=http"),
        "{seen}"
    );
    assert!(
        seen.contains("via: 1.1 prequal") || seen.contains("via: 2 prequal"),
        "{seen}"
    );
    assert!(
        !seen.contains("x-private") && !seen.contains("keep-alive"),
        "{seen}"
    );
    match proto {
        Proto::H1 => assert!(seen.contains("host: app.example"), "{seen}"),
        Proto::H2 => assert!(seen.contains("x-forwarded-host: app.example"), "{seen}"),
    }
}
over_h1_and_h2!(
    forwarding_headers_are_set_and_hop_by_hop_removed,
    forwarding_headers
);

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
    assert_eq!(
        metric(&metrics, "prequal_proxy_ejected_replicas{cluster=\"test\"}"),
        1.0
    );
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

async fn body_limit(proto: Proto) {
    let backend = Backend::start().await;
    let text = config_text(&[&backend], proto, "\"round-robin\"", "").replace(
        "drain_timeout = \"5s\"",
        "drain_timeout = \"5s\"\nmax_body_bytes = 16",
    );
    let proxy = start_proxy(&text).await;
    let post = |len: usize| {
        http::Request::post(format!("http://{}/upload", proxy.addr))
            .body(http_body_util::Full::new(bytes::Bytes::from(vec![
                b'x';
                len
            ])))
            .unwrap()
    };
    let client = client(proto);
    assert_eq!(client.request(post(16)).await.unwrap().status(), 200);
    assert_eq!(client.request(post(17)).await.unwrap().status(), 413);
    assert_eq!(
        backend.hits(),
        1,
        "the oversized body never reached the replica"
    );
}
over_h1_and_h2!(bodies_over_the_limit_get_413, body_limit);
