//! The prober and the timer: the two tasks that carry a policy's requests to the outside world.
//!
//! **Probes.** After every event a cluster drains the probes its policy asks for and hands them
//! here once its lock is released. Each probe is its own small task (so a request never waits
//! for a probe) that sends `GET /.prequal/probe?v=1` (the protocol of
//! `prequal_http::protocol`, with the sync-mode hint when there is one) over a connection
//! pool of its own ([`crate::upstream`]), waits at most the policy's `probe_timeout()`, and
//! reports the parsed [`LoadReport`] or a failure back to the policy. A probe that timed out is
//! still read to its end (for up to a second) so that its connection is reused, not replaced.
//!
//! Probe traffic is bounded twice, late probes included: at most `max_probes_per_replica` to one
//! replica and `max_probes_in_flight` per cluster. A probe beyond either bound is reported
//! failed at once without being sent. The per-replica bound is what keeps one hung host (it
//! accepts connections and never answers, so each probe to it holds its slot for the probe
//! timeout and the linger) from using up the cluster's probe capacity and blinding the policy
//! to every other replica; and since a refused probe counts as a failed one, the policy learns
//! from them that the replica does not answer (see prequal-core's error aversion).
//!
//! **Timer.** One task per cluster sleeps until the policy's `poll_timeout()` (idle probing,
//! server-report polling for weighted-round-robin and yarp-p2c, sync-mode probe timeouts) or
//! the end of an outlier ejection, whichever is first, and then calls `handle_timeout`. A
//! cluster wakes it early through a `Notify` when a new deadline is earlier than the one it
//! sleeps on. The task holds only a weak reference, so it ends when its cluster is dropped
//! (after a reload).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use http::HeaderValue;
use http::uri::PathAndQuery;
use prequal_core::{LoadReport, ProbeRequest};
use prequal_http::protocol::probe_path_and_query;
use prequal_http::read_probe_reply;
use tokio::sync::OwnedSemaphorePermit;

use crate::body::{BoxError, empty};
use crate::cluster::{Cluster, Outbox, ProbeTarget};

/// Rounds of "report failures, drain again" before leftover probes wait for the next event;
/// keeps a policy that re-probes on every failure from looping while the probe slots are full.
const MAX_FAILURE_ROUNDS: usize = 2;
/// How long a probe that timed out may still take to finish, for its connection's sake.
const PROBE_LINGER: Duration = Duration::from_secs(1);

impl Cluster {
    /// Sends each probe in `outbox` as its own task, over the probe connections of data-plane
    /// `worker` (the thread this runs on).
    pub(crate) fn send_probes(self: &Arc<Self>, outbox: Outbox, worker: usize) {
        let mut outbox = outbox;
        for _ in 0..MAX_FAILURE_ROUNDS {
            if outbox.is_empty() {
                return;
            }
            let failed = self.launch(outbox, worker);
            outbox = Vec::new();
            for probe in failed {
                outbox.extend(self.probe_result(&probe, None));
            }
        }
        // Still failing: report without draining further; the next event drains the rest.
        for (probe, _) in outbox {
            self.metrics.probes_dropped.inc();
            let _ = self.probe_result(&probe, None);
        }
    }

    /// Starts a task per probe; returns the probes that could not be started.
    fn launch(self: &Arc<Self>, outbox: Outbox, worker: usize) -> Vec<ProbeRequest> {
        let mut failed = Vec::new();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return outbox.into_iter().map(|(p, _)| p).collect();
        };
        for (probe, target) in outbox {
            let Some(target) = target else {
                failed.push(probe);
                continue;
            };
            let Some(outstanding) =
                Outstanding::take(&target, self.config().max_probes_per_replica)
            else {
                self.metrics.probes_skipped.inc();
                failed.push(probe);
                continue;
            };
            let Ok(permit) = Arc::clone(&self.probe_slots).try_acquire_owned() else {
                self.metrics.probes_dropped.inc();
                failed.push(probe);
                continue;
            };
            let cluster = Arc::clone(self);
            let slot = (permit, outstanding);
            runtime.spawn(run_probe(cluster, probe, target.authority, slot, worker));
        }
        failed
    }
}

