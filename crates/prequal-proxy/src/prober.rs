//! The prober: carries the probes a policy asks for to its replicas and their replies back.
//!
//! After every event a cluster drains the probes its policy asks for and hands them here once
//! its lock is released. Each probe is its own small task (so a request never waits for a
//! probe) that sends `GET /.prequal/probe?v=1` (the protocol of `prequal_http::protocol`, with
//! the sync-mode hint when there is one) over a connection pool of its own
//! ([`crate::upstream`], one per data-plane worker, the one of the thread that sends it), waits
//! at most the policy's `probe_timeout()`, and reports the parsed [`LoadReport`] or a failure
//! back to its owner, the cluster. A probe that timed out is still read to its end (for up to a
//! second) so that its connection is reused, not replaced. A replica that refuses probes (a
//! 404: no sidecar) or answers them only after the timeout is warned of once, not once per
//! probe: its probes share a [`ProbeHealth`] (prequal-http's, shared with prequal-tower).
//!
//! Probe traffic is bounded twice, late probes included: at most `max_probes_per_replica` to one
//! replica and `max_probes_in_flight` per cluster. A probe beyond either bound is not sent, and
//! its policy hears so at once ([`ProbeEnd::NotSent`]): no news of the replica, not a failure.
//! The per-replica bound is what keeps one hung host (it accepts connections and never answers,
//! so each probe to it holds its slot for the probe timeout and the linger) from using up the
//! cluster's probe capacity and blinding the policy to every other replica. The policy learns
//! that such a host does not answer from its probes that time out, each reported failed at its
//! timeout (see prequal-core's error aversion), not from the probes the bound then keeps back:
//! flat out, a healthy replica also reaches the bound (it is asked for probes faster than 8 at
//! a time can be answered), and counting those as failures made healthy replicas look dead.
//!
//! The prober knows its owner only as a `ProbeOwner`: what to report a probe's end to. So
//! the cluster uses the prober, and the prober does not use the cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::HeaderValue;
use http::uri::{Authority, PathAndQuery};
use prequal_core::{LoadReport, ProbeEnd, ProbeRequest, ReplicaId};
use prequal_http::probe_health::refusal;
use prequal_http::protocol::probe_path_and_query;
use prequal_http::{ProbeHealth, ProbeReplyError, read_probe_reply};
use prometheus_client::metrics::counter::Counter;

use crate::body::{BoxError, empty};
use crate::config::ClusterConfig;
use crate::metrics::ClusterMetrics;
use crate::upstream::Upstream;

/// Rounds of "report the probes not sent, drain again" before leftover probes wait for the next
/// event; keeps a policy that asks again at once from looping while the probe slots are full.
const MAX_UNSENT_ROUNDS: usize = 2;
/// Probe timeout for policies that do not name one (they never probe, so it is only a bound).
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a probe that timed out may still take to finish, for its connection's sake.
const PROBE_LINGER: Duration = Duration::from_secs(1);

/// Probes to send, with where each goes (`None` if the replica left meanwhile).
pub(crate) type Outbox = Vec<(ProbeRequest, Option<ProbeTarget>)>;

/// The replica a probe goes to: its address, its count of probes outstanding and how its
/// probes have been answered.
#[derive(Debug, Clone)]
pub(crate) struct ProbeTarget {
    pub(crate) authority: Authority,
    /// Probes sent to the replica that have not finished yet, late ones included.
    pub(crate) outstanding: Arc<AtomicUsize>,
    /// Whether the replica refuses probes, or answers them only after the timeout: warned of
    /// once, not once per probe (see prequal-http's `probe_health`).
    pub(crate) health: Arc<ProbeHealth>,
}

/// What a probe's end is reported to: the cluster whose policy asked for it.
pub(crate) trait ProbeOwner: Send + Sync + 'static {
    /// The prober that sends this owner's probes.
    fn prober(&self) -> &Prober;
    /// A probe ended. Returns the probes the policy asks for next.
    fn probe_result(&self, probe: &ProbeRequest, end: ProbeEnd<'_>) -> Outbox;
}

