//! The shutdown signal every long-running prequal command waits for: SIGINT (Ctrl-C) or, on
//! Unix, SIGTERM (what service managers and `docker stop` send).
//!
//! A handler that cannot be installed means that signal is not waited for; the other still is.
//! The future never completes because of such a failure: a server that stopped the moment it
//! started, for want of a signal handler, would be a worse surprise than one that must be
//! killed. (The proxy's copy once completed at once when Ctrl-C could not be watched; it uses
//! this one now.)

/// Completes on SIGINT or, on Unix, SIGTERM, and logs that shutdown has begun.
///
/// The handlers are installed on the first poll, so poll it once before relying on a signal
/// being caught.
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
            // Without a SIGTERM handler the default action (exit) applies; wait for SIGINT.
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutdown signal received");
}