/// One probe counted as outstanding at its replica until dropped.
struct Outstanding(Arc<AtomicUsize>);

impl Outstanding {
    /// Counts one more probe to `target`, unless it already has `max` outstanding.
    fn take(target: &ProbeTarget, max: usize) -> Option<Self> {
        target
            .outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Outstanding(Arc::clone(&target.outstanding)))
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn run_probe(
    cluster: Arc<Cluster>,
    probe: ProbeRequest,
    authority: http::uri::Authority,
    permit: (OwnedSemaphorePermit, Outstanding),
    worker: usize,
) {
    // Probes are spawned while a request is being picked for; yielding once lets that request
    // be written to its replica first, so probing never delays the query that triggered it.
    tokio::task::yield_now().await;
    let mut fetch = std::pin::pin!(fetch(&cluster, &probe, &authority, worker));
    let report = match tokio::time::timeout(cluster.probe_timeout, fetch.as_mut()).await {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => {
            tracing::debug!(cluster = cluster.name(), replica = %authority, %error, "probe failed");
            drop(permit);
            cluster.send_probes(cluster.probe_result(&probe, None), worker);
            return;
        }
        Err(_) => {
            // Too late for the policy, which hears of a failure now. The exchange itself is
            // left to finish (within PROBE_LINGER, holding its probe slot) so that its
            // connection goes back to the pool: dropping it would close the connection, and
            // under load, when probes run late, every late probe would cost a new connection.
            cluster.send_probes(cluster.probe_result(&probe, None), worker);
            let _ = tokio::time::timeout(PROBE_LINGER, fetch).await;
            drop(permit);
            return;
        }
    };
    drop(permit);
    cluster.send_probes(cluster.probe_result(&probe, Some(&report)), worker);
}

async fn fetch(
    cluster: &Cluster,
    probe: &ProbeRequest,
    authority: &http::uri::Authority,
    worker: usize,
) -> Result<LoadReport, BoxError> {
    let path = match probe.hint {
        None => plain_probe_path()?,
        Some(hint) => PathAndQuery::try_from(probe_path_and_query(Some(hint)))?,
    };
    let mut request = http::Request::new(empty());
    *request.uri_mut() = http::Uri::from(path);
    *request.version_mut() = cluster.version();
    if cluster.version() == http::Version::HTTP_11 {
        // Named here, the pool does not have to format one for every probe.
        request.headers_mut().insert(
            http::header::HOST,
            HeaderValue::from_str(authority.as_str())?,
        );
    }
    let response = cluster
        .probe_upstream(worker)
        .send(probe.replica, authority, request)
        .await?;
    Ok(read_probe_reply(response).await?)
}

/// The path and query of a probe without a hint, built once.
fn plain_probe_path() -> Result<PathAndQuery, BoxError> {
    static PLAIN: OnceLock<Option<PathAndQuery>> = OnceLock::new();
    PLAIN
        .get_or_init(|| PathAndQuery::try_from(probe_path_and_query(None)).ok())
        .clone()
        .ok_or_else(|| "the probe path is not a valid URI path".into())
}

/// Starts the cluster's timer task (see the module docs).
pub(crate) fn spawn_timer(cluster: &Arc<Cluster>) {
    let weak = Arc::downgrade(cluster);
    let wake = Arc::clone(&cluster.wake);
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(timer_loop(weak, wake));
    }
}

async fn timer_loop(weak: Weak<Cluster>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let deadline = {
            let Some(cluster) = weak.upgrade() else {
                return;
            };
            let (outbox, deadline) = cluster.tick();
            // The timer runs on the thread that accepts, data-plane worker 0.
            cluster.send_probes(outbox, 0);
            deadline
        };
        match deadline {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
