//! What every connection, the admin listener and reloads share: the routing table in force
//! (swapped whole by a reload), the metrics, the policies' clock, whether it is draining, the
//! access log and the listener's TLS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::access_log::AccessLog;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::routing::Routing;
use crate::tls::ServerTls;

/// State shared by every connection, the admin listener and reloads.
#[derive(Debug)]
pub struct Shared {
    routing: RwLock<Arc<Routing>>,
    /// The proxy's metrics.
    pub metrics: Arc<Metrics>,
    clock: Clock,
    draining: AtomicBool,
    access_log: Option<AccessLog>,
    /// TLS termination, when `[server.tls]` is set.
    tls: Option<Arc<ServerTls>>,
    /// The runtime the proxy was bound in, which runs its background work.
    runtime: tokio::runtime::Handle,
}

impl Shared {
    /// The state of a proxy that starts serving `routing`.
    pub(crate) fn new(
        routing: Routing,
        metrics: Arc<Metrics>,
        clock: Clock,
        access_log: Option<AccessLog>,
        tls: Option<Arc<ServerTls>>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Shared {
            routing: RwLock::new(Arc::new(routing)),
            metrics,
            clock,
            draining: AtomicBool::new(false),
            access_log,
            tls,
            runtime,
        }
    }

    /// The routing table now in force.
    pub fn routing(&self) -> Arc<Routing> {
        let guard = self.routing.read().unwrap_or_else(|p| p.into_inner());
        Arc::clone(&guard)
    }

    /// Puts `routing` in force; requests already routed keep the table they got.
    pub(crate) fn set_routing(&self, routing: Routing) {
        let mut guard = self.routing.write().unwrap_or_else(|p| p.into_inner());
        *guard = Arc::new(routing);
    }

    /// The policies' clock, whose zero is when the proxy started.
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// The runtime the proxy was bound in: the accepting thread's, which runs the clusters'
    /// timers and discovery.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// True once shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Marks the start of shutdown (`/ready` answers 503 from now on).
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// The access log, when `server.access_log` is set.
    pub(crate) fn access_log(&self) -> Option<&AccessLog> {
        self.access_log.as_ref()
    }

    /// The listener's TLS, when it terminates TLS.
    pub fn tls(&self) -> Option<&Arc<ServerTls>> {
        self.tls.as_ref()
    }
}
