//! One upstream cluster: its replicas, its policy instance, and the resilience state around it.
//!
//! A cluster is prequal-core's [`Balancer`] and the proxy's per-replica records behind one
//! `std::sync::Mutex` (`state.rs`), plus its connections: pools for requests and, in the
//! [`crate::prober`], pools for probes, one of each per data-plane worker, kept outside the lock.
//! The lock is held only for the few microseconds an event takes and never across an
//! `.await`. Every event (a pick, a completion, a probe reply, a timer) is one short critical
//! section that also drains what the policy wants done next: probes to send (handed to the
//! prober after the lock is released, so probe traffic never runs on a request's path) and
//! sync-mode decisions to hand to the requests waiting for them. Time is the nanoseconds since
//! the proxy started, as a [`Time`].
//!
//! The policy sits inside the [`Balancer`], which decides everything around it, the same lines
//! the simulator runs: outlier ejection (an ejected replica is removed from the policy and
//! inserted again when its ejection ends), slow start (a replica that joins after the cluster
//! started is passed over, with probability `1 − factor`, for another one while it ramps up),
//! exclusion of replicas a request already tried, the retry budget and `max_attempts`, and when
//! a hedge is due. The cluster adds the connections, the metrics and the logs.
//!
//! **Timer.** [`Cluster::new`] returns, beside the cluster, its timer task as
//! [`Background`] work for the server to spawn. It sleeps until the policy's `poll_timeout()`
//! (idle probing, server-report polling for weighted-round-robin and yarp-p2c, sync-mode probe
//! timeouts) or the end of an outlier ejection, whichever is first, and then calls
//! `handle_timeout`. An event whose new deadline is earlier than the one the timer sleeps until
//! wakes it early. The task holds only a weak reference, so it ends when its cluster is dropped
//! (after a reload).

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use prequal_core::{
    Balancer, Completion, HedgeDecision, LoadReport, Outcome, Pick, ProbeEnd, ProbeRequest, Query,
    QueryId, ReplicaId, RetryDecision, Time,
};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

mod state;

pub use prequal_core::Strict;

use self::state::State;
pub use self::state::{Attempt, Chosen, HedgePlan};
use crate::background::Background;
use crate::clock::Clock;
use crate::config::ClusterConfig;
use crate::connector::Connector;
use crate::metrics::{ClusterMetrics, Metrics};
use crate::prober::{self, Outbox, ProbeOwner, Prober};
use crate::tls::ClientTls;
use crate::upstream::Upstream;

/// Probe connections [`Cluster::warm_probe_connections`] opens at once.
const WARM_CONNECTS: usize = 8;

/// The shortest sleep of the timer task, so a policy that keeps asking for "now" cannot spin it.
const MIN_TIMER_STEP: Duration = Duration::from_micros(50);

/// How a try ended, as its guard reports it to [`Cluster::complete`].
#[derive(Clone, Copy, Debug)]
pub struct Ending {
    /// How it ended, as far as its guard knew: [`Outcome::Cancelled`] when it was dropped
    /// before its response ended.
    pub outcome: Outcome,
    /// It failed through the client's fault (its request body broke).
    pub client_fault: bool,
    /// Dropped because another try of its request won (`crate::try_guard::drop_losers`); a try
    /// dropped unanswered without it was dropped because its client went away.
    pub lost: bool,
}

/// One upstream cluster. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    name: String,
    config: ClusterConfig,
    clock: Clock,
    /// The balancer and what the proxy keeps per replica: the one lock an event takes.
    state: Mutex<State>,
    /// Connection pools per data-plane worker, so a worker's requests use connections its
    /// own runtime drives (no cross-thread wake-ups on the hot path).
    upstreams: Vec<Upstream>,
    /// Sends the probes, over pools of its own, kept apart from requests'.
    prober: Prober,
    /// Wakes the timer task when a deadline comes earlier than the one it sleeps until.
    timer: Arc<Notify>,
    pub(crate) metrics: ClusterMetrics,
    registry: Arc<Metrics>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Lets the timer task see that the cluster is gone and end.
        self.timer.notify_one();
    }
}

