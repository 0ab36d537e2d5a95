//! The asynchronous probing engine shared by `prequal`, `linear` and `c3`.
//!
//! The three policies probe, keep their pool and remove replies in exactly the same way; they
//! differ only in how a reply is ranked. [`AsyncProbing`] does everything but the ranking and
//! takes the ranking as a [`Rule`]. Per query ([`Policy::pick`]) it:
//!
//! 1. drops replies older than the age limit;
//! 2. queues `r_probe` probes (deterministically rounded) to distinct random replicas;
//! 3. picks the best reply by the rule (replies from avoided replicas last), uses it (its RIF
//!    goes up by one; it leaves the pool when its reuse budget is spent), or, with fewer than two
//!    replies in the pool, picks a uniformly random replica (the paper), or, while probing is
//!    blind (probes fail and none has been answered lately) and with `fallback_by_local_rif`, the
//!    one of two random replicas with fewer of this client's queries in flight;
//! 4. removes `r_remove` replies (deterministically rounded), alternating between the oldest and
//!    the worst by the rule. Removal comes after selection so the best reply is never thrown
//!    away before the query it was kept for.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use rand::{Rng, RngCore};

use super::aversion::{ReplicaLoad, less_loaded_of_two, random_replica};
use super::params::{ProbingParams, b_reuse, pool_capacity};
use super::pool::{Entry, Pool};
use crate::ewma::ewma;
use crate::policy::{
    Completion, LoadReport, Pick, Policy, PoolEntryView, ProbeId, ProbeRequest, Query, QueryId,
    ReplicaView, Snapshot,
};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::rounding::{RandomRound, RateRounder};
use crate::sampling::for_each_distinct;
use crate::time::{Time, duration_nanos};

/// How a rule ranks one reply: smaller is better, compared hot flag first, then `key`, then
/// `tie`. Rules without a hot/cold split leave `hot` false.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rank {
    /// Whether the reply is hot (HCL), or ranks with the hot ones (a cold reply past HCL's
    /// slowdown limit); every hot reply ranks after every cold one.
    pub hot: bool,
    /// The main score (cold: latency; hot: RIF; linear and C3: their score).
    pub key: f64,
    /// Breaks ties in `key`.
    pub tie: f64,
}

impl Rank {
    /// Total order: hot flag, then key, then tie.
    pub fn order(&self, other: &Rank) -> Ordering {
        self.hot
            .cmp(&other.hot)
            .then(self.key.total_cmp(&other.key))
            .then(self.tie.total_cmp(&other.tie))
    }
}

/// Orders `(avoided, rank)` pairs: every reply from an avoided replica ranks after the rest.
pub fn order_with_aversion(a: &(bool, Rank), b: &(bool, Rank)) -> Ordering {
    a.0.cmp(&b.0).then(a.1.order(&b.1))
}

/// A [`Rank`] as a sort key, ordered by [`Rank::order`]: the key of rules that have no cheaper
/// one.
#[derive(Clone, Copy, Debug)]
pub struct RankKey(pub Rank);

impl PartialEq for RankKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for RankKey {}

impl PartialOrd for RankKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RankKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.order(&other.0)
    }
}

/// The replies a decision compared, ranked and formatted only when a trace subscriber asks
/// for them.
struct Candidates<'a, R: Rule>(&'a AsyncProbing<R>, &'a R::Context, Time);

impl<R: Rule> fmt::Debug for Candidates<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Candidates(policy, cx, now) = *self;
        let mut list = f.debug_list();
        for entry in policy.pool.iter() {
            let (avoided, rank) = policy.rank_entry(cx, entry, now);
            list.entry(&format_args!(
                "{}(rif={} latency_us={} key={:.6}{}{})",
                entry.replica,
                entry.rif,
                entry.latency.as_micros(),
                rank.key,
                if rank.hot { " hot" } else { "" },
                if avoided { " avoided" } else { "" },
            ));
        }
        list.finish()
    }
}

/// The index of the entry with the largest `key` (ties go to the first).
fn worst_by<K: Ord>(pool: &Pool, key: impl Fn(&Entry) -> K) -> Option<usize> {
    let found = pool
        .iter()
        .enumerate()
        .fold(None, |found: Option<(usize, K)>, (index, entry)| {
            let k = key(entry);
            match &found {
                Some((_, f)) if k <= *f => found,
                _ => Some((index, k)),
            }
        });
    found.map(|(index, _)| index)
}

/// The best of `replies` (the smallest `key`, ties to the last) and the worst (the largest,
/// ties to the first) in one pass, with the worst's key; `None` when there are none.
fn extremes_by<T, K: Ord + Copy>(
    mut replies: impl ExactSizeIterator<Item = T>,
    key: impl Fn(T) -> K,
) -> Option<Extremes<K>> {
    let len = replies.len();
    let first = key(replies.next()?);
    let start = Extremes {
        best: 0,
        best_key: first,
        worst: 0,
        worst_key: first,
        len,
    };
    Some(
        replies
            .enumerate()
            .fold(start, |mut found, (index, reply)| {
                let k = key(reply);
                if k <= found.best_key {
                    found.best = index + 1;
                    found.best_key = k;
                }
                if k > found.worst_key {
                    found.worst = index + 1;
                    found.worst_key = k;
                }
                found
            }),
    )
}

