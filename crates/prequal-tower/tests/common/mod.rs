//! Fixtures for the balancer's end-to-end tests: loopback replicas that answer probes through
//! prequal-server's `ProbeLayer` (with switches to slow them, fail them and break their
//! probes), endpoints over a pooled hyper-util client per protocol, a channel-backed
//! `Discover`, and bounded waiting. Every address is 127.0.0.1.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_core::{EstimatorConfig, PolicyConfig};
use prequal_server::protocol::PROBE_PATH;
use prequal_server::{ProbeLayer, SharedTracker, serve};
use prequal_tower::{Balance, BoxError, Builder, HttpEndpoint};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tower::discover::Change;
use tower::{Service, ServiceExt};

/// Upper bound on any wait in these tests; a hang fails the test instead of blocking CI.
pub const BOUND: Duration = Duration::from_secs(20);

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

/// How a replica answers probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ProbeMode {
    /// Through `ProbeLayer`, as it should.
    Answer = 0,
    /// 200 with a body the protocol forbids.
    Malformed = 1,
    /// 500.
    ServerError = 2,
    /// Never (the probe hangs until the client gives up).
    Hang = 3,
    /// 404, as a server with no `ProbeLayer` answers.
    NotFound = 4,
}

/// A replica on 127.0.0.1 behind `ProbeLayer`, whose speed, status and probe answers the test
/// controls. Dropping it stops the server.
pub struct Replica {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
    pub probes: Arc<AtomicU64>,
    pub delay_ms: Arc<AtomicU64>,
    pub status: Arc<AtomicU16>,
    pub probe_mode: Arc<AtomicU8>,
    _stop: oneshot::Sender<()>,
}

