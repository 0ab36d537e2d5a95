//! A small, seeded driver for any [`Policy`]: the cross-policy invariant tests and the policy
//! benchmarks share it.
//!
//! [`Harness`] plays the part of the simulator in miniature. Each [`Harness::step`] advances
//! virtual time a little, delivers the probe replies and query completions that are due, wakes
//! the policy if its timer expired, and then does one of: send a new query (most steps), change
//! membership (insert, remove, duplicate insert, removal of an absent replica), or feed stray
//! input (probe replies and load reports for replicas the policy never heard of), or let a
//! lull of up to 0.8 s pass (so pool entries age out and timers fire). After every
//! event it drains [`Policy::poll_pick`] and [`Policy::poll_probe`], answering probes from
//! [`Model`], a toy model of replica load.
//!
//! Invariant breaches are collected in [`Harness::violations`] rather than panicking, so a test
//! can report all of them with the policy's name; every decision goes into [`Harness::log`] so
//! two runs can be compared.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use prequal_core::{
    Completion, LoadReport, Outcome, Pick, Policy, PolicyConfig, ProbeId, ProbeRequest, Query,
    QueryId, ReplicaChange, ReplicaId, Time,
};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// Queries slower than this end as [`Outcome::Timeout`] at the deadline.
const DEADLINE: Duration = Duration::from_millis(30);
/// Probe timeout assumed for policies that do not state one.
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(3);
/// Replica ids from here on are never inserted: "absent" and "unknown" replicas.
const ABSENT: u32 = 50_000;

/// Builds the policy called `name` with its defaults.
pub fn build(name: &str) -> Box<dyn Policy> {
    match PolicyConfig::from_name(name).and_then(|c| c.build()) {
        Ok(policy) => policy,
        Err(e) => panic!("{name}: {e}"),
    }
}

/// A toy model of replica load: each replica has a base latency that grows with its RIF; some
/// are slow and some fail half their queries fast (the sinkhole case).
pub struct Model;

impl Model {
    /// Latency of an unloaded replica: 1 to 1.75 ms, five times that for every fifth replica.
    pub fn base_latency(id: ReplicaId) -> Duration {
        let base = Duration::from_micros(1_000 + 250 * u64::from(id.0 % 4));
        if id.0 % 5 == 4 { base * 5 } else { base }
    }

    /// True for replicas that fail half their queries.
    pub fn erroring(id: ReplicaId) -> bool {
        id.0 % 7 == 3
    }

    /// Latency of a query that finds `rif` others in flight.
    pub fn latency(id: ReplicaId, rif: u32) -> Duration {
        Self::base_latency(id) + Self::base_latency(id) * rif / 4
    }

    /// What the replica answers to a probe when `rif` queries are in flight.
    pub fn report(id: ReplicaId, rif: u32) -> LoadReport {
        LoadReport {
            rif,
            latency: Self::latency(id, rif),
            qps: Some(100.0 + f64::from(id.0 % 10)),
            utilization: Some((0.1 * f64::from(rif + 1)).min(1.0)),
            error_rate: Some(if Self::erroring(id) { 0.5 } else { 0.0 }),
        }
    }
}

/// One decision the policy made, in the order it made them.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// [`Policy::pick`] answered.
    Pick(QueryId, Pick),
    /// [`Policy::poll_pick`] handed out a decision left pending.
    Resolved(QueryId, Pick),
    /// [`Policy::poll_probe`] asked for a probe.
    Probe(ProbeRequest),
    /// The driver woke the policy for the timer it asked for.
    Wake(Time),
}

struct InFlight {
    finish: Time,
    replica: ReplicaId,
    completion: Completion,
}

struct ProbeInFlight {
    due: Time,
    probe: ProbeRequest,
    lost: bool,
}

/// Drives one policy with seeded events; see the module docs.
pub struct Harness {
    /// The policy under test.
    pub policy: Box<dyn Policy>,
    /// The driver's RNG (the policy gets it too).
    pub rng: Pcg64Mcg,
    /// Virtual time.
    pub now: Time,
    /// Replicas currently in the set.
    pub live: BTreeSet<ReplicaId>,
    /// Every decision, in order.
    pub log: Vec<Decision>,
    /// Invariant breaches, as readable messages.
    pub violations: Vec<String>,
    /// Queries answered [`Pick::Pending`] and not yet resolved.
    pub pending: BTreeSet<QueryId>,
    next_replica: u32,
    next_query: u64,
    server_rif: BTreeMap<ReplicaId, u32>,
    in_flight: Vec<InFlight>,
    probes: Vec<ProbeInFlight>,
}

