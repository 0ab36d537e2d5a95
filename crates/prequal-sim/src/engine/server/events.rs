//! Replica-side events: query arrival and service, CPU wake-ups, capacity changes, probes and
//! the once-a-second utilisation sample, handled by the [`Sim`] for one
//! [`Server`](super::Server) at a time.

use prequal_core::{LoadReport, LoadTracker, Outcome};

use super::Job;
use crate::engine::{Event, Sim};
use crate::model::{Admission, CancelledWork, Fault};

impl Sim<'_> {
    pub(in crate::engine) fn on_query_at_server(&mut self, c: u32, s: u32, query: u64) {
        if !self.client_waits(c, query) {
            return; // Timed out on the way: the deadline travels with the query.
        }
        let now = self.now;
        if let Some(fault) = self.servers[s as usize].model.effects(now).fault
            && self.query_meets_fault(c, s, query, fault)
        {
            return;
        }
        let server = &mut self.servers[s as usize];
        let arrival = server.tracker.on_arrival(now);
        self.recorder.arrival(now, s as usize, arrival.rif);
        let (admission, error) = server.model.admit(now, &mut server.rng, &mut self.done);
        let mut job = Job {
            live: true,
            client: c,
            query,
            arrival,
            error,
            cpu: None,
            orphan: false,
        };
        match admission {
            Admission::After(d) => {
                let slot = server.insert(job);
                self.queue.push(
                    now + d,
                    Event::ServerDone {
                        server: s,
                        slot,
                        client: c,
                        query,
                    },
                );
                self.note_server_slot(c, query, slot);
            }
            Admission::Job(id) => {
                job.cpu = Some(id);
                let slot = server.insert(job);
                server.by_cpu.insert(id, slot);
                self.note_server_slot(c, query, slot);
            }
        }
        self.finish_cpu_jobs(s);
    }

    pub(in crate::engine) fn on_server_done(&mut self, s: u32, slot: u32, c: u32, query: u64) {
        let server = &mut self.servers[s as usize];
        let matches = server
            .jobs
            .get(slot as usize)
            .is_some_and(|j| j.live && j.client == c && j.query == query);
        if matches {
            self.respond(s, slot);
        }
    }

    /// A query arrives at a replica under a whole-replica fault (see [`Fault`]); false when
    /// the fault lets the replica serve it as usual.
    fn query_meets_fault(&mut self, c: u32, s: u32, query: u64, fault: Fault) -> bool {
        let now = self.now;
        match fault {
            // Draining for a deploy: a query already on its way is still served.
            Fault::Redeployed => return false,
            // Unreachable: the query vanishes; only its client's deadline or a hedge ends it.
            Fault::HostDown => {}
            // Connection refused: an error comes back after the return trip, no work done.
            Fault::Killed => {
                let at = now + self.delay(false);
                self.queue.push(
                    at,
                    Event::Response {
                        client: c,
                        query,
                        error: true,
                    },
                );
            }
            // Accepted and held forever: the tracker counts it in flight until it is cancelled.
            // A stalled body is the same here, where a response has no head of its own.
            Fault::BlackHole | Fault::StallBody => {
                let server = &mut self.servers[s as usize];
                let arrival = server.tracker.on_arrival(now);
                self.recorder.arrival(now, s as usize, arrival.rif);
                let slot = server.insert(Job {
                    live: true,
                    client: c,
                    query,
                    arrival,
                    error: false,
                    cpu: None,
                    orphan: false,
                });
                self.note_server_slot(c, query, slot);
            }
        }
        true
    }

    /// A `killed` fault starts at `now`: every query in flight fails (connection reset) and
    /// the process's state, its load tracker included, is gone.
    fn kill(&mut self, s: u32) {
        let now = self.now;
        let estimator = self.compiled.scenario.estimator;
        let server = &mut self.servers[s as usize];
        let mut reset = Vec::new();
        for slot in 0..server.jobs.len() as u32 {
            if let Some(job) = server.take(slot) {
                if let (Some(id), Some(cpu)) = (job.cpu, server.model.cpu_mut()) {
                    server.by_cpu.remove(&id);
                    cpu.cancel(now, id, &mut self.done);
                }
                if !job.orphan {
                    reset.push((job.client, job.query));
                }
            }
        }
        server.tracker = LoadTracker::new(estimator);
        for (client, query) in reset {
            let at = now + self.delay(false);
            self.queue.push(
                at,
                Event::Response {
                    client,
                    query,
                    error: true,
                },
            );
        }
    }

    /// The replica hands back the response of the job in `slot`.
    fn respond(&mut self, s: u32, slot: u32) {
        let now = self.now;
        let server = &mut self.servers[s as usize];
        let Some(job) = server.take(slot) else {
            return;
        };
        if job.orphan {
            // Its client went away: the tracker counted it out then, and no one waits for it.
            return;
        }
        let outcome = if job.error {
            Outcome::Error
        } else {
            Outcome::Success
        };
        server.tracker.on_finish(job.arrival, outcome, now);
        if self.compiled.scenario.clients.piggyback_reports {
            let mut report = server.tracker.report(now);
            report.utilization = server.utilization(now);
            self.attach_report(job.client, job.query, report);
        }
        let at = now + self.delay(false);
        let (client, query, error) = (job.client, job.query, job.error);
        self.queue.push(
            at,
            Event::Response {
                client,
                query,
                error,
            },
        );
    }

    /// Completes the CPU jobs in `self.done` and re-arms the replica's CPU wake-up.
    fn finish_cpu_jobs(&mut self, s: u32) {
        let done = std::mem::take(&mut self.done);
        // Overhead jobs (probes' CPU cost) never answer anyone and are not in `by_cpu`.
        for id in done.iter().filter(|id| !id.is_overhead()) {
            if let Some(slot) = self.servers[s as usize].by_cpu.remove(id) {
                self.respond(s, slot);
            }
        }
        self.done = done;
        self.done.clear();
        // The replica's one wake-up moves to its next completion. Probe overhead finishing
        // changes nothing observable, so the wake-up skips past it to the next query that
        // finishes (the CPU model steps through the overhead exactly as if woken).
        let next = self.servers[s as usize]
            .model
            .cpu()
            .and_then(|c| c.next_awaited_completion());
        self.wakes.set(s, next);
    }

    /// Replica `s`'s wake-up came due (still armed: `finish_cpu_jobs` moves it on).
    pub(in crate::engine) fn on_cpu_wake(&mut self, s: u32) {
        let now = self.now;
        if let Some(cpu) = self.servers[s as usize].model.cpu_mut() {
            cpu.advance(now, &mut self.done);
        }
        self.finish_cpu_jobs(s);
    }

    /// A query's client gave up (`Timeout`) or took another try's response (`Cancelled`): the
    /// tracker counts it out, and its work is dropped, freeing the replica, or with
    /// `cancelled_work = "finish"` runs to its end and answers no one (`respond`).
    pub(in crate::engine) fn cancel_at_server(
        &mut self,
        s: u32,
        slot: u32,
        c: u32,
        query: u64,
        outcome: Outcome,
    ) {
        let now = self.now;
        let server = &mut self.servers[s as usize];
        let Some(job) = server
            .jobs
            .get_mut(slot as usize)
            .filter(|j| j.live && !j.orphan && j.client == c && j.query == query)
        else {
            return; // Already answered (the response is on its way), or already given up on.
        };
        // Only work that holds a worker or a CPU share can be finished; a query without any (a
        // latency model's, a black hole's) has nothing to finish.
        let finish = server.cancelled_work == CancelledWork::Finish && job.cpu.is_some();
        job.orphan = finish;
        let job = *job;
        if outcome == Outcome::Cancelled {
            server.tracker.on_abandon(job.arrival, now);
        } else {
            server.tracker.on_finish(job.arrival, outcome, now);
        }
        if finish {
            return;
        }
        server.take(slot);
        if let (Some(id), Some(cpu)) = (job.cpu, server.model.cpu_mut()) {
            server.by_cpu.remove(&id);
            cpu.cancel(now, id, &mut self.done);
        }
        self.finish_cpu_jobs(s);
    }

    pub(in crate::engine) fn schedule_change(&mut self, s: u32) {
        if let Some(at) = self.servers[s as usize].model.next_change(self.now)
            && at <= self.end
        {
            self.queue.push(at, Event::Change(s));
        }
    }

    pub(in crate::engine) fn on_change(&mut self, s: u32) {
        let now = self.now;
        let server = &mut self.servers[s as usize];
        server
            .model
            .on_change(now, &mut server.antagonist_rng, &mut self.done);
        let fault = server.model.effects(now).fault;
        let killed = fault == Some(Fault::Killed);
        let was_killed = std::mem::replace(&mut server.killed, killed);
        let redeployed = server.model.redeploying(now);
        let was_redeployed = std::mem::replace(&mut server.redeployed, redeployed);
        if killed && !was_killed {
            self.kill(s);
        }
        if redeployed != was_redeployed {
            if was_redeployed {
                // The old process stops (what it still holds fails) and the new one rejoins.
                self.kill(s);
                self.servers[s as usize].joined_at = now;
            }
            self.announce_replicas();
        }
        self.finish_cpu_jobs(s);
        self.schedule_change(s);
    }

    pub(in crate::engine) fn on_probe_at_server(&mut self, c: u32, s: u32, probe: u64) {
        let now = self.now;
        match self.servers[s as usize].model.effects(now).fault {
            Some(Fault::HostDown) => return self.probe_unanswered(c, probe, false),
            Some(Fault::Killed) => return self.probe_unanswered(c, probe, true),
            Some(Fault::BlackHole | Fault::StallBody | Fault::Redeployed) | None => {}
        }
        let with_rates = self.clients[c as usize].reads_probe_rates;
        let server = &mut self.servers[s as usize];
        if let Some(cpu) = server.model.cpu_mut() {
            cpu.advance(now, &mut self.done);
        }
        let report: LoadReport = if with_rates {
            LoadReport {
                utilization: server.utilization(now),
                ..server.tracker.report(now)
            }
        } else {
            // Nobody reads the rates: RIF and latency are all the probe answers.
            server.tracker.report_without_rates(now)
        };
        server.model.charge_probe(now, &mut self.done);
        self.finish_cpu_jobs(s);
        self.deliver_probe_report(c, probe, report);
    }

    pub(in crate::engine) fn on_tick(&mut self) {
        let now = self.now;
        for s in 0..self.servers.len() {
            let server = &mut self.servers[s];
            if let Some(cpu) = server.model.cpu_mut() {
                cpu.advance(now, &mut self.done);
            }
            if let Some(u) = server.last_second(now) {
                self.recorder.utilization(now, s, u);
            }
            let busy = server.model.cpu().map_or(0.0, |c| c.busy_core_nanos());
            server.marks = [server.marks[1], (now, busy)];
            self.finish_cpu_jobs(s as u32);
        }
        self.tick_pending = now < self.end;
        if self.tick_pending {
            self.queue
                .push(now + std::time::Duration::from_secs(1), Event::Tick);
        }
    }
}