impl Cluster {
    /// Builds the cluster (the config must have been validated) with connection pools for
    /// `workers` data-plane threads, over `tls` when given (loaded from `config.tls`), with no
    /// replica yet. Returns it with its timer task, for the caller to spawn.
    pub fn new(
        name: &str,
        config: &ClusterConfig,
        tls: Option<Arc<ClientTls>>,
        clock: Clock,
        registry: &Arc<Metrics>,
        workers: usize,
    ) -> Result<(Arc<Self>, Background), prequal_core::ConfigError> {
        let policy = config.policy.build()?;
        let probe_timeout = policy.probe_timeout();
        let balancer = Balancer::new(policy, &config.balancer())
            .map_err(|e| prequal_core::ConfigError::invalid("proxy", e.component, e.to_string()))?;
        let metrics = registry.cluster(name);
        let upstreams = |opened: &prometheus_client::metrics::counter::Counter| {
            let connector = Connector::new(config.connect_timeout, tls.clone(), opened.clone());
            (0..workers.max(1))
                .map(|_| Upstream::new(config, connector.clone()))
                .collect()
        };
        let probe_upstreams = upstreams(&metrics.connections_for_probes);
        let cluster = Arc::new(Cluster {
            name: name.to_string(),
            config: config.clone(),
            clock,
            state: Mutex::new(State::new(balancer)),
            upstreams: upstreams(&metrics.connections_for_requests),
            prober: Prober::new(config, &metrics, probe_upstreams, probe_timeout),
            timer: Arc::new(Notify::new()),
            metrics,
            registry: Arc::clone(registry),
        });
        let timer = run_timer(Arc::downgrade(&cluster), Arc::clone(&cluster.timer));
        Ok((cluster, Background::one(timer)))
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The connection pools for requests made on data-plane `worker`.
    pub(crate) fn upstream(&self, worker: usize) -> &Upstream {
        &self.upstreams[worker % self.upstreams.len()]
    }

    /// The HTTP version spoken to the replicas.
    pub fn version(&self) -> http::Version {
        self.config.protocol.version()
    }

    /// The policy's clock: time since the proxy started.
    pub fn now(&self) -> Time {
        self.clock.now()
    }

    /// The instant a policy [`Time`] stands for.
    fn instant_of(&self, time: Time) -> Instant {
        self.clock.instant_of(time)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the replica set with `addrs` (discovery), as insert and remove changes.
    pub fn set_members(&self, addrs: &[String]) {
        let now = self.now();
        let left = self
            .lock()
            .set_members(addrs, &self.registry, &self.metrics, now);
        for id in left {
            for upstream in &self.upstreams {
                upstream.forget(id);
            }
            self.prober.forget(id);
        }
        self.timer.notify_one();
    }

    /// The replica addresses now known.
    pub fn member_addrs(&self) -> Vec<String> {
        self.lock().member_addrs()
    }

    /// Opens one probe connection to every replica known now from data-plane `worker` (a few
    /// at a time), for a policy that probes. Without it the first probes under load, finding
    /// no connection, each open their own: six proxies started into full load opened hundreds
    /// at once, and the probes timed out while they connected (docs/proxy.md).
    pub(crate) async fn warm_probe_connections(&self, worker: usize) {
        if !self.prober.sends_probes() {
            return;
        }
        let targets = self.lock().member_targets();
        let upstream = self.prober.upstream(worker);
        futures_util::stream::iter(targets)
            .for_each_concurrent(WARM_CONNECTS, |(replica, authority)| async move {
                if let Err(error) = upstream.prewarm(replica, &authority).await {
                    tracing::debug!(cluster = %self.name, replica = %authority, %error,
                        "cannot open a probe connection ahead");
                }
            })
            .await;
    }

    /// Chooses a replica for one try and tells the policy it is dispatched, in one critical
    /// section (two for a sync-mode policy, which decides once its probes answered); the
    /// probes the policy asks for go from data-plane `worker`. The first try of a request
    /// that may be hedged gets its hedge plan in the same step.
    pub async fn pick(self: &Arc<Self>, worker: usize, attempt: Attempt<'_>) -> Option<Chosen> {
        let (decided, waiter, outbox) = {
            let now = self.now();
            let mut guard = self.lock();
            let core = &mut *guard;
            let query = core.next_query();
            if attempt.first {
                core.balancer.on_request(now);
            }
            let pick = core.balancer.pick(
                &Query {
                    id: query,
                    hint: None,
                },
                now,
                &mut core.rng,
            );
            let mut waiter = None;
            let mut decided = None;
            if pick == Pick::Pending {
                let (tx, rx) = oneshot::channel();
                core.waiting.insert(query, tx);
                waiter = Some((query, rx));
            } else {
                decided = Some(self.dispatch(core, pick, query, &attempt, now));
            }
            let outbox = core.drain(now);
            let rearm = core.rearm();
            drop(guard);
            if rearm {
                self.timer.notify_one();
            }
            (decided, waiter, outbox)
        };
        prober::send(self, outbox, worker);
        if let Some(decided) = decided {
            return decided;
        }
        let (query, rx) = waiter?;
        let pick = self.wait_pending(query, rx).await;
        let now = self.now();
        self.dispatch(&mut self.lock(), pick, query, &attempt, now)
    }

    /// Turns `pick` into a dispatched try and, if `attempt` asks, plans its request's hedge.
    fn dispatch(
        &self,
        core: &mut State,
        pick: Pick,
        query: QueryId,
        attempt: &Attempt<'_>,
        now: Time,
    ) -> Option<Chosen> {
        let mut chosen = core.commit(pick, query, (attempt.exclude, attempt.strict), now)?;
        if attempt.plan_hedge && self.config.hedge.enabled {
            // None without a second usable replica: a hedge must go to another one.
            chosen.hedge = core.balancer.hedge_plan(now).map(|due| HedgePlan {
                started: now,
                due: self.instant_of(due),
            });
        }
        Some(chosen)
    }

    /// Waits for a sync-mode decision, for a few probe timeouts at most.
    async fn wait_pending(&self, query: QueryId, rx: oneshot::Receiver<Pick>) -> Pick {
        let limit = self.prober.timeout() * 4 + Duration::from_millis(10);
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(pick)) => pick,
            _ => {
                // The policy never decided (or dropped it): fall back to any usable replica.
                self.lock().waiting.remove(&query);
                Pick::NoReplica
            }
        }
    }

