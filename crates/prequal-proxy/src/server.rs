//! The data-plane listener: HTTP/1.1 and HTTP/2 (h2c with prior knowledge) on one socket,
//! graceful drain on shutdown, and reload by swapping the routing table.
//!
//! Connections are served by `hyper_util::server::conn::auto`, which reads the first bytes to
//! tell the HTTP/2 preface from an HTTP/1.1 request. Every connection is watched by a
//! `GracefulShutdown`: on shutdown the listener closes at once, idle keep-alive connections are
//! closed, HTTP/2 connections get a GOAWAY, and requests in flight run to completion (up to
//! `server.drain_timeout`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::body::ProxyBody;
use crate::config::{ProxyConfig, ServerConfig};
use crate::forward::{Limits, forward, local_response};
use crate::headers::ClientHop;
use crate::metrics::Metrics;
use crate::routing::Routing;

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
}

/// State shared by every connection, the admin listener and reloads.
#[derive(Debug)]
pub struct Shared {
    routing: RwLock<Arc<Routing>>,
    /// The proxy's metrics.
    pub metrics: Arc<Metrics>,
    epoch: Instant,
    draining: AtomicBool,
}

impl Shared {
    /// The routing table now in force.
    pub fn routing(&self) -> Arc<Routing> {
        let guard = self.routing.read().unwrap_or_else(|p| p.into_inner());
        Arc::clone(&guard)
    }

    /// True once shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
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
        let routing = Routing::build(config, Some(&old), self.shared.epoch, &self.shared.metrics)?;
        let mut guard = self
            .shared
            .routing
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *guard = Arc::new(routing);
        tracing::info!("configuration reloaded");
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
        let epoch = Instant::now();
        let metrics = Arc::new(Metrics::new());
        let routing = Routing::build(config, None, epoch, &metrics)?;
        let shared = Arc::new(Shared {
            routing: RwLock::new(Arc::new(routing)),
            metrics,
            epoch,
            draining: AtomicBool::new(false),
        });
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
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Proxy {
            shared,
            listener,
            admin,
        } = self;
        let admin_task = admin.map(|l| tokio::spawn(crate::admin::serve(l, Arc::clone(&shared))));
        let server = shared.routing().config().server.clone();
        let builder = connection_builder(&server);
        let limits = Limits {
            max_body_bytes: server.max_body_bytes,
        };
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let (stream, remote) = match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let state = Arc::clone(&shared);
            let client = Arc::new(ClientHop::new(remote));
            let service =
                service_fn(move |req| handle(Arc::clone(&state), req, Arc::clone(&client), limits));
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::spawn(log_end(graceful.watch(conn)));
        }
        drop(listener);
        shared.draining.store(true, Ordering::Relaxed);
        tracing::info!("draining in-flight requests");
        if tokio::time::timeout(server.drain_timeout, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("drain timeout reached; closing remaining connections");
        }
        if let Some(task) = admin_task {
            task.abort();
        }
    }
}

/// HTTP/1.1 and HTTP/2 on one listener, with the head-size limits of `[server]`.
fn connection_builder(server: &ServerConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .max_buf_size(server.max_header_bytes as usize);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(server.max_header_bytes);
    builder
}

async fn log_end<E: std::fmt::Display>(connection: impl Future<Output = Result<(), E>>) {
    if let Err(error) = connection.await {
        tracing::debug!(%error, "connection ended with an error");
    }
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
    client: Arc<ClientHop>,
    limits: Limits,
) -> Result<Response<ProxyBody>, Infallible> {
    let routing = shared.routing();
    let Some(cluster) = routing.route(&request) else {
        return Ok(local_response(StatusCode::NOT_FOUND, "no route\n"));
    };
    let cluster = Arc::clone(cluster);
    drop(routing);
    let metrics = &cluster.metrics;
    metrics.requests.inc();
    let start = Instant::now();
    let response = forward(&cluster, request, &client, limits).await;
    metrics.duration.observe(start.elapsed().as_secs_f64());
    metrics.response(response.status().as_u16());
    Ok(response)
}

/// Completes on SIGINT or SIGTERM (on Unix; SIGINT only elsewhere): the shutdown future
/// `prequal proxy` passes to [`Proxy::run`].
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            // Without a SIGTERM handler the default action (exit) applies; wait for SIGINT.
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutdown signal received; draining");
}
