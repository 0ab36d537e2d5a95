//! The driver of one balancer: the core behind a short lock, fed with events and drained of
//! decisions.
//!
//! The core is a [`prequal_core::Balancer`], the same one the proxy and the simulator drive: the
//! policy, plus outlier ejection and slow start for replicas that join after the starting set
//! (the replicas discovered before the first request). Retries and hedging stay with tower's
//! own layers, so the balancer's `max_attempts`, retry budget and hedge settings are not used.
//!
//! A [`Balance`](crate::Balance) owns its endpoints, but the balancer it drives is shared with
//! three kinds of task: the response futures and bodies of queries in flight (a query ends in
//! whichever task holds it), the probe tasks, and the timer task. So the policy lives here,
//! behind a `std::sync::Mutex` held only for the few microseconds an event takes and never
//! across an `.await`, exactly as in the proxy. Every event is one critical section that also
//! drains what the policy wants done next: probes to send (started once the lock is released)
//! and the decision a sync-mode pick is waiting for.
//!
//! Here are the shared state, its lock, and what the probe and timer tasks report (probe
//! results, timer ticks); the events from the balancer and its queries, which end by starting
//! the probes they drained, are in `events.rs`.
//!
//! Time is what the policy reads: the nanoseconds since the driver was built, on tokio's clock
//! (so tests with paused time drive it too), handed in as a [`Time`].

mod events;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use prequal_core::{
    Balancer, Pick, ProbeEnd, ProbeRequest, QueryId, ReplicaId, Snapshot, Strict, Time,
};
use rand::{Rng, RngCore};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::probe::SendProbe;
use crate::probe_slot::{Outbox, OutgoingProbe, ProbeTarget, Slot};

/// Probe timeout for policies that do not name one (they never probe, so it is only a bound).
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(100);

/// Most probes one event drains from the policy; the rest wait for the next event, so a policy
/// that asks for a probe after every failed one cannot keep an event going.
const MAX_PROBES_PER_EVENT: usize = 64;

/// How many probes may be out at once. See [`Builder`](crate::Builder) for the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProbeLimits {
    /// Probes in flight to one replica, late ones included.
    pub(crate) per_replica: usize,
    /// Probes in flight from this balancer.
    pub(crate) in_flight: usize,
}

/// The shared half of a balancer. See the module docs.
pub(crate) struct Driver {
    epoch: Instant,
    state: Mutex<State>,
    pub(crate) probe_timeout: Duration,
    limits: ProbeLimits,
    /// Probes out from this balancer, late ones included.
    probes_out: Arc<AtomicUsize>,
    /// Wakes the timer task when a deadline earlier than the one it sleeps on appears.
    pub(crate) wake: Arc<Notify>,
    timer_started: AtomicBool,
    /// Set when the balancer is dropped: no more probes, and the timer task ends.
    closed: AtomicBool,
}

struct State {
    balancer: Balancer,
    /// The replicas discovered, in the order they came.
    members: Vec<ReplicaId>,
    /// Whether `members` changed since the balancer last heard of them. The balancer hears of
    /// the first ones at the first request, so that all the replicas discovered before it are
    /// the starting set (no slow start); after that, of every change at once.
    members_changed: bool,
    /// Whether a request has been balanced yet.
    started: bool,
    rng: Box<dyn RngCore + Send>,
    /// How to probe each replica discovered, with its count of probes out (an ejected
    /// replica stays here; the policy does not probe it while it is out).
    probes: HashMap<ReplicaId, ReplicaProbe>,
    /// The sync-mode query the balancer waits on, its decision once made, and who to wake.
    waiting: Option<(QueryId, Option<Pick>, Option<Waker>)>,
    /// The deadline the timer task sleeps on.
    armed: Option<Time>,
}

struct ReplicaProbe {
    send: SendProbe,
    outstanding: Arc<AtomicUsize>,
    /// Its name and how it answers probes, for the prober's warnings.
    target: Arc<ProbeTarget>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Lets the timer task see that the balancer is gone and end.
        self.wake.notify_one();
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("policy", &self.lock().balancer.policy().name())
            .field("probe_timeout", &self.probe_timeout)
            .finish_non_exhaustive()
    }
}

