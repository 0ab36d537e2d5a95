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
//! **Warnings.** A failed probe is logged at debug level only, but two kinds of failure leave
//! the policy blind to a replica for as long as they last, so they are warned of, with the
//! replica's discovery key, once rather than once per probe (the rules are prequal-http's
//! [`probe_health`](prequal_http::probe_health), shared with the proxy):
//!
//! - a replica that *refuses* probes: it answers something other than a probe reply (a 404
//!   from a server with no `ProbeLayer`, or a body the parser refuses; not a transport error or
//!   a body cut off), in time or during the linger. Warned once, and again only after it has
//!   answered a probe in between (then an info line says it answers again);
//! - a replica whose replies come only during the linger: after 20 in a row with none in time
//!   between, a warning says how long the last one took, at most once a minute per replica.
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

use std::pin::{Pin, pin};
use std::sync::{Arc, Weak};
use std::time::Duration;

use prequal_core::{LoadReport, ProbeEnd, ProbeRequest};
use prequal_http::probe_health::refusal;
use prequal_http::protocol::PROBE_PATH;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::box_error::BoxError;
use crate::driver::Driver;
use crate::probe::ProbeFuture;
use crate::probe_slot::{Outbox, OutgoingProbe, ProbeTarget};

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
    for (probe, outgoing) in outbox {
        runtime.spawn(run_probe(Arc::clone(driver), probe, outgoing));
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

async fn run_probe(driver: Arc<Driver>, probe: ProbeRequest, outgoing: OutgoingProbe) {
    let OutgoingProbe {
        future,
        slot,
        target,
    } = outgoing;
    // Probes start while a query is being dispatched; yielding once lets that query be sent
    // to its replica first, so probing never delays the query that triggered it.
    tokio::task::yield_now().await;
    let mut future = pin!(future);
    let report: Option<LoadReport> =
        match tokio::time::timeout(driver.probe_timeout, future.as_mut()).await {
            Ok(Ok(report)) => {
                if target.health.answered() {
                    tracing::info!(replica = %probe.replica, key = %target.key,
                        "replica answers probes again");
                }
                Some(report)
            }
            Ok(Err(error)) => {
                tracing::debug!(replica = %probe.replica, %error, "probe failed");
                note_refusal(&probe, &target, &error);
                None
            }
            Err(_) => {
                tracing::trace!(replica = %probe.replica, "probe timed out");
                let next = driver.probe_result(&probe, ProbeEnd::Failed);
                send(&driver, next);
                linger(&driver, &probe, &target, future).await;
                drop(slot);
                return;
            }
        };
    drop(slot);
    let end = report.as_ref().map_or(ProbeEnd::Failed, ProbeEnd::Reply);
    let next = driver.probe_result(&probe, end);
    send(&driver, next);
}

/// Lets a probe that timed out (and was reported failed) finish, for its connection's sake,
/// and warns of what its end says about the replica: that it answers only after the timeout,
/// or that it refuses probes.
async fn linger(
    driver: &Driver,
    probe: &ProbeRequest,
    target: &ProbeTarget,
    future: Pin<&mut ProbeFuture>,
) {
    // Timed only here, so that a probe answered in time reads no clock for it.
    let timed_out = Instant::now();
    match tokio::time::timeout(PROBE_LINGER, future).await {
        Ok(Ok(_)) if target.health.answered_late() => tracing::warn!(
            replica = %probe.replica,
            key = %target.key,
            in_a_row = target.health.late_in_a_row(),
            took = ?(driver.probe_timeout + timed_out.elapsed()),
            probe_timeout = ?driver.probe_timeout,
            "replica answers probes only after probe_timeout, so the policy counts them as \
             failed and cannot see its load (while other replicas answer in time it gets \
             almost no traffic): if the network's round trip is longer than probe_timeout (its \
             default of 3ms is for one datacenter), raise the policy's probe_timeout \
             (PolicyConfig, docs/policies.md)"
        ),
        Ok(Err(error)) => note_refusal(probe, target, &error),
        _ => {}
    }
}

/// Warns, once until it answers a probe again, that the replica refuses probes, if `error`
/// says it answered with something other than a probe reply.
fn note_refusal(probe: &ProbeRequest, target: &ProbeTarget, error: &BoxError) {
    let Some(refused) = refusal(&**error) else {
        return;
    };
    if target.health.refused(refused.to_string()) {
        tracing::warn!(
            replica = %probe.replica,
            key = %target.key,
            answer = %refused,
            "replica does not answer probes (GET {PROBE_PATH}): the policy cannot see its \
             load, so while other replicas answer it gets almost no traffic, and when none \
             does the policy balances on this client's own requests in flight; add \
             prequal_server::ProbeLayer to its server or run `prequal sidecar` in front of it \
             (docs/library.md), or choose a policy that needs no probes, such as least-time"
        );
    }
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
