//! End-to-end tests of the emulated backend's whole-replica faults (`black-hole`, `host-down`,
//! `killed`) over real loopback sockets. "Never answered" is checked as "not answered within a
//! short wait", and every wait is bounded; no test asserts how fast the machine is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_core::{EstimatorConfig, LoadReport};
use prequal_server::protocol;
use prequal_sim::model::ServersSpec;
use prequal_testbed::backend::{Backend, BackendSpec, Bind};

/// The longest any step may take before the test fails.
const BOUND: Duration = Duration::from_secs(20);
/// How long "never answered" is watched.
const HELD: Duration = Duration::from_millis(300);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    Http1,
    Http2,
}

type TestClient = Client<HttpConnector, Full<Bytes>>;

fn client(proto: Proto) -> TestClient {
    let mut builder = Client::builder(TokioExecutor::new());
    builder.http2_only(proto == Proto::Http2);
    builder.build(HttpConnector::new())
}

/// One GET; `Err` for a transport failure (refused, reset, closed mid-response).
async fn get(
    client: &TestClient,
    proto: Proto,
    addr: SocketAddr,
    path: &str,
) -> Result<(StatusCode, Bytes), String> {
    let version = if proto == Proto::Http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let request = Request::get(format!("http://{addr}{path}"))
        .version(version)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, body))
}

async fn probe(client: &TestClient, proto: Proto, addr: SocketAddr) -> LoadReport {
    let path = protocol::probe_path_and_query(None);
    let (status, body) = tokio::time::timeout(BOUND, get(client, proto, addr, &path))
        .await
        .expect("probe answered")
        .expect("probe succeeded");
    assert_eq!(status, StatusCode::OK);
    protocol::parse_reply(&body).unwrap()
}

async fn start(servers: &str) -> Backend {
    let servers: ServersSpec = toml::from_str(servers).unwrap();
    let spec = BackendSpec::new(servers, EstimatorConfig::default(), 7, Path::new(".")).unwrap();
    let bind = Bind {
        host: IpAddr::V4(Ipv4Addr::LOCALHOST),
        base_port: 0,
        first: 0,
        replicas: spec.servers.count,
        drain: Duration::from_millis(200),
        piggyback: false,
    };
    Backend::start(&spec, bind).await.unwrap()
}

macro_rules! both_protocols {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http1() {
                super::$name(super::Proto::Http1).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http2() {
                super::$name(super::Proto::Http2).await;
            }
        }
    };
}

/// A black hole holds queries (its tracker counts them in flight) and answers probes; the
/// replica beside it is untouched.
async fn black_hole_holds_queries_and_answers_probes(proto: Proto) {
    let backend = start(
        r#"count = 2
           latency = { kind = "constant", value = "1ms" }
           [[episodes]]
           servers = [0]
           start = "0s"
           end = "1h"
           fault = "black-hole""#,
    )
    .await;
    let (hole, healthy) = (backend.addrs()[0], backend.addrs()[1]);
    let client = client(proto);
    let held = {
        let client = client.clone();
        tokio::spawn(async move { get(&client, proto, hole, "/").await })
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
        tokio::time::timeout(HELD, get(&client, proto, hole, "/"))
            .await
            .is_err(),
        "a black hole never answers a query"
    );
    assert!(!held.is_finished());
    held.abort();
    let ok = tokio::time::timeout(BOUND, get(&client, proto, healthy, "/")).await;
    assert_eq!(ok.unwrap().unwrap().0, StatusCode::OK);
    backend.shutdown().await;
}
both_protocols!(black_hole_holds_queries_and_answers_probes);

/// A down host holds queries and probes alike, and its tracker sees none of them.
async fn host_down_holds_queries_and_probes(proto: Proto) {
    let backend = start(
        r#"count = 1
           latency = { kind = "constant", value = "1ms" }
           [[episodes]]
           servers = [0]
           start = "0s"
           end = "1h"
           fault = "host-down""#,
    )
    .await;
    let addr = backend.addrs()[0];
    let client = client(proto);
    let query = tokio::time::timeout(HELD, get(&client, proto, addr, "/")).await;
    assert!(query.is_err(), "a down host never answers a query");
    let path = protocol::probe_path_and_query(None);
    let probed = tokio::time::timeout(HELD, get(&client, proto, addr, &path)).await;
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
    )
    .await;
    let addr = backend.addrs()[0];
    let replica = Arc::clone(backend.replicas().next().unwrap());
    let before = replica.tracker();
    let client = client(proto);
    // Sent before the kill, due after it: the kill breaks it off.
    let in_flight = tokio::time::timeout(BOUND, get(&client, proto, addr, "/")).await;
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