/// How many replies in `pool` are `recent`, counting at most `most`. `recent` must be a test
/// of recency (if true for a reply, true for every newer one): the pool is in receipt order, so
/// the count walks back from the newest and stops at the first that fails, not over the pool.
fn count_newest(pool: &Pool, most: usize, recent: impl Fn(&Entry) -> bool) -> usize {
    pool.iter()
        .rev()
        .take_while(|e| recent(e))
        .take(most)
        .count()
}

/// What one pass over the pool found: see [`extremes_by`]. `len` is the pool's length then.
#[derive(Clone, Copy, Debug)]
struct Extremes<K> {
    best: usize,
    best_key: K,
    worst: usize,
    worst_key: K,
    len: usize,
}

/// A selection rule: how the engine ranks the replies in its pool.
pub trait Rule: fmt::Debug + Send + 'static {
    /// What the rule computes once per decision (a threshold, a scale factor).
    type Context;

    /// The policy's config name.
    const NAME: &'static str;

    /// Whether [`Rule::on_reply`] reads the reply's rates (`qps`, `utilization`, `error_rate`);
    /// the engine reads only RIF and latency (see [`Policy::reads_probe_rates`]).
    const READS_RATES: bool = true;

    /// A probe reply arrived from `replica` (before it enters the pool).
    fn on_reply(&mut self, replica: ReplicaId, report: &LoadReport, now: Time);

    /// A replica reported its load unasked, piggybacked on a response. Such reports come only
    /// from replicas this client chose, a biased sample, so they never add a replica to the
    /// pool (with `reports_refresh_pool` the engine lets one refresh the reply held from its
    /// replica) and by default the rule ignores them.
    fn on_load_report(&mut self, _replica: ReplicaId, _report: &LoadReport, _now: Time) {}

    /// A query sent to `replica` finished.
    fn on_complete(&mut self, _replica: ReplicaId, _completion: &Completion) {}

    /// A replica joined or left.
    fn on_replica_change(&mut self, _change: ReplicaChange) {}

    /// Computes the per-decision context.
    fn context(&self) -> Self::Context;

    /// Computes the per-decision context when it depends on the replies held (by default it
    /// does not: [`Rule::context`]).
    fn context_for(&self, _pool: &Pool) -> Self::Context {
        self.context()
    }

    /// What the rule reads of one reply whatever the decision's context (a ranked latency, the
    /// replica's state in the rule). For a pick the engine has the rule work these out once for
    /// the whole pool, with the context ([`Rule::prepare`]), and ranks every reply from them
    /// ([`Rule::key_from`]), so a rule whose context is itself a pass over the pool looks
    /// nothing up twice. Rules with nothing to share use `()`.
    type Facts: Copy + Default + fmt::Debug + Send;

    /// Prepares a decision on `pool`: appends the facts of every reply, in pool order, to
    /// `facts`, and returns the context ([`Rule::context_for`]). By default the facts are the
    /// default ones, for rules that share nothing.
    fn prepare(&self, pool: &Pool, facts: &mut Vec<Self::Facts>) -> Self::Context {
        facts.extend(pool.iter().map(|_| Self::Facts::default()));
        self.context_for(pool)
    }

    /// Whether [`Rule::rank`] and [`Rule::key`] read `load`. When they do not, the engine
    /// skips looking the replica up for every reply it ranks (while no replica can be avoided).
    const READS_LOAD: bool = true;

    /// Ranks one reply; `load` is this client's own view of the replica.
    fn rank(&self, cx: &Self::Context, entry: &Entry, load: &ReplicaLoad) -> Rank;

    /// What the engine compares to choose: ordered exactly as [`Rule::rank`] orders by
    /// [`Rank::order`], and cheaper to compute and compare. Rules without a cheaper form use
    /// [`RankKey`].
    type Key: Ord + Copy;

    /// The reply's sort key (smaller is better).
    fn key(&self, cx: &Self::Context, entry: &Entry, load: &ReplicaLoad) -> Self::Key;

    /// [`Rule::key`] from the reply's `facts`, worked out for this decision ([`Rule::prepare`]);
    /// equal to `key`. By default the facts are not read.
    fn key_from(
        &self,
        cx: &Self::Context,
        entry: &Entry,
        _facts: &Self::Facts,
        load: &ReplicaLoad,
    ) -> Self::Key {
        self.key(cx, entry, load)
    }

    /// Scalars for the snapshot.
    fn values(&self, cx: &Self::Context) -> Vec<(&'static str, f64)>;
}

