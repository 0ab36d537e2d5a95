//! Helpers shared by the end-to-end tests: loopback servers on port 0, clients per protocol,
//! probing, and bounded waiting.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_core::LoadReport;
use prequal_server::{BoxError, protocol, serve};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Upper bound on any wait in these tests; a hang fails the test instead of blocking CI.
pub const BOUND: Duration = Duration::from_secs(10);

/// The two protocols every end-to-end test runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http1,
    Http2,
}

impl Proto {
    pub fn version(self) -> Version {
        match self {
            Proto::Http1 => Version::HTTP_11,
            Proto::Http2 => Version::HTTP_2,
        }
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

/// A pooled client speaking `proto` (HTTP/2 as h2c with prior knowledge).
pub fn client(proto: Proto) -> TestClient {
    let mut builder = Client::builder(TokioExecutor::new());
    if proto == Proto::Http2 {
        builder.http2_only(true);
    }
    builder.build(HttpConnector::new())
}

/// A running loopback server; dropping it shuts the server down.
pub struct Running {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Serves `service` on 127.0.0.1 with an OS-chosen port.
pub async fn spawn<S, B>(service: S) -> Running
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    tokio::spawn(serve(listener, service, shutdown, Duration::from_secs(1)));
    Running { addr, _stop: stop }
}

/// A request for `path` on `addr` over `proto`.
pub fn request(
    proto: Proto,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .version(proto.version())
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// Sends a request and reads the whole response: status, headers, body, trailers.
pub async fn fetch(client: &TestClient, req: Request<Full<Bytes>>) -> Fetched {
    let response = bounded(client.request(req)).await.unwrap();
    let (parts, body) = response.into_parts();
    let collected = bounded(body.collect()).await.unwrap();
    Fetched {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        trailers: collected.trailers().cloned(),
        body: collected.to_bytes(),
    }
}

#[derive(Debug)]
pub struct Fetched {
    pub status: http::StatusCode,
    pub version: Version,
    pub headers: http::HeaderMap,
    pub trailers: Option<http::HeaderMap>,
    pub body: Bytes,
}

/// Probes `addr` and parses the reply.
pub async fn probe(client: &TestClient, proto: Proto, addr: SocketAddr) -> LoadReport {
    let path = protocol::probe_path_and_query(None);
    let reply = fetch(client, request(proto, addr, "GET", &path, "")).await;
    assert_eq!(reply.status, 200, "probe reply {reply:?}");
    protocol::parse_reply(&reply.body).unwrap()
}

/// Probes until `done` holds for the reply, at most `BOUND` long in total.
pub async fn probe_until(
    client: &TestClient,
    proto: Proto,
    addr: SocketAddr,
    done: impl Fn(&LoadReport) -> bool,
) -> LoadReport {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let report = probe(client, proto, addr).await;
        if done(&report) || tokio::time::Instant::now() > deadline {
            return report;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `future` for at most `BOUND`.
pub async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(BOUND, future)
        .await
        .expect("test step exceeded its time bound")
}

/// Writes one end-to-end test body (`async fn name(proto: Proto)`) as two tests, one per
/// protocol.
#[allow(unused_macros)]
macro_rules! both_protocols {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn http1() {
                super::$name(crate::common::Proto::Http1).await;
            }
            #[tokio::test]
            async fn http2() {
                super::$name(crate::common::Proto::Http2).await;
            }
        }
    };
}
