//! Fixtures shared by the backend tests: a client over HTTP/1.1 or h2c, bounded GETs and
//! probes, and emulated replicas on OS-chosen loopback ports.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_core::{EstimatorConfig, LoadReport};
use prequal_model::model::ServersSpec;
use prequal_server::protocol;
use prequal_testbed::backend::{Backend, BackendSpec, Bind};

/// The longest any step may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// The HTTP version a test runs over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Proto {
    Http1,
    Http2,
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client(proto: Proto) -> TestClient {
    let mut builder = Client::builder(TokioExecutor::new());
    builder.http2_only(proto == Proto::Http2);
    builder.build(HttpConnector::new())
}

/// One GET, unbounded; `Err` for a transport failure (refused, reset, closed mid-response).
pub async fn try_get(
    client: &TestClient,
    proto: Proto,
    addr: SocketAddr,
    path: &str,
) -> Result<(StatusCode, http::HeaderMap, Bytes), String> {
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
    Ok((parts.status, parts.headers, body))
}

/// One GET that must succeed within [`BOUND`].
pub async fn get(
    client: &TestClient,
    proto: Proto,
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, http::HeaderMap, Bytes) {
    tokio::time::timeout(BOUND, try_get(client, proto, addr, path))
        .await
        .expect("answered within the bound")
        .expect("answered without a transport error")
}

/// A probe that must be answered within [`BOUND`].
pub async fn probe(client: &TestClient, proto: Proto, addr: SocketAddr) -> LoadReport {
    let (status, _, body) = get(client, proto, addr, &protocol::probe_path_and_query(None)).await;
    assert_eq!(status, StatusCode::OK);
    protocol::parse_reply(&body).unwrap()
}

/// Emulated replicas from a `[servers]` table: the first `replicas`, or all of them.
pub async fn start(servers: &str, replicas: Option<u32>) -> Backend {
    let servers: ServersSpec = toml::from_str(servers).unwrap();
    let spec = BackendSpec::new(servers, EstimatorConfig::default(), 7, Path::new(".")).unwrap();
    let bind = Bind {
        host: IpAddr::V4(Ipv4Addr::LOCALHOST),
        base_port: 0,
        first: 0,
        replicas: replicas.unwrap_or(spec.servers.count),
        drain: Duration::from_millis(200),
        piggyback: false,
    };
    Backend::start(&spec, bind).await.unwrap()
}

/// Writes one test body (`async fn name(proto: Proto)`) as two tests, one per protocol.
#[macro_export]
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
