//! Connections to the replicas: one `Upstream` per cluster and data-plane thread.
//!
//! **HTTP/1.1** has a pool of its own, built on `hyper::client::conn::http1`: per replica, a
//! list of idle connections, found by the replica's id (a small ordered map, no hashing of a
//! pool key) behind a lock that only its own thread takes on the hot path. A try takes the
//! most recently used idle connection that is ready; else it waits at most a millisecond for
//! one whose task is still settling its last exchange, and otherwise opens a new one
//! (`connector`: TCP, then TLS if the cluster has it, within `connect_timeout`). The
//! connection goes to the response body, which puts it back once the body has been read to its
//! end or its trailers; a body dropped before that, or failed, takes its connection with it, so a connection with an
//! unread response on the wire is never reused. Idle connections the replica closed, or idle
//! for `pool_idle_timeout`, are dropped at checkout, so a replica that closes idle connections
//! just after that timeout never gets a request on one; a request a reused connection refused
//! unsent goes out on the next one. At most `pool_max_idle_per_host` idle connections are kept
//! per replica, and a sweeper task (running only while something is idle) closes expired ones
//! every quarter of the timeout. Compared with hyper-util's pooled client this saves, per
//! request, the pool key's hash and comparisons, the boxed futures and the task it spawns to
//! return each HTTP/1.1 connection to its pool (docs/performance.md).
//!
//! **HTTP/2** stays on hyper-util's pooled client: one multiplexed connection per replica, and
//! trailers (gRPC) as hyper passes them.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prequal_core::ReplicaId;
use tokio::time::Instant;

use crate::body::ProxyBody;
use crate::config::{ClusterConfig, UpstreamProtocol};
use crate::connector::Connector;

/// The shortest interval between two sweeps of idle connections.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(10);
/// How long a try waits for an idle connection that is not ready yet (its task is settling the
/// exchange that just ended, or still sending that exchange's request body) before it opens a
/// new one instead.
const SETTLE_WAIT: Duration = Duration::from_millis(1);

/// Why a request could not be sent to a replica, or got no response.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UpstreamError(Kind);

