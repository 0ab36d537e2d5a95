//! The one interface every balancing policy implements: events in, decisions out.
//!
//! A driver (the simulator or the proxy) owns a `Box<dyn Policy>` per client and feeds it:
//!
//! - membership: [`Policy::on_replica_change`];
//! - queries: [`Policy::pick`] returns a [`Pick`]; a policy that must wait for probe replies
//!   first (`prequal-sync`) answers [`Pick::Pending`] and later hands the decision out through
//!   [`Policy::poll_pick`];
//! - feedback: [`Policy::on_dispatch`] when the query is sent, [`Policy::on_complete`] with its
//!   latency and [`Outcome`];
//! - probes: after every event the driver drains [`Policy::poll_probe`] and sends each
//!   [`ProbeRequest`]; replies come back through [`Policy::on_probe_reply`], losses and timeouts
//!   through [`Policy::on_probe_failure`], probes the driver's own bounds kept from being sent
//!   through [`Policy::on_probe_not_sent`]; load reports that arrive unasked (piggybacked on
//!   responses) through [`Policy::on_load_report`];
//! - timers: the driver wakes the policy at [`Policy::poll_timeout`] with
//!   [`Policy::handle_timeout`] (idle probing, polling intervals, sync-mode probe timeouts).
//!
//! Nothing here reads a clock or a global random source: `now` and `rng` are arguments, so the
//! same seed and the same events always give the same decisions.

use std::time::Duration;

use rand::RngCore;

use crate::replica::{ReplicaChange, ReplicaId};
use crate::time::Time;

/// A query's identity, chosen by the driver, unique among the queries in flight at one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct QueryId(pub u64);

/// What the policy is told about a query before it picks a replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// The driver's id for this query.
    pub id: QueryId,
    /// An optional query-specific key (for example a cache key). Sync-mode Prequal copies it
    /// into its probes, so a replica that can serve the query cheaply may report less load.
    pub hint: Option<u64>,
}

/// A policy's answer to [`Policy::pick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Send the query to this replica.
    Replica(ReplicaId),
    /// The decision needs probe replies; it will come out of [`Policy::poll_pick`].
    Pending,
    /// There is no replica to send to.
    NoReplica,
}

/// How a query ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// A successful response.
    Success,
    /// An error response (for HTTP, a 5xx; a refused or reset connection).
    Error,
    /// No response before the deadline.
    Timeout,
    /// Abandoned before the response ended: the client went away, or another try of the same
    /// request (a hedge) answered first. Not a failure by itself: the replica may simply not
    /// have had time. The latency that comes with it is a lower bound. Drivers that want a
    /// long-abandoned try to count against its replica report it as [`Outcome::Timeout`].
    Cancelled,
}

impl Outcome {
    /// True for [`Outcome::Error`] and [`Outcome::Timeout`].
    pub fn is_failure(self) -> bool {
        matches!(self, Outcome::Error | Outcome::Timeout)
    }

    /// What a gRPC status code (the `grpc-status` value, in a response's trailers or in the
    /// head of a trailers-only response) says about the replica that answered:
    /// DEADLINE_EXCEEDED (4) is a timeout; UNKNOWN (2), RESOURCE_EXHAUSTED (8), INTERNAL (13),
    /// UNAVAILABLE (14) and DATA_LOSS (15) are errors; every other code is a success: OK, and
    /// the codes that blame the caller (NOT_FOUND, INVALID_ARGUMENT, PERMISSION_DENIED, ...),
    /// which say nothing against the replica.
    ///
    /// ```
    /// use prequal_core::Outcome;
    /// assert_eq!(Outcome::from_grpc_status(b"0"), Outcome::Success);
    /// assert_eq!(Outcome::from_grpc_status(b"4"), Outcome::Timeout);
    /// assert_eq!(Outcome::from_grpc_status(b"14"), Outcome::Error);
    /// assert_eq!(Outcome::from_grpc_status(b"5"), Outcome::Success);
    /// ```
    pub fn from_grpc_status(code: &[u8]) -> Outcome {
        match code {
            b"4" => Outcome::Timeout,
            b"2" | b"8" | b"13" | b"14" | b"15" => Outcome::Error,
            _ => Outcome::Success,
        }
    }
}

