//! End-to-end tests of the emulated backend's whole-replica faults (`black-hole`, `stall-body`,
//! `host-down`, `killed`) over real loopback sockets. "Never answered" is checked as "not answered within a
//! short wait", and every wait is bounded; no test asserts how fast the machine is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use prequal_server::protocol;
use prequal_testbed::backend::Backend;

use common::*;

/// How long "never answered" is watched.
const HELD: Duration = Duration::from_millis(300);

/// `count` replicas answering in 1 ms, the first under `fault` for the whole test.
async fn with_fault(count: u32, fault: &str) -> Backend {
    let servers = format!(
        r#"count = {count}
           latency = {{ kind = "constant", value = "1ms" }}
           [[episodes]]
           servers = [0]
           start = "0s"
           end = "1h"
           fault = "{fault}""#
    );
    start(&servers, None).await
}

/// A black hole holds queries (its tracker counts them in flight) and answers probes; the
/// replica beside it is untouched.
async fn black_hole_holds_queries_and_answers_probes(proto: Proto) {
    let backend = with_fault(2, "black-hole").await;
    let (hole, healthy) = (backend.addrs()[0], backend.addrs()[1]);
    let client = client(proto);
    let held = {
        let client = client.clone();
        tokio::spawn(async move { try_get(&client, proto, hole, "/").await })
    };
    // The held query shows in the probe replies' RIF (bounded polling).
    let mut rif = 0;
    for _ in 0..200 {
        rif = probe(&client, proto, hole).await.rif;
        if rif >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rif, 1, "the held query is in flight at the replica");
    assert!(
        tokio::time::timeout(HELD, try_get(&client, proto, hole, "/"))
            .await
            .is_err(),
        "a black hole never answers a query"
    );
    assert!(!held.is_finished());
    held.abort();
    let ok = tokio::time::timeout(BOUND, try_get(&client, proto, healthy, "/")).await;
    assert_eq!(ok.unwrap().unwrap().0, StatusCode::OK);
    backend.shutdown().await;
}
both_protocols!(black_hole_holds_queries_and_answers_probes);

/// A stalled body: the head comes at once, declaring the usual body, which never comes; the
/// tracker counts the query in flight meanwhile, and probes are answered.
async fn stall_body_answers_heads_and_holds_bodies(proto: Proto) {
    let backend = with_fault(1, "stall-body").await;
    let addr = backend.addrs()[0];
    let client = client(proto);
    let version = match proto {
        Proto::Http1 => http::Version::HTTP_11,
        Proto::Http2 => http::Version::HTTP_2,
    };
    let request = http::Request::get(format!("http://{addr}/"))
        .version(version)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(BOUND, client.request(request))
        .await
        .expect("the head comes")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[http::header::CONTENT_LENGTH], "3");
    assert_eq!(
        probe(&client, proto, addr).await.rif,
        1,
        "in flight at the replica"
    );
    let body = http_body_util::BodyExt::collect(response.into_body());
    assert!(
        tokio::time::timeout(HELD, body).await.is_err(),
        "the body never comes"
    );
    backend.shutdown().await;
}
both_protocols!(stall_body_answers_heads_and_holds_bodies);

/// A down host holds queries and probes alike, and its tracker sees none of them.
async fn host_down_holds_queries_and_probes(proto: Proto) {
    let backend = with_fault(1, "host-down").await;
    let addr = backend.addrs()[0];
    let client = client(proto);
    let query = tokio::time::timeout(HELD, try_get(&client, proto, addr, "/")).await;
    assert!(query.is_err(), "a down host never answers a query");
    let path = protocol::probe_path_and_query(None);
    let probed = tokio::time::timeout(HELD, try_get(&client, proto, addr, &path)).await;
    assert!(probed.is_err(), "a down host never answers a probe");
    let replica = backend.replicas().next().unwrap();
    assert_eq!(replica.tracker().rif(), 0, "the tracker sees nothing");
    backend.shutdown().await;
}
both_protocols!(host_down_holds_queries_and_probes);

/// A killed replica fails its queries in flight, refuses connections while the episode lasts,
/// then listens again on the same port with an empty tracker.
async fn killed_replica_resets_refuses_and_restarts(proto: Proto) {
    let backend = start(
        r#"count = 1
           latency = { kind = "constant", value = "5s" }
           [[episodes]]
           servers = [0]
           start = "700ms"
           end = "1500ms"
           fault = "killed""#,
        None,
    )
    .await;
    let addr = backend.addrs()[0];
    let replica = Arc::clone(backend.replicas().next().unwrap());
    let before = replica.tracker();
    let client = client(proto);
    // Sent before the kill, due after it: the kill breaks it off.
    let in_flight = tokio::time::timeout(BOUND, try_get(&client, proto, addr, "/")).await;
    assert!(
        in_flight.expect("ends at the kill").is_err(),
        "a query in flight fails when its replica is killed"
    );
    // While killed, connections are refused (polled, bounded).
    let mut refused = false;
    for _ in 0..200 {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    assert!(refused, "a killed replica refuses connections");
    // Restarted on the same port, with a fresh tracker.
    let mut report = None;
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            report = Some(probe(&self::client(proto), proto, addr).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = report.expect("the replica listens again after the episode");
    assert_eq!(report.rif, 0);
    assert!(!Arc::ptr_eq(&before, &replica.tracker()), "a fresh tracker");
    backend.shutdown().await;
}
both_protocols!(killed_replica_resets_refuses_and_restarts);