/// One cluster's probe sender: its probe connections per data-plane worker, the probe timeout
/// and the two bounds on probes outstanding.
#[derive(Debug)]
pub(crate) struct Prober {
    /// The cluster's name, for logs.
    name: String,
    upstreams: Vec<Upstream>,
    version: http::Version,
    /// The policy's probe timeout; `None` when it never probes.
    timeout: Option<Duration>,
    /// Probes of the cluster not finished yet, late ones included.
    in_flight: Arc<AtomicUsize>,
    max_in_flight: usize,
    max_per_replica: usize,
    /// Probes not sent because the cluster's bound was reached.
    dropped: Counter,
    /// Probes not sent because their replica's bound was reached.
    skipped: Counter,
}

impl Prober {
    /// The prober of a cluster configured by `config`, whose policy's probe timeout is
    /// `timeout` (`None` for a policy that never probes), sending over `upstreams` (one entry
    /// per data-plane worker).
    pub(crate) fn new(
        config: &ClusterConfig,
        metrics: &ClusterMetrics,
        upstreams: Vec<Upstream>,
        timeout: Option<Duration>,
    ) -> Self {
        Prober {
            name: metrics.name.clone(),
            upstreams,
            version: config.protocol.version(),
            timeout,
            in_flight: Arc::default(),
            max_in_flight: config.max_probes_in_flight,
            max_per_replica: config.max_probes_per_replica,
            dropped: metrics.probes_dropped.clone(),
            skipped: metrics.probes_skipped.clone(),
        }
    }

    /// The policy's probe timeout (for one that never probes, only a bound).
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT)
    }

    /// Closes the idle probe connections to a replica that left the cluster.
    pub(crate) fn forget(&self, replica: ReplicaId) {
        for upstream in &self.upstreams {
            upstream.forget(replica);
        }
    }

    /// Whether the cluster's policy sends probes at all.
    pub(crate) fn sends_probes(&self) -> bool {
        self.timeout.is_some()
    }

    /// The probe connections of data-plane `worker`.
    pub(crate) fn upstream(&self, worker: usize) -> &Upstream {
        &self.upstreams[worker % self.upstreams.len()]
    }
}

/// Sends each probe in `outbox` as its own task, over the probe connections of data-plane
/// `worker` (the thread this runs on), and reports the ones that cannot be sent to `owner` as
/// not sent (sending what it asks for then, for a few rounds).
pub(crate) fn send<O: ProbeOwner>(owner: &Arc<O>, outbox: Outbox, worker: usize) {
    let mut outbox = outbox;
    for _ in 0..MAX_UNSENT_ROUNDS {
        if outbox.is_empty() {
            return;
        }
        let unsent = launch(owner, outbox, worker);
        outbox = Vec::new();
        for probe in unsent {
            outbox.extend(owner.probe_result(&probe, ProbeEnd::NotSent));
        }
    }
    // Still more: report without draining further; the next event drains the rest.
    for (probe, _) in outbox {
        owner.prober().dropped.inc();
        let _ = owner.probe_result(&probe, ProbeEnd::NotSent);
    }
}

/// Starts a task per probe; returns the probes that could not be started.
fn launch<O: ProbeOwner>(owner: &Arc<O>, outbox: Outbox, worker: usize) -> Vec<ProbeRequest> {
    let prober = owner.prober();
    let mut unsent = Vec::new();
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return outbox.into_iter().map(|(p, _)| p).collect();
    };
    for (probe, target) in outbox {
        let Some(target) = target else {
            unsent.push(probe);
            continue;
        };
        let Some(outstanding) = Slot::take(&target.outstanding, prober.max_per_replica) else {
            prober.skipped.inc();
            unsent.push(probe);
            continue;
        };
        let Some(in_flight) = Slot::take(&prober.in_flight, prober.max_in_flight) else {
            prober.dropped.inc();
            unsent.push(probe);
            continue;
        };
        let slot = (in_flight, outstanding);
        runtime.spawn(run_probe(Arc::clone(owner), probe, target, slot, worker));
    }
    unsent
}

