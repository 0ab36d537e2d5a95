//! The events from the balancer and its queries: replicas joining and leaving, picks,
//! dispatches, completions and piggybacked load reports. Each is one critical section of the
//! [driver](super) that ends, once its lock is released, by handing the probes it drained from
//! the policy to the [prober](crate::prober).

use std::sync::{Arc, MutexGuard};

use prequal_core::{Completion, LoadReport, Pick, Query, QueryId, ReplicaId, Time};

use super::{Driver, ReplicaProbe, State};
use crate::probe::SendProbe;
use crate::probe_slot::ProbeTarget;

impl Driver {
    /// A replica joined under the discovery key written `key`, probed through `send`.
    pub(crate) fn insert(self: &Arc<Self>, replica: ReplicaId, key: String, send: SendProbe) {
        let now = self.now();
        let mut state = self.lock();
        let probe = ReplicaProbe {
            send,
            outstanding: Arc::default(),
            target: Arc::new(ProbeTarget::new(key)),
        };
        state.probes.insert(replica, probe);
        if !state.members.contains(&replica) {
            state.members.push(replica);
            state.members_changed = true;
        }
        Self::sync_members(&mut state, now);
        self.after_event(state, now);
    }

    /// A replica left (discovery removed it, or its service failed).
    pub(crate) fn remove(self: &Arc<Self>, replica: ReplicaId) {
        let now = self.now();
        let mut state = self.lock();
        if state.probes.remove(&replica).is_none() {
            return;
        }
        state.members.retain(|&r| r != replica);
        state.members_changed = true;
        Self::sync_members(&mut state, now);
        self.after_event(state, now);
    }

    /// Tells the balancer the replicas discovered, once a request has started it.
    fn sync_members(state: &mut State, now: Time) {
        if state.started && state.members_changed {
            state.balancer.set_replicas(&state.members, now);
            state.members_changed = false;
        }
    }

    /// Asks the balancer for a replica for `query`: the policy's choice, replaced by another
    /// replica when it is ejected (or, with a probability, while it ramps up after joining). A
    /// [`Pick::Pending`] decision is later collected with [`Driver::poll_decision`].
    pub(crate) fn pick(self: &Arc<Self>, query: QueryId) -> Pick {
        let now = self.now();
        let mut guard = self.lock();
        let state = &mut *guard;
        state.started = true;
        Self::sync_members(state, now);
        let pick = state.balancer.pick(
            &Query {
                id: query,
                hint: None,
            },
            now,
            &mut state.rng,
        );
        let pick = match pick {
            Pick::Replica(_) => Self::resolve(state, pick, now),
            other => other,
        };
        if pick == Pick::Pending {
            state.waiting = Some((query, None, None));
        }
        self.after_event(guard, now);
        pick
    }

    /// The query was sent to `replica`.
    pub(crate) fn dispatch(self: &Arc<Self>, replica: ReplicaId, query: QueryId) {
        let now = self.now();
        let mut state = self.lock();
        state.balancer.dispatched(replica, query, now);
        tracing::trace!(%replica, query = query.0, "query dispatched");
        self.after_event(state, now);
    }

    /// A query sent to `replica` ended, with the load the replica piggybacked on its response.
    pub(crate) fn complete(
        self: &Arc<Self>,
        replica: ReplicaId,
        completion: &Completion,
        report: Option<&LoadReport>,
    ) {
        let now = self.now();
        let mut state = self.lock();
        let ejection = state.balancer.on_complete(replica, completion, report, now);
        tracing::trace!(%replica, query = completion.query.0, outcome = ?completion.outcome,
            latency_us = completion.latency.as_micros() as u64, "query ended");
        if let Some(ejection) = ejection {
            tracing::debug!(%replica, reason = %ejection.reason, ?ejection.duration, "replica ejected");
        }
        self.after_event(state, now);
    }

    /// Ends an event: drains the policy, rearms the timer, releases the lock and starts the
    /// probes asked for.
    fn after_event(self: &Arc<Self>, mut guard: MutexGuard<'_, State>, now: Time) {
        let outbox = self.drain(&mut guard, now);
        let rearm = self.rearm(&mut guard);
        drop(guard);
        if rearm {
            self.wake.notify_one();
        }
        crate::prober::send(self, outbox);
    }
}
