//! Serving a tower service on a TCP listener: HTTP/1.1 and cleartext HTTP/2 (h2c) on the same
//! port, with graceful shutdown.
//!
//! hyper-util's `auto` connection builder sniffs the HTTP/2 preface on each connection and
//! serves whichever protocol the client speaks, so gRPC (HTTP/2) and plain HTTP/1.1 clients can
//! share one listener. On shutdown the accept loop stops, every open connection is asked to
//! finish its in-flight requests, and the loop waits up to a drain deadline for them.
//!
//! With the `tls` feature, `serve_tls` does the same over TLS: the protocol negotiated by ALPN
//! (`h2` or `http/1.1`; sniffing only when the client offered none), and client certificates when the listener's TLS has a client CA.

use std::error::Error as StdError;
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

/// A boxed error, as hyper and tower pass them around.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// How long [`serve`] waits, after shutdown is asked, for open connections to finish.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

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
    let open = move |stream: TcpStream, peer: SocketAddr, graceful: &GracefulShutdown| {
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(service.clone()),
        );
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(log_end(connection, peer));
    };
    accept_loop(listener, open, shutdown, drain).await;
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
    let open = move |stream: TcpStream, peer: SocketAddr, graceful: &GracefulShutdown| {
        // Watched from accept on, so a drain waits for a handshake under way (at most its
        // timeout) and then closes the new connection.
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let service = TowerToHyperService::new(service.clone());
        let acceptor = tls.acceptor();
        let limit = tls.handshake_timeout();
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
    };
    accept_loop(listener, open, shutdown, drain).await;
}

/// Accepts connections and hands each to `open` until `shutdown` completes, then waits up to
/// `drain` for the connections `open` had watched to finish. `open` owns what it needs (the
/// service above all), so the loop is `Send` whenever the service is, `Sync` or not.
async fn accept_loop(
    listener: TcpListener,
    mut open: impl FnMut(TcpStream, SocketAddr, &GracefulShutdown),
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Typically out of file descriptors: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Latency matters more than packet count for small RPCs.
        let _ = stream.set_nodelay(true);
        open(stream, peer, &graceful);
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(?drain, "connections still open after the drain deadline");
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

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM: the usual way to stop a server.
///
/// If a signal handler cannot be installed, that signal is simply not waited for (the other
/// one still is), so the server never stops on its own because of it.
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