impl Harness {
    /// A harness around `policy` with `replicas` replicas inserted at time zero.
    pub fn new(policy: Box<dyn Policy>, replicas: u32, seed: u64) -> Self {
        let mut harness = Self {
            policy,
            rng: Pcg64Mcg::seed_from_u64(seed),
            now: Time::ZERO,
            live: BTreeSet::new(),
            log: Vec::new(),
            violations: Vec::new(),
            pending: BTreeSet::new(),
            next_replica: 0,
            next_query: 0,
            server_rif: BTreeMap::new(),
            in_flight: Vec::new(),
            probes: Vec::new(),
        };
        for _ in 0..replicas {
            harness.insert_new();
        }
        harness
    }

    /// One step: time passes, due events are delivered, then a query, a membership change,
    /// stray input or a lull.
    pub fn step(&mut self) {
        let pause = Duration::from_micros(self.rng.random_range(10..400));
        self.advance(pause);
        match self.rng.random_range(0..100) {
            0 => self.insert_new(),
            1 if self.live.len() > 2 => self.remove_random(),
            2 => self.duplicate_insert(),
            3 => self.remove_absent(),
            4 => self.stray_input(),
            5 => {
                // A lull: lets pool entries age out and polling and idle-probe timers fire.
                let lull = Duration::from_millis(self.rng.random_range(50..800));
                self.advance(lull);
            }
            _ => {
                self.query();
            }
        }
    }

    /// Lets time pass without new queries until nothing is pending or in flight, for at most
    /// `max_steps` steps of 1 ms. Returns true when everything settled.
    pub fn settle(&mut self, max_steps: usize) -> bool {
        for _ in 0..max_steps {
            if self.pending.is_empty() && self.in_flight.is_empty() && self.probes.is_empty() {
                return true;
            }
            self.advance(Duration::from_millis(1));
        }
        self.pending.is_empty()
    }

    /// Removes every replica.
    pub fn remove_all(&mut self) {
        let all: Vec<ReplicaId> = self.live.iter().copied().collect();
        for id in all {
            self.change(ReplicaChange::Remove(id));
        }
    }

    /// Sends one query: picks, and dispatches if a replica was named.
    pub fn query(&mut self) -> Pick {
        let id = QueryId(self.next_query);
        self.next_query += 1;
        let query = Query {
            id,
            hint: Some(id.0 % 8),
        };
        let pick = self.policy.pick(&query, self.now, &mut self.rng);
        self.log.push(Decision::Pick(id, pick));
        self.act_on(id, pick, "pick");
        self.drain();
        pick
    }

    fn advance(&mut self, by: Duration) {
        self.now = self.now + by;
        self.deliver_probes();
        self.complete_due();
        if let Some(at) = self.policy.poll_timeout()
            && at <= self.now
        {
            self.log.push(Decision::Wake(at));
            self.policy.handle_timeout(self.now, &mut self.rng);
            self.drain();
        }
    }

    fn act_on(&mut self, id: QueryId, pick: Pick, source: &str) {
        match pick {
            Pick::Replica(replica) => {
                if !self.live.contains(&replica) {
                    self.violate(format!("{source} named {replica}, not in the set"));
                }
                self.dispatch(replica, id);
            }
            Pick::Pending => {
                if !self.pending.insert(id) {
                    self.violate(format!("{source} left query {id:?} pending twice"));
                }
            }
            Pick::NoReplica => {
                if !self.live.is_empty() {
                    self.violate(format!(
                        "{source} answered NoReplica with {} replicas",
                        self.live.len()
                    ));
                }
            }
        }
    }

    fn dispatch(&mut self, replica: ReplicaId, id: QueryId) {
        self.policy.on_dispatch(replica, id, self.now);
        let rif = self.server_rif.entry(replica).or_default();
        let mut latency = Model::latency(replica, *rif);
        *rif += 1;
        let mut outcome = Outcome::Success;
        if Model::erroring(replica) && self.rng.random_bool(0.5) {
            (latency, outcome) = (Duration::from_micros(100), Outcome::Error);
        } else if latency > DEADLINE {
            (latency, outcome) = (DEADLINE, Outcome::Timeout);
        }
        self.in_flight.push(InFlight {
            finish: self.now + latency,
            replica,
            completion: Completion {
                query: id,
                latency,
                outcome,
            },
        });
    }