/// Async probing with a probe pool, generic over the selection [`Rule`].
#[derive(Debug)]
pub struct AsyncProbing<R: Rule> {
    params: ProbingParams,
    rule: R,
    replicas: Replicas<ReplicaLoad>,
    pool: Pool,
    probes: VecDeque<ProbeRequest>,
    next_probe_id: u64,
    probe_count: RateRounder,
    remove_count: RateRounder,
    remove_worst_next: bool,
    b_reuse: f64,
    /// `b_reuse` prepared for rounding each reply's budget.
    budget: RandomRound,
    next_idle_probe: Option<Time>,
    /// Probes the next queries may leave out: one per piggybacked report that refreshed a
    /// reply (`reports_replace_probes`), at most one query's worth.
    spared_probes: u32,
    /// Set for good at the first failed query or probe. Until then no replica can be avoided
    /// (avoidance needs a failure), so ranking and the random fallback need not ask.
    failure_seen: bool,
    /// Set for good at the first failed probe: with no reply lately, probing is blind.
    probe_failed: bool,
    /// When a replica last answered a probe.
    last_reply: Option<Time>,
    /// Queries waiting for fresh replies (`wait_when_stale`), with when they began to wait.
    waiting: VecDeque<(QueryId, Time)>,
    /// Decisions for queries that waited, handed out by `poll_pick`.
    decided: VecDeque<(QueryId, Pick)>,
    /// Queries that waited for fresh replies, for the snapshot.
    waited: u64,
    /// With `own_rif_live`: the queries picked on a reply and not yet dispatched, with the
    /// replica and when its reply came, newest last (at most [`PICKS_KEPT`]), so that a pick
    /// the driver sends elsewhere gives its use back.
    picked: VecDeque<(QueryId, ReplicaId, Time)>,
    /// A weighted mean of this client's successful queries' latencies, in nanoseconds: how long
    /// a reply stays fresh for `wait_when_stale`.
    typical_latency_ns: Option<f64>,
    /// With `wait_when_stale`: the last probe id of each recent batch of probes and when it was
    /// queued (ids grow), to time the replies.
    probe_batches: VecDeque<(u64, Time)>,
    /// A weighted mean of the probes' round trips, in nanoseconds.
    typical_probe_rtt_ns: Option<f64>,
    /// The rule's facts of every reply in the pool, in pool order, for the decision under way
    /// ([`Self::decision_context`]); stale once the pool changes.
    facts: Vec<R::Facts>,
}

/// Probe batches remembered for timing replies.
const PROBE_BATCHES_KEPT: usize = 256;

/// Picks remembered until their dispatch (older ones are forgotten: their query was never
/// sent).
const PICKS_KEPT: usize = 64;

/// `wait_when_stale` waits only for a client whose typical latency is at least this many probe
/// round trips: the wait costs about one, and against a query that takes little more, waiting
/// costs more than stale replies do.
const WAIT_MIN_LATENCY_IN_PROBE_RTTS: f64 = 10.0;

/// Weight of one successful query in the client's typical latency.
const TYPICAL_LATENCY_WEIGHT: f64 = 0.05;

impl<R: Rule> AsyncProbing<R> {
    /// A policy with no replicas yet (assumes `params` passed validation).
    pub fn new(params: ProbingParams, rule: R) -> Self {
        let b = b_reuse(
            params.pool_size,
            0,
            params.probe_rate,
            params.remove_rate,
            params.delta,
        );
        Self {
            pool: Pool::new(params.pool_size as usize, params.max_age),
            probe_count: RateRounder::new(params.probe_rate),
            remove_count: RateRounder::new(params.remove_rate),
            b_reuse: b,
            budget: RandomRound::new(b),
            params,
            rule,
            replicas: Replicas::new(),
            probes: VecDeque::new(),
            next_probe_id: 0,
            remove_worst_next: false,
            next_idle_probe: None,
            spared_probes: 0,
            failure_seen: false,
            probe_failed: false,
            last_reply: None,
            waiting: VecDeque::new(),
            decided: VecDeque::new(),
            waited: 0,
            picked: VecDeque::new(),
            typical_latency_ns: None,
            probe_batches: VecDeque::new(),
            typical_probe_rtt_ns: None,
            facts: Vec::new(),
        }
    }

    /// The probe pool (for tests and inspection).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The selection rule.
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// The selection rule, mutably (tests feed it samples directly).
    #[cfg(test)]
    pub(crate) fn rule_mut(&mut self) -> &mut R {
        &mut self.rule
    }

    /// The current reuse budget before rounding.
    pub fn current_b_reuse(&self) -> f64 {
        self.b_reuse
    }

