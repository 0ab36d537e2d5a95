//! A query counted in flight at this client, from dispatch until its response ends.
//!
//! The paper counts a query until its response is handed back, so this client's RIF at a
//! replica (what `least-loaded`, `peak-ewma` and Prequal's error aversion read) must fall
//! exactly once per query, however the query ends: its response body ends, the endpoint
//! answers an error, or the caller drops the response future or body half-way (a timeout
//! around the call, a hedge that lost, a client that went away). [`InFlight`] is that one
//! decrement as a value: it reports [`Outcome::Cancelled`] when dropped without having been
//! ended, so cancellation cannot leak RIF.

use std::sync::Arc;

use prequal_core::{Completion, LoadReport, Outcome, QueryId, ReplicaId};
use prequal_http::OnEnd;
use tokio::time::Instant;

use crate::driver::Driver;

/// One query in flight. See the module docs.
pub(crate) struct InFlight {
    driver: Arc<Driver>,
    replica: ReplicaId,
    query: QueryId,
    dispatched: Instant,
    /// The load the replica piggybacked on the response, handed to the policy with the end.
    report: Option<LoadReport>,
    ended: bool,
}

impl InFlight {
    /// Tells the policy that `query` was sent to `replica`, and counts it until it ends.
    pub(crate) fn dispatch(driver: &Arc<Driver>, replica: ReplicaId, query: QueryId) -> Self {
        driver.dispatch(replica, query);
        Self {
            driver: Arc::clone(driver),
            replica,
            query,
            dispatched: Instant::now(),
            report: None,
            ended: false,
        }
    }

    /// The replica reported its load on the response (piggybacked): the policy hears it when
    /// the query ends, after the end itself, as from the proxy (the report leaves the query
    /// out, and the policy takes the query's one off its reply when it hears of the end).
    pub(crate) fn load_report(&mut self, report: LoadReport) {
        self.report = Some(report);
    }

    /// The query ended with `outcome`; later calls (and the drop) do nothing.
    pub(crate) fn end(&mut self, outcome: Outcome) {
        if self.ended {
            return;
        }
        self.ended = true;
        let completion = Completion {
            query: self.query,
            latency: self.dispatched.elapsed(),
            outcome,
        };
        self.driver
            .complete(self.replica, &completion, self.report.take().as_ref());
    }
}

/// A response body in prequal-http's `TrackedBody` ends its query when it ends.
impl OnEnd for InFlight {
    fn on_end(mut self, outcome: Outcome) {
        self.end(outcome);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.end(Outcome::Cancelled);
    }
}
