//! The balancer: one cluster's policy together with the decisions production makes around it,
//! so the proxy, the simulator and a client library all drive the same lines.
//!
//! A [`Policy`] ranks replicas. A [`Balancer`] owns one and adds what a real cluster needs
//! between the policy's choice and the wire:
//!
//! - **Outlier ejection** ([`crate::outlier`], Finagle's failure accrual and Envoy's outlier
//!   detection): every finished try is scored; a replica that fails too often is removed from
//!   the policy and inserted again when its ejection ends (the balancer's timer says when).
//! - **Slow start** ([`crate::slow_start`], Envoy's curve): a replica that joins after the
//!   starting set is passed over, with probability `1 − factor`, for another usable replica
//!   while it ramps up, so a cold replica is not flooded for looking idle.
//! - **Retry exclusion**: a retry or a hedge goes to a replica its request has not tried; when
//!   the policy picks a tried one, another is drawn uniformly from the untried ones (those not
//!   ramping up first; a hedge under `idle_only`, the fastest idle one). [`Strict::No`] falls
//!   back to a tried replica when no other is left (a retry on a one-replica cluster),
//!   [`Strict::Yes`] never does (a retry beside a try still out would only double the load on
//!   the replica it races), and [`Strict::Hedge`] goes, with hedging's `idle_only` (the
//!   default), to an idle replica while there is one (none of this balancer's tries in flight,
//!   none in its last load report, alive since the request started).
//! - **Retries**: a failed try is tried again while the request has attempts left
//!   (`max_attempts`, the first try included) and the [`crate::retry_budget`] admits it.
//! - **Hedging** ([`crate::hedge`]): when a request's hedge falls due, and whether it has an
//!   untried usable replica to go to.
//!
//! The flow, for a driver: [`Balancer::set_replicas`] with the replica set (the first set is
//! the starting one, exempt from slow start); for each request [`Balancer::on_request`], then
//! for each try [`Balancer::pick`] (or, for [`Pick::Pending`], [`Balancer::poll_pick`]) and
//! [`Balancer::dispatch`], which applies ejection, exclusion and slow start to the policy's
//! choice and tells the policy the try is dispatched (a driver that must check a connection's
//! readiness in between calls its two halves, [`Balancer::resolve`] and
//! [`Balancer::dispatched`]); [`Balancer::on_complete`] when a try
//! ends, which may eject its replica; [`Balancer::try_retry`] before a retry. Probes and load
//! reports pass through to the policy as in [`crate::policy`]. The timer is the policy's and
//! the ejections': wake the balancer at [`Balancer::poll_timeout`] with
//! [`Balancer::handle_timeout`].
//!
//! Sans-IO like the policies: `now` and the RNG are arguments, so the same events and seed give
//! the same decisions. With ejection off, no replica joining late and nothing excluded, the
//! balancer draws no random number of its own and hands the policy exactly the events it would
//! have had without it. Defaults ([`BalancerConfig`]) are the proxy's: three attempts within the
//! retry budget, ejection on, a 30 s slow start, hedging on.
//!
//! ```
//! use prequal_core::balancer::{Balancer, BalancerConfig, Strict};
//! use prequal_core::{Completion, Outcome, PolicyConfig, Query, QueryId, ReplicaId, Time};
//! use rand::SeedableRng;
//! use std::time::Duration;
//!
//! let policy = PolicyConfig::from_name("round-robin").unwrap().build().unwrap();
//! let mut balancer = Balancer::new(policy, &BalancerConfig::default()).unwrap();
//! balancer.set_replicas(&[ReplicaId(0), ReplicaId(1), ReplicaId(2)], Time::ZERO);
//! let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
//! let now = Time::from_secs(1);
//! balancer.on_request(now);
//! let query = Query { id: QueryId(1), hint: None };
//! let pick = balancer.pick(&query, now, &mut rng);
//! let first = balancer.dispatch(pick, query.id, (&[], Strict::No), now, &mut rng).unwrap();
//! // The try fails fast: the request has attempts and budget left, and the retry goes to
//! // another replica even if the policy picks the same one again.
//! let failed = Completion { query: query.id, latency: Duration::from_millis(1), outcome: Outcome::Error };
//! balancer.on_complete(first, &failed, None, now);
//! assert!(balancer.try_retry(1, now).is_retry());
//! let retry = Query { id: QueryId(2), hint: None };
//! let pick = balancer.pick(&retry, now, &mut rng);
//! let second = balancer.dispatch(pick, retry.id, (&[first], Strict::No), now, &mut rng).unwrap();
//! assert_ne!(second, first);
//! ```

