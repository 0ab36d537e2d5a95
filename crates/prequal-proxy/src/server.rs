//! The data-plane listener: HTTP/1.1 and HTTP/2 (h2c with prior knowledge) on one socket, or
//! both over TLS with ALPN, graceful drain on shutdown, and reload by swapping the routing
//! table.
//!
//! Connections are served by `hyper_util::server::conn::auto`, which reads the first bytes to
//! tell the HTTP/2 preface from an HTTP/1.1 request. With `[server.tls]` each connection first
//! completes a TLS handshake ([`crate::tls`]: the certificate by SNI, ALPN `h2` or `http/1.1`)
//! on the thread that will serve it, and the same builder then serves the decrypted stream: a
//! client that negotiated `h2` sends the HTTP/2 preface, one that negotiated `http/1.1` (or
//! nothing) a request line. The data plane is thread-per-core: one
//! task accepts and deals connections in turn to `server.worker_threads` threads (itself
//! included), each a single-threaded tokio runtime with its own upstream connection pools, so a
//! request never wakes another thread on its way through. Measured on two cores, this costs
//! about a fifth less CPU per request than one work-stealing runtime (docs/performance.md).
//! Only the clusters' policy state is shared, behind each cluster's short-held lock. Every connection is watched by a
//! `GracefulShutdown` of its thread: on shutdown the listener closes at once, idle keep-alive connections are
//! closed, HTTP/2 connections get a GOAWAY, and requests in flight run to completion (up to
//! `server.drain_timeout`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use prequal_http::serve::{accept_until, drain, spawn_connection, spawn_tls_connection};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::access_log::{AccessLog, Entry, REQUEST_ID, Served, ensure_request_id};
use crate::background::Background;
use crate::body::ProxyBody;
use crate::clock::Clock;
use crate::config::{ProxyConfig, ServerConfig};
use crate::forward::{Limits, forward, local_response};
use crate::headers::ClientHop;
use crate::metrics::Metrics;
use crate::routing::Routing;
pub use crate::shared::Shared;
use crate::tls::ServerTls;

/// Why the proxy could not start or reload.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A listener could not bind.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Which listener.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A cluster could not be built.
    #[error(transparent)]
    Build(#[from] crate::routing::BuildError),
    /// The listener's certificates could not be loaded (the message names the key and file).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The access log could not be opened.
    #[error("cannot open the access log {path} (server.access_log): {source}")]
    AccessLog {
        /// The path.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A handle to a running proxy, for reloads and views; cheap to clone.
#[derive(Debug, Clone)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
}

impl ProxyHandle {
    /// Applies a new configuration without dropping requests. On error the running
    /// configuration stays in force. A changed listen address needs a restart (logged).
    pub fn reload(&self, config: &ProxyConfig) -> Result<(), ProxyError> {
        config.validate("<reload>")?;
        let old = self.shared.routing();
        if config.server != old.config().server || config.admin != old.config().admin {
            tracing::warn!("[server] and [admin] changes take effect only after a restart");
        }
        // Within the proxy's runtime, wherever this is called from, so that building reads the
        // time on its clock (tokio's, which a test may pause); the background work that
        // building returns is spawned there below.
        let runtime = self.shared.runtime();
        let _entered = runtime.enter();
        let clock = self.shared.clock();
        let (routing, background) =
            Routing::build(config, Some(&old), clock, &self.shared.metrics)?;
        self.shared.set_routing(routing);
        spawn(runtime, background);
        tracing::info!("configuration reloaded");
        // Only about a configuration that is now in force.
        config.log_warnings();
        Ok(())
    }

    /// The shared state (routing, metrics).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// A bound, not yet running proxy.
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    listener: TcpListener,
    admin: Option<TcpListener>,
}

impl Proxy {
    /// Binds the listeners and builds the clusters (starting probing and discovery). Must run
    /// inside a tokio runtime.
    pub async fn bind(config: &ProxyConfig) -> Result<Self, ProxyError> {
        config.validate("<config>")?;
        config.log_warnings();
        let listen = config.server.listen;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| ProxyError::Bind {
                addr: listen,
                what: "server.listen",
                source,
            })?;
        let admin = match config.admin.enabled {
            false => None,
            true => {
                let addr = config.admin.listen;
                let bound = TcpListener::bind(addr).await;
                Some(bound.map_err(|source| ProxyError::Bind {
                    addr,
                    what: "admin.listen",
                    source,
                })?)
            }
        };
        let (tls, tls_watch) = match &config.server.tls {
            None => (None, Background::none()),
            Some(tls) => {
                let (tls, watch) = ServerTls::load(tls)?;
                (Some(Arc::new(tls)), watch)
            }
        };
        let clock = Clock::start();
        let metrics = Arc::new(Metrics::new());
        let (routing, mut background) = Routing::build(config, None, clock, &metrics)?;
        background.add(tls_watch);
        let access_log = match &config.server.access_log {
            None => None,
            Some(path) => Some(
                AccessLog::open(path).map_err(|source| ProxyError::AccessLog {
                    path: path.clone(),
                    source,
                })?,
            ),
        };
        // Background work runs on the runtime the proxy is bound in (and so is reloaded in).
        let runtime = tokio::runtime::Handle::current();
        spawn(&runtime, background);
        let shared = Arc::new(Shared::new(
            routing, metrics, clock, access_log, tls, runtime,
        ));
        Ok(Proxy {
            shared,
            listener,
            admin,
        })
    }

    /// The data-plane address (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The admin address, if the admin listener is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// A handle for reloads.
    pub fn handle(&self) -> ProxyHandle {
        ProxyHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Serves until `shutdown` completes, then drains in-flight requests and returns.
    ///
    /// The calling task accepts; connections are dealt in turn to this thread and to
    /// `server.worker_threads - 1` more threads, each a single-threaded runtime, so that a
    /// request, its upstream connection and its response stay on one thread.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Proxy {
            shared,
            listener,
            admin,
        } = self;
        let admin_task = admin.map(|l| tokio::spawn(crate::admin::serve(l, Arc::clone(&shared))));
        let server = shared.routing().config().server.clone();
        let workers: Vec<Worker> = (1..server.workers())
            .filter_map(|index| Worker::spawn(index, &shared, &server))
            .collect();
        tokio::spawn(warm_probe_connections(Arc::clone(&shared), 0));
        let local = Serving::new(&server, &shared, 0);
        let mut next = 0usize;
        let deal = |stream, remote| {
            next = (next + 1) % (workers.len() + 1);
            match next.checked_sub(1).and_then(|i| workers.get(i)) {
                None => local.serve(stream, remote, &shared),
                Some(worker) => worker.hand_over(stream, remote, &local, &shared),
            }
        };
        accept_until(listener, shutdown, deal).await;
        shared.start_draining();
        tracing::info!("draining in-flight requests");
        // Closing a worker's queue makes it drain; all threads drain at the same time.
        let stopped: Vec<_> = workers.into_iter().map(|w| w.done).collect();
        local.drain(server.drain_timeout).await;
        for done in stopped {
            let _ = done.await;
        }
        if let Some(task) = admin_task {
            task.abort();
        }
    }
}

