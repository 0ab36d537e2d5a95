//! Serving one emulated replica on its port, with the scenario's whole-replica faults carried
//! out on the network as the simulator defines them (`docs/scenarios.md`, `fault`):
//!
//! - `black-hole`: queries that arrive are accepted and never answered (the replica's
//!   [`EmulatedReplica::serve`] holds them; its tracker counts them in flight until the client
//!   gives up); probes are answered;
//! - `host-down`: queries and probes that arrive are accepted and never answered, and the
//!   tracker never sees them (the gate in front of the probe layer holds them), like a
//!   stopped host whose kernel still completes connections;
//! - `killed`: at the episode's start the listener is closed and every open connection is
//!   dropped (requests in flight fail, new connections are refused); at its end the replica
//!   listens again on the same port with a fresh load tracker, as a restarted process.
//!
//! As in the simulator a fault acts on what arrives while it lasts: queries held by a black
//! hole or a down host when the episode ends stay unanswered until their client gives up.
//! Outside `killed` episodes this is `prequal_server::serve`: HTTP/1.1 and h2c on one
//! listener, graceful drain on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use prequal_core::{EstimatorConfig, Time};
use prequal_model::model::{EpisodeSpec, Fault};
use prequal_server::{ProbeLayer, SharedTracker};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::replica::{self, EmulatedReplica};

/// How one replica is served.
pub(crate) struct ServeReplica {
    /// The replica.
    pub replica: Arc<EmulatedReplica>,
    /// Its listener, already open.
    pub listener: TcpListener,
    /// The address it listens on (again, after a restart).
    pub addr: SocketAddr,
    /// Start and end times of the fault episodes that touch it, sorted.
    pub edges: Vec<Time>,
    /// The tracker settings of a restarted replica.
    pub estimator: EstimatorConfig,
    /// Whether responses carry the `prequal-load` header.
    pub piggyback: bool,
    /// How long open connections get to finish on shutdown.
    pub drain: Duration,
}

/// The start and end times of the fault episodes of `episodes` that touch replica `index`.
pub(crate) fn fault_edges(episodes: &[EpisodeSpec], index: u32) -> Vec<Time> {
    let mut edges: Vec<Time> = episodes
        .iter()
        .filter(|e| e.fault.is_some() && e.servers.contains(index))
        .flat_map(|e| [e.start, e.end])
        .map(|d| Time::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
        .collect();
    edges.sort();
    edges.dedup();
    edges
}

impl ServeReplica {
    /// Serves until `stop` changes (or its sender is dropped).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let ServeReplica {
            replica,
            listener,
            addr,
            edges,
            estimator,
            piggyback,
            drain,
        } = self;
        let mut listener = Some(listener);
        loop {
            let now = replica.clock().now();
            if replica.fault_at(now) == Some(Fault::Killed) {
                // Killed: no listener, so connections are refused until the episode ends.
                listener = None;
                let until = edges.iter().copied().find(|&e| e > now);
                if !sleep_until(&replica, until, &mut stop).await {
                    return;
                }
                continue;
            }
            let open = match listener.take() {
                Some(open) => open,
                None => match rebind(addr) {
                    Ok(open) => {
                        // The restarted process remembers nothing.
                        let fresh = SharedTracker::with_clock(estimator, replica.clock().clone());
                        replica.replace_tracker(Arc::new(fresh));
                        open
                    }
                    Err(error) => {
                        tracing::warn!(%addr, %error, "restarting replica: cannot listen again");
                        let retry = now + Duration::from_millis(100);
                        if !sleep_until(&replica, Some(retry), &mut stop).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            let kill_at = edges
                .iter()
                .copied()
                .find(|&e| e > now && replica.fault_at(e) == Some(Fault::Killed));
            match accept_until(&replica, open, piggyback, kill_at, drain, &mut stop).await {
                Ended::Killed => continue,
                Ended::Stopped => return,
            }
        }
    }
}

enum Ended {
    Killed,
    Stopped,
}

/// Accepts and serves connections until `kill_at` (then drops the listener and every
/// connection at once) or until `stop` (then drains gracefully for at most `drain`).
async fn accept_until(
    replica: &Arc<EmulatedReplica>,
    listener: TcpListener,
    piggyback: bool,
    kill_at: Option<Time>,
    drain: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    // The replica's service behind its probe layer, behind a gate that holds every request
    // (probes too) while the host is down.
    let charge = Arc::clone(replica);
    let layer = ProbeLayer::new(replica.tracker())
        .piggyback(piggyback)
        .probe_hook(Arc::new(move || charge.charge_probe()));
    let inner = tower::ServiceBuilder::new()
        .layer(layer)
        .service(replica::service(Arc::clone(replica)));
    let gate_replica = Arc::clone(replica);
    let service = tower::service_fn(move |request: Request<Incoming>| {
        let inner = inner.clone();
        let replica = Arc::clone(&gate_replica);
        async move {
            if replica.fault_at(replica.clock().now()) == Some(Fault::HostDown) {
                return std::future::pending().await;
            }
            inner.oneshot(request).await
        }
    });
    let killed = sleep_until_time(replica, kill_at);
    tokio::pin!(killed);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let connection = builder.serve_connection(
                    TokioIo::new(stream),
                    TowerToHyperService::new(service.clone()),
                );
                let connection = graceful.watch(connection.into_owned());
                connections.spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut killed => {
                // Killed: the process's sockets close at once, requests in flight with them.
                drop(listener);
                connections.abort_all();
                while connections.join_next().await.is_some() {}
                return Ended::Killed;
            }
            _ = stop.changed() => {
                drop(listener);
                if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
                    tracing::warn!(?drain, "connections still open after the drain deadline");
                }
                connections.abort_all();
                return Ended::Stopped;
            }
        }
    }
}

/// Sleeps until replica time `at` (forever for `None`).
async fn sleep_until_time(replica: &EmulatedReplica, at: Option<Time>) {
    match at {
        Some(at) => {
            let wait = at.saturating_since(replica.clock().now());
            tokio::time::sleep(wait).await;
            // Timers may fire a little early against the replica's clock: finish the wait.
            while replica.clock().now() < at {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; false when `stop` came first.
async fn sleep_until(
    replica: &EmulatedReplica,
    at: Option<Time>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        () = sleep_until_time(replica, at) => true,
        _ = stop.changed() => false,
    }
}

/// Listens on `addr` again; the old connections' TIME_WAIT does not stop it.
fn rebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}