use std::time::Duration;

use rand::{Rng as _, RngCore};

use crate::hedge::{HedgeDecision, Hedger};
use crate::outlier::{Ejection, OutlierDetector};
use crate::policy::{
    Completion, LoadReport, Outcome, Pick, Policy, ProbeEnd, ProbeRequest, Query, QueryId, Snapshot,
};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::retry_budget::{BlockConfigError, RetryBudget};
use crate::slow_start::SlowStartConfig;
use crate::time::{Time, duration_nanos};

mod config;

pub use self::config::{BalancerConfig, RetryDecision, Strict};

/// How many times the shorter of its replica's usual successful try and the hedge delay a
/// request's first try must have waited for its hedge to go while no replica is idle (see
/// [`crate::hedge::HedgeConfig::idle_only`]). In a queue near capacity a wait is roughly
/// exponential, and one past four times the mean comes about once in fifty; a hung replica's
/// tries pass it all.
pub const STALLED: u64 = 4;

/// A replica as the balancer knows it.
#[derive(Clone, Copy, Debug)]
struct Member {
    added_at: Time,
    /// In the starting set: slow start applies only to later arrivals.
    initial: bool,
    /// False while outlier ejection keeps it out of the policy.
    in_policy: bool,
    /// Its usual successful try, in nanoseconds (0 before the first): a moving average with
    /// weight 1/8 on each new success.
    usual_nanos: u64,
    /// When it last showed itself alive: a try of it ended successfully, or it answered a
    /// probe or sent a load report (None before the first).
    alive_at: Option<Time>,
    /// This balancer's tries sent to it that have not ended.
    in_flight: u32,
    /// Its last load report (a probe reply or one piggybacked on a response): when it came,
    /// and the requests in flight it reported, every client's.
    reported: Option<(Time, u32)>,
}

/// What makes a replica idle enough for a hedge with `idle_only`, for a request that started
/// at `since`, under the hedge delay `delay_nanos` (read once: it is a quantile).
#[derive(Clone, Copy, Debug)]
struct Idle {
    since: Time,
    delay_nanos: u64,
}

impl Idle {
    /// Whether a hedge may go to `m` without queueing: none of this balancer's tries in
    /// flight, nor any request in flight in its last load report if that came since `since`
    /// (behind several balancers, the others' load), alive since `since` (a black hole's tries
    /// end as timeouts, and it is then idle too, but shows nothing), and a usual successful try
    /// no longer than [`STALLED`] times the hedge delay (a replica the policy passes over for
    /// being slow is idle too; one not known yet counts as fast). The delay is learned from the
    /// time to a response's head and the usual try runs to its end, so the margin is wide.
    fn admits(self, m: &Member) -> bool {
        // A report since then that says other clients have requests there: busy, though not
        // with this balancer's.
        let others_busy = m
            .reported
            .is_some_and(|(at, rif)| at >= self.since && rif > 0);
        m.in_flight == 0
            && !others_busy
            && m.alive_at.is_some_and(|at| at >= self.since)
            && m.usual_nanos <= self.delay_nanos.saturating_mul(STALLED)
    }
}

/// A policy with outlier ejection, slow start, retry exclusion, the retry budget and hedging
/// around it. See the module docs.
#[derive(Debug)]
pub struct Balancer {
    policy: Box<dyn Policy>,
    members: Replicas<Member>,
    /// The starting set is known: replicas inserted from now on ramp up.
    started: bool,
    /// Members out of the policy (ejected, or waiting for the timer to put them back).
    out: usize,
    /// No later than the earliest end of their ejections (None when no member is out): read
    /// by every [`Balancer::poll_timeout`], so it is kept rather than searched for.
    returns_at: Option<Time>,
    outlier: Option<OutlierDetector>,
    slow_start: SlowStartConfig,
    max_attempts: u32,
    budget: RetryBudget,
    hedger: Hedger,
}