#[derive(Debug, thiserror::Error)]
enum Kind {
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error(transparent)]
    Http(#[from] hyper::Error),
    #[error(transparent)]
    Pooled(#[from] hyper_util::client::legacy::Error),
    #[error("not a forwardable request target: {0}")]
    Target(#[from] http::uri::InvalidUriParts),
}

impl UpstreamError {
    /// True when no connection could be opened, so nothing reached the replica.
    pub fn is_connect(&self) -> bool {
        match &self.0 {
            Kind::Connect(_) => true,
            Kind::Http(_) | Kind::Target(_) => false,
            Kind::Pooled(error) => error.is_connect(),
        }
    }
}

/// The connections of one data-plane thread to one cluster's replicas. See the module docs.
#[derive(Debug)]
pub(crate) enum Upstream {
    /// HTTP/1.1: the pool of this module.
    Http1(Arc<Pool>),
    /// HTTP/2 (h2c, or h2 over TLS): hyper-util's pooled client, and the `:scheme` to send.
    Http2(Box<Client<Connector, ProxyBody>>, http::uri::Scheme),
}

impl Upstream {
    /// Connections as `config` asks (its protocol and pool limits), opened by `connector`.
    pub(crate) fn new(config: &ClusterConfig, connector: Connector) -> Self {
        match config.protocol {
            UpstreamProtocol::Http1 => Upstream::Http1(Arc::new(Pool::new(config, connector))),
            UpstreamProtocol::Http2 => {
                let scheme = connector.scheme();
                Upstream::Http2(Box::new(http2_client(config, connector)), scheme)
            }
        }
    }

    /// Sends `request` (its URI in origin form, `/path?query`) to `replica` at `authority`.
    pub(crate) async fn send(
        &self,
        replica: ReplicaId,
        authority: &Authority,
        mut request: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        match self {
            Upstream::Http1(pool) => pool.send(replica, authority, request).await,
            Upstream::Http2(client, scheme) => {
                // The pooled client finds its connection by the URI's scheme and authority.
                let mut uri = std::mem::take(request.uri_mut()).into_parts();
                uri.scheme = Some(scheme.clone());
                uri.authority = Some(authority.clone());
                *request.uri_mut() =
                    http::Uri::from_parts(uri).map_err(|e| UpstreamError(e.into()))?;
                let response = client
                    .request(request)
                    .await
                    .map_err(|e| UpstreamError(e.into()))?;
                Ok(response.map(|body| UpstreamBody { body, lease: None }))
            }
        }
    }

    /// Opens a connection to `replica` at `authority` and keeps it idle, unless one is idle
    /// already. Over HTTP/2 it does nothing: the one multiplexed connection per replica opens
    /// at its first use.
    pub(crate) async fn prewarm(
        &self,
        replica: ReplicaId,
        authority: &Authority,
    ) -> Result<(), UpstreamError> {
        let Upstream::Http1(pool) = self else {
            return Ok(());
        };
        let idle = pool
            .lock()
            .replicas
            .get(&replica)
            .is_some_and(|list| !list.is_empty());
        if !idle {
            let sender = pool.connect(authority).await?;
            pool.put(replica, sender);
        }
        Ok(())
    }

    /// Closes the idle connections to a replica that left the cluster.
    pub(crate) fn forget(&self, replica: ReplicaId) {
        if let Upstream::Http1(pool) = self {
            pool.lock().replicas.remove(&replica);
        }
    }
}

/// A pooled HTTP/2 client: one multiplexed connection per replica.
fn http2_client(config: &ClusterConfig, connector: Connector) -> Client<Connector, ProxyBody> {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(config.pool_idle_timeout)
        .pool_max_idle_per_host(config.pool_max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_only(true)
        .build(connector)
}

/// Idle HTTP/1.1 connections per replica, for one data-plane thread.
#[derive(Debug)]
pub(crate) struct Pool {
    idle: Mutex<Idle>,
    connector: Connector,
    idle_timeout: Duration,
    max_idle: usize,
    builder: http1::Builder,
}

#[derive(Debug, Default)]
struct Idle {
    replicas: BTreeMap<ReplicaId, Vec<IdleConnection>>,
    /// Whether a sweeper task is running.
    sweeping: bool,
}

#[derive(Debug)]
struct IdleConnection {
    sender: http1::SendRequest<ProxyBody>,
    since: Instant,
}

impl Pool {
    fn new(config: &ClusterConfig, connector: Connector) -> Self {
        let mut builder = http1::Builder::new();
        // Flattened writes, as on the server side (4% less CPU per request, measured).
        builder.writev(false);
        Pool {
            idle: Mutex::new(Idle::default()),
            connector,
            idle_timeout: config.pool_idle_timeout,
            max_idle: config.pool_max_idle_per_host,
            builder,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Idle> {
        // The lists stay consistent whatever a panicking holder did; keep using them.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn send(
        self: &Arc<Self>,
        replica: ReplicaId,
        authority: &Authority,
        mut request: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        if !request.headers().contains_key(http::header::HOST)
            && let Ok(host) = http::HeaderValue::from_str(authority.as_str())
        {
            request.headers_mut().insert(http::header::HOST, host);
        }
        loop {
            // A new connection's future (a TCP connect, perhaps a TLS handshake) is boxed: a
            // reused connection is the common case, and inline it would add over a kilobyte to
            // every try's future, which is copied whole when the try is boxed.
            let (mut sender, reused) = match self.checkout(replica) {
                Some((sender, true)) => (sender, true),
                Some((mut sender, false)) => {
                    // Its last response was read to the end, but the connection's task has not
                    // said yet that it takes the next request: usually a moment's work, but
                    // the replica may have answered before the request body was all sent.
                    match tokio::time::timeout(SETTLE_WAIT, sender.ready()).await {
                        Ok(Ok(())) => (sender, true),
                        Ok(Err(_)) => continue,
                        Err(_) => {
                            self.put_aside(replica, sender);
                            (Box::pin(self.connect(authority)).await?, false)
                        }
                    }
                }
                None => (Box::pin(self.connect(authority)).await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let lease = Lease {
                        pool: Arc::clone(self),
                        replica,
                        sender,
                    };
                    return Ok(response.map(|body| UpstreamBody {
                        body,
                        lease: Some(lease),
                    }));
                }
                Err(mut error) => match error.take_message() {
                    // An idle connection closed before it took the request: nothing was sent,
                    // so it goes out on the next connection.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(UpstreamError(error.into_error().into())),
                },
            }
        }
    }

    /// The most recently used idle connection to `replica` that is ready for a request, else
    /// the most recent one still finishing its last exchange (`false`). A candidate the
    /// replica closed, or idle for `pool_idle_timeout`, is dropped and the next one tried: a
    /// replica that closes idle connections just after that timeout must never get a request
    /// on one. Others that expired wait for the sweeper, so a checkout stays short.
    fn checkout(&self, replica: ReplicaId) -> Option<(http1::SendRequest<ProxyBody>, bool)> {
        let now = Instant::now();
        let mut idle = self.lock();
        let list = idle.replicas.get_mut(&replica)?;
        loop {
            let (i, ready) = match list.iter().rposition(|c| c.sender.is_ready()) {
                Some(i) => (i, true),
                None => (list.len().checked_sub(1)?, false),
            };
            let candidate = list.remove(i);
            if !candidate.sender.is_closed()
                && now.duration_since(candidate.since) < self.idle_timeout
            {
                return Some((candidate.sender, ready));
            }
        }
    }

    async fn connect(
        &self,
        authority: &Authority,
    ) -> Result<http1::SendRequest<ProxyBody>, UpstreamError> {
        let stream = self
            .connector
            .connect(authority)
            .await
            .map_err(|e| UpstreamError(Kind::Connect(e)))?;
        let (sender, connection) = self
            .builder
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| UpstreamError(e.into()))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Takes back a connection whose response was read to its end, as the first to reuse.
    fn put(self: &Arc<Self>, replica: ReplicaId, sender: http1::SendRequest<ProxyBody>) {
        self.keep(replica, sender, true);
    }

    /// Takes back a connection that did not become ready in time, as the last to reuse.
    fn put_aside(self: &Arc<Self>, replica: ReplicaId, sender: http1::SendRequest<ProxyBody>) {
        self.keep(replica, sender, false);
    }

    fn keep(
        self: &Arc<Self>,
        replica: ReplicaId,
        sender: http1::SendRequest<ProxyBody>,
        first: bool,
    ) {
        if self.max_idle == 0 || self.idle_timeout.is_zero() || sender.is_closed() {
            return;
        }
        let mut idle = self.lock();
        let list = idle.replicas.entry(replica).or_default();
        if list.len() >= self.max_idle {
            // Keep the recently used ones; the oldest would be the next to time out anyway.
            list.remove(0);
        }
        let connection = IdleConnection {
            sender,
            since: Instant::now(),
        };
        match first {
            true => list.push(connection),
            false => list.insert(0, connection),
        }
        if !idle.sweeping
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            idle.sweeping = true;
            let every = (self.idle_timeout / 4).max(MIN_SWEEP_INTERVAL);
            runtime.spawn(sweep(Arc::downgrade(self), every));
        }
    }

    /// Closes connections idle for longer than the timeout; false (and the sweeper marked
    /// stopped) when nothing is left idle.
    fn sweep(&self, now: Instant) -> bool {
        let mut idle = self.lock();
        let timeout = self.idle_timeout;
        idle.replicas.retain(|_, list| {
            list.retain(|c| !c.sender.is_closed() && now.duration_since(c.since) < timeout);
            !list.is_empty()
        });
        idle.sweeping = !idle.replicas.is_empty();
        idle.sweeping
    }
}

/// The sweeper task: runs while its pool exists and has idle connections.
async fn sweep(pool: Weak<Pool>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        if !pool.sweep(Instant::now()) {
            return;
        }
    }
}

/// A connection lent to one response, until its body ends.
#[derive(Debug)]
struct Lease {
    pool: Arc<Pool>,
    replica: ReplicaId,
    sender: http1::SendRequest<ProxyBody>,
}

/// A replica's response body; an HTTP/1.1 connection goes back to its pool when the body has
/// been read to its end, and is closed if the body is dropped before.
#[derive(Debug)]
pub struct UpstreamBody {
    body: Incoming,
    lease: Option<Lease>,
}

impl UpstreamBody {
    fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.pool.put(lease.replica, lease.sender);
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // hyper's server stops polling a body that says it has ended, without reading the
        // final `None`; such a body was still read in full.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.release(),
            Poll::Ready(Some(Err(_))) => self.lease = None,
            // Trailers come after the last chunk, and hyper's server drops the body once it
            // has written them, without asking for the end.
            Poll::Ready(Some(Ok(frame))) if frame.is_trailers() || self.body.is_end_stream() => {
                self.release()
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU64, Ordering};

    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use prometheus_client::metrics::counter::Counter;
    use tokio::net::TcpListener;

    use super::*;

    /// A replica on loopback that answers `/n` with the number of the connection it came on
    /// (0 for the first accepted), `/big` with 4 MiB, and `/close` by closing after answering.
    async fn replica() -> (Authority, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = Authority::try_from(listener.local_addr().unwrap().to_string()).unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let service = service_fn(move |request: Request<Incoming>| async move {
                    let mut response = match request.uri().path() {
                        "/big" => {
                            Response::new(Full::new(Bytes::from(vec![b'x'; 4 << 20])).boxed())
                        }
                        "/trailers" => Response::new(Trailing(Some(n)).boxed()),
                        _ => Response::new(Full::new(Bytes::from(n.to_string())).boxed()),
                    };
                    if request.uri().path() == "/trailers" {
                        // hyper sends only the HTTP/1.1 trailers the head announces.
                        response
                            .headers_mut()
                            .insert(http::header::TRAILER, "x-done".parse().unwrap());
                    }
                    if request.uri().path() == "/close" {
                        response
                            .headers_mut()
                            .insert(http::header::CONNECTION, "close".parse().unwrap());
                    }
                    Ok::<_, Infallible>(response)
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (authority, accepted)
    }

    /// A chunked body: the connection number, then a trailer.
    struct Trailing(Option<u64>);

    impl Body for Trailing {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(Some(Ok(match self.0.take() {
                Some(n) => Frame::data(Bytes::from(n.to_string())),
                None => {
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("x-done", http::HeaderValue::from_static("1"));
                    Frame::trailers(trailers)
                }
            })))
        }
    }

    fn get(path: &'static str) -> Request<ProxyBody> {
        let mut request = Request::new(crate::body::empty());
        *request.uri_mut() = http::Uri::from_static(path);
        request
    }

    async fn text(upstream: &Upstream, authority: &Authority, path: &'static str) -> String {
        let response = upstream
            .send(ReplicaId(0), authority, get(path))
            .await
            .unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    fn http1(idle_timeout: Duration) -> Upstream {
        let config = ClusterConfig {
            pool_idle_timeout: idle_timeout,
            ..ClusterConfig::default()
        };
        let connector = Connector::new(config.connect_timeout, None, Counter::default());
        Upstream::new(&config, connector)
    }

    #[tokio::test]
    async fn a_connection_read_to_its_end_is_reused() {
        let (authority, accepted) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        for _ in 0..20 {
            assert_eq!(text(&upstream, &authority, "/n").await, "0");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_takes_its_connection() {
        let (authority, _) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        let response = upstream
            .send(ReplicaId(0), &authority, get("/big"))
            .await
            .unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        drop(response);
        // The unread megabytes are never taken for the next response.
        assert_eq!(text(&upstream, &authority, "/n").await, "1");
        assert_eq!(text(&upstream, &authority, "/n").await, "1");
    }

    #[tokio::test]
    async fn a_connection_the_replica_closes_is_not_reused() {
        let (authority, accepted) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        assert_eq!(text(&upstream, &authority, "/close").await, "0");
        assert_eq!(text(&upstream, &authority, "/n").await, "1");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_idle_timeout() {
        let (authority, _) = replica().await;
        let upstream = http1(Duration::from_millis(20));
        assert_eq!(text(&upstream, &authority, "/n").await, "0");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Upstream::Http1(pool) = &upstream else {
            unreachable!("HTTP/1.1 is the default protocol")
        };
        assert!(pool.lock().replicas.is_empty());
        assert!(!pool.lock().sweeping);
        assert_eq!(text(&upstream, &authority, "/n").await, "1");
    }

    /// A request body that never ends.
    struct Endless;

    impl Body for Endless {
        type Data = Bytes;
        type Error = crate::body::BoxError;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_response_before_the_request_body_ended_does_not_hold_up_the_next_try() {
        let (authority, _) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        let mut request = get("/n");
        *request.body_mut() = Endless.boxed_unsync();
        // The replica answers before the request body ends; the connection keeps sending it.
        let response = upstream
            .send(ReplicaId(0), &authority, request)
            .await
            .unwrap();
        assert_eq!(
            response.into_body().collect().await.unwrap().to_bytes(),
            "0"
        );
        // hyper ends such an exchange with the response; whichever connection the next try
        // gets, it must not wait for the first request's body.
        let next = tokio::time::timeout(Duration::from_secs(10), text(&upstream, &authority, "/n"));
        let answer = next.await.expect("a try never waits on a busy connection");
        assert!(answer == "0" || answer == "1", "{answer}");
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_timeout_is_not_reused() {
        let (authority, _) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        assert_eq!(text(&upstream, &authority, "/n").await, "0");
        let Upstream::Http1(pool) = &upstream else {
            unreachable!("HTTP/1.1 is the default protocol")
        };
        // As if it had been idle for longer than the timeout, before the sweeper came by.
        for connection in pool.lock().replicas.values_mut().flatten() {
            connection.since -= Duration::from_secs(61);
        }
        assert_eq!(text(&upstream, &authority, "/n").await, "1");
    }

    #[tokio::test]
    async fn a_response_ending_in_trailers_gives_its_connection_back() {
        let (authority, _) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        for _ in 0..3 {
            let mut request = get("/trailers");
            // hyper's server sends HTTP/1.1 trailers only to a client that accepts them.
            request
                .headers_mut()
                .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
            let response = upstream
                .send(ReplicaId(0), &authority, request)
                .await
                .unwrap();
            let mut body = response.into_body();
            let data = body.frame().await.unwrap().unwrap();
            assert_eq!(data.into_data().unwrap(), "0");
            let trailers = body.frame().await.unwrap().unwrap();
            assert!(trailers.is_trailers());
            // Dropped without asking for the end, as hyper's server does after trailers.
            drop(body);
        }
        assert_eq!(text(&upstream, &authority, "/n").await, "0");
    }

    #[tokio::test]
    async fn a_refused_connect_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority = Authority::try_from(listener.local_addr().unwrap().to_string()).unwrap();
        drop(listener);
        let upstream = http1(Duration::from_secs(60));
        let error = upstream
            .send(ReplicaId(0), &authority, get("/n"))
            .await
            .unwrap_err();
        assert!(error.is_connect(), "{error}");
    }

    #[tokio::test]
    async fn forgetting_a_replica_closes_its_idle_connections() {
        let (authority, _) = replica().await;
        let upstream = http1(Duration::from_secs(60));
        assert_eq!(text(&upstream, &authority, "/n").await, "0");
        upstream.forget(ReplicaId(0));
        assert_eq!(text(&upstream, &authority, "/n").await, "1");
    }
}