/// Opens data-plane `worker`'s probe connections to every replica of every cluster whose policy
/// probes, one each, so that probes find them ready when the requests come.
async fn warm_probe_connections(shared: Arc<Shared>, worker: usize) {
    let routing = shared.routing();
    for cluster in routing.clusters().values() {
        cluster.warm_probe_connections(worker).await;
    }
}

/// What one thread needs to serve connections: the HTTP/1.1 + HTTP/2 builder, the limits, the
/// TLS acceptor if any, the watcher that drains its connections on shutdown, and which
/// data-plane worker it is (0 for the thread that runs [`Proxy::run`], 1.. for the threads it
/// starts), which picks the connection pools its requests and probes use.
struct Serving {
    worker: usize,
    builder: auto::Builder<TokioExecutor>,
    limits: Limits,
    tls: Option<Arc<ServerTls>>,
    graceful: GracefulShutdown,
}

impl Serving {
    fn new(server: &ServerConfig, shared: &Shared, worker: usize) -> Self {
        Serving {
            worker,
            builder: connection_builder(server),
            limits: Limits {
                max_body_bytes: server.max_body_bytes,
            },
            tls: shared.tls().cloned(),
            graceful: GracefulShutdown::new(),
        }
    }

    /// Serves one connection as a task on the current runtime.
    fn serve(&self, stream: TcpStream, remote: SocketAddr, shared: &Arc<Shared>) {
        let state = Arc::clone(shared);
        let hop = match self.tls {
            None => ClientHop::new(remote),
            Some(_) => ClientHop::over_tls(remote),
        };
        let client = Arc::new(hop);
        let (limits, worker) = (self.limits, self.worker);
        let service = service_fn(move |req| {
            let client = Arc::clone(&client);
            handle(Arc::clone(&state), req, client, limits, worker)
        });
        match &self.tls {
            None => spawn_connection(&self.builder, stream, remote, service, &self.graceful),
            Some(tls) => {
                let handshake = (tls.acceptor(), tls.handshake_timeout());
                let graceful = &self.graceful;
                spawn_tls_connection(&self.builder, stream, remote, service, handshake, graceful);
            }
        }
    }

    /// Closes idle connections, sends GOAWAY on HTTP/2 ones, and waits for requests in flight
    /// (at most `limit`).
    async fn drain(self, limit: std::time::Duration) {
        drain(self.graceful, limit).await;
    }
}

