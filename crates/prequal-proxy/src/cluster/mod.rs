//! One upstream cluster: its replicas, its policy instance, and the resilience state around it.
//!
//! The policy from prequal-core lives in the cluster state behind a `std::sync::Mutex` held only
//! for the few microseconds an event takes and never across an `.await`. Every event (a pick, a
//! completion, a probe reply, a timer) is one short critical section that also drains what the
//! policy wants done next: probes to send (handed to [`crate::prober`] after the lock is
//! released, so probe traffic never runs on a request's path) and sync-mode decisions to hand to
//! the requests waiting for them. Time is the nanoseconds since the proxy started, as a
//! [`Time`].
//!
//! The policy sits inside prequal-core's [`Balancer`], which decides everything around it, the
//! same lines the simulator runs: outlier ejection (an ejected replica is removed from the policy
//! and inserted again when its ejection ends), slow start (a replica that joins after the
//! cluster started is passed over, with probability `1 − factor`, for another one while it
//! ramps up), exclusion of replicas a request already tried, the retry budget and
//! `max_attempts`, and when a hedge is due. The cluster adds the connections, the metrics and
//! the logs.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::uri::Authority;
use prequal_core::{
    Balancer, Completion, HedgeDecision, LoadReport, Outcome, Pick, ProbeRequest, Query, QueryId,
    ReplicaId, RetryDecision, Time,
};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::{Notify, Semaphore, oneshot};

mod state;

pub use prequal_core::Strict;

use self::state::{Core, Member, random_seed};
use crate::config::{ClusterConfig, UpstreamProtocol};
use crate::connector::Connector;
use crate::metrics::{ClusterMetrics, Metrics};
use crate::tls::ClientTls;
use crate::upstream::Upstream;

/// Probe timeout for policies that do not name one (they never probe, so it is only a bound).
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(100);

/// `d` rounded to whole milliseconds, for people to read.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The shortest sleep of the timer task, so a policy that keeps asking for "now" cannot spin it.
const MIN_TIMER_STEP: Duration = Duration::from_micros(50);

/// A probe to send, with where it goes (`None` if the replica left meanwhile).
pub(crate) type Outbox = Vec<(ProbeRequest, Option<ProbeTarget>)>;

/// The replica a probe goes to: its address and its count of probes outstanding.
#[derive(Debug, Clone)]
pub(crate) struct ProbeTarget {
    pub(crate) authority: Authority,
    /// Probes sent to the replica that have not finished yet, late ones included.
    pub(crate) outstanding: Arc<AtomicUsize>,
}

/// The replica a try goes to.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The replica.
    pub replica: ReplicaId,
    /// Its `host:port`.
    pub authority: Authority,
    /// The policy's id for this try.
    pub query: QueryId,
}

/// One upstream cluster. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    name: String,
    config: ClusterConfig,
    epoch: Instant,
    core: Mutex<Core>,
    /// Connection pools per data-plane worker, so a worker's requests use connections its
    /// own runtime drives (no cross-thread wake-ups on the hot path).
    upstreams: Vec<Upstream>,
    /// The same for probes, whose pools are kept apart from requests'.
    probe_upstreams: Vec<Upstream>,
    pub(crate) probe_timeout: Duration,
    pub(crate) probe_slots: Arc<Semaphore>,
    pub(crate) wake: Arc<Notify>,
    pub(crate) metrics: ClusterMetrics,
    registry: Arc<Metrics>,
    next_query: AtomicU64,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Lets the timer task see that the cluster is gone and end.
        self.wake.notify_one();
    }
}

