//! Serving HTTP on a TCP listener: HTTP/1.1 and cleartext HTTP/2 (h2c) on the same port, or
//! both over TLS, with graceful shutdown. The sidecar, the tower layer's servers, the testbed's
//! backends and the proxy's data plane all serve this way.
//!
//! hyper-util's `auto` connection builder sniffs the HTTP/2 preface on each connection and
//! serves whichever protocol the client speaks, so gRPC (HTTP/2) and plain HTTP/1.1 clients can
//! share one listener. The pieces, for a server that needs its own arrangement (the proxy deals
//! connections to several threads):
//!
//! - [`accept_until`]: accepts connections until shutdown, with `TCP_NODELAY` set (latency
//!   matters more than packet count for small RPCs); an accept error (typically out of file
//!   descriptors) is logged and retried after [`ACCEPT_BACKOFF`] instead of spinning;
//! - [`spawn_connection`] (and `spawn_tls_connection` with the `tls` feature): serves one
//!   connection as a task, watched by a `GracefulShutdown` so that a drain reaches it;
//! - [`drain`]: after the listener has closed, asks every watched connection to finish (idle
//!   keep-alive connections close, HTTP/2 ones get a GOAWAY, requests in flight run to
//!   completion) and waits for them up to a deadline.
//!
//! [`serve`] (and `serve_tls`) put them together for one tower service. Over TLS the protocol is
//! the one ALPN negotiated (`h2` or `http/1.1`; sniffing only when the client offered none),
//! and client certificates are required when the listener's TLS has a client CA.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

use crate::error::BoxError;

/// How long [`serve`] waits, after shutdown is asked, for open connections to finish.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

/// How long [`accept_until`] waits after a failed accept before it tries again.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `service` on `listener` until `shutdown` completes, then drains open connections for
/// at most `drain`. Connection-level errors (a client resetting, a bad preface) are logged and
/// do not stop the server.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let watching = &graceful;
    // The closure owns the service, so this future is `Send` whenever the service is, `Sync`
    // or not.
    let open = move |stream, peer| {
        let service = TowerToHyperService::new(service.clone());
        spawn_connection(&builder, stream, peer, service, watching);
    };
    accept_until(listener, shutdown, open).await;
    self::drain(graceful, drain).await;
}

/// [`serve`] over TLS: each connection first completes a handshake with `tls` (within its
/// handshake timeout, with the certificates in force at that moment; client certificates
/// required if `tls` has a client CA), and ALPN chooses HTTP/2 or HTTP/1.1. A failed handshake
/// is logged at debug level and closes that connection only.
#[cfg(feature = "tls")]
pub async fn serve_tls<S, B>(
    listener: TcpListener,
    service: S,
    tls: std::sync::Arc<crate::tls::ReplicaTls>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let watching = &graceful;
    let open = move |stream, peer| {
        let service = TowerToHyperService::new(service.clone());
        let handshake = (tls.acceptor(), tls.handshake_timeout());
        spawn_tls_connection(&builder, stream, peer, service, handshake, watching);
    };
    accept_until(listener, shutdown, open).await;
    self::drain(graceful, drain).await;
}

/// Accepts connections on `listener` and hands each to `open` until `shutdown` completes; the
/// listener is closed on return. See the module docs.
pub async fn accept_until(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    mut open: impl FnMut(TcpStream, SocketAddr),
) {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        open(stream, peer);
    }
}

/// Serves one connection from `peer` with `builder` and the hyper `service`, as a task on the
/// current runtime, watched by `graceful`.
pub fn spawn_connection<S, B>(
    builder: &auto::Builder<TokioExecutor>,
    stream: TcpStream,
    peer: SocketAddr,
    service: S,
    graceful: &GracefulShutdown,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let connection = builder
        .serve_connection(TokioIo::new(stream), service)
        .into_owned();
    tokio::spawn(log_end(graceful.watch(connection), peer));
}

/// [`spawn_connection`] after a TLS handshake with `handshake`'s acceptor, within its time
/// limit; the protocol is then the one ALPN chose. The connection is watched from accept on,
/// so a drain waits for a handshake under way (at most its limit) and then closes the new
/// connection.
#[cfg(feature = "tls")]
pub fn spawn_tls_connection<S, B>(
    builder: &auto::Builder<TokioExecutor>,
    stream: TcpStream,
    peer: SocketAddr,
    service: S,
    handshake: (tokio_rustls::TlsAcceptor, Duration),
    graceful: &GracefulShutdown,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let watcher = graceful.watcher();
    let builder = builder.clone();
    let (acceptor, limit) = handshake;
    tokio::spawn(async move {
        let Some(stream) = crate::tls::handshake(acceptor, stream, limit, peer).await else {
            return;
        };
        let builder = crate::tls::builder_for_alpn(&builder, &stream);
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        log_end(watcher.watch(connection), peer).await;
    });
}

/// Asks every connection `graceful` watches to finish, and waits for them at most `limit`; a
/// warning says so if some are still open then.
pub async fn drain(graceful: GracefulShutdown, limit: Duration) {
    if tokio::time::timeout(limit, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(?limit, "connections still open after the drain deadline");
    }
}

/// Runs a connection to its end, logging how it ended if not cleanly.
async fn log_end<E: std::fmt::Display>(
    connection: impl Future<Output = Result<(), E>>,
    peer: SocketAddr,
) {
    if let Err(error) = connection.await {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
