//! The state behind a cluster's lock and the events on it: turning policy decisions into
//! dispatched tries (exclusion of replicas already tried, slow start), draining the policy's
//! outputs, timer deadlines, and outlier ejection moving replicas out of and back into the
//! policy.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use http::uri::Authority;
use prequal_core::Hedger;
use prequal_core::outlier::OutlierDetector;
use prequal_core::retry_budget::RetryBudget;
use prequal_core::{Outcome, Pick, Policy, QueryId, ReplicaChange, ReplicaId, Time};
use rand::Rng;
use rand::rngs::SmallRng;
use tokio::sync::oneshot;

use super::{Chosen, Outbox, ProbeTarget};
use crate::config::ClusterConfig;
use crate::metrics::{ClusterMetrics, ReplicaMetrics};

/// Whether a pick may fall back to a replica the request already tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strict {
    /// Yes, when no other is left (a retry on a one-replica cluster).
    No,
    /// Never (a hedge: a second try to the same replica would only double its load).
    Yes,
}

/// A replica as the driver knows it.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) authority: Authority,
    pub(super) added_at: Time,
    /// Present when the cluster started (slow start applies only to later arrivals).
    pub(super) initial: bool,
    /// False while outlier ejection keeps it out of the policy.
    pub(super) in_policy: bool,
    pub(super) metrics: ReplicaMetrics,
    /// Probes to it not finished yet (see [`ProbeTarget`]).
    pub(super) probes_outstanding: Arc<AtomicUsize>,
    /// Its last try that ended either way failed (for logging the start and end of failures).
    pub(super) failing: bool,
}

/// Everything behind the cluster's lock.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) policy: Box<dyn Policy>,
    pub(super) rng: SmallRng,
    pub(super) members: BTreeMap<ReplicaId, Member>,
    pub(super) by_addr: HashMap<String, ReplicaId>,
    pub(super) next_id: u32,
    pub(super) started: bool,
    pub(super) outlier: Option<OutlierDetector>,
    pub(super) budget: RetryBudget,
    pub(super) waiting: HashMap<QueryId, oneshot::Sender<Pick>>,
    /// The deadline the timer task sleeps until.
    pub(super) armed: Option<Time>,
    /// When to hedge, within what budget; it learns the latencies of successful tries, the
    /// cluster's sense of normal.
    pub(super) hedger: Hedger,
}

impl Core {
    /// Turns a policy decision into a dispatched try, honouring exclusion and slow start. An
    /// excluded replica is used only when no other is left, and never for a `Strict` pick.
    pub(super) fn commit(
        &mut self,
        pick: Pick,
        query: QueryId,
        (exclude, strict): (&[ReplicaId], Strict),
        config: &ClusterConfig,
        now: Time,
    ) -> Option<Chosen> {
        let mut chosen = match pick {
            Pick::Replica(r) if self.members.get(&r).is_some_and(|m| m.in_policy) => Some(r),
            _ => None,
        };
        if chosen.is_none_or(|r| exclude.contains(&r)) {
            let fallback = match strict {
                Strict::No => chosen,
                Strict::Yes => None,
            };
            chosen = self.alternative(exclude, config, now).or(fallback);
        } else if let Some(r) = chosen
            && let Some(m) = self.members.get(&r)
            && !m.initial
            && config.slow_start.is_ramping(m.added_at, now)
        {
            let factor = config.slow_start.factor(m.added_at, now);
            if self.rng.random_bool((1.0 - factor).clamp(0.0, 1.0)) {
                let mut skip = exclude.to_vec();
                skip.push(r);
                chosen = self.alternative(&skip, config, now).or(chosen);
            }
        }
        let replica = chosen?;
        let authority = self.members.get(&replica)?.authority.clone();
        self.policy.on_dispatch(replica, query, now);
        Some(Chosen {
            replica,
            authority,
            query,
        })
    }

    /// Whether some replica in the policy is not in `tried`.
    pub(super) fn has_untried(&self, tried: &[ReplicaId]) -> bool {
        self.members
            .iter()
            .any(|(id, m)| m.in_policy && !tried.contains(id))
    }

