//! The discrete-event engine: clients, replicas and the network in integer virtual time.
//!
//! One run simulates one contender (a policy config) under one scenario. Every client owns
//! its own policy instance, built by the core from config, and its own seeded RNG; replicas own
//! a [`crate::model::ReplicaModel`] and the core's [`prequal_core::LoadTracker`], which answers
//! probes. Events sit in a [`crate::queue::EventQueue`] (FIFO among equal times), and each
//! replica's next CPU completion in one indexed heap (`wakes`), served before queued events of
//! the same instant, so a seed and a scenario always give the same run, event for event.
//!
//! Every client drives a [`prequal_core::Balancer`], the same the proxy drives: the policy with
//! outlier ejection, slow start, retry exclusion, the retry budget and hedging around it,
//! configured by the scenario's balancer keys (`max_attempts`, `[clients.outlier]`, ...; the
//! proxy's defaults). A query whose try fails with an error is tried again on a replica it has
//! not tried, while `max_attempts` and the retry budget allow (`client/balancing.rs`).
//!
//! Through the balancer the engine drives the whole [`prequal_core::Policy`] contract: replica
//! inserts at time zero;
//! `pick` (and `poll_pick` for pending decisions); `on_dispatch`; `on_complete` with the
//! outcome (a query past its deadline completes as `Outcome::Timeout`, and the replica drops
//! its work); after every client event it drains `poll_probe` and sends the probes over the
//! network, reporting `on_probe_reply` with the replica's tracker report (plus its recent
//! utilisation) or `on_probe_failure` when `probe_timeout` passes first; and it wakes the
//! policy at `poll_timeout` with `handle_timeout`.
//!
//! With hedging on (`[clients.hedge]`, or a contender's `hedge`), each client's balancer also
//! hedges ([`prequal_core::Hedger`]): a query's tries share one request, the hedger says when to send
//! another try (to a replica the query has not tried), the first success wins and the other
//! tries are cancelled at their replicas and reported to the policy (`client/hedging.rs`). Fault
//! episodes (`black-hole`, `host-down`, `killed`) act on queries and probes as they reach a
//! replica (`server/events.rs`); a `redeployed` episode takes the replica out of every client's
//! replica set and puts it back at its end, where the balancer's slow start ramps it up
//! (`Sim::announce_replicas`). Without hedging, no event, draw or report byte changes.
//!
//! Randomness is split so contenders face the same world: each replica's antagonists draw from
//! their own stream seeded by the scenario seed and the replica index, untouched by traffic.

mod client;
mod expiry;
mod server;
mod slab;
mod wakes;

use std::time::Duration;

use prequal_core::{Balancer, BalancerConfig, PolicyConfig, ReplicaId, Time};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::Serialize;

use crate::metrics::{Measured, Recorder};
use crate::model::Distribution;
use crate::queue::EventQueue;
use crate::scenario::Compiled;
use client::Client;
use server::Server;
use wakes::Wakes;

/// A run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The contender's config was rejected by the core.
    #[error("contender {name}: {source}")]
    Policy {
        /// The contender's label.
        name: String,
        /// Why.
        source: prequal_core::ConfigError,
    },
    /// The balancer's config (retries, ejection, slow start, hedging) was rejected by the core.
    #[error("contender {name}: {source}")]
    Balancer {
        /// The contender's label.
        name: String,
        /// Why.
        source: prequal_core::BlockConfigError,
    },
    /// A histogram could not be created.
    #[error("histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
}

/// What one run produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunOutput {
    /// Events processed.
    pub events: u64,
    /// Everything measured.
    #[serde(flatten)]
    pub measured: Measured,
    /// What hedging did, summed over the clients (absent when the run did not hedge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hedging: Option<HedgeSummary>,
    /// What retries and outlier ejection did, summed over the clients (absent when the run
    /// neither retried nor ejected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balancer: Option<BalancerSummary>,
}

/// Retries and ejections in one run, summed over the clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BalancerSummary {
    /// Retries sent (a query's tries after a failed one, hedges aside).
    pub retries: u64,
    /// Retries the budget refused.
    pub retries_refused: u64,
    /// Replicas ejected (one replica ejected twice counts twice).
    pub ejections: u64,
}

