//! Client-side events: arrivals, picks, dispatch, responses, retries, deadlines, probes and
//! timers, handled by the [`Sim`] for one [`Client`](super::Client) at a time.

use std::time::Duration;

use prequal_core::{Outcome, Pick, QueryId, ReplicaId, Time};
use rand_distr::{Distribution as _, Exp1};

use super::{PendingProbe, Request, TryKind};
use crate::engine::{Event, Sim};
use crate::scenario::Arrivals;

impl Sim<'_> {
    pub(in crate::engine) fn schedule_arrival(&mut self, c: u32) {
        let per_client = self.offered_qps(self.now) / self.clients.len() as f64;
        self.schedule_arrival_at(c, per_client);
    }

    /// Schedules client `c`'s next arrival, given its offered rate now.
    fn schedule_arrival_at(&mut self, c: u32, per_client: f64) {
        let now = self.now;
        if now >= self.end {
            return;
        }
        let gap = if per_client <= 0.0 {
            // Idle phase: look again at the next phase boundary.
            let phases = &self.compiled.phases;
            let i = phases.partition_point(|p| p.end <= now);
            match phases.get(i) {
                Some(p) => p.end.saturating_since(now).max(Duration::from_millis(1)),
                None => return,
            }
        } else {
            let scale = match self.compiled.scenario.clients.arrivals {
                Arrivals::Poisson => Exp1.sample(&mut self.clients[c as usize].rng),
                Arrivals::Constant => 1.0,
            };
            Duration::from_nanos(crate::model::round_to_u64(scale / per_client * 1e9).max(1))
        };
        self.queue.push(now + gap, Event::Arrival(c));
    }

    pub(in crate::engine) fn on_arrival(&mut self, c: u32) {
        let now = self.now;
        let per_client = self.offered_qps(now) / self.clients.len() as f64;
        if per_client > 0.0 {
            let client = &mut self.clients[c as usize];
            let query = client.open(now);
            // A query, not a retry nor a hedge: it earns retry budget.
            client.balancer.on_request(now);
            if let Some(h) = &mut client.hedging {
                let request = h.requests.insert(Request {
                    issued: now,
                    first_sent: None,
                    tries: vec![query],
                    tried: Vec::new(),
                    hedges: 0,
                    attempts: 1,
                    hedge_at: None,
                });
                if let Some(slot) = client.queries.get_mut(query) {
                    slot.request = Some(request);
                }
            }
            self.pick_and_dispatch(c, query);
        }
        self.schedule_arrival_at(c, per_client);
        self.service_client(c);
    }

    pub(super) fn no_replica(&mut self, c: u32, query: u64) {
        let client = &mut self.clients[c as usize];
        let Some(slot) = client.queries.remove(query) else {
            return;
        };
        if slot.attempts > 1 {
            client.retried.remove(&query);
        }
        if let (Some(key), Some(h)) = (slot.request, &mut client.hedging) {
            let Some(request) = h.requests.get_mut(key) else {
                return;
            };
            request.tries.retain(|&t| t != query);
            // A try that found no replica was never sent: it is not one of `max_attempts`.
            request.attempts = request.attempts.saturating_sub(1);
            if !request.tries.is_empty() {
                return; // A hedge found no replica; the query still waits for its other tries.
            }
            h.requests.remove(key);
        }
        self.recorder.query(slot.issued, None, None);
    }

    pub(super) fn dispatch(&mut self, c: u32, query: u64, replica: ReplicaId) {
        let now = self.now;
        let Some(replica) = self.commit(c, query, Pick::Replica(replica)) else {
            self.no_replica(c, query);
            return;
        };
        debug_assert!(
            self.clients[c as usize]
                .queries
                .get(query)
                .and_then(|s| s.request)
                .and_then(|k| self.clients[c as usize].hedging.as_ref()?.requests.get(k))
                .is_none_or(|r| r.tries.len() == 1 || !r.tried.contains(&replica)),
            "a hedge, or a retry beside other tries, never goes to a replica its query tried"
        );
        let client = &mut self.clients[c as usize];
        let Some(slot) = client.queries.get_mut(query) else {
            return;
        };
        slot.replica = replica.0;
        slot.dispatched = Some(now);
        let (issued, request, attempts, kind) =
            (slot.issued, slot.request, slot.attempts, slot.kind);
        let at = now + self.delay(false);
        self.queue.push(
            at,
            Event::AtServer {
                client: c,
                server: replica.0,
                query,
            },
        );
        // Without hedging a query's deadline is set when its first try goes out (a retry keeps
        // the query's id, and so its deadline); with hedging it belongs to the request and is
        // set when its first try goes out.
        let deadline_key = match request {
            None => (attempts == 1).then_some(query),
            Some(key) => self.note_try_sent(c, key, replica, kind),
        };
        if let Some(deadline) = self.compiled.scenario.clients.deadline
            && let Some(key) = deadline_key
            && let Some(at) = self.clients[c as usize]
                .deadlines
                .push(issued + deadline, key)
        {
            self.queue.push(at, Event::Deadline(c));
        }
        // The try's own timeout, unless the query's deadline comes first.
        let clients = &self.compiled.scenario.clients;
        let try_at = now + clients.try_timeout();
        if clients.deadline.is_none_or(|d| try_at < issued + d)
            && let Some(at) = self.clients[c as usize].try_timeouts.push(try_at, query)
        {
            self.queue.push(at, Event::TryTimeout(c));
        }
        // The hedger is asked after the first try and after each hedge, never after a retry
        // (as in the proxy, where a retry starts no new hedge plan).
        if let Some(key) = request
            && kind != TryKind::Retry
        {
            self.arm_hedge(c, key);
        }
    }

    /// Finishes `query` at the client with `outcome`, telling the balancer and the recorder;
    /// a failed try (an error, or a try timeout when `retry` says so) is retried instead while
    /// the balancer admits it.
    fn complete(&mut self, c: u32, query: u64, outcome: Outcome, retry: bool) {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        let Some(slot) = client.queries.get(query).copied() else {
            return;
        };
        if let Some(key) = slot.request {
            self.complete_try(c, key, query, outcome);
            return;
        }
        if slot.dispatched.is_none() {
            return;
        }
        self.settle(c, query, &slot, outcome);
        if retry && outcome != Outcome::Success && self.retry(c, query, slot) {
            return;
        }
        let client = &mut self.clients[c as usize];
        client.queries.remove(query);
        if slot.attempts > 1 {
            client.retried.remove(&query);
        }
        let latency = now.saturating_since(slot.issued).as_nanos() as u64;
        self.recorder
            .query(slot.issued, Some(latency), Some(outcome));
        self.service_client(c);
    }

    pub(in crate::engine) fn on_response(&mut self, c: u32, query: u64, error: bool) {
        let outcome = if error {
            Outcome::Error
        } else {
            Outcome::Success
        };
        self.complete(c, query, outcome, true);
    }

    pub(in crate::engine) fn on_deadlines(&mut self, c: u32) {
        let mut due = std::mem::take(&mut self.expired);
        let client = &mut self.clients[c as usize];
        let queries = &client.queries;
        let requests = client.hedging.as_ref().map(|h| &h.requests);
        let waiting = |key: u64| match requests {
            Some(requests) => requests.contains(key),
            None => queries.contains(key),
        };
        if let Some(at) = client.deadlines.pop_due(self.now, &mut due, waiting) {
            self.queue.push(at, Event::Deadline(c));
        }
        let hedging = client.hedging.is_some();
        for &key in &due {
            if hedging {
                self.on_request_deadline(c, key);
            } else {
                self.on_deadline(c, key);
            }
        }
        due.clear();
        self.expired = due;
    }

    /// Query `query` of client `c` reached its deadline (a retry's own deadline event comes
    /// here directly).
    pub(in crate::engine) fn on_deadline(&mut self, c: u32, query: u64) {
        let Some(slot) = self.clients[c as usize].queries.get(query).copied() else {
            return;
        };
        if let Some(server_slot) = slot.server_slot {
            self.cancel_at_server(slot.replica, server_slot, c, query, Outcome::Timeout);
        }
        self.complete(c, query, Outcome::Timeout, false);
    }

    pub(in crate::engine) fn on_try_timeouts(&mut self, c: u32) {
        let mut due = std::mem::take(&mut self.expired);
        let client = &mut self.clients[c as usize];
        let queries = &client.queries;
        let out = |key: u64| queries.get(key).is_some_and(|s| s.dispatched.is_some());
        if let Some(at) = client.try_timeouts.pop_due(self.now, &mut due, out) {
            self.queue.push(at, Event::TryTimeout(c));
        }
        for &query in &due {
            self.on_try_timeout(c, query);
        }
        due.clear();
        self.expired = due;
    }

    /// Try `query` of client `c` has had no response for `try_timeout`: the client gives up on
    /// it (its replica drops the work) and it fails as timed out, to be retried (or replaced,
    /// with hedging) like an error.
    fn on_try_timeout(&mut self, c: u32, query: u64) {
        let Some(slot) = self.clients[c as usize].queries.get(query).copied() else {
            return;
        };
        if slot.dispatched.is_none() {
            return;
        }
        if let Some(server_slot) = slot.server_slot {
            self.cancel_at_server(slot.replica, server_slot, c, query, Outcome::Timeout);
        }
        match slot.request {
            Some(key) => self.complete_try(c, key, query, Outcome::Timeout),
            None => self.complete(c, query, Outcome::Timeout, true),
        }
    }

    /// Drains decisions and probes the policy has ready and re-arms its timer.
    pub(in crate::engine) fn service_client(&mut self, c: u32) {
        let now = self.now;
        loop {
            let client = &mut self.clients[c as usize];
            let Some((QueryId(query), pick)) = client.balancer.poll_pick(now, &mut client.rng)
            else {
                break;
            };
            match pick {
                Pick::Replica(r) => self.dispatch(c, query, r),
                Pick::NoReplica => self.no_replica(c, query),
                Pick::Pending => {}
            }
        }
        loop {
            let client = &mut self.clients[c as usize];
            let Some(probe) = client.balancer.poll_probe(now, &mut client.rng) else {
                break;
            };
            let timeout = client.balancer.probe_timeout();
            let (out, back) = (self.delay(true), self.delay(true));
            let server = probe.replica.0;
            let client = &mut self.clients[c as usize];
            let id = client.probes.insert(PendingProbe {
                request: probe,
                sent: now,
                reply_delay: back,
                report: None,
            });
            self.queue.push(
                now + out,
                Event::ProbeAtServer {
                    client: c,
                    server,
                    probe: id,
                },
            );
            // Replicas answer every probe, so a reply due before the timeout cannot time out:
            // only the others need a timeout entry (which keeps its wake-ups out of the queue).
            if let Some(t) = timeout
                && out + back >= t
                && let Some(at) = client.probe_timeouts.push(now + t, id)
            {
                self.queue.push(at, Event::ProbeTimeout(c));
            }
        }
        self.arm_timer(c);
    }

    fn arm_timer(&mut self, c: u32) {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        let Some(want) = client.balancer.poll_timeout() else {
            return;
        };
        // Never schedule in the past, and never spin at one instant.
        let want = want.max(now + Duration::from_micros(1));
        if client.timer.is_none_or(|t| want < t) {
            client.timer = Some(want);
            self.queue.push(want, Event::Timer(c));
        }
    }

    pub(in crate::engine) fn on_timer(&mut self, c: u32) {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        if client.timer == Some(now) {
            client.timer = None;
        }
        if client.balancer.poll_timeout().is_some_and(|t| t <= now) {
            client.balancer.handle_timeout(now, &mut client.rng);
        }
        self.service_client(c);
    }

    /// A probe reached its replica; the reply (computed there) travels back.
    ///
    /// Most replies are quiet ([`prequal_core::Policy::probe_reply_is_quiet`]): they change
    /// nothing but their client. Such a reply is held back instead of queued, and applied with
    /// its own time just before the client's next event (`catch_up_replies`), which gives the
    /// client the very state, random draws and all, that the queued reply would have; should
    /// the client turn loud meanwhile (a query starts waiting for replies), its held replies
    /// are queued after all (`release_if_loud`). Held back only when
    ///
    /// - the client is quiet now, so that nothing but its own events can make it loud;
    /// - no event is queued at the reply's very time: every event at that time is then queued
    ///   after the reply would have been, so it comes after it, as the catch-up before a
    ///   client's event and `EventQueue::push_first` on release both have it;
    /// - no other reply, of any client, is held back for that time: two released to the queue
    ///   would each go first and so swap, and a queued reply may draw from the network's
    ///   random numbers;
    /// - it comes by the end of the load, so that every held reply is applied (or released)
    ///   before the run can end, and counts as the event it would have been.
    pub(in crate::engine) fn deliver_probe_report(
        &mut self,
        c: u32,
        probe: u64,
        report: prequal_core::LoadReport,
    ) {
        let client = &mut self.clients[c as usize];
        let Some(entry) = client.probes.get_mut(probe) else {
            return;
        };
        entry.report = Some(report);
        let at = self.now + entry.reply_delay;
        if self.hold_replies
            && at <= self.end
            && client.balancer.probe_reply_is_quiet()
            && !self.queue.holds(at)
            && self.held_at.take(at)
        {
            let place = client.deferred.partition_point(|&(due, _)| due <= at);
            client.deferred.insert(place, (at, probe));
            self.held.0 += 1;
        } else {
            self.queue.push(at, Event::ProbeReply { client: c, probe });
        }
    }

    /// Applies client `c`'s held-back replies that came by `until`, in order, each at its own
    /// time and counted as the event it stands for. Quiet, each leaves nothing to poll and no
    /// timer to move, so no `service_client` follows.
    pub(in crate::engine) fn catch_up_replies(&mut self, c: u32, until: Time) {
        let client = &mut self.clients[c as usize];
        let due = client.deferred.partition_point(|&(at, _)| at <= until);
        for i in 0..due {
            let (at, probe) = client.deferred[i];
            debug_assert!(client.balancer.probe_reply_is_quiet());
            client.apply_reply(probe, at);
            self.held_at.free(at);
        }
        client.deferred.drain(..due);
        self.events += due as u64;
    }

    /// Queues client `c`'s held-back replies if it is no longer quiet (a query of its own now
    /// waits for replies), each ahead of whatever is queued at its time: everything there was
    /// queued after the reply was held back.
    pub(in crate::engine) fn release_if_loud(&mut self, c: u32) {
        let client = &mut self.clients[c as usize];
        if client.deferred.is_empty() || client.balancer.probe_reply_is_quiet() {
            return;
        }
        // Backwards, so that replies due at one time keep their order ahead of the rest.
        for &(at, probe) in client.deferred.iter().rev() {
            self.queue
                .push_first(at, Event::ProbeReply { client: c, probe });
            self.held_at.free(at);
        }
        self.held.1 += client.deferred.len() as u64;
        client.deferred.clear();
    }

    /// Whether client `c` holds back replies (see `deliver_probe_report`).
    pub(in crate::engine) fn holds_replies(&self, c: u32) -> bool {
        !self.clients[c as usize].deferred.is_empty()
    }

    pub(in crate::engine) fn on_probe_reply(&mut self, c: u32, probe: u64) {
        let now = self.now;
        if self.clients[c as usize].apply_reply(probe, now) {
            self.service_client(c);
        }
    }

    pub(in crate::engine) fn on_probe_timeouts(&mut self, c: u32) {
        let mut due = std::mem::take(&mut self.expired);
        let client = &mut self.clients[c as usize];
        let probes = &client.probes;
        let pending = |p: u64| probes.contains(p);
        if let Some(at) = client.probe_timeouts.pop_due(self.now, &mut due, pending) {
            self.queue.push(at, Event::ProbeTimeout(c));
        }
        for &probe in &due {
            self.on_probe_timeout(c, probe);
        }
        due.clear();
        self.expired = due;
    }

    /// Probe `probe` reached a replica that cannot answer it: `refused` (its process is
    /// down: the client learns it when the refusal comes back) or unreachable (the client
    /// learns it at the probe timeout).
    pub(in crate::engine) fn probe_unanswered(&mut self, c: u32, probe: u64, refused: bool) {
        let now = self.now;
        let client = &self.clients[c as usize];
        let Some(entry) = client.probes.get(probe) else {
            return;
        };
        let at = match (refused, client.balancer.probe_timeout()) {
            (false, Some(timeout)) => (entry.sent + timeout).max(now),
            _ => now + entry.reply_delay,
        };
        self.queue.push(at, Event::ProbeFailed { client: c, probe });
    }

    /// The client learns that a probe failed (see [`Sim::probe_unanswered`]).
    pub(in crate::engine) fn on_probe_failed(&mut self, c: u32, probe: u64) {
        self.on_probe_timeout(c, probe);
    }

    fn on_probe_timeout(&mut self, c: u32, probe: u64) {
        let now = self.now;
        let client = &mut self.clients[c as usize];
        if let Some(pending) = client.probes.remove(probe) {
            client.balancer.on_probe_failure(&pending.request, now);
            self.service_client(c);
        }
    }

    /// Whether client `c` still waits for `query` (used by replicas to drop abandoned work).
    pub(in crate::engine) fn client_waits(&self, c: u32, query: u64) -> bool {
        self.clients[c as usize].in_flight(query)
    }

    /// Attaches the replica's load report to the response of `query`.
    pub(in crate::engine) fn attach_report(
        &mut self,
        c: u32,
        query: u64,
        report: prequal_core::LoadReport,
    ) {
        if let Some(s) = self.clients[c as usize].queries.get_mut(query) {
            s.report = Some(report);
        }
    }

    /// Remembers where the replica keeps `query`, so a deadline can cancel it there.
    pub(in crate::engine) fn note_server_slot(&mut self, c: u32, query: u64, server_slot: u32) {
        if let Some(s) = self.clients[c as usize].queries.get_mut(query) {
            s.server_slot = Some(server_slot);
        }
    }
}
