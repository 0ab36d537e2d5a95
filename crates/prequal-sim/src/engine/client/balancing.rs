//! The client side of the core's [`prequal_core::Balancer`] around each try: the dispatch
//! decision (exclusion of the replicas a query tried, ejection, slow start), settling a try
//! (which may eject its replica), and retries of failed queries within the budget.

use prequal_core::{Completion, Outcome, Pick, Query, QueryId, ReplicaId, RetryDecision, Strict};

use super::{Slot, TryKind};
use crate::engine::{Event, Sim};

impl Sim<'_> {
    /// The balancer's decision for `query` on `pick`: the replicas its query tried are excluded
    /// (for a hedge strictly, and with `idle_only` busy ones too; for a retry beside another
    /// try strictly; for a retry alone unless none other is left), ejected ones replaced,
    /// ramping ones passed over by chance; the policy hears of the dispatch.
    pub(super) fn commit(&mut self, c: u32, query: u64, pick: Pick) -> Option<ReplicaId> {
        let client = &mut self.clients[c as usize];
        let slot = client.queries.get(query)?;
        let tried: (&[ReplicaId], Strict) = match (slot.request, &client.hedging) {
            // A hedge, or a retry beside other tries, must go elsewhere; a retry with no other
            // try out only prefers a replica not tried (as a retry without hedging).
            (Some(key), Some(h)) => match h.requests.get(key) {
                Some(r) if slot.kind == TryKind::Hedge => {
                    (&r.tried, Strict::Hedge(r.first_sent.unwrap_or(self.now)))
                }
                Some(r) if r.tries.len() > 1 => (&r.tried, Strict::Yes),
                Some(r) => (&r.tried, Strict::No),
                None => (&[], Strict::No),
            },
            _ if slot.attempts > 1 => (client.retried.get(&query).map_or(&[], |t| t), Strict::No),
            _ => (&[], Strict::No),
        };
        let (now, rng) = (self.now, &mut client.rng);
        client
            .balancer
            .dispatch(pick, QueryId(query), tried, now, rng)
    }

    /// Asks the policy for a replica for `query` (a first try, a hedge or a retry) and sends it
    /// there; a pending pick is sent when the policy is ready (`service_client`).
    pub(super) fn pick_and_dispatch(&mut self, c: u32, query: u64) {
        let client = &mut self.clients[c as usize];
        let q = Query {
            id: QueryId(query),
            hint: None,
        };
        match client.balancer.pick(&q, self.now, &mut client.rng) {
            Pick::Replica(r) => self.dispatch(c, query, r),
            Pick::Pending => {}
            Pick::NoReplica => self.no_replica(c, query),
        }
    }

    /// Tells the balancer that try `query` (`slot`) ended with `outcome`, with the load report
    /// its response carried; counts an ejection. A try sent to a process that has since been
    /// replaced (its replica left for a deploy and rejoined) is not reported: the balancer
    /// forgot that process when it left, as the proxy's does a replica discovery removed.
    pub(super) fn settle(&mut self, c: u32, query: u64, slot: &Slot, outcome: Outcome) {
        let Some(sent) = slot.dispatched else {
            return;
        };
        if sent < self.servers[slot.replica as usize].joined_at {
            return;
        }
        let now = self.now;
        let client = &mut self.clients[c as usize];
        let replica = ReplicaId(slot.replica);
        let completion = Completion {
            query: QueryId(query),
            latency: now.saturating_since(sent),
            outcome,
        };
        // The piggybacked report, if the response carried one, goes with the completion: the
        // balancer hands it to the policy after the query has ended, as the proxy does.
        let ejected = client
            .balancer
            .on_complete(replica, &completion, slot.report.as_ref(), now);
        client.counts.ejections += u64::from(ejected.is_some());
    }

    /// Tries the query whose try `query` (`slot`) failed again, if the balancer admits it: a
    /// new try (under a new key, so no event of the old one can reach it) with the query's
    /// issue time and deadline, to a replica the query has not tried. True if it did.
    pub(super) fn retry(&mut self, c: u32, query: u64, slot: Slot) -> bool {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        match client.balancer.try_retry(slot.attempts, now) {
            RetryDecision::Retry => client.counts.retries += 1,
            RetryDecision::OverBudget => {
                client.counts.retries_refused += 1;
                return false;
            }
            RetryDecision::NoAttemptsLeft => return false,
        }
        client.queries.remove(query);
        let mut tried = client.retried.remove(&query).unwrap_or_default();
        tried.push(ReplicaId(slot.replica));
        let next = client.queries.insert(Slot {
            dispatched: None,
            server_slot: None,
            report: None,
            attempts: slot.attempts + 1,
            kind: TryKind::Retry,
            ..slot
        });
        client.retried.insert(next, tried);
        // The first try's deadline entry names the old key; the retry gets its own, at the
        // same time.
        if let Some(deadline) = self.compiled.scenario.clients.deadline {
            let event = Event::QueryDeadline {
                client: c,
                query: next,
            };
            self.queue.push(slot.issued + deadline, event);
        }
        self.pick_and_dispatch(c, next);
        self.service_client(c);
        true
    }
}