    /// Drains decided picks and probe requests until the policy has nothing more to say.
    fn drain(&mut self) {
        loop {
            let mut progressed = false;
            while let Some((id, pick)) = self.policy.poll_pick(self.now, &mut self.rng) {
                progressed = true;
                self.log.push(Decision::Resolved(id, pick));
                if !self.pending.remove(&id) {
                    self.violate(format!("poll_pick resolved {id:?}, which was not pending"));
                }
                if pick == Pick::Pending {
                    self.violate(format!("poll_pick resolved {id:?} as Pending"));
                } else {
                    self.act_on(id, pick, "poll_pick");
                }
            }
            while let Some(probe) = self.policy.poll_probe(self.now, &mut self.rng) {
                progressed = true;
                self.schedule_probe(probe);
            }
            if !progressed {
                return;
            }
        }
    }

    fn schedule_probe(&mut self, probe: ProbeRequest) {
        self.log.push(Decision::Probe(probe));
        if !self.live.contains(&probe.replica) {
            self.violate(format!(
                "probe {:?} to {}, not in the set",
                probe.id, probe.replica
            ));
        }
        if self.probes.iter().any(|p| p.probe.id == probe.id) {
            self.violate(format!("probe id {:?} reused while outstanding", probe.id));
        }
        let lost = self.rng.random_bool(0.05);
        let delay = if lost {
            self.policy.probe_timeout().unwrap_or(DEFAULT_PROBE_TIMEOUT)
        } else {
            Duration::from_micros(self.rng.random_range(50..400))
        };
        self.probes.push(ProbeInFlight {
            due: self.now + delay,
            probe,
            lost,
        });
    }

    fn deliver_probes(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = self.probes.drain(..).partition(|p| p.due <= now);
        self.probes = later;
        for p in due {
            if p.lost {
                self.policy.on_probe_failure(&p.probe, now);
            } else {
                let rif = self.server_rif.get(&p.probe.replica).copied().unwrap_or(0);
                let report = Model::report(p.probe.replica, rif);
                self.policy
                    .on_probe_reply(&p.probe, &report, now, &mut self.rng);
            }
            self.drain();
        }
    }

    fn complete_due(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) =
            self.in_flight.drain(..).partition(|q| q.finish <= now);
        self.in_flight = later;
        for q in due {
            if let Some(rif) = self.server_rif.get_mut(&q.replica) {
                *rif = rif.saturating_sub(1);
            }
            self.policy.on_complete(q.replica, &q.completion, now);
            self.drain();
        }
    }

    fn change(&mut self, change: ReplicaChange) {
        match change {
            ReplicaChange::Insert(id) => self.live.insert(id),
            ReplicaChange::Remove(id) => self.live.remove(&id),
        };
        self.policy.on_replica_change(change, self.now);
        self.drain();
    }

    fn insert_new(&mut self) {
        let id = ReplicaId(self.next_replica);
        self.next_replica += 1;
        self.change(ReplicaChange::Insert(id));
    }

    fn remove_random(&mut self) {
        let index = self.rng.random_range(0..self.live.len());
        if let Some(id) = self.live.iter().nth(index).copied() {
            self.change(ReplicaChange::Remove(id));
        }
    }

    fn duplicate_insert(&mut self) {
        if let Some(id) = self.live.first().copied() {
            self.change(ReplicaChange::Insert(id));
        }
    }

    fn remove_absent(&mut self) {
        self.change(ReplicaChange::Remove(ReplicaId(ABSENT + 1)));
    }

    /// Probe replies, probe failures and load reports the policy never asked for, about a
    /// replica it never heard of and about a live one.
    fn stray_input(&mut self) {
        let unknown = ReplicaId(ABSENT + 2);
        let probe = ProbeRequest {
            id: ProbeId(u64::MAX - self.next_query),
            replica: unknown,
            query: Some(QueryId(u64::MAX)),
            hint: None,
        };
        let report = Model::report(unknown, 3);
        self.policy
            .on_probe_reply(&probe, &report, self.now, &mut self.rng);
        self.policy.on_probe_failure(&probe, self.now);
        self.policy.on_load_report(unknown, &report, self.now);
        let completion = Completion {
            query: QueryId(u64::MAX),
            latency: Duration::from_millis(1),
            outcome: Outcome::Success,
        };
        self.policy.on_complete(unknown, &completion, self.now);
        if let Some(live) = self.live.first().copied() {
            let stray = ProbeRequest {
                replica: live,
                ..probe
            };
            self.policy
                .on_probe_reply(&stray, &Model::report(live, 1), self.now, &mut self.rng);
            self.policy
                .on_load_report(live, &Model::report(live, 0), self.now);
        }
        self.drain();
    }

    fn violate(&mut self, message: String) {
        let at = self.now.as_nanos() / 1_000;
        self.violations
            .push(format!("{} at {at} us: {message}", self.policy.name()));
    }
}
