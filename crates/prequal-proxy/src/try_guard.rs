//! The guard that tells the policy when a try has really finished.
//!
//! A try is "in flight" for the policy (client-local RIF) from its dispatch until its response
//! body has been read to the end, failed, or been dropped because the client went away. The
//! guard exists from the dispatch on; the response body is wrapped in prequal-http's
//! [`TrackedBody`](prequal_http::TrackedBody) (the one the replica side and the tower balancer
//! use too), which is handed the guard and reports the body's end to it; dropping the guard
//! reports the try to its cluster ([`Cluster::complete`]). A try counts as a success only once
//! its body has ended: one whose client left first is [`Outcome::Cancelled`].

use std::sync::Arc;

use prequal_core::{LoadReport, Outcome, QueryId, ReplicaId};
use prequal_http::OnEnd;
use tokio::time::Instant;

use crate::cluster::{Chosen, Cluster};

/// One try that the policy counts as in flight until this guard is dropped.
#[derive(Debug)]
pub struct TryGuard {
    /// The cluster the try went to.
    pub cluster: Arc<Cluster>,
    /// The replica it went to.
    pub replica: ReplicaId,
    /// The data-plane worker it runs on.
    pub worker: usize,
    /// The policy's id for it.
    pub query: QueryId,
    /// When it was dispatched.
    pub start: Instant,
    /// How it ended, as far as is known so far: [`Outcome::Cancelled`] until the response
    /// has ended or failed (or its head has shown a failure).
    pub outcome: Outcome,
    /// A load report piggybacked on the response, if any.
    pub report: Option<LoadReport>,
    /// How long the replica took to answer, once it has: to the response head, or, for a
    /// response read whole within the try, to its end. A try dropped before is a loser.
    pub answered: Option<std::time::Duration>,
    /// How long the replica took to send the response head, once it has (what the hedge
    /// delay is learned from).
    pub head: Option<std::time::Duration>,
    /// Set when the try failed through the client's fault (its request body broke): it ends
    /// cancelled however long it ran, never counted against the replica.
    pub client_fault: bool,
}

impl TryGuard {
    /// A try dispatched now to `chosen`: cancelled until proven otherwise, so that if it is
    /// dropped (the client went away, or another try answered first) it is reported as such.
    pub fn dispatched(cluster: &Arc<Cluster>, chosen: &Chosen, worker: usize) -> Self {
        TryGuard {
            cluster: Arc::clone(cluster),
            replica: chosen.replica,
            worker,
            query: chosen.query,
            start: Instant::now(),
            outcome: Outcome::Cancelled,
            report: None,
            answered: None,
            head: None,
            client_fault: false,
        }
    }
}

/// The response body ended: the try is complete with the body's outcome (a success unless the
/// head, the trailers or the body itself showed a failure).
impl OnEnd for TryGuard {
    fn on_end(mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for TryGuard {
    fn drop(&mut self) {
        let latency = self.start.elapsed();
        self.cluster.complete(
            self.replica,
            self.query,
            (latency, self.answered, self.head),
            (self.outcome, self.client_fault),
            self.report.take(),
            self.worker,
        );
    }
}