/// Hedging's cost and benefit in one run, summed over the clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HedgeSummary {
    /// Queries whose first try was sent.
    pub queries: u64,
    /// Tries sent to replicas: first tries plus hedges.
    pub tries: u64,
    /// Hedges sent.
    pub sent: u64,
    /// Queries whose response came from a hedge.
    pub won: u64,
    /// Hedges due but refused by the budget.
    pub refused: u64,
    /// Tries per query (1 = no extra load).
    pub tries_per_query: f64,
    /// Extra requests caused by hedging, percent of queries.
    pub extra_pct: f64,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Arrival(u32),
    AtServer {
        client: u32,
        server: u32,
        query: u64,
    },
    ServerDone {
        server: u32,
        slot: u32,
        client: u32,
        query: u64,
    },
    Change(u32),
    Response {
        client: u32,
        query: u64,
        error: bool,
    },
    Deadline(u32),
    /// Tries of the client have been out for `try_timeout` (they wait in its `try_timeouts`).
    TryTimeout(u32),
    /// A retried query's deadline (first tries' deadlines wait in the client's `deadlines`).
    QueryDeadline {
        client: u32,
        query: u64,
    },
    ProbeAtServer {
        client: u32,
        server: u32,
        probe: u64,
    },
    ProbeReply {
        client: u32,
        probe: u64,
    },
    ProbeTimeout(u32),
    Timer(u32),
    Tick,
    /// A probe's replica cannot answer (down or refusing): the client learns it now.
    ProbeFailed {
        client: u32,
        probe: u64,
    },
    /// Time to ask the client's hedger about one of its requests again.
    Hedge {
        client: u32,
        request: u64,
    },
}