impl Driver {
    pub(crate) fn new(
        balancer: Balancer,
        rng: Box<dyn RngCore + Send>,
        limits: ProbeLimits,
    ) -> Self {
        let probe_timeout = balancer.probe_timeout().unwrap_or(DEFAULT_PROBE_TIMEOUT);
        Self {
            epoch: Instant::now(),
            state: Mutex::new(State {
                balancer,
                members: Vec::new(),
                members_changed: false,
                started: false,
                rng,
                probes: HashMap::new(),
                waiting: None,
                armed: None,
            }),
            probe_timeout,
            limits,
            probes_out: Arc::default(),
            wake: Arc::new(Notify::new()),
            timer_started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// The policy's clock: time since the driver was built.
    pub(crate) fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The instant a policy [`Time`] stands for.
    pub(crate) fn instant_of(&self, time: Time) -> Instant {
        self.epoch + Duration::from_nanos(time.as_nanos())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep balancing with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True the first time it is called: the caller starts the timer task.
    pub(crate) fn claim_timer(&self) -> bool {
        !self.timer_started.load(Ordering::Acquire)
            && !self.timer_started.swap(true, Ordering::AcqRel)
    }

    /// The balancer is gone: its endpoints (and the probe services made from them) are dropped
    /// and the timer task ends. Queries still in flight end as usual, and a [`Handle`] still
    /// reads the policy.
    ///
    /// [`Handle`]: crate::Handle
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.lock().probes.clear();
        self.wake.notify_one();
    }

    /// Whether the balancer is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The decision for the sync-mode `query`, if made; otherwise `waker` is woken when it is.
    pub(crate) fn poll_decision(&self, query: QueryId, waker: &Waker) -> Option<Pick> {
        let mut state = self.lock();
        match &mut state.waiting {
            Some((waiting, decided, wake)) if *waiting == query => match decided.take() {
                Some(pick) => {
                    state.waiting = None;
                    Some(pick)
                }
                None => {
                    *wake = Some(waker.clone());
                    None
                }
            },
            // Not waited on (any more): nothing will come.
            _ => Some(Pick::NoReplica),
        }
    }

    /// Stops waiting for the sync-mode `query` (its decision was too late).
    pub(crate) fn abandon_decision(&self, query: QueryId) {
        let mut state = self.lock();
        if state.waiting.as_ref().is_some_and(|w| w.0 == query) {
            state.waiting = None;
        }
    }

    /// Where the balancer sends a decided pick (an ejected or ramping replica replaced).
    fn resolve(state: &mut State, pick: Pick, now: Time) -> Pick {
        match state
            .balancer
            .resolve(pick, (&[], Strict::No), now, &mut state.rng)
        {
            Some(replica) => Pick::Replica(replica),
            None => Pick::NoReplica,
        }
    }

    /// The replicas the balancer has ejected.
    pub(crate) fn ejected(&self) -> Vec<ReplicaId> {
        let state = self.lock();
        let balancer = &state.balancer;
        balancer
            .replicas()
            .iter()
            .copied()
            .filter(|&r| balancer.is_ejected(r))
            .collect()
    }

    /// A number in `0..n` from the policy's random source (for the fallback pick).
    pub(crate) fn random_below(&self, n: usize) -> usize {
        self.lock().rng.random_range(0..n.max(1))
    }

    /// A probe ended. Returns the probes the policy asks for next.
    pub(crate) fn probe_result(&self, probe: &ProbeRequest, end: ProbeEnd<'_>) -> Outbox {
        let now = self.now();
        let mut guard = self.lock();
        let state = &mut *guard;
        state.balancer.on_probe_end(probe, end, now, &mut state.rng);
        let outbox = self.drain(state, now);
        if self.rearm(state) {
            self.wake.notify_one();
        }
        outbox
    }

    /// The timer task's step: fires the balancer's timer if due (the policy's, and the end of
    /// an ejection); returns the probes to send and when to come back.
    pub(crate) fn tick(&self) -> (Outbox, Option<Instant>) {
        let now = self.now();
        let mut guard = self.lock();
        let state = &mut *guard;
        if state.balancer.poll_timeout().is_some_and(|t| t <= now) {
            let back = state.balancer.handle_timeout(now, &mut state.rng);
            if !back.is_empty() {
                tracing::debug!(?back, "ejection over");
            }
        }
        let outbox = self.drain(state, now);
        state.armed = state.balancer.poll_timeout();
        (outbox, state.armed.map(|t| self.instant_of(t)))
    }

    /// A read-only view of the policy.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let now = self.now();
        self.lock().balancer.snapshot(now)
    }

    /// The policy's name.
    pub(crate) fn policy_name(&self) -> &'static str {
        self.lock().balancer.policy().name()
    }