impl Replica {
    pub async fn start() -> Replica {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let replica = Replica {
            addr,
            hits: Arc::default(),
            probes: Arc::default(),
            delay_ms: Arc::new(AtomicU64::new(1)),
            status: Arc::new(AtomicU16::new(200)),
            probe_mode: Arc::default(),
            _stop: stop,
        };
        let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
        let probes = Arc::clone(&replica.probes);
        let layer = ProbeLayer::new(tracker).probe_hook(Arc::new(move || {
            probes.fetch_add(1, Ordering::SeqCst);
        }));
        let app = App {
            hits: Arc::clone(&replica.hits),
            delay_ms: Arc::clone(&replica.delay_ms),
            status: Arc::clone(&replica.status),
        };
        let tracked = tower::ServiceBuilder::new()
            .layer(layer)
            .service_fn(move |request| app.clone().answer(request));
        let mode = Arc::clone(&replica.probe_mode);
        let service = tower::service_fn(move |request: Request<Incoming>| {
            let tracked = tracked.clone();
            let mode = mode.load(Ordering::SeqCst);
            async move {
                if request.uri().path() == PROBE_PATH && mode != ProbeMode::Answer as u8 {
                    return Ok::<_, Infallible>(broken_probe(mode).await);
                }
                let response = tracked.oneshot(request).await?;
                Ok(response.map(|body| body.boxed_unsync()))
            }
        });
        let shutdown = async move {
            let _ = stopped.await;
        };
        tokio::spawn(serve(
            listener,
            service,
            shutdown,
            Duration::from_millis(100),
        ));
        replica
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn probes(&self) -> u64 {
        self.probes.load(Ordering::SeqCst)
    }

    pub fn set_delay_ms(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    pub fn set_probe_mode(&self, mode: ProbeMode) {
        self.probe_mode.store(mode as u8, Ordering::SeqCst);
    }
}

type TestBody = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

async fn broken_probe(mode: u8) -> Response<TestBody> {
    let (status, text) = match mode {
        m if m == ProbeMode::Malformed as u8 => (StatusCode::OK, "rif=three latency=fast\n"),
        m if m == ProbeMode::ServerError as u8 => (StatusCode::INTERNAL_SERVER_ERROR, "no\n"),
        m if m == ProbeMode::NotFound as u8 => (StatusCode::NOT_FOUND, "not found\n"),
        _ => {
            tokio::time::sleep(BOUND).await;
            (StatusCode::OK, "v=1 rif=0 latency_us=1\n")
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
    *response.status_mut() = status;
    response
}

#[derive(Clone)]
struct App {
    hits: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    status: Arc<AtomicU16>,
}

impl App {
    async fn answer(self, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let _ = request.into_body().collect().await;
        let delay = self.delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let status = StatusCode::from_u16(self.status.load(Ordering::SeqCst)).unwrap();
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        *response.status_mut() = status;
        Ok(response)
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

/// The endpoint service of `addr`.
pub fn endpoint(client: &TestClient, addr: SocketAddr) -> TestEndpoint {
    HttpEndpoint::new(client.clone(), &addr.to_string()).unwrap()
}

/// A `Discover` fed by a channel: the test sends `Change`s while requests flow.
pub struct ChannelDiscover<S> {
    rx: mpsc::UnboundedReceiver<Change<SocketAddr, S>>,
}

impl<S> Stream for ChannelDiscover<S> {
    type Item = Result<Change<SocketAddr, S>, Infallible>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|change| change.map(Ok))
    }
}

pub type Changes<S> = mpsc::UnboundedSender<Change<SocketAddr, S>>;

/// A discovery channel, and its `Discover` end.
pub fn discovery<S>() -> (Changes<S>, ChannelDiscover<S>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, ChannelDiscover { rx })
}

/// A policy by name, with its probe timeout raised to 100 ms where it has one: debug builds
/// on a shared 2-core machine answer loopback probes in well under that, but not always in
/// the 3 ms a datacenter default allows.
pub fn policy(name: &str) -> PolicyConfig {
    let text = format!("name = {name:?}\nprobe_timeout = \"100ms\"\n");
    toml::from_str(&text).unwrap_or_else(|_| PolicyConfig::from_name(name).unwrap())
}

/// The endpoint service of the tests: a pooled client addressed to one replica.
pub type TestEndpoint = HttpEndpoint<HttpConnector, Full<Bytes>>;

/// The balancer of the tests.
pub type TestBalance = Balance<ChannelDiscover<TestEndpoint>, Full<Bytes>>;

/// A seeded balancer over the replicas at `addrs`, with `name`'s policy.
pub fn balance(
    name: &str,
    proto: Proto,
    addrs: &[SocketAddr],
) -> (TestBalance, Changes<TestEndpoint>) {
    balance_with(Builder::new(policy(name)), proto, addrs)
}

/// Like [`balance`], from a builder the test configured.
pub fn balance_with(
    builder: Builder,
    proto: Proto,
    addrs: &[SocketAddr],
) -> (TestBalance, Changes<TestEndpoint>) {
    let client = client(proto);
    let (changes, discover) = discovery();
    for addr in addrs {
        changes
            .send(Change::Insert(*addr, endpoint(&client, *addr)))
            .unwrap();
    }
    let balance = builder.seed(7).build(discover).unwrap();
    (balance, changes)
}

/// A request for `path`, as an application sends it through a balancer.
pub fn request(proto: Proto, path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .uri(path)
        .version(proto.version())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// What one request came to: its status, or the error text.
pub type Answer = Result<StatusCode, String>;

/// Sends `count` requests, up to `concurrency` at once, each read to its end; returns every
/// answer in the order they finished.
pub async fn load<S, F>(
    balance: &mut S,
    proto: Proto,
    count: usize,
    concurrency: usize,
) -> Vec<Answer>
where
    S: Service<Request<Full<Bytes>>, Error = BoxError, Future = F>,
    F: Future<Output = Result<Response<prequal_tower::ResponseBody<Incoming>>, BoxError>>
        + Send
        + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    let mut answers = Vec::with_capacity(count);
    for _ in 0..count {
        while tasks.len() >= concurrency.max(1) {
            answers.push(bounded(tasks.join_next()).await.unwrap().unwrap());
        }
        let call = match bounded(balance.ready()).await {
            Ok(call) => call,
            Err(error) => {
                answers.push(Err(error.to_string()));
                continue;
            }
        };
        let future = call.call(request(proto, "/"));
        tasks.spawn(async move {
            let response = future.await.map_err(|e| e.to_string())?;
            let status = response.status();
            response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            Ok(status)
        });
    }
    while let Some(joined) = bounded(tasks.join_next()).await {
        answers.push(joined.unwrap());
    }
    answers
}

/// Runs `future` for at most `BOUND`.
pub async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(BOUND, future)
        .await
        .expect("test step exceeded its time bound")
}

/// Polls `done` every 10 ms until it holds, for at most `BOUND`; returns whether it held.
pub async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + BOUND;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

/// An endpoint whose `poll_ready` fails once `broken` is set: a replica the client itself has
/// given up on (a circuit breaker, a connection that cannot be made).
#[derive(Clone)]
pub struct Breakable<S> {
    pub inner: S,
    pub broken: Arc<AtomicBool>,
}

impl<S, R> Service<R> for Breakable<S>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = futures_util::future::MapErr<S::Future, fn(S::Error) -> BoxError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.broken.load(Ordering::SeqCst) {
            return Poll::Ready(Err("endpoint broken by the test".into()));
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        use futures_util::TryFutureExt;
        self.inner.call(request).map_err(Into::into)
    }
}

/// Writes one end-to-end test body (`async fn name(proto: Proto)`) as two tests, one per
/// protocol.
#[allow(unused_macros)]
macro_rules! both_protocols {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http1() {
                super::$name(crate::common::Proto::Http1).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http2() {
                super::$name(crate::common::Proto::Http2).await;
            }
        }
    };
}