/// Feedback for one finished query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Completion {
    /// The query that finished.
    pub query: QueryId,
    /// Client-observed latency, from dispatch to the end of the response.
    pub latency: Duration,
    /// How it ended.
    pub outcome: Outcome,
}

/// A probe's identity, assigned by the policy that asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ProbeId(pub u64);

/// A probe the policy wants sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeRequest {
    /// Identity, echoed back in [`Policy::on_probe_reply`], [`Policy::on_probe_failure`] and
    /// [`Policy::on_probe_not_sent`].
    pub id: ProbeId,
    /// The replica to probe.
    pub replica: ReplicaId,
    /// Set when the probe serves one query (sync mode).
    pub query: Option<QueryId>,
    /// The query's hint, to be sent with the probe (sync mode).
    pub hint: Option<u64>,
}

/// How a probe ended, as a driver reports it (see [`crate::Balancer::on_probe_end`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ProbeEnd<'a> {
    /// The replica answered: [`Policy::on_probe_reply`].
    Reply(&'a LoadReport),
    /// No usable reply in time (a transport error, a malformed reply, the probe timeout):
    /// [`Policy::on_probe_failure`].
    Failed,
    /// Never sent, by the driver's own bound on probes outstanding or because the replica
    /// left: [`Policy::on_probe_not_sent`].
    NotSent,
}

/// What a replica reports about its load, in a probe reply or piggybacked on a response.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadReport {
    /// Server-local requests in flight.
    pub rif: u32,
    /// The replica's latency estimate at its current RIF.
    #[serde(with = "humantime_serde")]
    pub latency: Duration,
    /// Recent completed queries per second, where the replica reports it (WRR needs it).
    pub qps: Option<f64>,
    /// Recent CPU utilisation as a share of the allocation (1.0 = fully used), where reported.
    pub utilization: Option<f64>,
    /// Recent share of queries that failed, where reported.
    pub error_rate: Option<f64>,
}

/// A read-only view of a policy's state, for admin pages and tests.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Snapshot {
    /// The policy's name, as in its config.
    pub policy: &'static str,
    /// Per-replica state, in id order.
    pub replicas: Vec<ReplicaView>,
    /// The probe pool, for policies that keep one (oldest first).
    pub pool: Vec<PoolEntryView>,
    /// Policy-specific scalars (for Prequal: the current hot RIF threshold, b_reuse).
    pub values: Vec<(&'static str, f64)>,
}

/// One replica in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ReplicaView {
    /// The replica.
    pub id: Option<ReplicaId>,
    /// Client-local requests in flight.
    pub local_rif: u32,
    /// The policy's cost, score or weight for this replica, if it keeps one.
    pub score: Option<f64>,
    /// Queries this policy sent to the replica.
    pub picks: u64,
    /// Whether the policy currently avoids the replica (error aversion).
    pub avoided: bool,
}

/// One probe reply in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PoolEntryView {
    /// The replica that replied.
    pub replica: ReplicaId,
    /// Its reported RIF, plus one for every query this client sent it since.
    pub rif: u32,
    /// Its reported latency estimate, in microseconds.
    pub latency_us: u64,
    /// Age of the reply, in microseconds.
    pub age_us: u64,
    /// Uses left before the reply is removed.
    pub uses_left: u32,
    /// Whether the HCL rule currently ranks it with the hot replies, after every cold one: its
    /// RIF is above the hot threshold, or it is cold but slower than `max_cold_slowdown` times
    /// the fastest hot reply.
    pub hot: bool,
}