    /// Queues `count` probes to distinct replicas chosen uniformly at random.
    fn queue_probes(&mut self, count: u32, now: Time, rng: &mut dyn RngCore) {
        let n = self.replicas.len();
        let k = (count as usize).min(n);
        if k == 0 {
            return;
        }
        for_each_distinct(rng, n, k, |index| {
            self.next_probe_id += 1;
            self.probes.push_back(ProbeRequest {
                id: ProbeId(self.next_probe_id),
                replica: self.replicas.id_at(index),
                query: None,
                hint: None,
            });
        });
        if self.params.wait_when_stale {
            if self.probe_batches.len() == PROBE_BATCHES_KEPT {
                self.probe_batches.pop_front();
            }
            self.probe_batches.push_back((self.next_probe_id, now));
        }
        self.next_idle_probe = Some(now + self.params.max_idle);
    }

    /// This client's view of the replica that sent `entry`: found through the entry's slot
    /// hint, or by search if the hint is stale.
    fn load_of(&self, entry: &Entry) -> Option<&ReplicaLoad> {
        self.replicas.get_hinted(entry.replica, entry.slot)
    }

    /// Whether the replica that sent `entry` is avoided, and `score` of the reply given this
    /// client's view of that replica (a replica no longer in the set counts as avoided).
    fn assess<T>(
        &self,
        entry: &Entry,
        now: Time,
        score: impl FnOnce(&ReplicaLoad) -> T,
    ) -> (bool, T) {
        match self.load_of(entry) {
            Some(load) => (load.avoided(now, &self.params.aversion), score(load)),
            None => (true, score(&ReplicaLoad::default())),
        }
    }

    /// One reply's avoided flag and rank.
    fn rank_entry(&self, cx: &R::Context, entry: &Entry, now: Time) -> (bool, Rank) {
        self.assess(entry, now, |load| self.rule.rank(cx, entry, load))
    }

    /// One reply's place in the order the engine chooses by: replies from avoided replicas
    /// last, then by the rule's key. Orders like `rank_entry` does.
    fn sort_key(&self, cx: &R::Context, entry: &Entry, now: Time) -> (bool, R::Key) {
        self.assess(entry, now, |load| self.rule.key(cx, entry, load))
    }

    /// [`Self::sort_key`] from the reply's facts for this decision.
    fn sort_key_from(
        &self,
        cx: &R::Context,
        entry: &Entry,
        facts: &R::Facts,
        now: Time,
    ) -> (bool, R::Key) {
        self.assess(entry, now, |load| {
            self.rule.key_from(cx, entry, facts, load)
        })
    }

    /// The context of a decision on the pool as it is, with the rule's facts of every reply
    /// kept for [`Self::select`]: the pool must not change in between.
    fn decision_context(&mut self) -> R::Context {
        self.facts.clear();
        self.rule.prepare(&self.pool, &mut self.facts)
    }

    /// The index of the worst reply (the largest sort key; ties go to the oldest).
    fn worst(&self, cx: &R::Context, now: Time) -> Option<usize> {
        if self.failure_seen || R::READS_LOAD {
            return worst_by(&self.pool, |entry| self.sort_key(cx, entry, now));
        }
        // Nothing has failed, so no replica is avoided (and every reply in the pool is from a
        // replica in the set: a departure drops its replies), and the rule ignores the load:
        // the rule's key alone orders the replies.
        let unused = ReplicaLoad::default();
        worst_by(&self.pool, |entry| self.rule.key(cx, entry, &unused))
    }

    /// The best reply (the smallest sort key; ties go to the newest) and the worst (ties go to
    /// the oldest) in one pass, ranked with the facts of [`Self::decision_context`].
    fn extremes(&self, cx: &R::Context, now: Time) -> Option<Extremes<(bool, R::Key)>> {
        debug_assert_eq!(self.facts.len(), self.pool.len(), "facts of another pool");
        let replies = self.pool.iter().zip(&self.facts);
        if self.failure_seen || R::READS_LOAD {
            return extremes_by(replies, |(entry, facts)| {
                self.sort_key_from(cx, entry, facts, now)
            });
        }
        // As in `worst`: no replica is avoided, and the rule ignores the load.
        let unused = ReplicaLoad::default();
        let found = extremes_by(replies, |(entry, facts)| {
            self.rule.key_from(cx, entry, facts, &unused)
        })?;
        Some(Extremes {
            best: found.best,
            best_key: (false, found.best_key),
            worst: found.worst,
            worst_key: (false, found.worst_key),
            len: found.len,
        })
    }

    /// Every reply with its avoided flag and rank, in pool order.
    fn ranked(&self, cx: &R::Context, now: Time) -> Vec<(bool, Rank)> {
        self.pool
            .iter()
            .map(|entry| self.rank_entry(cx, entry, now))
            .collect()
    }

    /// The best reply's index (ties go to the newest), if the pool holds two or more, with
    /// what the same pass found for the removal that follows (see [`Self::remove_per_query`]).
    /// `cx` is from [`Self::decision_context`], on the pool as it is.
    fn select(&self, cx: &R::Context, now: Time) -> Option<Extremes<(bool, R::Key)>> {
        if self.pool.len() < 2 {
            return None;
        }
        let found = self.extremes(cx, now)?;
        let entry = self.pool.get(found.best)?;
        tracing::trace!(
            policy = R::NAME,
            compared = ?Candidates(self, cx, now),
            chosen = %entry.replica,
            rif = entry.rif,
            latency_us = entry.latency.as_micros() as u64,
            hot = self.rank_entry(cx, entry, now).1.hot,
            avoided = self.rank_entry(cx, entry, now).0,
            key = self.rank_entry(cx, entry, now).1.key,
            "selected from pool"
        );
        Some(found)
    }