    /// Hands a sync-mode decision to the balancer waiting for it, and turns the probes the
    /// policy asks for into futures, each holding its slots. A probe over a limit (or to a
    /// replica that left) is reported failed at once, as the protocol says of a probe that
    /// could not be sent.
    fn drain(&self, state: &mut State, now: Time) -> Outbox {
        while let Some((query, pick)) = state.balancer.poll_pick(now, &mut state.rng) {
            let pick = match pick {
                Pick::Replica(_) => Self::resolve(state, pick, now),
                other => other,
            };
            if let Some((waiting, decided, waker)) = &mut state.waiting
                && *waiting == query
            {
                *decided = Some(pick);
                if let Some(waker) = waker.take() {
                    waker.wake();
                }
            }
        }
        let mut outbox = Vec::new();
        for _ in 0..MAX_PROBES_PER_EVENT {
            let Some(probe) = state.balancer.poll_probe(now, &mut state.rng) else {
                break;
            };
            match self.start_probe(state, &probe) {
                Some(started) => outbox.push((probe, started)),
                // Not a failure: flat out, a healthy replica reaches the bound too.
                None => {
                    let end = ProbeEnd::NotSent;
                    state
                        .balancer
                        .on_probe_end(&probe, end, now, &mut state.rng);
                }
            }
        }
        outbox
    }

    /// The future of one probe with its slots, or `None` if it may not be sent now.
    fn start_probe(&self, state: &State, probe: &ProbeRequest) -> Option<OutgoingProbe> {
        let replica = state.probes.get(&probe.replica)?;
        let Some(slot) = Slot::take(
            [&replica.outstanding, &self.probes_out],
            [self.limits.per_replica, self.limits.in_flight],
        ) else {
            tracing::trace!(replica = %probe.replica, "probe refused: too many in flight");
            return None;
        };
        let request = prequal_http::protocol::Probe { hint: probe.hint };
        Some(OutgoingProbe {
            future: (replica.send)(request),
            slot,
            target: Arc::clone(&replica.target),
        })
    }

    /// True (and the new deadline recorded) when the timer task must wake earlier than planned.
    fn rearm(&self, state: &mut State) -> bool {
        match (state.balancer.poll_timeout(), state.armed) {
            (Some(next), Some(armed)) if next >= armed => false,
            (None, _) => false,
            (Some(next), _) => {
                state.armed = Some(next);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prequal_core::{BalancerConfig, PolicyConfig};
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn driver() -> Arc<Driver> {
        let policy = PolicyConfig::from_name("round-robin")
            .and_then(|p| p.build())
            .unwrap_or_else(|e| panic!("{e}"));
        let balancer =
            Balancer::new(policy, &BalancerConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let limits = ProbeLimits {
            per_replica: 1,
            in_flight: 1,
        };
        Arc::new(Driver::new(
            balancer,
            Box::new(SmallRng::seed_from_u64(1)),
            limits,
        ))
    }

    fn never_probed() -> SendProbe {
        Box::new(|_| Box::pin(async { Err("not probed".into()) }))
    }

    #[tokio::test(start_paused = true)]
    async fn replicas_discovered_before_the_first_request_do_not_ramp() {
        let driver = driver();
        driver.insert(ReplicaId(0), "a".into(), never_probed());
        driver.insert(ReplicaId(1), "b".into(), never_probed());
        // The balancer hears of the starting set at the first request.
        assert!(driver.snapshot().replicas.is_empty());
        assert!(matches!(driver.pick(QueryId(0)), Pick::Replica(_)));
        driver.insert(ReplicaId(2), "c".into(), never_probed());
        let now = driver.now();
        let state = driver.lock();
        assert!(!state.balancer.is_ramping(ReplicaId(0), now));
        assert!(!state.balancer.is_ramping(ReplicaId(1), now));
        assert!(
            state.balancer.is_ramping(ReplicaId(2), now),
            "a later one ramps"
        );
    }
}