/// A load-balancing policy. See the module docs for the event flow.
///
/// Methods other than [`Policy::name`], [`Policy::on_replica_change`], [`Policy::pick`] and
/// [`Policy::snapshot`] default to doing nothing, so a policy implements only the events it
/// uses.
pub trait Policy: Send + std::fmt::Debug {
    /// The policy's config name (`"prequal"`, `"round-robin"`, ...).
    fn name(&self) -> &'static str;

    /// A replica joined or left.
    fn on_replica_change(&mut self, change: ReplicaChange, now: Time);

    /// Chooses a replica for `query`.
    fn pick(&mut self, query: &Query, now: Time, rng: &mut dyn RngCore) -> Pick;

    /// A decision that [`Policy::pick`] left [`Pick::Pending`] and that is now ready.
    fn poll_pick(&mut self, _now: Time, _rng: &mut dyn RngCore) -> Option<(QueryId, Pick)> {
        None
    }

    /// The query was sent to `replica`.
    fn on_dispatch(&mut self, _replica: ReplicaId, _query: QueryId, _now: Time) {}

    /// A query sent to `replica` finished.
    fn on_complete(&mut self, _replica: ReplicaId, _completion: &Completion, _now: Time) {}

    /// The next probe to send, if any. Drivers drain this after every event.
    fn poll_probe(&mut self, _now: Time, _rng: &mut dyn RngCore) -> Option<ProbeRequest> {
        None
    }

    /// How long the driver waits for a probe reply before it reports
    /// [`Policy::on_probe_failure`]; `None` for policies that never probe.
    fn probe_timeout(&self) -> Option<Duration> {
        None
    }

    /// A probe was answered.
    fn on_probe_reply(
        &mut self,
        _probe: &ProbeRequest,
        _report: &LoadReport,
        _now: Time,
        _rng: &mut dyn RngCore,
    ) {
    }

    /// Whether [`Policy::on_probe_reply`] reads a reply's rates (`qps`, `utilization`,
    /// `error_rate`); by default true. A driver that computes replies itself, like the
    /// simulator, may leave them out (`None`) for a policy that does not, and save their
    /// arithmetic on every probe.
    fn reads_probe_rates(&self) -> bool {
        true
    }

    /// A probe failed: no reply before its timeout, a transport error, or a malformed reply.
    fn on_probe_failure(&mut self, _probe: &ProbeRequest, _now: Time) {}

    /// Whether a probe reply, were it reported now, would be *quiet*: it would leave nothing
    /// for [`Policy::poll_pick`] or [`Policy::poll_probe`], would not move
    /// [`Policy::poll_timeout`], and would leave the policy quiet in turn, whatever the reply
    /// says. By default false (no promise).
    ///
    /// A driver may then report the reply later than it came, with the time it came, provided
    /// nothing else reaches the policy in between: the simulator applies such replies just
    /// before the client's next event instead of queueing an event for each.
    fn probe_reply_is_quiet(&self) -> bool {
        false
    }

    /// The driver did not send the probe: its bound on probes outstanding (per replica or in
    /// all) was reached, or the replica left. The probe ends without telling anything about its
    /// replica, so unlike [`Policy::on_probe_failure`] it must not count against it; a policy
    /// that waits for a probe's end (`prequal-sync`) stops waiting for this one. By default
    /// nothing happens.
    fn on_probe_not_sent(&mut self, _probe: &ProbeRequest, _now: Time) {}

    /// A replica reported its load without being probed (piggybacked on a response).
    fn on_load_report(&mut self, _replica: ReplicaId, _report: &LoadReport, _now: Time) {}

    /// When the policy next wants [`Policy::handle_timeout`], if ever.
    fn poll_timeout(&self) -> Option<Time> {
        None
    }

    /// Called at (or after) the time [`Policy::poll_timeout`] returned.
    fn handle_timeout(&mut self, _now: Time, _rng: &mut dyn RngCore) {}

    /// A read-only view of the policy's state.
    fn snapshot(&self, now: Time) -> Snapshot;
}