    /// A replica for a pick the pool cannot serve (fewer than two replies).
    fn fallback(&mut self, now: Time, rng: &mut dyn RngCore) -> Option<ReplicaId> {
        if self.replicas.is_empty() {
            return None;
        }
        if self.params.fallback_by_local_rif && self.blind(now) {
            let id = less_loaded_of_two(&self.replicas, now, &self.params.aversion, rng);
            tracing::trace!(policy = R::NAME, pool = self.pool.len(), chosen = ?id, "blind fallback");
            return id;
        }
        if !self.failure_seen {
            // No replica is avoided: the same draw as `random_replica`, without its list.
            let id = self
                .replicas
                .id_at(rng.random_range(0..self.replicas.len()));
            tracing::trace!(policy = R::NAME, pool = self.pool.len(), chosen = %id, "random fallback");
            return Some(id);
        }
        let id = random_replica(&self.replicas, now, &self.params.aversion, rng);
        tracing::trace!(policy = R::NAME, pool = self.pool.len(), chosen = ?id, "random fallback");
        id
    }

    /// Uses the reply at `index` for `query`; with `own_rif_live`, remembers the use until the
    /// query is dispatched ([`Policy::on_dispatch`]).
    fn use_reply(&mut self, index: usize, query: QueryId) -> Option<ReplicaId> {
        let received = self.pool.get(index).map(|e| e.received);
        let replica = self.pool.use_entry(index)?;
        if self.params.own_rif_live
            && let Some(received) = received
        {
            if self.picked.len() == PICKS_KEPT {
                self.picked.pop_front();
            }
            self.picked.push_back((query, replica, received));
        }
        Some(replica)
    }

    /// Counts a pick of `chosen` and turns it into the policy's answer.
    fn count_pick(&mut self, chosen: Option<ReplicaId>) -> Pick {
        match chosen.and_then(|id| self.replicas.get_mut(id).map(|l| (id, l))) {
            Some((id, load)) => {
                load.picks += 1;
                Pick::Replica(id)
            }
            None => Pick::NoReplica,
        }
    }

    /// Folds the round trip of probe `id`, answered at `now`, into the typical one.
    fn time_reply(&mut self, id: ProbeId, now: Time) {
        // The first batch whose last probe is `id` or later. Replies come mostly to the
        // newest batches, so the search walks back from the newest: a step or two, in the
        // ring's last cache line, where a binary search would touch lines all over it.
        let batches = &self.probe_batches;
        let mut batch = batches.len();
        while batch > 0 && batches[batch - 1].0 >= id.0 {
            batch -= 1;
        }
        let Some(&(_, queued)) = self.probe_batches.get(batch) else {
            return;
        };
        let rtt = duration_nanos(now.saturating_since(queued)) as f64;
        self.typical_probe_rtt_ns = ewma(self.typical_probe_rtt_ns, rtt, TYPICAL_LATENCY_WEIGHT);
    }

    /// How many fresh replies a pick wants for `wait_when_stale`: two, or fewer when the pool
    /// cannot hold two (one replica, or a pool of one).
    fn fresh_wanted(&self) -> usize {
        2.min(self.replicas.len()).min(self.pool.capacity())
    }

    /// Whether the pool is stale for `wait_when_stale`: it holds fewer than two replies younger
    /// than this client's typical latency (never before the first success and the first timed
    /// reply, nor while that latency is under [`WAIT_MIN_LATENCY_IN_PROBE_RTTS`] probe round
    /// trips). A blind prober ([`Self::blind`]) does not wait: no reply would come.
    fn stale(&self, now: Time) -> bool {
        let (Some(latency), Some(rtt)) = (self.typical_latency_ns, self.typical_probe_rtt_ns)
        else {
            return false;
        };
        if rtt <= 0.0 || latency < WAIT_MIN_LATENCY_IN_PROBE_RTTS * rtt {
            return false;
        }
        let horizon = latency as u64;
        let wanted = self.fresh_wanted();
        count_newest(&self.pool, wanted, |e| {
            duration_nanos(e.age(now)) <= horizon
        }) < wanted
    }

    /// The best reply received at or after `since` (ties go to the newest).
    fn best_received_since(&self, cx: &R::Context, now: Time, since: Time) -> Option<usize> {
        let fresh = self
            .pool
            .iter()
            .enumerate()
            .filter(|(_, e)| e.received >= since);
        fresh
            .fold(None, |found: Option<(usize, _)>, (index, entry)| {
                let key = self.sort_key(cx, entry, now);
                match &found {
                    Some((_, best)) if key > *best => found,
                    _ => Some((index, key)),
                }
            })
            .map(|(index, _)| index)
    }

