//! The state behind a cluster's lock and the events on it: the core's [`Balancer`] (the policy
//! with outlier ejection, slow start, retry exclusion, the retry budget and hedging around it),
//! what the proxy keeps per replica beside it (address, metrics, probes outstanding), and the
//! sync-mode requests waiting for a decision. Turning the balancer's decisions into dispatched
//! tries, draining its outputs, its timer deadline, membership changes, the logs and metrics
//! of ejections, and the admin view.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use http::uri::Authority;
use prequal_core::outlier::Ejection;
use prequal_core::{Balancer, LatencyQuantile, Outcome, Pick, QueryId, ReplicaId, Strict, Time};
use prequal_http::ProbeHealth;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::metrics::{ClusterMetrics, Metrics, ReplicaMetrics};
use crate::prober::{Outbox, ProbeTarget};

/// What a pick is for: which try of its request, and where it may not go.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The request's first try, which earns retry budget.
    pub first: bool,
    /// Plan the request's hedge in the same step (asked on the first try of a request that
    /// may be hedged): the hedge clock starts once the first try is on its way.
    pub plan_hedge: bool,
    /// Replicas the request already tried, used only when no other is left.
    pub exclude: &'a [ReplicaId],
    /// Whether even that fallback is refused (a hedge, or a retry beside running tries).
    pub strict: Strict,
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
    /// When its request's hedge is due, if the pick was asked to plan one and there is one
    /// (hedging on, a second usable replica, enough tries seen to know what is slow).
    pub hedge: Option<HedgePlan>,
}

/// A request's hedge plan: when its first try started (policy time) and when its first hedge
/// is due.
#[derive(Debug, Clone, Copy)]
pub struct HedgePlan {
    /// The first try's start, to ask about the hedge with.
    pub started: Time,
    /// When to ask.
    pub due: Instant,
}

/// A replica as the driver knows it (the balancer keeps its standing: ejected, ramping up).
#[derive(Debug)]
struct Member {
    authority: Authority,
    metrics: ReplicaMetrics,
    /// Probes to it not finished yet (see [`ProbeTarget`]).
    probes_outstanding: Arc<AtomicUsize>,
    /// Whether it refuses probes, or answers them only after the timeout.
    probe_health: Arc<ProbeHealth>,
    /// Its last try that ended either way failed (for logging the start and end of failures).
    failing: bool,
}

/// Everything behind the cluster's lock.
#[derive(Debug)]
pub(super) struct State {
    pub(super) balancer: Balancer,
    pub(super) rng: SmallRng,
    members: BTreeMap<ReplicaId, Member>,
    by_addr: HashMap<String, ReplicaId>,
    next_id: u32,
    pub(super) waiting: HashMap<QueryId, oneshot::Sender<Pick>>,
    /// The deadline the timer task sleeps until.
    pub(super) armed: Option<Time>,
    /// The id of the next query the policy is asked to place.
    next_query: u64,
    /// How long the last bodies read whole waited after their heads, among those that did not
    /// come with them (see `Cluster::body_allowance`).
    pub(super) body_waits: LatencyQuantile,
}

impl State {
    /// A cluster with no replica yet, around `balancer`.
    pub(super) fn new(balancer: Balancer) -> Self {
        State {
            balancer,
            rng: SmallRng::seed_from_u64(random_seed()),
            members: BTreeMap::new(),
            by_addr: HashMap::new(),
            next_id: 0,
            waiting: HashMap::new(),
            armed: None,
            next_query: 1,
            body_waits: LatencyQuantile::new(1000),
        }
    }

    /// A new query id.
    pub(super) fn next_query(&mut self) -> QueryId {
        let id = QueryId(self.next_query);
        self.next_query += 1;
        id
    }

