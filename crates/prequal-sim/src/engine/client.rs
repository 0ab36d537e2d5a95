//! A balancing client and what it has in flight: queries, hedged requests, probes, deadlines.
//! Each client drives one [`Balancer`]: the policy picks, the balancer dispatches (ejection,
//! exclusion of the replicas a query tried, slow start), scores every finished try, and admits
//! retries. The engine's client-side events live in the children: `events` (arrivals, picks,
//! dispatch, responses, deadlines, probes and timers), `balancing` (the balancer around each
//! try, retries) and `hedging`.

use std::time::Duration;

use prequal_core::{Balancer, ProbeRequest, ReplicaId, Time};
use rand::rngs::SmallRng;

mod balancing;
mod events;
mod hedging;

use super::expiry::Expiries;
use super::slab::Slab;
use rustc_hash::FxHashMap as IdMap;

/// One query a client has issued and not yet finished.
#[derive(Clone, Copy, Debug)]
struct Slot {
    replica: u32,
    issued: Time,
    dispatched: Option<Time>,
    /// Where the replica keeps the query's work, once it arrived there.
    server_slot: Option<u32>,
    /// The replica's load report carried by the response (`piggyback_reports`).
    report: Option<prequal_core::LoadReport>,
    /// With hedging on, the query this slot is one try of (a key in `Hedging::requests`).
    request: Option<u64>,
    /// Tries of the query so far, this one included (more than one after a retry).
    attempts: u32,
    /// What this try is to its query.
    kind: TryKind,
}

/// A query's first try, a hedge, or a retry of a failed try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TryKind {
    First,
    Hedge,
    Retry,
}

/// A query of a hedging client: its tries (each a [`Slot`]) and its hedging state.
#[derive(Clone, Debug)]
struct Request {
    issued: Time,
    /// When the first try was sent: hedge delays count from there.
    first_sent: Option<Time>,
    /// Tries not settled yet (keys in `Client::queries`).
    tries: Vec<u64>,
    /// Replicas tried so far: a hedge never goes to one of them.
    tried: Vec<ReplicaId>,
    /// Hedges decided so far.
    hedges: u32,
    /// Tries sent or being sent so far (the first, hedges and retries): at most `max_attempts`.
    attempts: u32,
    /// The hedge wake-up armed for this query, if any.
    hedge_at: Option<Time>,
}

/// A client's hedging: its queries and what they cost (the decisions are its balancer's).
struct Hedging {
    requests: Slab<Request>,
    /// Tries sent to replicas (first tries and hedges).
    tries: u64,
}

/// A probe on its way: the request, the network delay its reply will take (drawn when it is
/// sent, so the client knows at once whether it can time out), and the replica's report once
/// computed.
#[derive(Clone, Copy, Debug)]
struct PendingProbe {
    request: ProbeRequest,
    sent: Time,
    reply_delay: Duration,
    report: Option<prequal_core::LoadReport>,
}

/// What a client's balancer did beyond picking, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    pub(super) retries: u64,
    pub(super) retries_refused: u64,
    pub(super) ejections: u64,
}

/// A balancing client: its balancer, its RNG, its queries and probes in flight.
pub(super) struct Client {
    pub(super) balancer: Balancer,
    /// What the policy says once: whether its probe replies need the replica's rates.
    pub(super) reads_probe_rates: bool,
    rng: SmallRng,
    /// Queries in flight; a query's id is its key here.
    queries: Slab<Slot>,
    /// The replicas a query being retried tried before its current try.
    retried: IdMap<u64, Vec<ReplicaId>>,
    pub(super) counts: Counts,
    /// Probes in flight, under the keys their events carry.
    probes: Slab<PendingProbe>,
    /// Replies held back (see `deliver_probe_report`): when each came and its probe, in the
    /// order the queue would give them (by time, then as held back).
    deferred: Vec<(Time, u64)>,
    timer: Option<Time>,
    /// Query deadlines, keyed by query (without hedging) or by request (with it).
    deadlines: Expiries,
    /// Each try's `try_timeout`, keyed by the try's query key.
    try_timeouts: Expiries,
    probe_timeouts: Expiries,
    hedging: Option<Hedging>,
}

impl Client {
    pub(super) fn new(balancer: Balancer, rng: SmallRng, hedging: bool) -> Self {
        Client {
            reads_probe_rates: balancer.policy().reads_probe_rates(),
            balancer,
            rng,
            queries: Slab::default(),
            retried: IdMap::default(),
            counts: Counts::default(),
            probes: Slab::default(),
            deferred: Vec::new(),
            timer: None,
            deadlines: Expiries::default(),
            try_timeouts: Expiries::default(),
            probe_timeouts: Expiries::default(),
            hedging: hedging.then(|| Hedging {
                requests: Slab::default(),
                tries: 0,
            }),
        }
    }

    /// Hands the reply to `probe`, if it came, to the balancer as of `at`, and forgets the
    /// probe; false when there was no reply to hand over.
    fn apply_reply(&mut self, probe: u64, at: Time) -> bool {
        let Some(PendingProbe {
            request,
            report: Some(report),
            ..
        }) = self.probes.remove(probe)
        else {
            return false;
        };
        self.balancer
            .on_probe_reply(&request, &report, at, &mut self.rng);
        true
    }

    /// True when no query, try or hedged request is in flight (a run past its end stops once
    /// every client is; tests check it after a run).
    pub(super) fn is_idle(&self) -> bool {
        self.queries.is_empty()
            && self.retried.is_empty()
            && self.hedging.as_ref().is_none_or(|h| h.requests.is_empty())
    }

    /// This client's hedging counters: (stats, tries sent), when it hedges.
    pub(super) fn hedge_stats(&self) -> Option<(prequal_core::HedgeStats, u64)> {
        let stats = self.balancer.hedger().stats();
        self.hedging.as_ref().map(|h| (stats, h.tries))
    }

    fn open(&mut self, now: Time) -> u64 {
        self.queries.insert(Slot {
            replica: 0,
            issued: now,
            dispatched: None,
            server_slot: None,
            report: None,
            request: None,
            attempts: 1,
            kind: TryKind::First,
        })
    }

    /// True when `query` is still waiting for its response (the replica drops it otherwise).
    pub(super) fn in_flight(&self, query: u64) -> bool {
        self.queries
            .get(query)
            .is_some_and(|s| s.dispatched.is_some())
    }
}
