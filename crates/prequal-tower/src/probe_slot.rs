//! Probe slots: a [`Slot`] counts one probe as out, at its replica and at its balancer, until
//! it is dropped, so the driver can refuse probes beyond either limit; an [`Outbox`] is the
//! probes an event drained from the policy, each with its slot, that the prober then sends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prequal_core::ProbeRequest;
use prequal_http::ProbeHealth;

use crate::probe::ProbeFuture;

/// Probes to send, each with what it takes on its way.
pub(crate) type Outbox = Vec<(ProbeRequest, OutgoingProbe)>;

/// A probe the driver lets out: its future, the slots it holds until it ends, and its replica
/// as the prober's warnings name it.
pub(crate) struct OutgoingProbe {
    pub(crate) future: ProbeFuture,
    pub(crate) slot: Slot,
    pub(crate) target: Arc<ProbeTarget>,
}

/// The replica a probe goes to, as the warnings name it, and how its probes have been
/// answered (shared by its probes, so that each warning comes once, not once per probe).
#[derive(Debug)]
pub(crate) struct ProbeTarget {
    /// The replica's discovery key, written with `Debug`.
    pub(crate) key: String,
    /// How its probes have been answered.
    pub(crate) health: ProbeHealth,
}

impl ProbeTarget {
    /// A replica discovered under the key written `key`, not probed yet.
    pub(crate) fn new(key: String) -> Self {
        Self {
            key,
            health: ProbeHealth::default(),
        }
    }
}

/// One probe counted as out, at its replica and at its balancer, until dropped.
pub(crate) struct Slot([Arc<AtomicUsize>; 2]);

impl Slot {
    /// Counts one more probe on both counters, unless either is at its limit.
    pub(crate) fn take(counters: [&Arc<AtomicUsize>; 2], limits: [usize; 2]) -> Option<Self> {
        let [replica, balancer] = counters;
        let [per_replica, in_flight] = limits;
        if !reserve(replica, per_replica) {
            return None;
        }
        if !reserve(balancer, in_flight) {
            replica.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot([Arc::clone(replica), Arc::clone(balancer)]))
    }
}

fn reserve(counter: &AtomicUsize, limit: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

impl Drop for Slot {
    fn drop(&mut self) {
        for counter in &self.0 {
            counter.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
