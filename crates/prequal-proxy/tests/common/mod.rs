//! Test fixtures: loopback backends that answer probes, a proxy on port 0, and a client.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod certs;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prequal_core::LoadReport;
use prequal_http::protocol::{PROBE_PATH, encode_reply};
use prequal_http::tls::ReplicaTls;
use prequal_proxy::{Proxy, ProxyConfig, ProxyHandle};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The HTTP version a test runs over, client to proxy and proxy to replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
}

impl Proto {
    pub fn toml(self) -> &'static str {
        match self {
            Proto::H1 => "http1",
            Proto::H2 => "http2",
        }
    }
}

/// A backend replica on 127.0.0.1 whose delay and status the test controls.
pub struct Backend {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
    pub delay_ms: Arc<AtomicU64>,
    /// How long probes wait before their answer (0 by default).
    pub probe_delay_ms: Arc<AtomicU64>,
    /// When not 0, probes are answered with this status and no reply, as by a service with no
    /// sidecar.
    pub probe_status: Arc<AtomicU16>,
    pub status: Arc<AtomicU16>,
    pub in_flight: Arc<AtomicU32>,
    /// Connections accepted.
    pub connections: Arc<AtomicU64>,
    alive: Arc<AtomicBool>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Backend {
    pub async fn start() -> Backend {
        Backend::serve(None).await
    }

    /// The same replica behind TLS: each connection completes a handshake with `tls` first
    /// (which may demand a client certificate).
    pub async fn start_tls(tls: Arc<rustls::ServerConfig>) -> Backend {
        Backend::serve(Some(tokio_rustls::TlsAcceptor::from(tls))).await
    }

    /// The same replica behind the listener TLS of `prequal sidecar --tls-cert`
    /// (`prequal_http::serve_tls`): certificates reloaded on file change, ALPN, client
    /// certificates when `tls` has a client CA.
    pub async fn start_replica_tls(tls: Arc<ReplicaTls>) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let backend = Backend::new(listener.local_addr().unwrap());
        let state = backend.state();
        let service = tower::service_fn(move |req| state.clone().answer(req));
        let never = std::future::pending();
        let serve = prequal_http::serve_tls(listener, service, tls, never, Duration::ZERO);
        backend.tasks.lock().unwrap().push(tokio::spawn(serve));
        backend
    }

    fn new(addr: SocketAddr) -> Backend {
        Backend {
            addr,
            hits: Arc::default(),
            delay_ms: Arc::new(AtomicU64::new(1)),
            probe_delay_ms: Arc::default(),
            probe_status: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            in_flight: Arc::default(),
            connections: Arc::default(),
            alive: Arc::new(AtomicBool::new(true)),
            tasks: Arc::default(),
        }
    }