/// A data-plane thread: its queue of accepted connections, and a signal that it has drained.
struct Worker {
    queue: mpsc::UnboundedSender<(std::net::TcpStream, SocketAddr)>,
    done: oneshot::Receiver<()>,
}

impl Worker {
    /// Starts worker `index` on a thread of its own; `None` (logged) if the system refuses.
    fn spawn(index: usize, shared: &Arc<Shared>, server: &ServerConfig) -> Option<Worker> {
        let (queue, mut accepted) = mpsc::unbounded_channel::<(std::net::TcpStream, SocketAddr)>();
        let (finished, done) = oneshot::channel();
        let shared = Arc::clone(shared);
        let server = server.clone();
        let work = async move {
            tokio::spawn(warm_probe_connections(Arc::clone(&shared), index));
            let serving = Serving::new(&server, &shared, index);
            while let Some((stream, remote)) = accepted.recv().await {
                match TcpStream::from_std(stream) {
                    Ok(stream) => serving.serve(stream, remote, &shared),
                    Err(error) => tracing::debug!(%error, "cannot adopt a connection"),
                }
            }
            serving.drain(server.drain_timeout).await;
        };
        std::thread::Builder::new()
            .name(format!("prequal-data-{index}"))
            .spawn(move || {
                // Built on the thread itself: a runtime made here and dropped because the
                // thread could not start would be dropped inside the caller's runtime, which
                // panics. If this fails, the worker's queue closes and its connections are
                // served by the accepting thread (`Worker::hand_over`).
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        tracing::warn!(%error, index, "cannot start a worker runtime");
                        return;
                    }
                };
                runtime.block_on(work);
                let _ = finished.send(());
            })
            .map_err(|error| tracing::warn!(%error, index, "cannot start a worker thread"))
            .ok()?;
        Some(Worker { queue, done })
    }

    /// Passes an accepted connection to this worker, or serves it on `fallback` if the worker
    /// is gone.
    fn hand_over(
        &self,
        stream: TcpStream,
        remote: SocketAddr,
        fallback: &Serving,
        shared: &Arc<Shared>,
    ) {
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "cannot hand a connection over");
                return;
            }
        };
        if let Err(mpsc::error::SendError((stream, remote))) = self.queue.send((stream, remote)) {
            match TcpStream::from_std(stream) {
                Ok(stream) => fallback.serve(stream, remote, shared),
                Err(error) => tracing::debug!(%error, "cannot adopt a connection"),
            }
        }
    }
}

/// Spawns background work (the clusters' timers, the discovery and TLS file watches) on
/// `runtime`.
fn spawn(runtime: &tokio::runtime::Handle, background: Background) {
    for task in background.into_tasks() {
        runtime.spawn(task);
    }
}

/// HTTP/1.1 and HTTP/2 on one listener, with the head-size limits of `[server]`.
fn connection_builder(server: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // One flattened write per response head and small body instead of writev: measured
        // 4% less CPU per request (docs/performance.md).
        .writev(false)
        .max_buf_size(server.max_header_bytes as usize);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(server.max_header_bytes);
    builder
}

async fn handle(
    shared: Arc<Shared>,
    mut request: Request<Incoming>,
    client: Arc<ClientHop>,
    limits: Limits,
    worker: usize,
) -> Result<Response<ProxyBody>, Infallible> {
    let start = Instant::now();
    let id = ensure_request_id(request.headers_mut());
    // What the access log needs of the request, kept only when there is one.
    let logged = shared.access_log().map(|_| {
        let host = request
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()))
            .map(str::to_owned);
        let path = request
            .uri()
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        (request.method().clone(), host, path)
    });
    let routing = shared.routing();
    let (mut response, served, cluster) = match routing.route(&request) {
        None => {
            let response = local_response(StatusCode::NOT_FOUND, "no route\n");
            (response, Served::default(), None)
        }
        Some(cluster) => {
            let cluster = Arc::clone(cluster);
            drop(routing);
            let metrics = &cluster.metrics;
            metrics.requests.inc();
            let (response, served) = forward(&cluster, request, &client, limits, worker).await;
            metrics.duration.observe(start.elapsed().as_secs_f64());
            metrics.response(response.status().as_u16());
            (response, served, Some(cluster))
        }
    };
    if let (Some(log), Some((method, host, path))) = (shared.access_log(), logged) {
        log.write(&Entry {
            time: Entry::now(),
            request_id: id.to_str().unwrap_or_default(),
            client: client.ip().to_string(),
            method: method.as_str(),
            host: host.as_deref(),
            path: &path,
            status: response.status().as_u16(),
            cluster: cluster.as_ref().map(|c| c.name()),
            replica: served.replica.as_ref().map(|a| a.as_str()),
            tries: served.tries,
            hedged: served.hedged,
            duration_ms: Entry::millis(start.elapsed()),
        });
    }
    response.headers_mut().insert(REQUEST_ID, id);
    Ok(response)
}
