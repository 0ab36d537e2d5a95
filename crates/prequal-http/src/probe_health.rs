//! How a replica answers probes, when it does not answer them as it should: what the proxy's
//! prober and the tower balancer's both keep per replica, so that each warns once of a replica
//! probing cannot see rather than once per probe.
//!
//! Two ways a replica leaves the policy blind, each warned of by the prober that sees it:
//!
//! - it *refuses* probes: it answers something other than a probe reply ([`refusal`]). A
//!   service with no probe layer or `prequal sidecar` in front of it answers
//!   `GET /.prequal/probe` with a 404, or with a page the parser refuses. Warned once, and
//!   again only after it has answered a probe in between;
//! - it answers them *late*: each reply comes after the probe timeout, so the policy counts
//!   every probe as failed (a round trip longer than the policy's `probe_timeout`, as across
//!   zones with the datacenter default of 3 ms, or a replica too busy to answer in time).
//!   Warned after [`LATE_IN_A_ROW_TO_WARN`] in a row with no reply in time between, at most
//!   once per [`LATE_WARNING_INTERVAL`].
//!
//! A prober records every probe's end here ([`ProbeHealth::answered`],
//! [`ProbeHealth::refused`], [`ProbeHealth::answered_late`]), and writes the warning itself
//! when told to: the advice (which setting to raise, what to put in front of the replica) is
//! the prober's to give. Time is tokio's, so tests with paused time drive the interval.
//!
//! ```
//! use prequal_http::probe_health::ProbeHealth;
//!
//! let health = ProbeHealth::default();
//! assert!(health.refused("probe answered with status 404 Not Found".into()), "warn");
//! assert!(!health.refused("probe answered with status 404 Not Found".into()), "once");
//! assert!(health.answered(), "it answers again");
//! assert_eq!(health.refused_with(), None);
//! ```

use std::error::Error;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::probe::ProbeReplyError;

/// Probes answered only after the probe timeout, in a row, that make a prober warn.
pub const LATE_IN_A_ROW_TO_WARN: u32 = 20;
/// The shortest time between two warnings of late probes to one replica.
pub const LATE_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// How one replica answers probes, shared by its probes (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct ProbeHealth {
    refusing: AtomicBool,
    /// What the latest refused probe got back, while the replica refuses them.
    reason: Mutex<Option<String>>,
    /// Probes answered after the timeout since the last one answered in time.
    late: AtomicU32,
    /// When late probes to the replica were last warned of.
    late_warned: Mutex<Option<Instant>>,
}

impl ProbeHealth {
    /// Records a probe the replica answered with `reason` instead of a reply; true when the
    /// replica was answering probes until now (or had not been probed yet): time to warn.
    pub fn refused(&self, reason: String) -> bool {
        // Flag and reason change together under the lock, so a reply racing with this cannot
        // leave the flag up with no reason.
        let mut held = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        let first = !self.refusing.swap(true, Ordering::AcqRel);
        *held = Some(reason);
        first
    }

    /// Records a probe answered after the timeout; true when that is worth a warning now:
    /// the [`LATE_IN_A_ROW_TO_WARN`]th in a row or later, and no warning for this replica in
    /// the last [`LATE_WARNING_INTERVAL`].
    pub fn answered_late(&self) -> bool {
        let late = self.late.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        if late < LATE_IN_A_ROW_TO_WARN {
            return false;
        }
        let Ok(mut warned) = self.late_warned.lock() else {
            return false;
        };
        let now = Instant::now();
        if warned.is_some_and(|at| now.duration_since(at) < LATE_WARNING_INTERVAL) {
            return false;
        }
        *warned = Some(now);
        true
    }

    /// Records a probe reply in time; true when the replica was refusing probes until now.
    pub fn answered(&self) -> bool {
        // Loads only on the common path: a replica that answers probes takes no lock.
        if self.late.load(Ordering::Acquire) != 0 {
            self.late.store(0, Ordering::Release);
        }
        if !self.refusing.load(Ordering::Acquire) {
            return false;
        }
        let mut held = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if !self.refusing.swap(false, Ordering::AcqRel) {
            return false;
        }
        *held = None;
        true
    }