    /// Places the waiting queries whose replies have come (two since they began to wait, see
    /// [`Self::fresh_wanted`]) or whose wait is over (`probe_timeout`), oldest first. Where the
    /// pool can hold a reply from every replica, a query whose replies came goes among those
    /// replies alone: every balancer then holds every replica, and an out-of-date reply draws
    /// them all to the same one. Where the cluster is larger than the pool, the pool is a sample
    /// whose breadth counts, so such a query is ranked over the whole pool, the new replies
    /// with the rest; so is one whose wait ran out, as any pick.
    fn release_waiting(&mut self, now: Time, rng: &mut dyn RngCore) {
        let wanted = self.fresh_wanted();
        let covers = self.pool.capacity() >= self.replicas.len();
        while let Some(&(query, since)) = self.waiting.front() {
            let came = count_newest(&self.pool, wanted, |e| e.received >= since);
            let complete = wanted > 0 && came >= wanted;
            if !complete && now < since + self.params.probe_timeout && !self.replicas.is_empty() {
                // A later query began to wait later: it has no more replies, nor an earlier end.
                break;
            }
            self.waiting.pop_front();
            let cx = self.decision_context();
            let fresh = (complete && covers)
                .then(|| self.best_received_since(&cx, now, since))
                .flatten();
            let (chosen, selected) = match fresh {
                Some(index) => (self.use_reply(index, query), None),
                None => match self.select(&cx, now) {
                    Some(found) => (self.use_reply(found.best, query), Some(found)),
                    None => (self.fallback(now, rng), None),
                },
            };
            self.remove_per_query(&cx, now, selected);
            let pick = self.count_pick(chosen);
            tracing::trace!(
                policy = R::NAME,
                query = query.0,
                replies_came = complete,
                among_them = fresh.is_some(),
                ?pick,
                "waiting query placed"
            );
            self.decided.push_back((query, pick));
        }
    }

    /// Whether probing is blind: probes have failed and no replica has answered one within
    /// `max_age` (replicas with no sidecar, or a probe timeout shorter than the round trip).
    /// Not at start-up, before any probe has ended.
    fn blind(&self, now: Time) -> bool {
        self.probe_failed
            && self
                .last_reply
                .is_none_or(|at| now.saturating_since(at) > self.params.max_age)
    }

    /// [`Self::worst`] once the best reply `found` has been used, from what the pass that
    /// chose it found. Using a reply changes that reply alone: it is gone (spent), and every
    /// later index moves down one, or its key changed (its RIF rose by one). Every other
    /// reply's key is unchanged, and the worst of them is `found.worst` (never the best: with
    /// two or more replies, ties go to the last for the best and to the first for the worst).
    fn worst_after_use(
        &self,
        cx: &R::Context,
        now: Time,
        found: Extremes<(bool, R::Key)>,
    ) -> Option<usize> {
        debug_assert_ne!(found.best, found.worst);
        let worst = if self.pool.len() < found.len {
            found.worst - usize::from(found.worst > found.best)
        } else {
            // One reply: the full sort key (the passes skip its load lookup only while it
            // cannot matter, and then it orders the same).
            let key = self.sort_key(cx, self.pool.get(found.best)?, now);
            let used_wins =
                key > found.worst_key || (key == found.worst_key && found.best < found.worst);
            if used_wins { found.best } else { found.worst }
        };
        // Every test run in a debug build (the property tests of the HCL rule among them)
        // holds this to a pass of its own.
        debug_assert_eq!(Some(worst), self.worst(cx, now));
        Some(worst)
    }

    /// Removes `r_remove` replies for this query, alternating oldest and worst. `selected` is
    /// what the pass that chose this query's reply found, before that reply was used: it
    /// saves the first worst removal a pass of its own.
    fn remove_per_query(
        &mut self,
        cx: &R::Context,
        now: Time,
        mut selected: Option<Extremes<(bool, R::Key)>>,
    ) {
        for _ in 0..self.remove_count.next_count() {
            let index = if self.remove_worst_next {
                match selected.take() {
                    Some(found) => self.worst_after_use(cx, now, found),
                    None => self.worst(cx, now),
                }
            } else {
                selected = None;
                (!self.pool.is_empty()).then_some(0)
            };
            self.remove_worst_next = !self.remove_worst_next;
            if let Some(removed) = index.and_then(|i| self.pool.remove(i)) {
                tracing::trace!(
                    policy = R::NAME,
                    replica = %removed.replica,
                    worst = !self.remove_worst_next,
                    "removed reply"
                );
            }
        }
    }

    /// Resizes the pool for the current replica count and recomputes b_reuse with that size.
    fn recompute_b_reuse(&mut self) {
        let p = &self.params;
        let capacity = pool_capacity(p, self.replicas.len());
        self.pool.set_capacity(capacity as usize);
        self.b_reuse = b_reuse(
            capacity,
            self.replicas.len(),
            p.probe_rate,
            p.remove_rate,
            p.delta,
        );
        self.budget = RandomRound::new(self.b_reuse);
    }
}