impl Balancer {
    /// A balancer around `policy` (with no replicas yet), configured by `config`, validated.
    pub fn new(policy: Box<dyn Policy>, config: &BalancerConfig) -> Result<Self, BlockConfigError> {
        config.validate()?;
        let outlier = match config.outlier_ejection {
            true => Some(OutlierDetector::new(&config.outlier)?),
            false => None,
        };
        Ok(Self {
            policy,
            members: Replicas::new(),
            started: false,
            out: 0,
            returns_at: None,
            outlier,
            slow_start: config.slow_start.clone(),
            max_attempts: config.max_attempts,
            budget: RetryBudget::new(&config.retry_budget)?,
            hedger: Hedger::new(&config.hedge)?,
        })
    }

    /// The policy, for reads (its name, snapshot, probe timeout).
    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    /// Replaces the replica set with `replicas` (discovery): removals first, then inserts in
    /// the order given. The first call gives the starting set, taken at full weight; replicas
    /// inserted by later calls ramp up through slow start.
    pub fn set_replicas(&mut self, replicas: &[ReplicaId], now: Time) {
        let gone: Vec<ReplicaId> = self
            .members
            .ids()
            .iter()
            .copied()
            .filter(|id| !replicas.contains(id))
            .collect();
        for id in gone {
            self.remove(id, now);
        }
        let initial = !self.started;
        self.started = true;
        for &id in replicas {
            let member = Member {
                added_at: now,
                initial,
                in_policy: true,
                usual_nanos: 0,
                alive_at: None,
                in_flight: 0,
                reported: None,
            };
            if self.members.insert(id, member) {
                self.policy
                    .on_replica_change(ReplicaChange::Insert(id), now);
                if let Some(outlier) = &mut self.outlier {
                    outlier.insert(id);
                }
            }
        }
    }

    fn remove(&mut self, id: ReplicaId, now: Time) {
        if let Some(member) = self.members.remove(id) {
            match member.in_policy {
                true => self
                    .policy
                    .on_replica_change(ReplicaChange::Remove(id), now),
                false => self.out -= 1,
            }
        }
        if let Some(outlier) = &mut self.outlier {
            // A smaller cluster may lift ejections early, to stay within the cap.
            outlier.remove(id, now);
            self.returns_at = self.earliest_return();
        }
    }

    /// The earliest end of the ejections of the members out of the policy.
    fn earliest_return(&self) -> Option<Time> {
        let outlier = self.outlier.as_ref()?;
        if self.out == 0 {
            return None;
        }
        self.members
            .iter()
            .filter(|(_, m)| !m.in_policy)
            // A member out of the policy with no ejection on record (cleared by a late result
            // after its time was up) is due back at once.
            .map(|(id, _)| outlier.ejected_until(id).unwrap_or(Time::ZERO))
            .min()
    }

    /// The replicas known, in id order.
    pub fn replicas(&self) -> &[ReplicaId] {
        self.members.ids()
    }

    /// True while `replica` is out of the policy (ejected). Pure.
    pub fn is_ejected(&self, replica: ReplicaId) -> bool {
        self.members.get(replica).is_some_and(|m| !m.in_policy)
    }

    /// How many replicas are out of the policy.
    pub fn ejected_count(&self) -> usize {
        self.out
    }

    /// True while `replica`, which joined after the starting set, ramps up. Pure.
    pub fn is_ramping(&self, replica: ReplicaId, now: Time) -> bool {
        self.members
            .get(replica)
            .is_some_and(|m| self.ramping(m, now))
    }

    fn ramping(&self, member: &Member, now: Time) -> bool {
        !member.initial && self.slow_start.is_ramping(member.added_at, now)
    }

    /// How many replicas can take traffic (known and not ejected).
    pub fn usable_count(&self) -> usize {
        self.members.len() - self.out
    }