    /// What the replica's latest probe got back, while it refuses probes.
    pub fn refused_with(&self) -> Option<String> {
        if !self.refusing.load(Ordering::Acquire) {
            return None;
        }
        self.reason.lock().ok().and_then(|held| held.clone())
    }

    /// Probes answered after the timeout since the last one answered in time.
    pub fn late_in_a_row(&self) -> u32 {
        self.late.load(Ordering::Acquire)
    }
}

/// What a probe got back instead of a reply, if the replica answered at all: a status other
/// than 200, a body the parser refuses, or one longer than any reply (a catch-all page served
/// with 200); not a body cut off, which is the connection's doing,
/// nor any other failure (no connection, no answer in time). Looks through `error`'s sources,
/// so a [`ProbeReplyError`] wrapped by a layer around the probe service still counts.
pub fn refusal<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a ProbeReplyError> {
    std::iter::successors(Some(error), |&e| e.source())
        .find_map(|e| e.downcast_ref::<ProbeReplyError>())
        .filter(|e| !matches!(e, ProbeReplyError::Body(_)))
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;
    use crate::error::BoxError;

    #[test]
    fn a_refusing_replica_is_warned_of_again_only_after_it_answered() {
        let health = ProbeHealth::default();
        assert!(health.refused("404".into()));
        assert!(!health.refused("500".into()));
        assert_eq!(health.refused_with().as_deref(), Some("500"));
        assert!(health.answered());
        assert!(!health.answered(), "said once");
        assert!(health.refused("404".into()), "refusing again after a reply");
    }

    #[tokio::test(start_paused = true)]
    async fn late_probes_warn_at_the_twentieth_in_a_row_and_once_a_minute() {
        let health = ProbeHealth::default();
        let warned = (0..LATE_IN_A_ROW_TO_WARN)
            .filter(|_| health.answered_late())
            .count();
        assert_eq!((warned, health.late_in_a_row()), (1, LATE_IN_A_ROW_TO_WARN));
        assert!(!health.answered_late(), "not again within the interval");
        tokio::time::advance(LATE_WARNING_INTERVAL).await;
        assert!(health.answered_late(), "again once the interval has passed");
        // A reply in time starts the count over; the interval still holds.
        assert!(!health.answered());
        assert_eq!(health.late_in_a_row(), 0);
        tokio::time::advance(LATE_WARNING_INTERVAL).await;
        let warned = (0..LATE_IN_A_ROW_TO_WARN - 1)
            .filter(|_| health.answered_late())
            .count();
        assert_eq!(warned, 0, "fewer than twenty in a row since the reply");
        assert!(health.answered_late());
    }

    #[test]
    fn a_refusal_is_a_well_formed_answer_that_is_not_a_reply() {
        let status: BoxError = Box::new(ProbeReplyError::Status(StatusCode::NOT_FOUND));
        assert!(refusal(&*status).is_some());
        let garbled = crate::protocol::parse_reply(b"rif=3").expect_err("malformed");
        let malformed: BoxError = Box::new(ProbeReplyError::Malformed(garbled));
        assert!(refusal(&*malformed).is_some());
        let page: BoxError = Box::new(ProbeReplyError::TooLong);
        assert!(refusal(&*page).is_some());
        let cut_off: BoxError = Box::new(ProbeReplyError::Body("connection reset".into()));
        assert!(refusal(&*cut_off).is_none());
        let transport: BoxError = "connection refused".into();
        assert!(refusal(&*transport).is_none());
    }

    #[test]
    fn a_refusal_wrapped_by_a_layer_is_found() {
        #[derive(Debug, thiserror::Error)]
        #[error("probe service failed")]
        struct Wrapped(#[source] ProbeReplyError);
        let wrapped: BoxError = Box::new(Wrapped(ProbeReplyError::Status(StatusCode::NOT_FOUND)));
        assert!(refusal(&*wrapped).is_some());
    }
}