/// A seed for component `tag`, index `index`, derived from the scenario seed (SplitMix64).
fn derive_seed(seed: u64, tag: u64, index: u64) -> u64 {
    let mut z = seed
        .wrapping_add(tag.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(index.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Sim<'a> {
    compiled: &'a Compiled,
    load_factor: f64,
    now: Time,
    end: Time,
    horizon: Time,
    queue: EventQueue<Event>,
    wakes: Wakes,
    clients: Vec<Client>,
    servers: Vec<Server>,
    net_rng: SmallRng,
    /// This run's own copies of the network delays: a sequential trace keeps its place per
    /// run, never shared with runs going on in parallel.
    delay: Option<Distribution>,
    probe_delay: Option<Distribution>,
    recorder: Recorder,
    done: Vec<crate::model::JobId>,
    expired: Vec<u64>,
    events: u64,
    /// Whether a utilisation sample (`Event::Tick`) is still to come.
    tick_pending: bool,
    /// Whether quiet probe replies may be held back instead of queued (see
    /// [`Sim::deliver_probe_report`]); off only in tests that check it changes nothing.
    hold_replies: bool,
    /// Replies held back, and of those, released to the queue after all (for tests).
    held: (u64, u64),
    /// The instants at which replies are held back, by any client ([`HeldAt`]).
    held_at: HeldAt,
}

/// The instants at which probe replies are held back, by any client, so that no two are held
/// for one instant: released to the queue, each would go ahead of the other and they would
/// swap. A table of [`HeldAt::SLOTS`] instants in nanoseconds, each in the slot its value
/// names; a reply whose slot is taken, by its own instant or another, is queued rather than
/// held, which is always correct, and a table this size holds the ramp's few hundred replies
/// held at a time with few such misses. Cheaper than a hash set, which cost more than a third
/// of what holding saves.
struct HeldAt {
    /// `u64::MAX` where free (no reply comes at the end of time).
    slots: Box<[u64]>,
}

impl HeldAt {
    const SLOTS: usize = 4096;

    fn new() -> Self {
        HeldAt {
            slots: vec![u64::MAX; Self::SLOTS].into_boxed_slice(),
        }
    }

    fn slot(at: Time) -> usize {
        at.as_nanos() as usize % Self::SLOTS
    }

    /// Takes `at`'s slot for a reply held back then; false (and nothing taken) if it is taken.
    fn take(&mut self, at: Time) -> bool {
        let slot = &mut self.slots[Self::slot(at)];
        let free = *slot == u64::MAX;
        if free {
            *slot = at.as_nanos();
        }
        free
    }

    /// Frees `at`'s slot: the reply held back for then is applied or queued.
    fn free(&mut self, at: Time) {
        self.slots[Self::slot(at)] = u64::MAX;
    }
}

/// Runs `contender` through the scenario with every load level multiplied by `load_factor`,
/// its clients' balancers as `[clients]` says (balancer keys and `[clients.hedge]`).
pub fn run(
    compiled: &Compiled,
    contender: &PolicyConfig,
    load_factor: f64,
) -> Result<RunOutput, SimError> {
    let clients = &compiled.scenario.clients;
    let balancer = clients.balancer_keys().config(clients.hedge.as_ref());
    run_with(compiled, contender, &balancer, load_factor)
}

/// Like [`run`], with every client's balancer configured by `balancer` (hedging when its
/// `hedge.enabled`) in place of the scenario's `[clients]` keys.
pub fn run_with(
    compiled: &Compiled,
    contender: &PolicyConfig,
    balancer: &BalancerConfig,
    load_factor: f64,
) -> Result<RunOutput, SimError> {
    let mut sim = Sim::new(compiled, contender, balancer, load_factor)?;
    sim.start();
    sim.drive();
    Ok(RunOutput {
        events: sim.events,
        measured: sim.recorder.finish(),
        hedging: sim.hedge_summary(),
        balancer: sim.balancer_summary(),
    })
}

impl<'a> Sim<'a> {
    fn new(
        compiled: &'a Compiled,
        contender: &PolicyConfig,
        config: &BalancerConfig,
        load_factor: f64,
    ) -> Result<Self, SimError> {
        let sc = &compiled.scenario;
        let seed = sc.seed;
        let mut clients = Vec::new();
        for i in 0..sc.clients.count {
            let policy = contender.build().map_err(|source| SimError::Policy {
                name: contender.name().to_string(),
                source,
            })?;
            let balancer = Balancer::new(policy, config).map_err(|source| SimError::Balancer {
                name: contender.name().to_string(),
                source,
            })?;
            clients.push(Client::new(
                balancer,
                SmallRng::seed_from_u64(derive_seed(seed, 1, i.into())),
                config.hedge.enabled,
            ));
        }
        let servers: Vec<Server> = (0..sc.servers.count)
            .map(|i| {
                Server::new(
                    compiled,
                    i,
                    derive_seed(seed, 2, i.into()),
                    derive_seed(seed, 3, i.into()),
                )
            })
            .collect();
        let with_util = sc.servers.allocation().is_some();
        let objective_us = u64::try_from(sc.latency_objective.as_micros()).unwrap_or(u64::MAX);
        let recorder = Recorder::new(objective_us, &compiled.phases, servers.len(), with_util)?;
        let end = compiled.end();
        let drain = sc.clients.deadline.unwrap_or(Duration::from_secs(30));
        Ok(Sim {
            compiled,
            load_factor,
            now: Time::ZERO,
            end,
            horizon: end + drain + Duration::from_millis(1),
            queue: EventQueue::new(),
            wakes: Wakes::new(servers.len()),
            clients,
            servers,
            net_rng: SmallRng::seed_from_u64(derive_seed(seed, 4, 0)),
            delay: compiled.delay.clone(),
            probe_delay: compiled.probe_delay.clone(),
            recorder,
            done: Vec::new(),
            expired: Vec::new(),
            events: 0,
            tick_pending: false,
            hold_replies: true,
            held: (0, 0),
            held_at: HeldAt::new(),
        })
    }

    /// Handles events until the horizon, or, past the end of the load, until no query is in
    /// flight and the last utilisation sample is taken: what follows (probes, timers) changes
    /// nothing the report measures, and with a long deadline it would go on for as long.
    fn drive(&mut self) {
        loop {
            if self.now > self.end && !self.tick_pending && self.clients.iter().all(Client::is_idle)
            {
                break;
            }
            // A wake-up due no later than the next queued event goes first: completions at an
            // instant are handled before anything else that happens then. So a queued event
            // is taken only when it comes strictly before the next wake-up (and by the horizon).
            let wake = self.wakes.peek();
            let limit = match wake {
                Some((at, _)) => at.min(self.horizon + Duration::from_nanos(1)),
                None => self.horizon + Duration::from_nanos(1),
            };
            let Some((at, event)) = self.queue.pop_before(limit) else {
                // Nothing queued comes first: the wake-up is next, if there is one in time.
                match wake {
                    Some((at, s)) if at <= self.horizon => {
                        self.now = at;
                        self.events += 1;
                        // The wake-up stays in the heap: handling it always ends in
                        // `finish_cpu_jobs`, which moves the replica's one wake-up to its next
                        // completion or disarms it.
                        self.on_cpu_wake(s);
                        continue;
                    }
                    _ => break,
                }
            };
            self.now = at;
            self.events += 1;
            self.handle(event);
        }
        // Replies still held back came by the end of the load, so before anything that ended
        // the run: they count, and leave their clients as they would have.
        for c in 0..self.clients.len() as u32 {
            self.catch_up_replies(c, self.end);
        }
    }

    fn start(&mut self) {
        let replicas = self.replica_set();
        for c in 0..self.clients.len() {
            // The starting set: no slow start for it.
            self.clients[c].balancer.set_replicas(&replicas, Time::ZERO);
            self.schedule_arrival(c as u32);
            self.service_client(c as u32);
        }
        for s in 0..self.servers.len() {
            self.schedule_change(s as u32);
        }
        if self.compiled.scenario.servers.allocation().is_some() {
            self.queue.push(Time::from_secs(1), Event::Tick);
            self.tick_pending = true;
        }
    }

    /// The replicas in service discovery: all but those out for a deploy.
    fn replica_set(&self) -> Vec<ReplicaId> {
        (0..self.servers.len() as u32)
            .filter(|&s| !self.servers[s as usize].redeployed)
            .map(ReplicaId)
            .collect()
    }

    /// Discovery changed (a replica left or rejoined for a deploy): every client learns the
    /// new set at once; a rejoining replica ramps up through slow start.
    fn announce_replicas(&mut self) {
        let replicas = self.replica_set();
        for c in 0..self.clients.len() as u32 {
            self.as_client(c, |sim| {
                sim.clients[c as usize]
                    .balancer
                    .set_replicas(&replicas, sim.now);
                sim.service_client(c);
            });
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrival(c) => self.as_client(c, |sim| sim.on_arrival(c)),
            Event::AtServer {
                client,
                server,
                query,
            } => self.on_query_at_server(client, server, query),
            Event::ServerDone {
                server,
                slot,
                client,
                query,
            } => self.on_server_done(server, slot, client, query),
            Event::Change(s) => self.on_change(s),
            Event::Response {
                client,
                query,
                error,
            } => self.as_client(client, |sim| sim.on_response(client, query, error)),
            Event::Deadline(c) => self.as_client(c, |sim| sim.on_deadlines(c)),
            Event::TryTimeout(c) => self.as_client(c, |sim| sim.on_try_timeouts(c)),
            Event::QueryDeadline { client, query } => {
                self.as_client(client, |sim| sim.on_deadline(client, query))
            }
            Event::ProbeAtServer {
                client,
                server,
                probe,
            } => self.on_probe_at_server(client, server, probe),
            Event::ProbeReply { client, probe } => {
                self.as_client(client, |sim| sim.on_probe_reply(client, probe))
            }
            Event::ProbeTimeout(c) => self.as_client(c, |sim| sim.on_probe_timeouts(c)),
            Event::Timer(c) => self.as_client(c, |sim| sim.on_timer(c)),
            Event::Tick => self.on_tick(),
            Event::Hedge { client, request } => {
                self.as_client(client, |sim| sim.on_hedge_due(client, request))
            }
            Event::ProbeFailed { client, probe } => {
                self.as_client(client, |sim| sim.on_probe_failed(client, probe))
            }
        }
    }

    /// Handles an event of client `c`: its held-back replies that came first are applied
    /// before it, and released to the queue after it if it left the client loud (see
    /// [`Sim::deliver_probe_report`]).
    #[inline(always)]
    fn as_client(&mut self, c: u32, handle: impl FnOnce(&mut Self)) {
        let holds = self.holds_replies(c);
        if holds {
            self.catch_up_replies(c, self.now);
        }
        handle(self);
        if holds {
            self.release_if_loud(c);
        }
    }

    /// Hedging's counters summed over the clients; None when they do not hedge.
    fn hedge_summary(&self) -> Option<HedgeSummary> {
        let mut sum = HedgeSummary::default();
        let mut any = false;
        for (stats, tries) in self.clients.iter().filter_map(|c| c.hedge_stats()) {
            any = true;
            sum.queries += stats.requests;
            sum.tries += tries;
            sum.sent += stats.sent;
            sum.won += stats.won;
            sum.refused += stats.refused;
        }
        if !any {
            return None;
        }
        if sum.queries > 0 {
            sum.tries_per_query = sum.tries as f64 / sum.queries as f64;
            sum.extra_pct = (sum.tries_per_query - 1.0) * 100.0;
        }
        Some(sum)
    }

    /// Retries and ejections summed over the clients; None when there were none.
    fn balancer_summary(&self) -> Option<BalancerSummary> {
        let mut sum = BalancerSummary::default();
        for c in &self.clients {
            sum.retries += c.counts.retries;
            sum.retries_refused += c.counts.retries_refused;
            sum.ejections += c.counts.ejections;
        }
        (sum != BalancerSummary::default()).then_some(sum)
    }

    /// One-way network delay drawn from `dist` (zero when the scenario sets none).
    fn delay(&mut self, probe: bool) -> Duration {
        let dist: Option<&Distribution> = if probe {
            self.probe_delay.as_ref()
        } else {
            self.delay.as_ref()
        };
        dist.map_or(Duration::ZERO, |d| d.sample(&mut self.net_rng))
    }

    /// The aggregate offered qps at `now` (0 past the end).
    fn offered_qps(&self, now: Time) -> f64 {
        let phases = &self.compiled.phases;
        let i = phases.partition_point(|p| p.end <= now);
        phases
            .get(i)
            .map_or(0.0, |p| p.qps_at(now) * self.load_factor)
    }
}

#[cfg(test)]
mod tests;
