//! The state behind a cluster's lock and the events on it: the core's [`Balancer`] (the policy
//! with outlier ejection, slow start, retry exclusion, the retry budget and hedging around it),
//! what the proxy keeps per replica beside it (address, metrics, probes outstanding), and the
//! sync-mode requests waiting for a decision. Turning the balancer's decisions into dispatched
//! tries, draining its outputs, its timer deadline, and the logs and metrics of ejections.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use http::uri::Authority;
use prequal_core::outlier::Ejection;
use prequal_core::{Balancer, Outcome, Pick, QueryId, ReplicaId, Strict, Time};
use rand::rngs::SmallRng;
use tokio::sync::oneshot;

use super::{Chosen, Outbox, ProbeTarget};
use crate::metrics::{ClusterMetrics, ReplicaMetrics};

/// A replica as the driver knows it (the balancer keeps its standing: ejected, ramping up).
#[derive(Debug)]
pub(super) struct Member {
    pub(super) authority: Authority,
    pub(super) metrics: ReplicaMetrics,
    /// Probes to it not finished yet (see [`ProbeTarget`]).
    pub(super) probes_outstanding: Arc<AtomicUsize>,
    /// Its last try that ended either way failed (for logging the start and end of failures).
    pub(super) failing: bool,
}

/// Everything behind the cluster's lock.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) balancer: Balancer,
    pub(super) rng: SmallRng,
    pub(super) members: BTreeMap<ReplicaId, Member>,
    pub(super) by_addr: HashMap<String, ReplicaId>,
    pub(super) next_id: u32,
    pub(super) waiting: HashMap<QueryId, oneshot::Sender<Pick>>,
    /// The deadline the timer task sleeps until.
    pub(super) armed: Option<Time>,
}

impl Core {
    /// Turns a policy decision into a dispatched try: the balancer applies ejection, exclusion
    /// of the replicas in `exclude` (used only when no other is left, and never for a `Strict`
    /// pick) and slow start.
    pub(super) fn commit(
        &mut self,
        pick: Pick,
        query: QueryId,
        exclude: (&[ReplicaId], Strict),
        now: Time,
    ) -> Option<Chosen> {
        let replica = self
            .balancer
            .dispatch(pick, query, exclude, now, &mut self.rng)?;
        let authority = self.members.get(&replica)?.authority.clone();
        Some(Chosen {
            replica,
            authority,
            query,
        })
    }

    /// Drains the policy's outputs: sync-mode decisions go to their waiting requests, probes are
    /// returned for sending once the lock is released.
    pub(super) fn drain(&mut self, now: Time) -> Outbox {
        while let Some((query, pick)) = self.balancer.poll_pick(now, &mut self.rng) {
            if let Some(tx) = self.waiting.remove(&query) {
                // A request that gave up waiting has dropped its receiver; nothing to do.
                let _ = tx.send(pick);
            }
        }
        let mut outbox = Vec::new();
        while let Some(probe) = self.balancer.poll_probe(now, &mut self.rng) {
            let target = self.members.get(&probe.replica).map(|m| ProbeTarget {
                authority: m.authority.clone(),
                outstanding: Arc::clone(&m.probes_outstanding),
            });
            outbox.push((probe, target));
        }
        outbox
    }

    /// The earliest time the timer task must act: the policy's timer or an ejection's end.
    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.balancer.poll_timeout()
    }

    /// True (and the new deadline recorded) when the timer task must wake earlier than planned.
    pub(super) fn rearm(&mut self) -> bool {
        let next = self.next_deadline();
        match (next, self.armed) {
            (Some(n), Some(a)) if n >= a => false,
            (None, _) => false,
            (Some(n), _) => {
                self.armed = Some(n);
                true
            }
        }
    }

    /// Logs and counts what a try's result did: when a replica starts and stops failing, and
    /// why and for how long the balancer ejected it, if it did.
    pub(super) fn note_result(
        &mut self,
        replica: ReplicaId,
        outcome: Outcome,
        ejection: Option<Ejection>,
        m: &ClusterMetrics,
    ) {
        let Some(member) = self.members.get_mut(&replica) else {
            return;
        };
        // Failures are logged when they start and end, not one line per failed try.
        if outcome.is_failure() && !member.failing {
            tracing::info!(cluster = %m.name, replica = %member.authority, ?outcome, "replica failing");
        } else if outcome == Outcome::Success && member.failing {
            tracing::info!(cluster = %m.name, replica = %member.authority, "replica answering again");
        }
        member.failing = outcome.is_failure() || (member.failing && outcome != Outcome::Success);
        let Some(ejection) = ejection else {
            return;
        };
        member.metrics.ejections.inc();
        tracing::warn!(
            cluster = %m.name,
            replica = %member.authority,
            reason = %ejection.reason,
            duration = %humantime::format_duration(ejection.duration),
            ejection = ejection.number,
            "replica ejected"
        );
        m.ejected.set(self.ejected_count());
    }

    pub(super) fn ejected_count(&self) -> i64 {
        self.balancer.ejected_count() as i64
    }

    /// Logs the replicas the balancer put back into the policy as their ejections ended.
    pub(super) fn note_restored(&self, back: &[ReplicaId], m: &ClusterMetrics) {
        for id in back {
            if let Some(member) = self.members.get(id) {
                tracing::info!(cluster = %m.name, replica = %member.authority, "replica back from ejection");
            }
        }
        if !back.is_empty() {
            m.ejected.set(self.ejected_count());
        }
    }
}

/// A seed from the standard library's per-process random hash keys; the proxy needs
/// independence between clusters and runs, not reproducibility.
pub(super) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