    /// Whether some usable replica is not in `tried`: where a hedge or a retry beside other
    /// tries could go.
    pub fn has_untried(&self, tried: &[ReplicaId]) -> bool {
        self.lock().balancer.has_untried(tried)
    }

    /// Admits one more try of a request that made `attempts` tries, all failed: within
    /// `max_attempts`, against the retry budget.
    pub fn try_retry(&self, attempts: u32) -> bool {
        let now = self.now();
        let decision = self.lock().balancer.try_retry(attempts, now);
        match decision {
            RetryDecision::Retry => self.metrics.retries.inc(),
            RetryDecision::OverBudget => self.metrics.retries_refused.inc(),
            RetryDecision::NoAttemptsLeft => return false,
        };
        decision.is_retry()
    }

    /// Asks, at its due time, whether the request that started at `started` and has sent
    /// `hedges_sent` hedges sends one now (the hedge budget is charged), later, or never. Never
    /// when every usable replica is in `tried`: a hedge goes only to a replica the request has
    /// not tried, and one with nowhere to go is neither charged nor counted.
    pub fn poll_hedge(
        &self,
        started: Time,
        hedges_sent: u32,
        tried: &[ReplicaId],
    ) -> Option<Result<(), Instant>> {
        let now = self.now();
        let decision = self
            .lock()
            .balancer
            .poll_hedge(started, hedges_sent, tried, now)?;
        match decision {
            HedgeDecision::Now => {
                self.metrics.hedges.inc();
                Some(Ok(()))
            }
            HedgeDecision::At(at) => Some(Err(self.instant_of(at))),
            HedgeDecision::Never => {
                if hedges_sent < self.config.hedge.max_hedges {
                    self.metrics.hedges_refused.inc();
                }
                None
            }
        }
    }

    /// How long after its head a body read whole may take before the request's hedge goes
    /// (if one is still due): the p99 of the recent bodies that did not come with their head
    /// (see [`Cluster::record_body_wait`]), or, until 20 are known, the hedge delay.
    pub fn body_allowance(&self) -> Duration {
        let state = self.lock();
        match state.body_waits.len() {
            0..20 => state
                .balancer
                .hedger()
                .delay()
                .unwrap_or_else(|| self.config.hedge.earliest_delay()),
            _ => state.body_waits.quantile(0.99).unwrap_or_default(),
        }
    }

    /// A body read whole came `wait` after its head, where it had not come with it.
    pub fn record_body_wait(&self, wait: Duration) {
        self.lock().body_waits.record(wait);
    }

