//! The prober and the timer: the tasks that carry a policy's wishes out to the replicas.
//!
//! **Probes.** After every event the [driver](crate::driver) drains the probes its policy asks
//! for and hands them here once its lock is released. Each probe runs as its own tokio task, so
//! a query never waits for one: the task yields once (the query that triggered the probe is
//! written to its replica first), then waits at most the policy's probe timeout (`prequal`: 3 ms
//! by default) for the reply and reports the [`LoadReport`], or a failure, to the policy. A
//! probe that timed out is reported failed at once but its exchange is left to finish for up to
//! [`PROBE_LINGER`] (still holding its slots), so that its connection goes back to the pool
//! instead of being closed: under load, when probes run late, every dropped probe would
//! otherwise cost a new connection.
//!
//! Probe traffic is bounded twice, late probes included: per replica and per balancer (see
//! [`Builder`](crate::Builder)). A probe beyond either bound is not sent, and the policy hears
//! so (`on_probe_not_sent`): no news of its replica, not a failure, since flat out a healthy
//! replica reaches the bound too. The per-replica bound keeps one hung replica (it accepts
//! connections and never answers) from using up the balancer's probe capacity and blinding the
//! policy to the others; the policy learns that replica does not answer from its probes that
//! time out.
//!
//! **Timer.** One task per balancer sleeps until the policy's `poll_timeout()` (idle probing,
//! load polling for `weighted-round-robin` and `yarp-p2c`, sync-mode probe deadlines) and then
//! calls `handle_timeout`. The driver wakes it early when a new deadline is earlier than the one
//! it sleeps on. It ends when the balancer is dropped (or, holding only a weak reference, once
//! nothing refers to the policy any more).

use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use prequal_core::{LoadReport, ProbeEnd, ProbeRequest};
use tokio::sync::Notify;

use crate::driver::Driver;
use crate::probe::ProbeFuture;
use crate::probe_slot::{Outbox, Slot};

/// How long a probe that timed out may still take to finish, for its connection's sake.
pub const PROBE_LINGER: Duration = Duration::from_secs(1);

/// The shortest sleep of the timer task, so a policy that keeps asking for "now" cannot spin it.
const MIN_TIMER_STEP: Duration = Duration::from_micros(50);

/// Rounds of "report the probes not sent, drain again" when probes cannot be started at all.
const MAX_UNSENT_ROUNDS: usize = 2;

/// Starts each probe in `outbox` as its own task.
pub(crate) fn send(driver: &Arc<Driver>, outbox: Outbox) {
    if outbox.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // Outside a runtime (a response dropped after it shut down): nothing can be sent.
        report_unsent(driver, outbox);
        return;
    };
    for (probe, (future, slot)) in outbox {
        runtime.spawn(run_probe(Arc::clone(driver), probe, future, slot));
    }
}

/// Reports every probe failed, draining what the policy asks for next a bounded number of times.
fn report_unsent(driver: &Driver, mut outbox: Outbox) {
    for _ in 0..MAX_UNSENT_ROUNDS {
        let mut next = Vec::new();
        for (probe, _) in outbox {
            next.extend(driver.probe_result(&probe, ProbeEnd::NotSent));
        }
        outbox = next;
    }
    for (probe, _) in outbox {
        // Still more: report without draining; the next event drains the rest.
        let _ = driver.probe_result(&probe, ProbeEnd::NotSent);
    }
}

async fn run_probe(driver: Arc<Driver>, probe: ProbeRequest, future: ProbeFuture, slot: Slot) {
    // Probes start while a query is being dispatched; yielding once lets that query be sent
    // to its replica first, so probing never delays the query that triggered it.
    tokio::task::yield_now().await;
    let mut future = pin!(future);
    let report: Option<LoadReport> =
        match tokio::time::timeout(driver.probe_timeout, future.as_mut()).await {
            Ok(Ok(report)) => Some(report),
            Ok(Err(error)) => {
                tracing::debug!(replica = %probe.replica, %error, "probe failed");
                None
            }
            Err(_) => {
                tracing::trace!(replica = %probe.replica, "probe timed out");
                let next = driver.probe_result(&probe, ProbeEnd::Failed);
                send(&driver, next);
                let _ = tokio::time::timeout(PROBE_LINGER, future).await;
                drop(slot);
                return;
            }
        };
    drop(slot);
    let end = report.as_ref().map_or(ProbeEnd::Failed, ProbeEnd::Reply);
    let next = driver.probe_result(&probe, end);
    send(&driver, next);
}

/// Starts the balancer's timer task once, if a tokio runtime is there to run it.
pub(crate) fn start_timer(driver: &Arc<Driver>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if driver.claim_timer() {
        runtime.spawn(timer_loop(Arc::downgrade(driver), Arc::clone(&driver.wake)));
    }
}

async fn timer_loop(weak: Weak<Driver>, wake: Arc<Notify>) {
    loop {
        let deadline = {
            let Some(driver) = weak.upgrade().filter(|d| !d.is_closed()) else {
                return;
            };
            let (outbox, deadline) = driver.tick();
            send(&driver, outbox);
            deadline
        };
        match deadline {
            Some(at) => {
                let floor = tokio::time::Instant::now() + MIN_TIMER_STEP;
                tokio::select! {
                    _ = tokio::time::sleep_until(at.max(floor)) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
