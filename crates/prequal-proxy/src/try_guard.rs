//! The guard that tells the policy when a try has really finished.
//!
//! A try is "in flight" for the policy (client-local RIF) from its dispatch until its response
//! body has been read to the end, failed, or been dropped because the client went away. The
//! guard exists from the dispatch on; the response body is wrapped in prequal-http's
//! [`TrackedBody`](prequal_http::TrackedBody) (the one the replica side and the tower balancer
//! use too), which is handed the guard and reports the body's end to it; dropping the guard
//! reports the try to its cluster ([`Cluster::complete`]). A try counts as a success only once
//! its body has ended: one whose client left first is [`Outcome::Cancelled`].

use std::cell::Cell;
use std::sync::Arc;

use prequal_core::{LoadReport, Outcome, QueryId, ReplicaId};
use prequal_http::OnEnd;
use tokio::time::Instant;

use crate::cluster::{Chosen, Cluster, Ending};

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
        let ending = Ending {
            outcome: self.outcome,
            client_fault: self.client_fault,
            lost: DROPPING_LOSERS.get(),
        };
        self.cluster.complete(
            self.replica,
            self.query,
            (latency, self.answered, self.head),
            ending,
            self.report.take(),
            self.worker,
        );
    }
}

thread_local! {
    /// Set while [`drop_losers`] drops the tries that lost to another try of their request.
    static DROPPING_LOSERS: Cell<bool> = const { Cell::new(false) };
}

/// Drops `losers`, the tries still out when another try of their request won, so that each
/// guard among them reports a loser ([`Ending::lost`]) rather than a try whose client left:
/// the guards sit inside the tries' futures, out of the request's reach, and are dropped here,
/// on this thread, while the flag is up.
pub fn drop_losers<T>(losers: T) {
    /// Puts the flag back as it was, even if a drop panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DROPPING_LOSERS.set(self.0);
        }
    }
    let _restore = Restore(DROPPING_LOSERS.replace(true));
    drop(losers);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records, when dropped, whether it was dropped as a loser.
    struct Witness<'a>(&'a Cell<Option<bool>>);

    impl Drop for Witness<'_> {
        fn drop(&mut self) {
            self.0.set(Some(DROPPING_LOSERS.get()));
        }
    }

    #[test]
    fn only_what_drop_losers_drops_is_a_loser() {
        let seen = Cell::new(None);
        drop_losers(vec![Witness(&seen)]);
        assert_eq!(seen.get(), Some(true));
        drop(Witness(&seen));
        assert_eq!(seen.get(), Some(false), "the flag is down again");
    }

    #[test]
    fn the_flag_comes_down_when_a_drop_panics() {
        struct Panics;
        impl Drop for Panics {
            fn drop(&mut self) {
                panic!("a drop that panics");
            }
        }
        let caught = std::panic::catch_unwind(|| drop_losers(Panics));
        assert!(caught.is_err());
        assert!(!DROPPING_LOSERS.get());
    }
}