    async fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = Backend::new(addr);
        let state = backend.state();
        let tasks = Arc::clone(&backend.tasks);
        let connections = Arc::clone(&backend.connections);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let state = state.clone();
                let service = service_fn(move |req| state.clone().answer(req));
                let tls = tls.clone();
                let conn = tokio::spawn(async move {
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                        Some(tls) => {
                            let Ok(stream) = tls.accept(stream).await else {
                                return;
                            };
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        backend.tasks.lock().unwrap().push(accept);
        backend
    }

    fn state(&self) -> BackendState {
        BackendState {
            hits: Arc::clone(&self.hits),
            delay_ms: Arc::clone(&self.delay_ms),
            probe_delay_ms: Arc::clone(&self.probe_delay_ms),
            probe_status: Arc::clone(&self.probe_status),
            status: Arc::clone(&self.status),
            in_flight: Arc::clone(&self.in_flight),
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn set_delay_ms(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    pub fn set_probe_delay_ms(&self, ms: u64) {
        self.probe_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Probes get `status` and no reply from now on; 0 answers them again.
    pub fn set_probe_status(&self, status: u16) {
        self.probe_status.store(status, Ordering::SeqCst);
    }

    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Closes the listener and every connection: the port refuses from now on.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::SeqCst);
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone)]
struct BackendState {
    hits: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    probe_delay_ms: Arc<AtomicU64>,
    probe_status: Arc<AtomicU16>,
    status: Arc<AtomicU16>,
    in_flight: Arc<AtomicU32>,
}

impl BackendState {
    async fn answer(self, req: Request<Incoming>) -> Result<Response<TestBody>, Infallible> {
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        if req.uri().path() == PROBE_PATH {
            let probe_delay = self.probe_delay_ms.load(Ordering::SeqCst);
            if probe_delay > 0 {
                tokio::time::sleep(Duration::from_millis(probe_delay)).await;
            }
            if let Ok(status) = StatusCode::from_u16(self.probe_status.load(Ordering::SeqCst)) {
                let mut response = Response::new(TestBody::text("not found"));
                *response.status_mut() = status;
                return Ok(response);
            }
            // RIF from the counter; the latency estimate is the configured delay.
            let report = LoadReport {
                rif: self.in_flight.load(Ordering::SeqCst),
                latency: delay,
                ..LoadReport::default()
            };
            return Ok(Response::new(TestBody::text(encode_reply(&report))));
        }
        if req.uri().path() == "/echo-headers" {
            let mut lines: Vec<String> = req
                .headers()
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("?")))
                .collect();
            lines.sort();
            return Ok(Response::new(TestBody::text(lines.join("\n"))));
        }
        if let Some(code) = req.uri().path().strip_prefix("/grpc/") {
            // A gRPC-style answer: data, then the status in trailers.
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_str(code).unwrap());
            let body = TestBody {
                data: Some(Bytes::from_static(b"payload")),
                trailers: Some(trailers),
            };
            let mut response = Response::new(body);
            // HTTP/1.1 senders only forward trailers that the head announces.
            response
                .headers_mut()
                .insert("trailer", HeaderValue::from_static("grpc-status"));
            return Ok(response);
        }
        self.hits.fetch_add(1, Ordering::SeqCst);
        // `/slow/N`: a slow endpoint, answered after N ms whatever the configured delay.
        let delay = match req.uri().path().strip_prefix("/slow/") {
            Some(ms) => Duration::from_millis(ms.parse().unwrap_or(0)),
            None => delay,
        };
        let piggyback = req.uri().path() == "/piggyback";
        let others = self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _ = req.into_body().collect().await;
        tokio::time::sleep(delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let status = StatusCode::from_u16(self.status.load(Ordering::SeqCst)).unwrap();
        let mut response = Response::new(TestBody::text("ok"));
        *response.status_mut() = status;
        if piggyback {
            // The load without this request, as a piggybacking replica reports it.
            let report = LoadReport {
                rif: others,
                latency: delay,
                ..LoadReport::default()
            };
            response.headers_mut().insert(
                prequal_http::protocol::LOAD_HEADER,
                HeaderValue::from_str(&encode_reply(&report)).unwrap(),
            );
        }
        Ok(response)
    }
}

/// A body of one data frame and optional trailers.
pub struct TestBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl TestBody {
    fn text(text: impl Into<Bytes>) -> Self {
        TestBody {
            data: Some(text.into()),
            trailers: None,
        }
    }
}

impl http_body::Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let frame = match self.data.take() {
            Some(data) => Some(http_body::Frame::data(data)),
            None => self.trailers.take().map(http_body::Frame::trailers),
        };
        std::task::Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// A running proxy and what a test needs to drive it.
pub struct Running {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub handle: ProxyHandle,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<()>,
}

impl Running {
    /// Begins shutdown (what SIGTERM does in `prequal proxy`).
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A config over `backends` with `cluster_extra` lines added to the cluster table.
pub fn config_text(
    backends: &[&Backend],
    proto: Proto,
    policy: &str,
    cluster_extra: &str,
) -> String {
    let upstreams: Vec<String> = backends.iter().map(|b| format!("\"{}\"", b.addr)).collect();
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout = \"5s\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams = [{}]\npolicy = {policy}\nprotocol = \"{}\"\n{cluster_extra}\n",
        upstreams.join(", "),
        proto.toml()
    )
}

pub async fn start_proxy(text: &str) -> Running {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let config = ProxyConfig::from_toml(text, "test.toml").unwrap();
    let proxy = Proxy::bind(&config).await.unwrap();
    let addr = proxy.local_addr().unwrap();
    let admin = proxy.admin_addr().unwrap();
    let handle = proxy.handle();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(proxy.run(async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        admin,
        handle,
        stop: Some(stop),
        task,
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client(proto: Proto) -> TestClient {
    let mut builder = Client::builder(TokioExecutor::new());
    if proto == Proto::H2 {
        builder.http2_only(true);
    }
    builder.build(HttpConnector::new())
}

/// Sends one GET and returns its status and body (bounded by a 10 s guard).
pub async fn get(client: &TestClient, addr: SocketAddr, path: &str) -> (u16, String) {
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let fut = async {
        let resp = client.request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("request finished within the test guard")
}

/// Sends one request with `body` to `/work` and gives up after `patience`, as an impatient
/// client does; `Some(status)` if the whole response came in time.
pub async fn send_within(
    client: &TestClient,
    addr: SocketAddr,
    method: &str,
    body: Vec<u8>,
    patience: Duration,
) -> Option<u16> {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}/work"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    status_within(client, req, patience).await
}

/// GETs `path`, giving up after `patience`; returns the status if the response ended by then.
pub async fn get_within(
    client: &TestClient,
    addr: SocketAddr,
    path: &str,
    patience: Duration,
) -> Option<u16> {
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    status_within(client, req, patience).await
}

/// Sends `req`, giving up after `patience`; its status if the response ended by then.
async fn status_within(
    client: &TestClient,
    req: Request<Full<Bytes>>,
    patience: Duration,
) -> Option<u16> {
    let fut = async {
        let resp = client.request(req).await.ok()?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await.ok()?;
        Some(status)
    };
    tokio::time::timeout(patience, fut).await.ok().flatten()
}

/// The sum of every sample line that contains all of `parts`.
pub fn metric_sum(text: &str, parts: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && parts.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends `n` GETs with `concurrency` at a time; returns how many got 200.
pub async fn load(client: &TestClient, addr: SocketAddr, n: usize, concurrency: usize) -> usize {
    let next = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, next, ok) = (client.clone(), Arc::clone(&next), Arc::clone(&ok));
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < n as u64 {
                if get(&client, addr, "/work").await.0 == 200 {
                    ok.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    ok.load(Ordering::SeqCst) as usize
}

/// Runs `body` once per protocol: `e2e!(name, |proto| async move { ... })`.
#[macro_export]
macro_rules! over_h1_and_h2 {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http1() {
                $body(Proto::H1).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http2() {
                $body(Proto::H2).await;
            }
        }
    };
}

/// Cluster lines that turn hedging off, for tests that count one try per request.
pub const NO_HEDGING: &str = "hedge = { enabled = false }";

/// Probes on a busy test machine can take longer than the datacenter default of 3 ms.
pub const PREQUAL: &str = "{ name = \"prequal\", probe_timeout = \"200ms\" }";

pub async fn futures_join(n: usize) -> Vec<Backend> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(Backend::start().await);
    }
    out
}

/// The value of the first sample line starting with `series`.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// How many replicas of the test cluster the proxy has ejected, from its `/metrics` text.
pub fn ejected_replicas(metrics: &str) -> f64 {
    metric(metrics, "prequal_proxy_ejected_replicas{cluster=\"test\"}")
}

pub fn client_again(proto: Proto) -> TestClient {
    client(proto)
}