    /// Whether some usable replica is not in `tried`: where a hedge or a retry beside other
    /// tries could go. Pure.
    pub fn has_untried(&self, tried: &[ReplicaId]) -> bool {
        self.members
            .iter()
            .any(|(id, m)| m.in_policy && !tried.contains(&id))
    }

    /// Whether some usable replica not in `tried` passes `idle`: where a hedge may go with
    /// `idle_only` ([`crate::hedge::HedgeConfig`]). Pure.
    fn has_idle_untried(&self, tried: &[ReplicaId], idle: Idle) -> bool {
        self.idle_outside(tried, idle).next().is_some()
    }

    /// The usable replicas outside `exclude` that `idle` admits.
    fn idle_outside<'a>(
        &'a self,
        exclude: &'a [ReplicaId],
        idle: Idle,
    ) -> impl Iterator<Item = (ReplicaId, &'a Member)> + 'a {
        self.members
            .iter()
            .filter(move |(id, m)| m.in_policy && idle.admits(m) && !exclude.contains(id))
    }

    /// The idle test for a request that started at `since`, under the current hedge delay.
    fn idle(&self, since: Time) -> Idle {
        Idle {
            since,
            delay_nanos: self.hedge_delay_nanos(),
        }
    }

    /// The hedge delay in nanoseconds; the most there is while it is still being learned.
    fn hedge_delay_nanos(&self) -> u64 {
        self.hedger.delay().map_or(u64::MAX, duration_nanos)
    }

    /// For a try dispatched with `strict`, the test a replica it goes to must pass (a hedge
    /// with `idle_only`, [`Idle`]); None when any may take it.
    fn idle_for(&self, strict: Strict) -> Option<Idle> {
        match strict {
            Strict::Hedge(since) if self.hedger.config().idle_only => Some(self.idle(since)),
            _ => None,
        }
    }

    /// Chooses a replica for `query` (the policy's choice; see [`Balancer::dispatch`]).
    pub fn pick(&mut self, query: &Query, now: Time, rng: &mut dyn RngCore) -> Pick {
        self.policy.pick(query, now, rng)
    }

    /// A decision that [`Balancer::pick`] left [`Pick::Pending`] and that is now ready.
    pub fn poll_pick(&mut self, now: Time, rng: &mut dyn RngCore) -> Option<(QueryId, Pick)> {
        self.policy.poll_pick(now, rng)
    }

    /// Turns the policy's `pick` for `query` into the replica the try goes to, and tells the
    /// policy it is dispatched; None when there is nowhere to send it. A replica out of the
    /// policy, or in `tried`, is replaced by an untried usable one ([`Strict`] says whether a
    /// tried one may serve when none is left); a replica ramping up is passed over with
    /// probability `1 − factor` when another is available. [`Pick::NoReplica`] (and a pending
    /// decision that never came) falls back to any usable replica.
    pub fn dispatch(
        &mut self,
        pick: Pick,
        query: QueryId,
        tried: (&[ReplicaId], Strict),
        now: Time,
        rng: &mut dyn RngCore,
    ) -> Option<ReplicaId> {
        let replica = self.resolve(pick, tried, now, rng)?;
        self.dispatched(replica, query, now);
        Some(replica)
    }

    /// The first half of [`Balancer::dispatch`]: the replica the try would go to, without
    /// telling the policy. For a driver that may still not send it there (its connection to
    /// that replica is not ready); it then calls [`Balancer::dispatched`] once the try is sent.
    pub fn resolve(
        &self,
        pick: Pick,
        (tried, strict): (&[ReplicaId], Strict),
        now: Time,
        rng: &mut dyn RngCore,
    ) -> Option<ReplicaId> {
        // The policy's pick and its member, if it may take the try.
        let picked = match pick {
            Pick::Replica(r) => self.members.get(r).filter(|m| m.in_policy).map(|m| (r, *m)),
            Pick::Pending | Pick::NoReplica => None,
        };
        let idle = self.idle_for(strict);
        let mut chosen = picked.map(|(r, _)| r);
        let busy = |r: ReplicaId| {
            idle.is_some_and(|idle| self.members.get(r).is_some_and(|m| !idle.admits(m)))
        };
        if chosen.is_none_or(|r| tried.contains(&r) || busy(r)) {
            chosen = if let Some(idle) = idle {
                // The idle replica that answers soonest by its usual try (one the policy passed
                // over may be idle for being slow); with none idle (the hedge of a stalled try,
                // `poll_hedge`), the policy's pick.
                self.fastest_idle(tried, idle)
                    .or(chosen.filter(|r| !tried.contains(r)))
                    .or_else(|| self.alternative(tried, None, now, rng))
            } else {
                let fallback = match strict {
                    Strict::No => chosen,
                    Strict::Yes | Strict::Hedge(_) => None,
                };
                self.alternative(tried, None, now, rng).or(fallback)
            };
            tracing::trace!(
                ?pick,
                ?chosen,
                tried = tried.len(),
                "replaced: ejected or tried"
            );
        } else if let Some((r, m)) = picked
            && self.ramping(&m, now)
        {
            let factor = self.slow_start.factor(m.added_at, now);
            if rng.random_bool((1.0 - factor).clamp(0.0, 1.0)) {
                let mut skip = tried.to_vec();
                skip.push(r);
                chosen = self.alternative(&skip, idle, now, rng).or(chosen);
                tracing::trace!(%r, factor, ?chosen, "passed over: ramping up");
            }
        }
        chosen
    }

    /// The second half of [`Balancer::dispatch`]: a try of `query` was sent to `replica`.
    pub fn dispatched(&mut self, replica: ReplicaId, query: QueryId, now: Time) {
        if let Some(member) = self.members.get_mut(replica) {
            member.in_flight += 1;
        }
        self.policy.on_dispatch(replica, query, now);
    }

    /// The usable replica outside `exclude` that `idle` admits whose usual successful try is
    /// the shortest (one with none known yet after every known one; ties to the lowest id).
    /// Draws nothing.
    fn fastest_idle(&self, exclude: &[ReplicaId], idle: Idle) -> Option<ReplicaId> {
        self.idle_outside(exclude, idle)
            .min_by_key(|(id, m)| (m.usual_nanos.wrapping_sub(1), id.0))
            .map(|(id, _)| id)
    }

    /// A usable replica outside `exclude` (and one `idle` admits, if given), uniformly at
    /// random, preferring ones not ramping up.
    fn alternative(
        &self,
        exclude: &[ReplicaId],
        idle: Option<Idle>,
        now: Time,
        rng: &mut dyn RngCore,
    ) -> Option<ReplicaId> {
        let usable = || {
            self.members.iter().filter(move |(id, m)| {
                m.in_policy && !exclude.contains(id) && idle.is_none_or(|idle| idle.admits(m))
            })
        };
        let settled: Vec<ReplicaId> = usable()
            .filter(|(_, m)| !self.ramping(m, now))
            .map(|(id, _)| id)
            .collect();
        let pool: Vec<ReplicaId> = match settled.is_empty() {
            true => usable().map(|(id, _)| id).collect(),
            false => settled,
        };
        if pool.is_empty() {
            return None;
        }
        // A u32 draw: the simulator's draws, and so its reports, depend on the width.
        let len = u32::try_from(pool.len()).unwrap_or(u32::MAX);
        pool.get(rng.random_range(0..len) as usize).copied()
    }

    /// A try sent to `replica` finished: tells the policy (and gives it the load report the
    /// response carried, if any), then scores the result for outlier ejection unless the try
    /// was cancelled. Returns the ejection it caused, if any: the replica has left the policy.
    pub fn on_complete(
        &mut self,
        replica: ReplicaId,
        completion: &Completion,
        report: Option<&LoadReport>,
        now: Time,
    ) -> Option<Ejection> {
        if let Some(member) = self.members.get_mut(replica) {
            member.in_flight = member.in_flight.saturating_sub(1);
        }
        self.policy.on_complete(replica, completion, now);
        if completion.outcome == Outcome::Success
            && let Some(member) = self.members.get_mut(replica)
        {
            let latency = u64::try_from(completion.latency.as_nanos()).unwrap_or(u64::MAX);
            member.usual_nanos = match member.usual_nanos {
                0 => latency.max(1),
                usual => (usual - usual / 8).saturating_add(latency / 8).max(1),
            };
            member.alive_at = Some(now);
        }
        if let Some(report) = report {
            // Whatever the outcome, a replica that sent a report is alive.
            self.seen_reported(replica, report, now);
            self.policy.on_load_report(replica, report, now);
        }
        if completion.outcome == Outcome::Cancelled {
            return None;
        }
        let ejection = self
            .outlier
            .as_mut()?
            .on_result(replica, completion.outcome, now)?;
        // A replica ejected again on probation, before the timer put it back, is still out.
        if let Some(member) = self.members.get_mut(replica)
            && member.in_policy
        {
            member.in_policy = false;
            self.out += 1;
            self.policy
                .on_replica_change(ReplicaChange::Remove(replica), now);
        }
        // A replica ejected again while out returns later than its first end, which stays as
        // an early (and harmless) wake-up.
        let until = now + ejection.duration;
        self.returns_at = Some(self.returns_at.map_or(until, |t| t.min(until)));
        tracing::trace!(%replica, reason = %ejection.reason, ?ejection.duration, "ejected");
        Some(ejection)
    }

    /// How to report a try to `replica` abandoned `age` after it was sent without an answer
    /// (it lost to another try of its request; for a try whose client left, see
    /// [`Balancer::abandoned_outcome`]): [`Hedger::loser_outcome`] (a timeout once it outlived
    /// the hedge delay, else cancelled), but cancelled while `age` is under twice the replica's
    /// own usual successful try. The hedge delay is the whole cluster's p95; in a
    /// cluster of unequal replicas a slower one's normal answers outlast it, and counting
    /// those as timeouts would make error aversion and ejection drive healthy capacity out.
    /// A replica that stalls (its usual time learned before the stall) still outlives twice
    /// that, and counts.
    pub fn loser_outcome(&self, replica: ReplicaId, age: Duration) -> Outcome {
        let outcome = self.hedger.loser_outcome(age);
        let usual = self.members.get(replica).map_or(0, |m| m.usual_nanos);
        let age = u64::try_from(age.as_nanos()).unwrap_or(u64::MAX);
        if outcome == Outcome::Timeout && age < usual.saturating_mul(2) {
            Outcome::Cancelled
        } else {
            outcome
        }
    }

    /// How to report a try to `replica` whose client went away `age` after it was sent,
    /// before the replica answered (no other try of the request had won): cancelled when the
    /// replica has shown itself alive since this one was sent (another try of it ended
    /// successfully, or it answered a probe or sent a load report), so that this request was
    /// merely slower than its client's patience (a slow endpoint, a client with a short
    /// timeout); otherwise as [`Balancer::loser_outcome`]. A host that is stopped or cut off
    /// shows nothing, and its abandoned tries still count as timeouts once they outlived the
    /// hedge delay and twice its usual time, so that with hedging off and clients that give up
    /// before `try_timeout` it is still found out. (A service that hangs behind a live sidecar
    /// answers probes: its probed RIF grows, which turns a probing policy away, and its tries
    /// count once they lose to a hedge or reach `try_timeout`.)
    pub fn abandoned_outcome(&self, replica: ReplicaId, age: Duration, now: Time) -> Outcome {
        let sent = Time::from_nanos(now.as_nanos().saturating_sub(duration_nanos(age)));
        let alive = self
            .members
            .get(replica)
            .and_then(|m| m.alive_at)
            .is_some_and(|at| at > sent);
        if alive {
            Outcome::Cancelled
        } else {
            self.loser_outcome(replica, age)
        }
    }

    /// A replica reported its load without being probed, apart from any query. A report
    /// piggybacked on a query's response belongs with that query's end instead
    /// ([`Balancer::on_complete`]'s `report`): it leaves the query out, and the policy takes the
    /// query's one off when it hears of the end, so the end must come first.
    pub fn on_load_report(&mut self, replica: ReplicaId, report: &LoadReport, now: Time) {
        self.seen_reported(replica, report, now);
        self.policy.on_load_report(replica, report, now);
    }

    /// The next probe the policy wants sent, if any. Drain after every event.
    pub fn poll_probe(&mut self, now: Time, rng: &mut dyn RngCore) -> Option<ProbeRequest> {
        self.policy.poll_probe(now, rng)
    }

    /// How long to wait for a probe reply; None for policies that never probe.
    pub fn probe_timeout(&self) -> Option<Duration> {
        self.policy.probe_timeout()
    }

    /// A probe was answered.
    pub fn on_probe_reply(
        &mut self,
        probe: &ProbeRequest,
        report: &LoadReport,
        now: Time,
        rng: &mut dyn RngCore,
    ) {
        self.seen_reported(probe.replica, report, now);
        self.policy.on_probe_reply(probe, report, now, rng);
    }

    /// Whether a probe reply now would be quiet ([`Policy::probe_reply_is_quiet`]): the
    /// balancer's own part of a reply (the replica seen alive) polls nothing and moves no
    /// timer.
    pub fn probe_reply_is_quiet(&self) -> bool {
        self.policy.probe_reply_is_quiet()
    }

    /// `replica` reported its load at `now`, and so showed itself alive.
    fn seen_reported(&mut self, replica: ReplicaId, report: &LoadReport, now: Time) {
        if let Some(member) = self.members.get_mut(replica) {
            member.alive_at = Some(now);
            member.reported = Some((now, report.rif));
        }
    }

    /// A probe failed: no reply before its timeout, a transport error, or a malformed reply.
    pub fn on_probe_failure(&mut self, probe: &ProbeRequest, now: Time) {
        self.policy.on_probe_failure(probe, now);
    }

    /// A probe ended, however it did: for drivers that learn the three ends in one place.
    pub fn on_probe_end(
        &mut self,
        probe: &ProbeRequest,
        end: ProbeEnd<'_>,
        now: Time,
        rng: &mut dyn RngCore,
    ) {
        match end {
            ProbeEnd::Reply(report) => self.on_probe_reply(probe, report, now, rng),
            ProbeEnd::Failed => self.policy.on_probe_failure(probe, now),
            ProbeEnd::NotSent => self.policy.on_probe_not_sent(probe, now),
        }
    }

    /// When the balancer next wants [`Balancer::handle_timeout`]: the policy's timer, or the
    /// end of an ejection (possibly already past, when a replica awaits its return). Pure.
    pub fn poll_timeout(&self) -> Option<Time> {
        match (self.policy.poll_timeout(), self.returns_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The timer fired: runs the policy's timer if it is due, and puts back into the policy the
    /// replicas whose ejection has ended. Returns those replicas.
    pub fn handle_timeout(&mut self, now: Time, rng: &mut dyn RngCore) -> Vec<ReplicaId> {
        if self.policy.poll_timeout().is_some_and(|t| t <= now) {
            self.policy.handle_timeout(now, rng);
        }
        let mut back = Vec::new();
        let Some(outlier) = &self.outlier else {
            return back;
        };
        if self.returns_at.is_none_or(|t| t > now) {
            return back;
        }
        for (id, member) in self.members.iter_mut() {
            if !member.in_policy && !outlier.is_ejected(id, now) {
                member.in_policy = true;
                self.policy
                    .on_replica_change(ReplicaChange::Insert(id), now);
                back.push(id);
            }
        }
        self.out -= back.len();
        self.returns_at = self.earliest_return();
        back
    }

    /// A read-only view of the policy's state.
    pub fn snapshot(&self, now: Time) -> Snapshot {
        self.policy.snapshot(now)
    }

    /// Outlier ejection's state, when it is on.
    pub fn outlier(&self) -> Option<&OutlierDetector> {
        self.outlier.as_ref()
    }

    /// A request (not a retry, not a hedge) starts: it earns retry budget.
    pub fn on_request(&mut self, now: Time) {
        self.budget.on_request(now);
    }

    /// A request whose `attempts` tries all failed asks to try again: within `max_attempts`,
    /// the retry budget decides (and is charged on [`RetryDecision::Retry`]). The driver first
    /// decides whether the failure may be retried at all (a connect failure always; an error
    /// response or a timed-out try when the request is idempotent, or configured so).
    pub fn try_retry(&mut self, attempts: u32, now: Time) -> RetryDecision {
        if attempts >= self.max_attempts {
            return RetryDecision::NoAttemptsLeft;
        }
        match self.budget.try_retry(now) {
            true => RetryDecision::Retry,
            false => RetryDecision::OverBudget,
        }
    }

    /// Tries per request, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The retry budget.
    pub fn retry_budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// The hedger: its delay, its counters, and how a losing try is reported.
    pub fn hedger(&self) -> &Hedger {
        &self.hedger
    }

    /// The hedger, to tell it of requests and responses.
    pub fn hedger_mut(&mut self) -> &mut Hedger {
        &mut self.hedger
    }

    /// A request that may be hedged sent its first try at `now`: counts it for the hedge
    /// budget and returns when its hedge is due. None when hedging is off, no second usable
    /// replica exists, or too few tries have answered yet to know what is slow.
    pub fn hedge_plan(&mut self, now: Time) -> Option<Time> {
        if !self.hedger.config().enabled || self.usable_count() < 2 {
            return None;
        }
        self.hedger.on_request(now);
        self.hedger.next_hedge_at(now, 0)
    }

    /// Whether the request whose first try started at `started`, that sent `hedges_sent`
    /// hedges and tried `tried`, hedges at `now` ([`HedgeDecision::Now`] charges the hedge
    /// budget), later, or never. None when every usable replica is in `tried`: a hedge goes
    /// only to a replica the request has not tried, and one with nowhere to go is neither
    /// charged nor counted. With [`crate::hedge::HedgeConfig::idle_only`] a hedge that is due
    /// while no untried usable replica is idle is held back, uncharged, and asked about again a
    /// step later ([`Hedger::held_back`]), unless its first try has stalled; the driver
    /// dispatches one that goes with [`Strict::Hedge`] (`started`), which sends it to an idle
    /// replica while there is one.
    pub fn poll_hedge(
        &mut self,
        started: Time,
        hedges_sent: u32,
        tried: &[ReplicaId],
        now: Time,
    ) -> Option<HedgeDecision> {
        if !self.has_untried(tried) {
            return None;
        }
        if self.hedger.config().idle_only {
            let idle = self.idle(started);
            if !self.has_idle_untried(tried, idle)
                && !self.stalled(tried.last().copied(), idle, now)
            {
                return Some(self.hedger.held_back(started, hedges_sent, now));
            }
        }
        Some(self.hedger.poll_hedge(started, hedges_sent, now))
    }

    /// Whether a request that started at `idle.since` and whose latest try went to `replica`
    /// has stalled at `now`: the replica, one that reports its load, has shown no life since
    /// the request started (no try of it ended successfully, it answered no probe and sent no
    /// report: a host stopped or cut off), or the request has waited more than [`STALLED`]
    /// times the shorter of that replica's usual successful try and the hedge delay (the
    /// cluster's usual slow try): more than a busy replica's queue explains, a replica hung or
    /// slowed down (one whose usual time has grown with its slowness is still held to the
    /// cluster's). Its hedge goes, when due, even when no replica is idle. Pure.
    fn stalled(&self, replica: Option<ReplicaId>, idle: Idle, now: Time) -> bool {
        let (started, delay) = (idle.since, idle.delay_nanos);
        let member = replica.and_then(|r| self.members.get(r));
        // Silent since the request started, from a replica that reports its load (whose probe
        // replies would have shown it alive): no answer, no probe reply, no report. One that
        // never reports shows life only by answering, which a busy one may not do for a while.
        if member.is_some_and(|m| m.reported.is_some() && m.alive_at.is_none_or(|at| at < started))
        {
            return true;
        }
        let usual = match member {
            Some(m) if m.usual_nanos > 0 => m.usual_nanos.min(delay),
            _ => delay,
        };
        usual < u64::MAX
            && duration_nanos(now.saturating_since(started)) > usual.saturating_mul(STALLED)
    }
}

#[cfg(test)]
mod tests;