impl Cluster {
    /// Builds the cluster (the config must have been validated) with connection pools for
    /// `workers` data-plane threads, over `tls` when given (loaded from `config.tls`), and
    /// starts its timer task.
    pub fn start(
        name: &str,
        config: &ClusterConfig,
        tls: Option<Arc<ClientTls>>,
        epoch: Instant,
        registry: &Arc<Metrics>,
        workers: usize,
    ) -> Result<Arc<Self>, prequal_core::ConfigError> {
        let policy = config.policy.build()?;
        let probe_timeout = policy.probe_timeout().unwrap_or(DEFAULT_PROBE_TIMEOUT);
        let balancer = Balancer::new(policy, &config.balancer())
            .map_err(|e| prequal_core::ConfigError::invalid("proxy", e.component, e.to_string()))?;
        let core = Core {
            balancer,
            rng: SmallRng::seed_from_u64(random_seed()),
            members: BTreeMap::new(),
            by_addr: HashMap::new(),
            next_id: 0,
            waiting: HashMap::new(),
            armed: None,
        };
        let metrics = registry.cluster(name);
        let upstreams = |opened: &prometheus_client::metrics::counter::Counter| {
            let connector = Connector::new(config.connect_timeout, tls.clone(), opened.clone());
            (0..workers.max(1))
                .map(|_| Upstream::new(config, connector.clone()))
                .collect()
        };
        let cluster = Arc::new(Cluster {
            name: name.to_string(),
            config: config.clone(),
            epoch,
            core: Mutex::new(core),
            upstreams: upstreams(&metrics.connections_for_requests),
            probe_upstreams: upstreams(&metrics.connections_for_probes),
            probe_timeout,
            probe_slots: Arc::new(Semaphore::new(config.max_probes_in_flight)),
            wake: Arc::new(Notify::new()),
            metrics,
            registry: Arc::clone(registry),
            next_query: AtomicU64::new(1),
        });
        crate::prober::spawn_timer(&cluster);
        Ok(cluster)
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

    /// The connection pools for probes sent from data-plane `worker`.
    pub(crate) fn probe_upstream(&self, worker: usize) -> &Upstream {
        &self.probe_upstreams[worker % self.probe_upstreams.len()]
    }

    /// The HTTP version spoken to the replicas.
    pub fn version(&self) -> http::Version {
        match self.config.protocol {
            UpstreamProtocol::Http1 => http::Version::HTTP_11,
            UpstreamProtocol::Http2 => http::Version::HTTP_2,
        }
    }

    /// The policy's clock: time since the proxy started.
    pub fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The instant a policy [`Time`] stands for.
    pub(crate) fn instant_of(&self, time: Time) -> Instant {
        self.epoch + Duration::from_nanos(time.as_nanos())
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves plain data behind; keep serving with it.
        self.core
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the replica set with `addrs` (discovery), as insert and remove changes.
    pub fn set_members(&self, addrs: &[String]) {
        let now = self.now();
        let mut guard = self.lock();
        let core = &mut *guard;
        let gone: Vec<String> = core
            .by_addr
            .keys()
            .filter(|a| !addrs.contains(a))
            .cloned()
            .collect();
        for addr in gone {
            if let Some(id) = core.by_addr.remove(&addr) {
                core.members.remove(&id);
                for upstream in self.upstreams.iter().chain(&self.probe_upstreams) {
                    upstream.forget(id);
                }
            }
        }
        // The replicas staying, then the new ones in the order given.
        let mut ids: Vec<ReplicaId> = Vec::with_capacity(addrs.len());
        for addr in addrs {
            if let Some(&id) = core.by_addr.get(addr) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
                continue;
            }
            let Ok(authority) = addr.parse::<Authority>() else {
                tracing::warn!(cluster = %self.name, %addr, "ignoring replica address that is not host:port");
                continue;
            };
            let id = ReplicaId(core.next_id);
            core.next_id += 1;
            let metrics = self.registry.replica(&self.name, addr);
            let member = Member {
                authority,
                metrics,
                probes_outstanding: Arc::default(),
                failing: false,
            };
            core.members.insert(id, member);
            core.by_addr.insert(addr.clone(), id);
            ids.push(id);
        }
        // The first set is the starting one; replicas added later ramp up through slow start.
        core.balancer.set_replicas(&ids, now);
        self.metrics.replicas.set(core.members.len() as i64);
        self.metrics.ejected.set(core.ejected_count());
        drop(guard);
        self.wake.notify_one();
    }

    /// The replica addresses now known.
    pub fn member_addrs(&self) -> Vec<String> {
        self.lock().by_addr.keys().cloned().collect()
    }

    /// Chooses a replica for one try and tells the policy it is dispatched; the probes the
    /// policy asks for go from data-plane `worker`. `first` marks a request's first try (it
    /// earns retry budget); `exclude` lists replicas already tried, which `strict` says whether
    /// to fall back to when no other is left.
    pub async fn pick(
        self: &Arc<Self>,
        worker: usize,
        first: bool,
        exclude: &[ReplicaId],
        strict: Strict,
    ) -> Option<Chosen> {
        let query = QueryId(self.next_query.fetch_add(1, Ordering::Relaxed));
        let (decided, waiter, outbox) = {
            let now = self.now();
            let mut guard = self.lock();
            let core = &mut *guard;
            if first {
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
                waiter = Some(rx);
            } else {
                decided = Some(core.commit(pick, query, (exclude, strict), now));
            }
            let outbox = core.drain(now);
            let rearm = core.rearm();
            drop(guard);
            if rearm {
                self.wake.notify_one();
            }
            (decided, waiter, outbox)
        };
        self.send_probes(outbox, worker);
        if let Some(decided) = decided {
            return decided;
        }
        let pick = match waiter {
            Some(rx) => self.wait_pending(query, rx).await,
            None => Pick::NoReplica,
        };
        let now = self.now();
        self.lock().commit(pick, query, (exclude, strict), now)
    }

    /// Waits for a sync-mode decision, for a few probe timeouts at most.
    async fn wait_pending(&self, query: QueryId, rx: oneshot::Receiver<Pick>) -> Pick {
        let limit = self.probe_timeout * 4 + Duration::from_millis(10);
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

    /// A request that may be hedged starts now: counts it for the hedge budget; returns its
    /// start and when its hedge is due (`None`: hedging is off, the cluster has no second
    /// usable replica, or too few tries have succeeded yet to know what is slow).
    pub fn hedge_plan(&self) -> Option<(Time, Instant)> {
        if !self.config.hedge.enabled {
            return None;
        }
        let now = self.now();
        // None without a second usable replica: a hedge must go to another one.
        let due = self.lock().balancer.hedge_plan(now)?;
        Some((now, self.instant_of(due)))
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

    /// A try finished after `latency` (`answered`: the time to its response head, if it came):
    /// feeds the policy (error aversion sees 5xx and timeouts as failures) and outlier
    /// ejection, which may take the replica out of the policy. A try cancelled before its
    /// response head (the client left, or another try answered first) counts as a timeout once
    /// it has outlived the hedge delay and twice the replica's usual successful try (see
    /// prequal-core's `Balancer::loser_outcome`), the delay being the learned p95 of the time to a successful response
    /// head (as in the simulator, see prequal-core's `Hedger::loser_outcome`; learned whether
    /// or not hedging is on); one abandoned sooner, or while its body streamed, counts for
    /// nothing but the policy's in-flight count. The probes the policy then asks for go from
    /// data-plane `worker`.
    pub fn complete(
        self: &Arc<Self>,
        replica: ReplicaId,
        query: QueryId,
        (latency, answered): (Duration, Option<Duration>),
        outcome: Outcome,
        report: Option<LoadReport>,
        worker: usize,
    ) {
        let now = self.now();
        let mut guard = self.lock();
        let core = &mut *guard;
        if let Some(member) = core.members.get(&replica) {
            member.metrics.tried(outcome);
        }
        let outcome = match (outcome, answered) {
            // Abandoned before the replica answered: a timeout once it outlived the delay (and
            // twice the replica's usual time).
            (Outcome::Cancelled, None) => core.balancer.loser_outcome(replica, latency),
            // The hedger learns the time to the response head, what a hedge races.
            (Outcome::Success, Some(head)) => {
                core.balancer.hedger_mut().on_response(head, false);
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
    fn after_event(self: &Arc<Self>, mut guard: MutexGuard<'_, Core>, now: Time, worker: usize) {
        let outbox = guard.drain(now);
        let rearm = guard.rearm();
        drop(guard);
        if rearm {
            self.wake.notify_one();
        }
        self.send_probes(outbox, worker);
    }

    /// A probe ended: `Some(report)` if answered, `None` if it failed.
    pub(crate) fn probe_result(&self, probe: &ProbeRequest, report: Option<&LoadReport>) -> Outbox {
        let now = self.now();
        let mut guard = self.lock();
        let core = &mut *guard;
        match report {
            Some(report) => {
                self.metrics.probes_ok.inc();
                core.balancer
                    .on_probe_reply(probe, report, now, &mut core.rng);
            }
            None => {
                self.metrics.probes_failed.inc();
                core.balancer.on_probe_failure(probe, now);
            }
        }
        let outbox = core.drain(now);
        if core.rearm() {
            self.wake.notify_one();
        }
        outbox
    }

    /// The timer task's step: fires the policy's timer if due, ends ejections whose time is up,
    /// and returns the probes to send and the next deadline.
    pub(crate) fn tick(&self) -> (Outbox, Option<Instant>) {
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
        let core = self.lock();
        let replicas: Vec<serde_json::Value> = core
            .members
            .iter()
            .map(|(id, m)| {
                serde_json::json!({
                    "id": id,
                    "address": m.authority.as_str(),
                    "ejected": core.balancer.is_ejected(*id),
                    "ramping": core.balancer.is_ramping(*id, now),
                    "tries": m.metrics.counts(),
                })
            })
            .collect();
        // Ejections as an operator reads them: the replica's address, how long is left, and
        // when that is on the wall clock.
        let wall_now = std::time::SystemTime::now();
        let outlier = core.balancer.outlier().map(|o| {
            o.views(now)
                .into_iter()
                .map(|v| {
                    let left = v.ejected_until.map(|t| t.saturating_since(now));
                    serde_json::json!({
                        "replica": v.replica,
                        "address": core.members.get(&v.replica).map(|m| m.authority.as_str()),
                        "consecutive_failures": v.consecutive_failures,
                        "ejections": v.ejections,
                        "ejected_for": left.map(|d| humantime::format_duration(round_ms(d)).to_string()),
                        "ejected_until": left.map(|d| humantime::format_rfc3339_millis(wall_now + d).to_string()),
                    })
                })
                .collect::<Vec<_>>()
        });
        serde_json::json!({
            "name": self.name,
            "policy": core.balancer.policy().name(),
            "replicas": replicas,
            "snapshot": core.balancer.snapshot(now),
            "outlier": outlier,
            "retry_budget_available": core.balancer.retry_budget().available(now),
            "waiting_for_decision": core.waiting.len(),
            "requests": self.metrics.requests.get(),
            "retries": self.metrics.retries.get(),
            "hedges": {
                "delay_us": core.balancer.hedger().delay().map(|d| d.as_micros() as u64),
                "sent": self.metrics.hedges.get(),
                "won": self.metrics.hedges_won.get(),
                "refused": self.metrics.hedges_refused.get(),
            },
        })
    }

    /// Whether any replica can take traffic.
    pub fn is_ready(&self) -> bool {
        self.lock().balancer.usable_count() > 0
    }
}