    /// A usable replica outside `exclude`, uniformly at random, preferring ones not ramping up.
    pub(super) fn alternative(
        &mut self,
        exclude: &[ReplicaId],
        config: &ClusterConfig,
        now: Time,
    ) -> Option<ReplicaId> {
        let usable: Vec<(ReplicaId, bool)> = self
            .members
            .iter()
            .filter(|(id, m)| m.in_policy && !exclude.contains(id))
            .map(|(id, m)| {
                let ramping = !m.initial && config.slow_start.is_ramping(m.added_at, now);
                (*id, ramping)
            })
            .collect();
        let settled: Vec<ReplicaId> = usable.iter().filter(|u| !u.1).map(|u| u.0).collect();
        let pool: Vec<ReplicaId> = match settled.is_empty() {
            true => usable.iter().map(|u| u.0).collect(),
            false => settled,
        };
        if pool.is_empty() {
            return None;
        }
        Some(pool[self.rng.random_range(0..pool.len())])
    }

    /// Drains the policy's outputs: sync-mode decisions go to their waiting requests, probes are
    /// returned for sending once the lock is released.
    pub(super) fn drain(&mut self, now: Time) -> Outbox {
        while let Some((query, pick)) = self.policy.poll_pick(now, &mut self.rng) {
            if let Some(tx) = self.waiting.remove(&query) {
                // A request that gave up waiting has dropped its receiver; nothing to do.
                let _ = tx.send(pick);
            }
        }
        let mut outbox = Vec::new();
        while let Some(probe) = self.policy.poll_probe(now, &mut self.rng) {
            let target = self.members.get(&probe.replica).map(|m| ProbeTarget {
                authority: m.authority.clone(),
                outstanding: Arc::clone(&m.probes_outstanding),
            });
            outbox.push((probe, target));
        }
        outbox
    }

    /// The earliest time the timer task must act: the policy's timer or an ejection's end.
    pub(super) fn next_deadline(&self, now: Time) -> Option<Time> {
        let unejection = self.outlier.as_ref().and_then(|o| o.next_unejection(now));
        match (self.policy.poll_timeout(), unejection) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// True (and the new deadline recorded) when the timer task must wake earlier than planned.
    pub(super) fn rearm(&mut self, now: Time) -> bool {
        let next = self.next_deadline(now);
        match (next, self.armed) {
            (Some(n), Some(a)) if n >= a => false,
            (None, _) => false,
            (Some(n), _) => {
                self.armed = Some(n);
                true
            }
        }
    }

    /// Feeds a try's outcome to outlier ejection, which may take the replica out of the
    /// policy; logs when a replica starts and stops failing, and why and for how long it is
    /// ejected.
    pub(super) fn record_outlier(
        &mut self,
        replica: ReplicaId,
        outcome: Outcome,
        now: Time,
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
        let Some(outlier) = &mut self.outlier else {
            return;
        };
        let Some(ejection) = outlier.on_result(replica, outcome, now) else {
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
        // A replica ejected again on probation, before the timer put it back, is still out.
        if member.in_policy {
            member.in_policy = false;
            self.policy
                .on_replica_change(ReplicaChange::Remove(replica), now);
            m.ejected.set(self.ejected_count());
        }
    }

    pub(super) fn ejected_count(&self) -> i64 {
        self.members.values().filter(|m| !m.in_policy).count() as i64
    }

    pub(super) fn restore_unejected(&mut self, now: Time, m: &ClusterMetrics) {
        let Some(outlier) = &self.outlier else {
            return;
        };
        if self.ejected_count() == 0 {
            return;
        }
        for (id, member) in self.members.iter_mut() {
            if !member.in_policy && !outlier.is_ejected(*id, now) {
                member.in_policy = true;
                self.policy
                    .on_replica_change(ReplicaChange::Insert(*id), now);
                tracing::info!(cluster = %m.name, replica = %member.authority, "replica back from ejection");
            }
        }
        m.ejected.set(self.ejected_count());
    }

    pub(super) fn remove_member(&mut self, id: ReplicaId, now: Time) {
        if let Some(member) = self.members.remove(&id)
            && member.in_policy
        {
            self.policy
                .on_replica_change(ReplicaChange::Remove(id), now);
        }
        if let Some(outlier) = &mut self.outlier {
            outlier.remove(id, now);
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