    /// Replaces the replica set with `addrs` as insert and remove changes (replicas staying
    /// keep their ids; new ones get replica metrics from `registry`); returns the replicas
    /// that left, whose connections the caller closes.
    pub(super) fn set_members(
        &mut self,
        addrs: &[String],
        registry: &Metrics,
        m: &ClusterMetrics,
        now: Time,
    ) -> Vec<ReplicaId> {
        let gone: Vec<String> = self
            .by_addr
            .keys()
            .filter(|a| !addrs.contains(a))
            .cloned()
            .collect();
        let mut left = Vec::with_capacity(gone.len());
        for addr in gone {
            if let Some(id) = self.by_addr.remove(&addr) {
                self.members.remove(&id);
                left.push(id);
            }
        }
        // The replicas staying, then the new ones in the order given.
        let mut ids: Vec<ReplicaId> = Vec::with_capacity(addrs.len());
        for addr in addrs {
            if let Some(&id) = self.by_addr.get(addr) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
                continue;
            }
            let Ok(authority) = addr.parse::<Authority>() else {
                tracing::warn!(cluster = %m.name, %addr, "ignoring replica address that is not host:port");
                continue;
            };
            let id = ReplicaId(self.next_id);
            self.next_id += 1;
            let member = Member {
                authority,
                metrics: registry.replica(&m.name, addr),
                probes_outstanding: Arc::default(),
                probe_health: Arc::default(),
                failing: false,
            };
            self.members.insert(id, member);
            self.by_addr.insert(addr.clone(), id);
            ids.push(id);
        }
        // The first set is the starting one; replicas added later ramp up through slow start.
        self.balancer.set_replicas(&ids, now);
        m.replicas.set(self.members.len() as i64);
        m.ejected.set(self.ejected_count());
        left
    }

    /// The replica addresses now known.
    pub(super) fn member_targets(&self) -> Vec<(ReplicaId, Authority)> {
        self.members
            .iter()
            .map(|(&id, member)| (id, member.authority.clone()))
            .collect()
    }

    pub(super) fn member_addrs(&self) -> Vec<String> {
        self.by_addr.keys().cloned().collect()
    }

    /// Turns a policy decision into a dispatched try: the balancer applies ejection, exclusion
    /// of the replicas in `exclude` (used only when no other is left, and never for a `Strict`
    /// pick) and slow start.
    pub(super) fn commit(
        &mut self,
        pick: Pick,
        query: QueryId,
        exclude: (&[ReplicaId], Strict),
        now: Time,
    ) -> Option<Chosen> {
        let replica = self
            .balancer
            .dispatch(pick, query, exclude, now, &mut self.rng)?;
        let authority = self.members.get(&replica)?.authority.clone();
        Some(Chosen {
            replica,
            authority,
            query,
            hedge: None,
        })
    }

    /// Counts a try's result in its replica's metrics.
    pub(super) fn count_try(&self, replica: ReplicaId, outcome: Outcome) {
        if let Some(member) = self.members.get(&replica) {
            member.metrics.tried(outcome);
        }
    }

    /// Drains the policy's outputs: sync-mode decisions go to their waiting requests, probes are
    /// returned for sending once the lock is released.
    pub(super) fn drain(&mut self, now: Time) -> Outbox {
        while let Some((query, pick)) = self.balancer.poll_pick(now, &mut self.rng) {
            if let Some(tx) = self.waiting.remove(&query) {
                // A request that gave up waiting has dropped its receiver; nothing to do.
                let _ = tx.send(pick);
            }
        }
        let mut outbox = Vec::new();
        while let Some(probe) = self.balancer.poll_probe(now, &mut self.rng) {
            let target = self.members.get(&probe.replica).map(|m| ProbeTarget {
                authority: m.authority.clone(),
                outstanding: Arc::clone(&m.probes_outstanding),
                health: Arc::clone(&m.probe_health),
            });
            outbox.push((probe, target));
        }
        outbox
    }

    /// The earliest time the timer task must act: the policy's timer or an ejection's end.
    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.balancer.poll_timeout()
    }

    /// True (and the new deadline recorded) when the timer task must wake earlier than planned.
    pub(super) fn rearm(&mut self) -> bool {
        let next = self.next_deadline();
        match (next, self.armed) {
            (Some(n), Some(a)) if n >= a => false,
            (None, _) => false,
            (Some(n), _) => {
                self.armed = Some(n);
                true
            }
        }
    }

    /// Logs and counts what a try's result did: when a replica starts and stops failing, and
    /// why and for how long the balancer ejected it, if it did.
    pub(super) fn note_result(
        &mut self,
        replica: ReplicaId,
        outcome: Outcome,
        ejection: Option<Ejection>,
        m: &ClusterMetrics,
    ) {
        let Some(member) = self.members.get_mut(&replica) else {
            return;
        };
        // Failures are logged when they start and end, not one line per failed try.
        if outcome.is_failure() && !member.failing {
            tracing::info!(cluster = %m.name, replica = %member.authority, ?outcome, "replica failing");
        } else if outcome == Outcome::Success && member.failing {
            tracing::info!(cluster = %m.name, replica = %member.authority, "replica answering again");
        }
        member.failing = outcome.is_failure() || (member.failing && outcome != Outcome::Success);
        let Some(ejection) = ejection else {
            return;
        };
        member.metrics.ejections.inc();
        tracing::warn!(
            cluster = %m.name,
            replica = %member.authority,
            reason = %ejection.reason,
            duration = %humantime::format_duration(ejection.duration),
            ejection = ejection.number,
            "replica ejected"
        );
        m.ejected.set(self.ejected_count());
    }

    fn ejected_count(&self) -> i64 {
        self.balancer.ejected_count() as i64
    }

    /// Logs the replicas the balancer put back into the policy as their ejections ended.
    pub(super) fn note_restored(&self, back: &[ReplicaId], m: &ClusterMetrics) {
        for id in back {
            if let Some(member) = self.members.get(id) {
                tracing::info!(cluster = %m.name, replica = %member.authority, "replica back from ejection");
            }
        }
        if !back.is_empty() {
            m.ejected.set(self.ejected_count());
        }
    }

    /// The admin listener's JSON view of the cluster (see `Cluster::view`).
    pub(super) fn view(&self, now: Time, m: &ClusterMetrics) -> serde_json::Value {
        let replicas: Vec<serde_json::Value> = self
            .members
            .iter()
            .map(|(id, member)| {
                serde_json::json!({
                    "id": id,
                    "address": member.authority.as_str(),
                    "ejected": self.balancer.is_ejected(*id),
                    "ramping": self.balancer.is_ramping(*id, now),
                    "tries": member.metrics.counts(),
                    "probes_refused": member.probe_health.refused_with(),
                    "probes_late_in_a_row": member.probe_health.late_in_a_row(),
                })
            })
            .collect();
        // Ejections as an operator reads them: the replica's address, how long is left, and
        // when that is on the wall clock.
        let wall_now = std::time::SystemTime::now();
        let outlier = self.balancer.outlier().map(|o| {
            o.views(now)
                .into_iter()
                .map(|v| {
                    let left = v.ejected_until.map(|t| t.saturating_since(now));
                    serde_json::json!({
                        "replica": v.replica,
                        "address": self.members.get(&v.replica).map(|m| m.authority.as_str()),
                        "consecutive_failures": v.consecutive_failures,
                        "ejections": v.ejections,
                        "ejected_for": left.map(|d| humantime::format_duration(round_ms(d)).to_string()),
                        "ejected_until": left.map(|d| humantime::format_rfc3339_millis(wall_now + d).to_string()),
                    })
                })
                .collect::<Vec<_>>()
        });
        serde_json::json!({
            "name": m.name,
            "policy": self.balancer.policy().name(),
            "replicas": replicas,
            "snapshot": self.balancer.snapshot(now),
            "outlier": outlier,
            "retry_budget_available": self.balancer.retry_budget().available(now),
            "waiting_for_decision": self.waiting.len(),
            "requests": m.requests.get(),
            "retries": m.retries.get(),
            "hedges": {
                "delay_us": self.balancer.hedger().delay().map(|d| d.as_micros() as u64),
                "sent": m.hedges.get(),
                "won": m.hedges_won.get(),
                "refused": m.hedges_refused.get(),
            },
        })
    }
}

/// `d` rounded to whole milliseconds, for people to read.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A seed from the standard library's per-process random hash keys; the proxy needs
/// independence between clusters and runs, not reproducibility.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