    /// A try finished after `latency` (`answered`: the time to its response head, or to the
    /// end of a response read whole, if it came; `head`: the time to its head): feeds the
    /// policy (error aversion sees 5xx and timeouts as failures) and outlier ejection, which
    /// may take the replica out of the policy. A try cancelled before it answered because
    /// another try of its request answered first (`ending.lost`) counts as a timeout once it
    /// has outlived the hedge delay and twice the replica's usual successful try (see
    /// prequal-core's `Balancer::loser_outcome`), the delay being the learned p95 of the time
    /// to a successful response head (as in the simulator, see prequal-core's
    /// `Hedger::loser_outcome`; learned whether or not hedging is on). One whose client left
    /// counts the same way only if the replica showed no sign of life since it was sent (no
    /// other try ended successfully, no probe answered, no load report; see
    /// `Balancer::abandoned_outcome`): a live replica is not blamed for a slow request its
    /// client gave up on. One abandoned sooner, or while its body streamed, counts
    /// for nothing but the policy's in-flight count, and so does one that failed through the
    /// client's fault (`client_fault`: its request body broke), however long it ran. The probes
    /// the policy then asks for go from data-plane `worker`.
    pub fn complete(
        self: &Arc<Self>,
        replica: ReplicaId,
        query: QueryId,
        (latency, answered, head): (Duration, Option<Duration>, Option<Duration>),
        ending: Ending,
        report: Option<LoadReport>,
        worker: usize,
    ) {
        let now = self.now();
        let mut guard = self.lock();
        let core = &mut *guard;
        let outcome = ending.outcome;
        core.count_try(replica, outcome);
        let outcome = match (outcome, answered) {
            // Abandoned before the replica answered: a timeout once it outlived the delay (and
            // twice the replica's usual time), and, when its client left, if the replica showed
            // no sign of life since.
            (Outcome::Cancelled, None) if !ending.client_fault => match ending.lost {
                true => core.balancer.loser_outcome(replica, latency),
                false => core.balancer.abandoned_outcome(replica, latency, now),
            },
            // The hedger learns the time to the response head, what a hedge races (a body
            // that is late after its head re-times the hedge, see `body_allowance`).
            (Outcome::Success, Some(answered)) => {
                core.balancer
                    .hedger_mut()
                    .on_response(head.unwrap_or(answered), false);
                outcome
            }
            (other, _) => other,
        };
        let completion = Completion {
            query,
            latency,
            outcome,
        };
        let ejection = core
            .balancer
            .on_complete(replica, &completion, report.as_ref(), now);
        if outcome != Outcome::Cancelled {
            core.note_result(replica, outcome, ejection, &self.metrics);
        }
        self.after_event(guard, now, worker);
    }

    /// Ends an event: drains the policy's outputs, rearms the timer, releases the lock and
    /// sends the probes asked for from `worker`.
    fn after_event(self: &Arc<Self>, mut guard: MutexGuard<'_, State>, now: Time, worker: usize) {
        let outbox = guard.drain(now);
        let rearm = guard.rearm();
        drop(guard);
        if rearm {
            self.timer.notify_one();
        }
        prober::send(self, outbox, worker);
    }

    /// The timer task's step: fires the policy's timer if due, ends ejections whose time is up,
    /// and returns the probes to send and the next deadline.
    fn tick(&self) -> (Outbox, Option<Instant>) {
        let now = self.now();
        let mut guard = self.lock();
        let core = &mut *guard;
        let back = core.balancer.handle_timeout(now, &mut core.rng);
        core.note_restored(&back, &self.metrics);
        let outbox = core.drain(now);
        let next = core.next_deadline();
        core.armed = next;
        let floor = Instant::now() + MIN_TIMER_STEP;
        (outbox, next.map(|t| self.instant_of(t).max(floor)))
    }

    /// A JSON view for the admin listener: replicas (with their tries by outcome), the policy's
    /// snapshot (probe pool with hot/cold, scores, pick counts), outlier state, the retry
    /// budget, and the counts of requests, retries and hedges.
    pub fn view(&self) -> serde_json::Value {
        let now = self.now();
        self.lock().view(now, &self.metrics)
    }

    /// Whether any replica can take traffic.
    pub fn is_ready(&self) -> bool {
        self.lock().balancer.usable_count() > 0
    }
}

impl ProbeOwner for Cluster {
    fn prober(&self) -> &Prober {
        &self.prober
    }

    fn probe_result(&self, probe: &ProbeRequest, end: ProbeEnd<'_>) -> Outbox {
        let now = self.now();
        let mut guard = self.lock();
        let core = &mut *guard;
        let counter = match end {
            ProbeEnd::Reply(_) => Some(&self.metrics.probes_ok),
            ProbeEnd::Failed => Some(&self.metrics.probes_failed),
            // Counted by the prober, as skipped or dropped.
            ProbeEnd::NotSent => None,
        };
        if let Some(counter) = counter {
            counter.inc();
        }
        core.balancer.on_probe_end(probe, end, now, &mut core.rng);
        let outbox = core.drain(now);
        if core.rearm() {
            self.timer.notify_one();
        }
        outbox
    }
}

/// The cluster's timer task (see the module docs). It runs where the server spawns it, on the
/// thread that accepts: data-plane worker 0, whose probe connections its probes use.
async fn run_timer(weak: Weak<Cluster>, wake: Arc<Notify>) {
    loop {
        let deadline = {
            let Some(cluster) = weak.upgrade() else {
                return;
            };
            let (outbox, deadline) = cluster.tick();
            prober::send(&cluster, outbox, 0);
            deadline
        };
        match deadline {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
