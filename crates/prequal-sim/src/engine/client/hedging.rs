//! Hedging, the client side of [`prequal_core::hedge`]: a query's tries share one
//! [`super::Request`]; the balancer's hedger says when another try goes out (the balancer sends
//! it to a replica the query has not tried), the first success wins, and the other tries are
//! cancelled at their replicas and reported to the policy.

use prequal_core::{HedgeDecision, Outcome, ReplicaId, RetryDecision};

use super::{Slot, TryKind};
use crate::engine::{Event, Sim};

/// Hedging: the client side of [`prequal_core::hedge`]. A query's tries share one `Request`;
/// the first response wins, the other tries are cancelled at their replicas and reported to
/// the policy as [`Outcome::Cancelled`]; an error waits for the other tries still out.
impl Sim<'_> {
    /// A try of request `key` went to `replica`; returns the deadline key for a first try. The
    /// hedging summary counts first tries and hedges (retries are the balancer's).
    pub(super) fn note_try_sent(
        &mut self,
        c: u32,
        key: u64,
        replica: ReplicaId,
        kind: TryKind,
    ) -> Option<u64> {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        let h = client.hedging.as_mut()?;
        let request = h.requests.get_mut(key)?;
        request.tried.push(replica);
        h.tries += u64::from(kind != TryKind::Retry);
        if request.first_sent.is_some() {
            return None;
        }
        request.first_sent = Some(now);
        client.balancer.hedger_mut().on_request(now);
        Some(key)
    }

    /// Asks the hedger about request `key`, unless a wake-up for it is already armed.
    pub(in crate::engine) fn arm_hedge(&mut self, c: u32, key: u64) {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        let Some(h) = client.hedging.as_mut() else {
            return;
        };
        let Some(request) = h.requests.get_mut(key) else {
            return;
        };
        let Some(first_sent) = request.first_sent else {
            return;
        };
        if request.hedge_at.is_some() {
            return; // Armed already.
        }
        if request.attempts >= client.balancer.max_attempts() {
            return; // Hedges are tries: `max_attempts` bounds them, as in the proxy.
        }
        // None: nowhere to go. A hedge only goes to a replica not yet tried, and one with
        // nowhere to go is neither charged nor counted (as in the proxy).
        let decision = client
            .balancer
            .poll_hedge(first_sent, request.hedges, &request.tried, now);
        match decision {
            None | Some(HedgeDecision::Never) => {}
            Some(HedgeDecision::At(at)) => {
                request.hedge_at = Some(at);
                self.queue.push(
                    at,
                    Event::Hedge {
                        client: c,
                        request: key,
                    },
                );
            }
            Some(HedgeDecision::Now) => {
                request.hedges += 1;
                self.send_try(c, key, TryKind::Hedge);
            }
        }
    }

    /// A hedge wake-up came due.
    pub(in crate::engine) fn on_hedge_due(&mut self, c: u32, key: u64) {
        let now = self.now;
        let Some(h) = self.clients[c as usize].hedging.as_mut() else {
            return;
        };
        match h.requests.get_mut(key) {
            Some(request) if request.hedge_at == Some(now) => request.hedge_at = None,
            _ => return, // Settled, or re-armed for another time.
        }
        self.arm_hedge(c, key);
        self.service_client(c);
    }

    /// Sends one more try of request `key` (`kind`: a hedge, or a retry of a failed try): the
    /// policy picks, a replica already tried is replaced in `dispatch`.
    pub(super) fn send_try(&mut self, c: u32, key: u64, kind: TryKind) {
        let client = &mut self.clients[c as usize];
        let Some(issued) = client
            .hedging
            .as_ref()
            .and_then(|h| h.requests.get(key))
            .map(|r| r.issued)
        else {
            return;
        };
        let query = client.queries.insert(Slot {
            replica: 0,
            issued,
            dispatched: None,
            server_slot: None,
            report: None,
            request: Some(key),
            attempts: 1,
            kind,
        });
        if let Some(request) = client
            .hedging
            .as_mut()
            .and_then(|h| h.requests.get_mut(key))
        {
            request.tries.push(query);
            request.attempts += 1;
        }
        self.pick_and_dispatch(c, query);
    }

    /// Ends try `query` without a response: at its replica (which drops the work, as a real
    /// server does when its client resets the stream) and for the policy, with `outcome`
    /// (`Timeout` at the deadline; for a hedge's loser, the hedger's `loser_outcome`).
    pub(in crate::engine) fn end_try(
        &mut self,
        c: u32,
        query: u64,
        outcome: Outcome,
        deadline: bool,
    ) {
        let Some(slot) = self.clients[c as usize].queries.remove(query) else {
            return;
        };
        if let Some(server_slot) = slot.server_slot {
            // The replica sees a deadline as before, and a hedge's loser as abandoned.
            let at_server = if deadline {
                Outcome::Timeout
            } else {
                Outcome::Cancelled
            };
            self.cancel_at_server(slot.replica, server_slot, c, query, at_server);
        }
        self.settle(c, query, &slot, outcome);
    }

    /// Try `query` of request `key` got its response (`Success` or `Error`).
    pub(in crate::engine) fn complete_try(
        &mut self,
        c: u32,
        key: u64,
        query: u64,
        outcome: Outcome,
    ) {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        let Some(slot) = client.queries.remove(query) else {
            return;
        };
        let Some(sent) = slot.dispatched else {
            return;
        };
        self.settle(c, query, &slot, outcome);
        let client = &mut self.clients[c as usize];
        let Some(h) = client.hedging.as_mut() else {
            return;
        };
        let Some(request) = h.requests.get_mut(key) else {
            return;
        };
        request.tries.retain(|&t| t != query);
        if outcome != Outcome::Success {
            // A failed try (an error, or its `try_timeout`) is retried as the proxy does, within
            // `max_attempts` and the retry budget: at once, on a replica the query has not
            // tried, while another try is still out (that one may be stuck on a hung replica);
            // with none out, on any replica, preferring untried ones. Otherwise the query waits
            // for its other tries, or fails with none out.
            let waiting = !request.tries.is_empty();
            let attempts = request.attempts;
            let room = !waiting || client.balancer.has_untried(&request.tried);
            let retry = room
                && match client.balancer.try_retry(attempts, now) {
                    RetryDecision::Retry => {
                        client.counts.retries += 1;
                        true
                    }
                    RetryDecision::OverBudget => {
                        client.counts.retries_refused += 1;
                        false
                    }
                    RetryDecision::NoAttemptsLeft => false,
                };
            if retry {
                self.send_try(c, key, TryKind::Retry);
            }
            if waiting || retry {
                self.service_client(c);
                return;
            }
        }
        let client = &mut self.clients[c as usize];
        let Some(h) = client.hedging.as_mut() else {
            return;
        };
        let Some(request) = h.requests.remove(key) else {
            return;
        };
        if outcome == Outcome::Success {
            // The winning try's own latency: a try stuck on a slow replica is replaced by its
            // hedge's, so the delay stays that of replicas that answer.
            client
                .balancer
                .hedger_mut()
                .on_response(now.saturating_since(sent), slot.kind == TryKind::Hedge);
        }
        for &t in &request.tries {
            let outcome = match self.clients[c as usize].queries.get(t) {
                Some(Slot {
                    dispatched: Some(at),
                    replica,
                    ..
                }) => self.clients[c as usize]
                    .balancer
                    .loser_outcome(ReplicaId(*replica), now.saturating_since(*at)),
                _ => Outcome::Cancelled,
            };
            self.end_try(c, t, outcome, false);
        }
        let latency = now.saturating_since(request.issued).as_nanos() as u64;
        self.recorder
            .query(request.issued, Some(latency), Some(outcome));
        self.service_client(c);
    }

    /// Request `key` reached its deadline: every try still out times out.
    pub(in crate::engine) fn on_request_deadline(&mut self, c: u32, key: u64) {
        let now = self.now;
        let Some(request) = self.clients[c as usize]
            .hedging
            .as_mut()
            .and_then(|h| h.requests.remove(key))
        else {
            return;
        };
        for &t in &request.tries {
            self.end_try(c, t, Outcome::Timeout, true);
        }
        let latency = now.saturating_since(request.issued).as_nanos() as u64;
        self.recorder
            .query(request.issued, Some(latency), Some(Outcome::Timeout));
        self.service_client(c);
    }
}