impl<R: Rule> Policy for AsyncProbing<R> {
    fn name(&self) -> &'static str {
        R::NAME
    }

    fn on_replica_change(&mut self, change: ReplicaChange, now: Time) {
        self.pool.expire(now);
        if !self.replicas.apply(change, ReplicaLoad::default) {
            return;
        }
        if let ReplicaChange::Remove(id) = change {
            self.pool.remove_replica(id);
            self.probes.retain(|p| p.replica != id);
        }
        let replicas = &self.replicas;
        self.pool.reslot(|id| replicas.index_of(id));
        self.rule.on_replica_change(change);
        self.recompute_b_reuse();
        if self.replicas.is_empty() && !self.waiting.is_empty() {
            // No replica left to wait for: every waiting query is answered, with none.
            let waiting = std::mem::take(&mut self.waiting);
            self.decided.extend(
                waiting
                    .into_iter()
                    .map(|(query, _)| (query, Pick::NoReplica)),
            );
        }
        if self.next_idle_probe.is_none() {
            // Probe at once so the first queries find a pool.
            self.next_idle_probe = Some(now);
        }
    }

    fn pick(&mut self, query: &Query, now: Time, rng: &mut dyn RngCore) -> Pick {
        self.pool.expire(now);
        if self.replicas.is_empty() {
            return Pick::NoReplica;
        }
        // No more probes than replicas (each goes to a distinct one).
        let count = self
            .probe_count
            .next_count()
            .min(u32::try_from(self.replicas.len()).unwrap_or(u32::MAX));
        // A report that refreshed the pool told as much as a probe would have; the last probe
        // is always sent, since reports come only from replicas this client chose and the pool
        // must keep sampling the others.
        let spared = self.spared_probes.min(count.saturating_sub(1));
        self.spared_probes -= spared;
        self.queue_probes(count - spared, now, rng);
        // Using a reply changes neither the RIF history nor α, so one context serves the whole
        // decision. (With `own_queries_raise_latency` a use raises the chosen reply's ranked
        // latency, which can move the latency band's ceiling; the removal below still ranks
        // with the ceiling the pick saw.)
        if self.params.wait_when_stale && self.stale(now) && !self.blind(now) {
            self.waiting.push_back((query.id, now));
            self.waited += 1;
            return Pick::Pending;
        }
        let cx = self.decision_context();
        let selected = self.select(&cx, now);
        let chosen = match selected {
            Some(found) => self.use_reply(found.best, query.id),
            None => self.fallback(now, rng),
        };
        self.remove_per_query(&cx, now, selected);
        self.count_pick(chosen)
    }

    fn on_dispatch(&mut self, replica: ReplicaId, query: QueryId, now: Time) {
        self.pool.expire(now);
        // A query picked on a reply and sent elsewhere (the balancer passed its replica over:
        // tried already by a hedge or retry, ejected, ramping up; or the driver picked again,
        // its endpoint not ready) gives that use back.
        for at in (0..self.picked.len()).rev() {
            if self.picked[at].0 == query
                && let Some((_, picked, received)) = self.picked.remove(at)
                && picked != replica
            {
                self.pool.unuse(picked, received);
                if let Some(load) = self.replicas.get(picked) {
                    self.pool.set_own(picked, load.local_rif);
                }
            }
        }
        if let Some(load) = self.replicas.get_mut(replica) {
            load.on_dispatch();
            if self.params.own_rif_live {
                self.pool.set_own(replica, load.local_rif);
            }
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, completion: &Completion, now: Time) {
        self.pool.expire(now);
        self.failure_seen |= completion.outcome.is_failure();
        let mut own = None;
        if let Some(load) = self.replicas.get_mut(replica) {
            load.on_complete(completion.outcome, now, &self.params.aversion);
            own = Some(load.local_rif).filter(|_| self.params.own_rif_live);
        }
        self.rule.on_complete(replica, completion);
        if self.params.wait_when_stale && completion.outcome == crate::policy::Outcome::Success {
            let latency = duration_nanos(completion.latency) as f64;
            self.typical_latency_ns =
                ewma(self.typical_latency_ns, latency, TYPICAL_LATENCY_WEIGHT);
        }
        // With `own_rif_live` the RIF is set from this client's count whatever
        // `completions_lower_rif` says, but the reply still learns that one of the queries sent
        // on it has finished, for `own_queries_raise_latency`.
        let settles = self.params.completions_lower_rif || own.is_some();
        let dispatched = settles.then(|| {
            Time::from_nanos(
                now.as_nanos()
                    .saturating_sub(duration_nanos(completion.latency)),
            )
        });
        match (dispatched, own) {
            (dispatched, Some(own)) => self.pool.on_finished_with_own(replica, dispatched, own),
            (Some(dispatched), None) => self.pool.on_finished(replica, dispatched),
            (None, None) => {}
        }
    }

    fn poll_probe(&mut self, _now: Time, _rng: &mut dyn RngCore) -> Option<ProbeRequest> {
        self.probes.pop_front()
    }

    fn probe_timeout(&self) -> Option<Duration> {
        Some(self.params.probe_timeout)
    }

    fn on_probe_reply(
        &mut self,
        probe: &ProbeRequest,
        report: &LoadReport,
        now: Time,
        rng: &mut dyn RngCore,
    ) {
        self.pool.expire(now);
        let Some(slot) = self.replicas.index_of(probe.replica) else {
            tracing::trace!(policy = R::NAME, replica = %probe.replica, "reply from departed replica dropped");
            return;
        };
        self.replicas.at_mut(slot).on_probe_reply();
        self.last_reply = Some(now);
        if self.params.wait_when_stale {
            self.time_reply(probe.id, now);
        }
        self.rule.on_reply(probe.replica, report, now);
        let budget = self.budget.sample(rng).max(1);
        let own = Some(self.replicas.at(slot).local_rif).filter(|_| self.params.own_rif_live);
        self.pool
            .insert(Entry::new(probe.replica, now, report, budget, slot).with_own(own));
        if !self.waiting.is_empty() {
            self.release_waiting(now, rng);
        }
    }

    fn poll_pick(&mut self, _now: Time, _rng: &mut dyn RngCore) -> Option<(QueryId, Pick)> {
        self.decided.pop_front()
    }

    /// A reply only places queries that wait for one; with none waiting it goes into the pool
    /// and the rule, queues no probe, and leaves the timer (idle probe, end of a wait) alone.
    fn probe_reply_is_quiet(&self) -> bool {
        self.waiting.is_empty() && self.decided.is_empty() && self.probes.is_empty()
    }

    fn on_load_report(&mut self, replica: ReplicaId, report: &LoadReport, now: Time) {
        self.pool.expire(now);
        if self.replicas.contains(replica) {
            self.rule.on_load_report(replica, report, now);
            let own = self
                .replicas
                .get(replica)
                .map(|load| load.local_rif)
                .filter(|_| self.params.own_rif_live);
            if self.params.reports_refresh_pool
                && self.pool.refresh(replica, report, now, own)
                && self.params.reports_replace_probes
            {
                let most = self.params.probe_rate.ceil() as u32;
                self.spared_probes = self.spared_probes.saturating_add(1).min(most);
            }
        }
    }

    fn reads_probe_rates(&self) -> bool {
        R::READS_RATES
    }

    fn on_probe_failure(&mut self, probe: &ProbeRequest, now: Time) {
        self.pool.expire(now);
        self.failure_seen = true;
        self.probe_failed = true;
        if let Some(load) = self.replicas.get_mut(probe.replica) {
            load.on_probe_failure();
        }
        tracing::trace!(policy = R::NAME, replica = %probe.replica, "probe failed");
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.replicas.is_empty() {
            return None;
        }
        let wait_ends = self
            .waiting
            .front()
            .map(|&(_, since)| since + self.params.probe_timeout);
        match (self.next_idle_probe, wait_ends) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Time, rng: &mut dyn RngCore) {
        self.pool.expire(now);
        if !self.waiting.is_empty() {
            self.release_waiting(now, rng);
        }
        match self.next_idle_probe {
            Some(due) if now >= due && !self.replicas.is_empty() => {
                // One probe per idle period keeps about max_age / max_idle fresh replies.
                self.queue_probes(1, now, rng);
            }
            _ => {}
        }
    }

    fn snapshot(&self, now: Time) -> Snapshot {
        let cx = self.rule.context_for(&self.pool);
        let ranked = self.ranked(&cx, now);
        let pool = self
            .pool
            .iter()
            .zip(&ranked)
            .filter(|(e, _)| e.age(now) <= self.params.max_age)
            .map(|(e, (_, rank))| PoolEntryView {
                replica: e.replica,
                rif: e.rif,
                latency_us: e.latency.as_micros() as u64,
                age_us: duration_nanos(e.age(now)) / 1_000,
                uses_left: e.uses_left(),
                hot: rank.hot,
            })
            .collect();
        let replicas = self
            .replicas
            .iter()
            .map(|(id, load)| ReplicaView {
                id: Some(id),
                local_rif: load.local_rif,
                score: None,
                picks: load.picks,
                avoided: load.avoided(now, &self.params.aversion),
            })
            .collect();
        let mut values = vec![
            ("b_reuse", self.b_reuse),
            ("pool_capacity", self.pool.capacity() as f64),
        ];
        if self.params.wait_when_stale {
            values.push(("queries_waited", self.waited as f64));
        }
        values.extend(self.rule.values(&cx));
        Snapshot {
            policy: R::NAME,
            replicas,
            pool,
            values,
        }
    }
}