/// One probe counted in a bounded count (the cluster's probes in flight, or one replica's
/// probes outstanding) until dropped. An atomic, not a semaphore: nothing ever waits for a
/// slot, and giving one back takes no lock.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// Counts one more probe in `count`, unless it is already at `max`.
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(count)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Warns, once until it answers again, that `target` refuses probes.
fn note_refusal(prober: &Prober, target: &ProbeTarget, refused: &ProbeReplyError) {
    if target.health.refused(refused.to_string()) {
        tracing::warn!(
            cluster = %prober.name,
            replica = %target.authority,
            answer = %refused,
            "replica does not answer probes (GET {}): the policy cannot see its load, so while \
             other replicas answer it gets almost no traffic, and when none does the policy \
             balances on this proxy's own requests in flight; run `prequal sidecar` in front \
             of it (docs/proxy.md), or choose a policy that needs no probes, such as least-time",
            prequal_http::protocol::PROBE_PATH,
        );
    }
}

async fn run_probe<O: ProbeOwner>(
    owner: Arc<O>,
    probe: ProbeRequest,
    target: ProbeTarget,
    permit: (Slot, Slot),
    worker: usize,
) {
    let authority = &target.authority;
    // Probes are spawned while a request is being picked for; yielding once lets that request
    // be written to its replica first, so probing never delays the query that triggered it.
    tokio::task::yield_now().await;
    let prober = owner.prober();
    let mut fetch = std::pin::pin!(fetch(prober, &probe, authority, worker));
    let report = match tokio::time::timeout(prober.timeout(), fetch.as_mut()).await {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => {
            tracing::debug!(cluster = %prober.name, replica = %authority, %error, "probe failed");
            if let Some(refused) = refusal(&*error) {
                note_refusal(prober, &target, refused);
            }
            drop(permit);
            send(&owner, owner.probe_result(&probe, ProbeEnd::Failed), worker);
            return;
        }
        Err(_) => {
            // Too late for the policy, which hears of a failure now. The exchange itself is
            // left to finish (within PROBE_LINGER, holding its probe slot) so that its
            // connection goes back to the pool: dropping it would close the connection, and
            // under load, when probes run late, every late probe would cost a new connection.
            send(&owner, owner.probe_result(&probe, ProbeEnd::Failed), worker);
            // Timed only here, so that a probe answered in time reads no clock for it.
            let timed_out = tokio::time::Instant::now();
            let lingered = tokio::time::timeout(PROBE_LINGER, fetch).await;
            drop(permit);
            match lingered {
                Ok(Ok(_)) if target.health.answered_late() => tracing::warn!(
                    cluster = %prober.name,
                    replica = %authority,
                    in_a_row = target.health.late_in_a_row(),
                    took = ?(prober.timeout() + timed_out.elapsed()),
                    probe_timeout = ?prober.timeout(),
                    "replica answers probes only after probe_timeout, so the policy counts them \
                     as failed and cannot see its load (while other replicas answer in time it \
                     gets almost no traffic): if the network's round trip is longer than \
                     probe_timeout (its default of 3ms is for one datacenter), raise \
                     probe_timeout in the cluster's policy table (docs/config.md)"
                ),
                Ok(Err(error)) => {
                    if let Some(refused) = refusal(&*error) {
                        note_refusal(prober, &target, refused);
                    }
                }
                _ => {}
            }
            return;
        }
    };
    drop(permit);
    if target.health.answered() {
        tracing::info!(cluster = %prober.name, replica = %authority, "replica answers probes again");
    }
    send(
        &owner,
        owner.probe_result(&probe, ProbeEnd::Reply(&report)),
        worker,
    );
}

async fn fetch(
    prober: &Prober,
    probe: &ProbeRequest,
    authority: &Authority,
    worker: usize,
) -> Result<LoadReport, BoxError> {
    let path = match probe.hint {
        None => plain_probe_path()?,
        Some(hint) => PathAndQuery::try_from(probe_path_and_query(Some(hint)))?,
    };
    let mut request = http::Request::new(empty());
    *request.uri_mut() = http::Uri::from(path);
    *request.version_mut() = prober.version;
    if prober.version == http::Version::HTTP_11 {
        // Named here, the pool does not have to format one for every probe.
        request.headers_mut().insert(
            http::header::HOST,
            HeaderValue::from_str(authority.as_str())?,
        );
    }
    let response = prober
        .upstream(worker)
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
