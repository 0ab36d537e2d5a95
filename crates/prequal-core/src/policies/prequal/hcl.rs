//! The hot-cold lexicographic (HCL) rule and its RIF-quantile estimate.
//!
//! The client keeps the RIF values of its most recent [`HISTORY_LEN`] probe replies (about 40
//! queries' worth at the default three probes per query: recent enough to follow load, large
//! enough that the 0.84 quantile is not one sample's whim). A reply is *hot* when its RIF is
//! above the `q_rif` quantile of that history (nearest-rank), *cold* otherwise. Selection is
//! lexicographic: if any reply is cold, the cold reply with the lowest latency wins (ties to the
//! lower RIF); if all are hot, the lowest RIF wins (ties to the lower latency). The two ends are
//! exact: `q_rif = 1` calls nothing hot (latency-only control) and `q_rif = 0` calls everything
//! hot (RIF-only control). Prequal paper, section 4, "Replica selection".
//!
//! Our addition, the **latency band** (`latency_band`, default 2.5; 0 is the paper's rule):
//! cold replies whose latency is within `1 + band` times the lowest cold latency in the pool
//! rank first, by expected delay (below) or, with `band_ranks_by_delay = false`, by RIF (ties
//! to the lower latency); cold replies beyond the band still rank by latency after them. The
//! band is `latency_band` scaled by the share of the replicas the pool can hold
//! (`min(1, m / n)`): full when every pick sees (nearly) the whole cluster, as in small
//! clusters, a sixth of it with the paper's 16-reply pool over 100 replicas. Why: when every client sees every replica, the cold pick sends each
//! query to the replica with the lowest latency, so the fastest replicas are filled until
//! they queue (the hot threshold stops it late), and independent clients all pick the same
//! replica; a RIF is exact and current where a latency median is a few queries old, so among
//! comparable latencies the lower RIF is the better guess. With a pool that samples a large
//! cluster the picks are spread already and the latency differences carry more information.
//! docs/policies.md has the evidence.
//!
//! Inside the band, by default (`band_ranks_by_delay`), replies rank by their *expected delay*:
//! this client's recent latency from the replica (an exponentially weighted mean of its
//! successful queries there, [`OBSERVED_WEIGHT`]) × (1 + RIF / `delay_concurrency`): the
//! queries ahead of a new one, worked off `delay_concurrency` (default 2) at a time (ties to
//! the lower latency). With 1 it is the score of Traefik's `leasttime` with the probed RIF in
//! place of the client's own count; a replica that serves several queries at once (a thread
//! pool) makes a new query wait less than a whole service time for each one ahead, and a larger
//! value lets a fast replica with a few queries in flight win over a slow idle one. A replica
//! with fewer than [`MIN_OBSERVED`] of this client's queries seen counts as fast as the mean of
//! those known, so that one slow first answer (a connection being set up) does not brand it,
//! and with none known the RIF alone decides. Both signals are needed: the RIF says how busy a
//! replica is across all clients, and the observed latency how fast it works through its
//! queue, which a probe's latency median, taken at whatever RIF the replica had, tells poorly.
//! With `band_ranks_by_delay = false` the band ranks by RIF alone (ties to the lower latency),
//! as before this rule.
//!
//! With `hot_by_work` (on by default; false is the paper's test), every RIF the rule reads, in
//! the history and in each reply, is first weighed by the replica's speed (`Hcl::hot_rif`): the
//! work queued there in units of a typical query, so that on replicas of mixed speeds a fast
//! replica's naturally higher RIF does not make it hot more often than a slow replica holding
//! more work.

use std::time::Duration;

use crate::config::build_policy::ConfigError;
use crate::policies::probing::aversion::ReplicaLoad;
use crate::policies::probing::engine::{Rank, Rule};
use crate::policies::probing::pool::{Entry, Pool};
use crate::policy::{Completion, LoadReport, Outcome};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::{Time, duration_nanos};

/// How many recent reply RIFs the quantile is estimated from.
pub const HISTORY_LEN: usize = 128;

/// Weight of one successful query in a replica's observed latency, an exponentially weighted
/// mean over about the last 200 of this client's queries there (2/w − 1): long enough that the
/// noise of heavy-tailed service times does not tell identical replicas apart (a weight of 0.05,
/// about 40 queries, left one balancer's median on 20 identical replicas 26-32% above
/// least-loaded's; docs/policies.md).
pub const OBSERVED_WEIGHT: f64 = 0.01;

/// Which RIF values count as hot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// Nothing is hot (`q_rif = 1`, or no history yet).
    AllCold,
    /// Everything is hot (`q_rif = 0`).
    AllHot,
    /// A RIF above this value is hot.
    Above(u32),
}

impl Threshold {
    /// Whether a reply with this RIF is hot.
    pub fn is_hot(self, rif: u32) -> bool {
        i64::from(rif) > self.hot_above()
    }

    /// The RIF above which a reply is hot, as one number for a comparison without a `match`:
    /// −1 when everything is hot, `i64::MAX` (above every RIF) when nothing is.
    pub fn hot_above(self) -> i64 {
        match self {
            Threshold::AllCold => i64::MAX,
            Threshold::AllHot => -1,
            Threshold::Above(limit) => i64::from(limit),
        }
    }

    /// The threshold as a number for snapshots (infinite when nothing can be hot, −1 when
    /// everything is; snapshots leave out the infinite case).
    pub fn as_f64(self) -> f64 {
        match self {
            Threshold::AllCold => f64::INFINITY,
            Threshold::AllHot => -1.0,
            Threshold::Above(limit) => f64::from(limit),
        }
    }
}

/// RIF values below this are counted in a dense array; larger ones in a sorted list.
const DENSE: usize = 64;
// The dense counts are bytes.
const _: () = assert!(HISTORY_LEN <= u8::MAX as usize);

/// A bounded history of recently reported RIF values.
///
/// The values are kept twice: in arrival order, to know which to forget, and as a multiset, so
/// a quantile is a walk over counts instead of a sort of the whole history on every decision.
/// The multiset counts small values (the common case: a balanced replica has a handful of
/// requests in flight) in a dense array indexed by value, and larger ones as (value, count)
/// pairs in increasing order.
#[derive(Clone, Debug)]
pub struct RifHistory {
    /// The values in arrival order, as a ring: the oldest at `next` once it is full (a fixed
    /// array, cheaper to push to than a growable deque).
    recent: [u32; HISTORY_LEN],
    /// How many values are held (at most [`HISTORY_LEN`]).
    len: usize,
    /// Where the next value goes: past the newest, on the oldest once the ring is full.
    next: usize,
    /// `dense[v]` = how many held values equal `v`, for `v < DENSE` (at most `HISTORY_LEN`).
    dense: [u8; DENSE],
    /// How many held values are below `DENSE`.
    dense_total: usize,
    /// Distinct values of at least `DENSE`, increasing, each with its count.
    sparse: Vec<(u32, usize)>,
}

impl Default for RifHistory {
    fn default() -> Self {
        Self {
            recent: [0; HISTORY_LEN],
            len: 0,
            next: 0,
            dense: [0; DENSE],
            dense_total: 0,
            sparse: Vec::new(),
        }
    }
}

impl RifHistory {
    /// Records a reported RIF, forgetting the oldest beyond [`HISTORY_LEN`].
    pub fn push(&mut self, rif: u32) {
        if self.len == HISTORY_LEN {
            self.forget(self.recent[self.next]);
        } else {
            self.len += 1;
        }
        self.recent[self.next] = rif;
        self.next = (self.next + 1) % HISTORY_LEN;
        if let Some(count) = self.dense.get_mut(rif as usize) {
            *count += 1;
            self.dense_total += 1;
            return;
        }
        match self.sparse.binary_search_by_key(&rif, |&(value, _)| value) {
            Ok(i) => self.sparse[i].1 += 1,
            Err(i) => self.sparse.insert(i, (rif, 1)),
        }
    }

    fn forget(&mut self, value: u32) {
        if let Some(count) = self.dense.get_mut(value as usize) {
            *count -= 1;
            self.dense_total -= 1;
            return;
        }
        if let Ok(i) = self.sparse.binary_search_by_key(&value, |&(v, _)| v) {
            self.sparse[i].1 -= 1;
            if self.sparse[i].1 == 0 {
                self.sparse.remove(i);
            }
        }
    }

    /// Number of values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hot threshold for quantile `q` (nearest-rank: the smallest value with at least a
    /// share `q` of the history at or below it).
    pub fn threshold(&self, q: f64) -> Threshold {
        if q >= 1.0 || self.is_empty() {
            return Threshold::AllCold;
        }
        if q <= 0.0 {
            return Threshold::AllHot;
        }
        let len = self.len;
        // The ceiling of q·len (0 < q < 1, so 0 < q·len < len) without a libm `ceil`.
        let scaled = q * len as f64;
        let whole = scaled as usize;
        let rank = (whole + usize::from((whole as f64) < scaled)).clamp(1, len);
        if rank <= self.dense_total {
            let mut seen = 0;
            for (value, &count) in self.dense.iter().enumerate() {
                seen += usize::from(count);
                if seen >= rank {
                    return Threshold::Above(value as u32);
                }
            }
        }
        let mut seen = self.dense_total;
        for &(value, count) in &self.sparse {
            seen += count;
            if seen >= rank {
                return Threshold::Above(value);
            }
        }
        Threshold::AllCold
    }
}

/// Subtracted from the RIF of a cold reply inside the latency band so its rank key sorts
/// before every latency (which is >= 0) and keeps the RIF order among the band.
const IN_BAND: f64 = 1e12;

/// The HCL rank of a reply with `rif` and `latency` under `threshold`; with a band `ceiling`,
/// cold replies at or below it rank first, by RIF.
pub fn hcl_rank(
    threshold: Threshold,
    ceiling: Option<Duration>,
    rif: u32,
    latency: Duration,
) -> Rank {
    let hot = threshold.is_hot(rif);
    let in_band = !hot && ceiling.is_some_and(|c| latency <= c);
    let latency = latency.as_secs_f64();
    let rif = f64::from(rif);
    if hot {
        Rank {
            hot: true,
            key: rif,
            tie: latency,
        }
    } else if in_band {
        Rank {
            hot: false,
            key: rif - IN_BAND,
            tie: latency,
        }
    } else {
        Rank {
            hot: false,
            key: latency,
            tie: rif,
        }
    }
}

/// [`hcl_rank`] under `cx` as one integer, ordered the same way: the hot flag in the top bit,
/// then the main signal and the other one below it (latency as whole nanoseconds, 64 bits; RIF,
/// 32). Takes the latency in nanoseconds ([`duration_nanos`]), which pool entries hold ready.
/// Exact where the rank's float latency is (below 2^53 ns, about 104 days); beyond, the key
/// still tells latencies apart where the float rounds them together.
///
/// `band_delay_ns`, when given, is the reply's expected delay, by which it ranks if it falls in
/// the band (ties to the lower latency; below every latency key, like a RIF); without it a reply
/// in the band ranks by RIF.
pub fn hcl_key(cx: &HclContext, rif: u32, latency_ns: u64, band_delay_ns: Option<u64>) -> u128 {
    let hot = i64::from(rif) > cx.hot_above;
    let in_band = cx.in_band(rif, latency_ns);
    let slow = !hot && latency_ns > cx.slow_cold_ns;
    let latency = u128::from(latency_ns);
    let rif = u128::from(rif);
    // Every case computed and one selected: the pick folds this over the pool, where branches
    // on the cases would mispredict.
    let hot_key = 1 << 127 | rif << 64 | latency;
    // After every hot key (whose RIF, below 2^32, never reaches bit 126), by latency alone.
    let slow_key = 1 << 127 | 1 << 126 | latency;
    // A delay is held below 2^62 (146 years), so its key stays below the cold keys' bit 126.
    let band_key = match band_delay_ns {
        Some(delay) => u128::from(delay.min(MAX_DELAY_NS)) << 64 | latency,
        None => rif << 64 | latency,
    };
    let cold_key = 1 << 126 | latency << 32 | rif;
    let key = if in_band { band_key } else { cold_key };
    let key = if slow { slow_key } else { key };
    if hot { hot_key } else { key }
}

/// [`hcl_rank`] under `cx`, with its limit on slow cold replies: a cold reply slower than
/// [`HclContext::slow_cold`] ranks after every hot one, by latency alone; and with
/// `band_delay`, a reply in the band ranks by that expected delay (ties to the lower latency)
/// instead of by RIF. Orders as [`hcl_key`] does.
pub fn hcl_rank_in(
    cx: &HclContext,
    rif: u32,
    latency: Duration,
    band_delay: Option<Duration>,
) -> Rank {
    let hot = cx.threshold.is_hot(rif);
    if !hot && cx.slow_cold.is_some_and(|limit| latency > limit) {
        // After every hot reply (whose key is a RIF), by latency alone.
        return Rank {
            hot: true,
            key: f64::INFINITY,
            tie: latency.as_secs_f64(),
        };
    }
    let in_band = !hot && cx.ceiling.is_some_and(|c| latency <= c);
    if let (true, Some(delay)) = (in_band, band_delay) {
        // Below every latency key (>= 0) and increasing with the delay; distinct for any two
        // delays below about 2^50 ns (13 days).
        return Rank {
            hot: false,
            key: -1.0 / (1.0 + duration_nanos(delay) as f64),
            tie: latency.as_secs_f64(),
        };
    }
    hcl_rank(cx.threshold, cx.ceiling, rif, latency)
}

/// How many of a replica's successful queries this client must have seen before their mean
/// stands for the replica's speed; until then the replica counts as fast as the mean of those
/// known.
pub const MIN_OBSERVED: u32 = 8;

/// The latency one client observed from one replica: a weighted mean of its successful queries
/// there. The first ones are plainly averaged (each of the first n weighs 1/n until that falls to
/// [`OBSERVED_WEIGHT`]), so that the first answer, which may carry a connection's set-up, does
/// not linger as the replica's speed.
#[derive(Clone, Copy, Debug, Default)]
struct Observed {
    /// The mean, in nanoseconds.
    latency_ns: f64,
    /// Successful queries seen, up to the count past which the weight stays fixed.
    count: u32,
}

impl Observed {
    /// The mean, once [`MIN_OBSERVED`] queries were seen.
    fn known_ns(&self) -> Option<f64> {
        (self.count >= MIN_OBSERVED).then_some(self.latency_ns)
    }

    fn record(&mut self, latency_ns: f64) {
        // Past this many answers 1/n is below the fixed weight and the count stops.
        const WARM: u32 = (1.0 / OBSERVED_WEIGHT) as u32;
        self.count = (self.count + 1).min(WARM);
        let weight = (1.0 / f64::from(self.count)).max(OBSERVED_WEIGHT);
        self.latency_ns += weight * (latency_ns - self.latency_ns);
    }
}

/// What HCL reads of one reply whatever the decision's context ([`Rule::Facts`]): worked out
/// once per decision, for the context's pass over the pool and for every key.
#[derive(Clone, Copy, Debug, Default)]
pub struct HclFacts {
    /// The latency the reply ranks by (`Hcl::latency_ns`).
    latency_ns: u64,
    /// The RIF the hot test reads (`Hcl::hot_rif`).
    hot_rif: u32,
    /// This client's observed latency from the replica, once known (`MIN_OBSERVED`).
    known_ns: Option<f64>,
}

/// [`Hcl::hot_rif`] of a reply reporting `rif` from a replica whose observed latency is
/// `known_ns`, if known.
fn rif_as_work(scale: f64, rif: u32, known_ns: Option<f64>) -> u32 {
    if scale == 0.0 {
        return rif;
    }
    let Some(observed) = known_ns else {
        return rif;
    };
    // Rounded to the nearest whole query without a call to `round` (the value is never
    // negative; a product that lands on a half may go either way by its last bit). A
    // float-to-integer cast saturates: no overflow whatever the ratio.
    (f64::from(rif) * observed * scale + 0.5) as u32
}

/// The largest expected delay [`hcl_key`] tells apart, in nanoseconds.
const MAX_DELAY_NS: u64 = (1 << 62) - 1;

/// What HCL computes once per decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HclContext {
    /// Which RIFs are hot.
    pub threshold: Threshold,
    /// The top of the latency band: cold replies at or below it rank by RIF (None: no band).
    pub ceiling: Option<Duration>,
    /// Cold replies slower than this rank after every hot one (None: no limit, the paper's
    /// rule).
    pub slow_cold: Option<Duration>,
    /// [`Threshold::hot_above`] of `threshold`, for [`hcl_key`].
    hot_above: i64,
    /// `ceiling` in whole nanoseconds, for [`hcl_key`]; with no band, a value no latency is at
    /// or below.
    ceiling_ns: i128,
    /// `slow_cold` in whole nanoseconds, for [`hcl_key`]; with no limit, `u64::MAX`.
    slow_cold_ns: u64,
    /// With `hot_by_work`, 1 / the known replicas' mean observed latency in nanoseconds, taken
    /// once per decision (`Hcl::hot_rif`); 0 reads every RIF as reported.
    work_scale: f64,
}

impl HclContext {
    /// The context for `threshold` and `ceiling`, with no limit on slow cold replies.
    pub fn new(threshold: Threshold, ceiling: Option<Duration>) -> Self {
        Self {
            threshold,
            ceiling,
            slow_cold: None,
            hot_above: threshold.hot_above(),
            ceiling_ns: ceiling.map_or(-1, |c| i128::from(duration_nanos(c))),
            slow_cold_ns: u64::MAX,
            work_scale: 0.0,
        }
    }

    /// Whether a reply with `rif` and a ranked latency of `latency_ns` falls in the band.
    pub fn in_band(&self, rif: u32, latency_ns: u64) -> bool {
        i64::from(rif) <= self.hot_above && i128::from(latency_ns) <= self.ceiling_ns
    }

    /// The same context, reading each RIF as work queued with `scale` (0: as reported).
    fn with_work_scale(self, scale: f64) -> Self {
        Self {
            work_scale: scale,
            ..self
        }
    }

    /// The same context, with cold replies slower than `limit` ranking after every hot one.
    pub fn with_slow_cold(self, limit: Option<Duration>) -> Self {
        Self {
            slow_cold: limit,
            slow_cold_ns: limit.map_or(u64::MAX, duration_nanos),
            ..self
        }
    }
}

/// Checks that `q_rif` is a quantile.
pub fn validate_q_rif(policy: &'static str, q_rif: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&q_rif) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            policy,
            "q_rif",
            format!("must be between 0 and 1, got {q_rif}"),
        ))
    }
}

/// The HCL selection rule for the async engine.
#[derive(Clone, Debug)]
pub struct Hcl {
    q_rif: f64,
    latency_band: f64,
    own_queries_raise_latency: bool,
    max_cold_slowdown: f64,
    /// Whether replies in the band rank by expected delay (else by RIF).
    band_ranks_by_delay: bool,
    /// 1 / `delay_concurrency`: each query ahead adds this share of the observed latency to
    /// the expected delay.
    delay_per_rif: f64,
    /// `delay_power`: the power the queueing factor (1 + RIF / `delay_concurrency`) is raised
    /// to; 1 ranks by this query's own expected delay, 2 also by what it adds to the queries
    /// after it.
    delay_power: f64,
    /// Whether the hot test reads a reply's RIF weighed by its replica's observed speed
    /// (`Hcl::hot_rif`).
    hot_by_work: bool,
    /// Replicas known (for the pool's coverage of the cluster).
    replicas: usize,
    history: RifHistory,
    /// Per replica, what this client observed of its successful queries there.
    observed: Replicas<Observed>,
    /// The sum of the known replicas' observed latencies ([`Observed::known_ns`]), and how many
    /// they are: their mean stands in for a replica not known yet.
    known_sum_ns: f64,
    known: u32,
}

impl Hcl {
    /// The rule with quantile `q_rif` (in [0, 1]), latency band `latency_band` (>= 0; 0 is
    /// the paper's rule) and `own_queries_raise_latency` (false is the paper's rule), with no
    /// limit on slow cold replies (the paper's rule; see [`Hcl::with_max_cold_slowdown`]).
    pub fn new(q_rif: f64, latency_band: f64, own_queries_raise_latency: bool) -> Self {
        Self {
            q_rif,
            latency_band,
            own_queries_raise_latency,
            max_cold_slowdown: 0.0,
            band_ranks_by_delay: false,
            delay_per_rif: 1.0,
            delay_power: 1.0,
            hot_by_work: false,
            replicas: 0,
            history: RifHistory::default(),
            observed: Replicas::new(),
            known_sum_ns: 0.0,
            known: 0,
        }
    }

    /// The same rule, where replies in the latency band rank by expected delay (this client's
    /// observed latency from the replica × (RIF + 1)) instead of by RIF.
    pub fn with_band_ranks_by_delay(self, by_delay: bool) -> Self {
        Self {
            band_ranks_by_delay: by_delay,
            ..self
        }
    }

    /// The same rule, where the band's expected delay takes a replica to serve `concurrency`
    /// queries at once: observed latency × (1 + RIF / `concurrency`) (> 0; 1 is Traefik's
    /// `leasttime` score).
    pub fn with_delay_concurrency(self, concurrency: f64) -> Self {
        Self {
            delay_per_rif: 1.0 / concurrency,
            ..self
        }
    }

    /// The same rule, where the band ranks by observed latency × (1 + RIF /
    /// `delay_concurrency`) ^ `power` (> 0; 1 is the expected delay of the query itself).
    /// With 2 it is the delay the query adds in all, its own and that of the queries after it:
    /// at a single-server queue holding n queries on average, a query's own delay is the
    /// service time × (1 + n) and the total delay grows with the arrival rate at the service
    /// time × (1 + n)² (docs/policies.md, "Prequal in one page").
    pub fn with_delay_power(self, power: f64) -> Self {
        Self {
            delay_power: power,
            ..self
        }
    }

    /// The same rule, where the hot test reads each reply's RIF as the work queued at its
    /// replica (`Hcl::hot_rif`) rather than the count of queries.
    pub fn with_hot_by_work(self, hot_by_work: bool) -> Self {
        Self {
            hot_by_work,
            ..self
        }
    }

    /// 1 / the known replicas' mean observed latency, in nanoseconds, with `hot_by_work`; 0
    /// without it or while no replica is known ([`Hcl::hot_rif`] then reads every RIF as
    /// reported).
    fn work_scale(&self) -> f64 {
        if !self.hot_by_work || self.known == 0 || self.known_sum_ns <= 0.0 {
            return 0.0;
        }
        f64::from(self.known) / self.known_sum_ns
    }

    /// The RIF the hot test reads for a reply from `replica` reporting `rif`, `scale` being
    /// [`Hcl::work_scale`]: the RIF itself, or, with `hot_by_work`, the RIF × this client's
    /// observed latency from the replica / the known replicas' mean, rounded: the work queued
    /// there in units of a typical query. A replica three times as fast as the mean with three
    /// queries in flight has about one typical query's work queued. Replicas serve their
    /// queries at different speeds, and a fast replica's RIF is naturally higher, so by the raw
    /// count it is hot more often than a slow one holding more work. A replica not known yet
    /// ([`MIN_OBSERVED`]), or any when none is, counts at the mean: its RIF as reported.
    fn hot_rif(&self, scale: f64, replica: ReplicaId, rif: u32) -> u32 {
        if scale == 0.0 {
            return rif;
        }
        rif_as_work(scale, rif, self.known_ns(replica))
    }

    /// This client's observed latency from `replica`, once known ([`MIN_OBSERVED`]).
    fn known_ns(&self, replica: ReplicaId) -> Option<f64> {
        self.observed.get(replica).and_then(Observed::known_ns)
    }

    /// What the rule reads of `entry` with the decision's work scale `scale`
    /// ([`Hcl::work_scale`]), the replica looked up once for the hot test and the band's delay.
    #[inline]
    fn facts_at(&self, scale: f64, entry: &Entry) -> HclFacts {
        // The rule's replicas are the engine's, in the same order: the entry's slot in the
        // engine's set is the replica's position here too (checked).
        let known_ns = self
            .observed
            .get_hinted(entry.replica, entry.slot)
            .and_then(Observed::known_ns);
        HclFacts {
            latency_ns: self.latency_ns(entry),
            hot_rif: rif_as_work(scale, entry.rif, known_ns),
            known_ns,
        }
    }

    /// Takes a replica's known latency out of the sum of the known ones.
    fn forget_known(&mut self, latency_ns: f64) {
        self.known -= 1;
        self.known_sum_ns = if self.known == 0 {
            0.0
        } else {
            self.known_sum_ns - latency_ns
        };
    }

    /// The expected delay a reply ranks by if it falls in the band (None when it does not, or
    /// when the band ranks by RIF): the replica's observed latency, or the known replicas'
    /// mean where it is not known yet ([`MIN_OBSERVED`]), × (1 + RIF / `delay_concurrency`).
    fn band_delay_ns(&self, cx: &HclContext, entry: &Entry, facts: &HclFacts) -> Option<u64> {
        if !self.band_ranks_by_delay || !cx.in_band(facts.hot_rif, facts.latency_ns) {
            return None;
        }
        // A replica not known yet counts as fast as the known ones on average; with none known
        // every reply in the band has the same speed (any one: a millisecond keeps the RIFs
        // apart in whole nanoseconds whatever `delay_concurrency`), and the RIF alone orders them.
        let typical = if self.known > 0 {
            self.known_sum_ns / f64::from(self.known)
        } else {
            1e6
        };
        let observed = facts.known_ns.unwrap_or(typical);
        let factor = 1.0 + f64::from(entry.rif) * self.delay_per_rif;
        let factor = if self.delay_power == 1.0 {
            factor
        } else {
            factor.powf(self.delay_power)
        };
        // A float-to-integer cast saturates: no overflow whatever the latency.
        Some((observed * factor) as u64)
    }

    /// The same rule, where a cold reply more than `slowdown` times slower than the fastest
    /// hot reply in the pool ranks after every hot one (0: no limit).
    pub fn with_max_cold_slowdown(self, slowdown: f64) -> Self {
        Self {
            max_cold_slowdown: slowdown,
            ..self
        }
    }

    /// The latency a reply is ranked by: as reported, or, with `own_queries_raise_latency`,
    /// grown with this client's queries sent on it that have not finished
    /// ([`Entry::latency_with_own_queries_ns`]).
    fn latency_ns(&self, entry: &Entry) -> u64 {
        if self.own_queries_raise_latency {
            entry.latency_with_own_queries_ns()
        } else {
            entry.latency_ns
        }
    }
}

impl Rule for Hcl {
    type Context = HclContext;
    const NAME: &'static str = "prequal";
    const READS_LOAD: bool = false;
    const READS_RATES: bool = false;

    fn on_reply(&mut self, replica: ReplicaId, report: &LoadReport, _now: Time) {
        self.history
            .push(self.hot_rif(self.work_scale(), replica, report.rif));
    }

    fn context(&self) -> HclContext {
        HclContext::new(self.history.threshold(self.q_rif), None).with_work_scale(self.work_scale())
    }

    fn on_replica_change(&mut self, change: ReplicaChange) {
        match change {
            ReplicaChange::Insert(id) => {
                self.replicas += 1;
                self.observed.insert(id, Observed::default());
            }
            ReplicaChange::Remove(id) => {
                self.replicas = self.replicas.saturating_sub(1);
                if let Some(known) = self.observed.remove(id).and_then(|o| o.known_ns()) {
                    self.forget_known(known);
                }
            }
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, completion: &Completion) {
        let reads_observed = self.band_ranks_by_delay || self.hot_by_work;
        if !reads_observed || completion.outcome != Outcome::Success {
            // A failure's time says nothing of how fast the replica serves.
            return;
        }
        let Some(observed) = self.observed.get_mut(replica) else {
            return;
        };
        let before = observed.known_ns();
        observed.record(duration_nanos(completion.latency) as f64);
        let after = observed.known_ns();
        if let Some(known) = before {
            self.forget_known(known);
        }
        if let Some(known) = after {
            self.known_sum_ns += known;
            self.known += 1;
        }
    }

    type Facts = HclFacts;

    fn context_for(&self, pool: &Pool) -> HclContext {
        self.prepare(pool, &mut Vec::with_capacity(pool.len()))
    }

    fn prepare(&self, pool: &Pool, facts: &mut Vec<HclFacts>) -> HclContext {
        let threshold = self.history.threshold(self.q_rif);
        let coverage = if self.replicas == 0 {
            1.0
        } else {
            (pool.capacity() as f64 / self.replicas as f64).min(1.0)
        };
        let band = self.latency_band * coverage;
        let scale = self.work_scale();
        let start = facts.len();
        facts.extend(pool.iter().map(|entry| self.facts_at(scale, entry)));
        // The fastest cold and the fastest hot latency, in a pass over the facts (tighter than
        // one fused with working them out), indexed by the hot flag without a branch: `seen`
        // has bit 0 set once a cold reply came, bit 1 once a hot one did. (Without a band or a
        // slowdown limit neither is read.)
        let (mut fastest, mut seen) = ([u64::MAX; 2], 0_u8);
        for reply in &facts[start..] {
            let hot = usize::from(threshold.is_hot(reply.hot_rif));
            fastest[hot] = fastest[hot].min(reply.latency_ns);
            seen |= 1 << hot;
        }
        let fastest_cold = Some(fastest[0]).filter(|_| seen & 1 != 0);
        let fastest_hot = Some(fastest[1]).filter(|_| seen & 2 != 0);
        let ceiling = fastest_cold
            .filter(|_| band > 0.0)
            .map(|fastest| Duration::from_nanos(fastest).mul_f64(1.0 + band));
        // An idle replica is cold whatever its speed; past this it is not worth being idle. A
        // float-to-integer cast saturates: no overflow whatever the factor.
        let slow_cold = fastest_hot
            .filter(|_| self.max_cold_slowdown > 0.0)
            .map(|fastest| Duration::from_nanos((fastest as f64 * self.max_cold_slowdown) as u64));
        HclContext::new(threshold, ceiling)
            .with_slow_cold(slow_cold)
            .with_work_scale(scale)
    }

    fn rank(&self, cx: &HclContext, entry: &Entry, _load: &ReplicaLoad) -> Rank {
        let facts = self.facts_at(cx.work_scale, entry);
        let delay = self.band_delay_ns(cx, entry, &facts);
        hcl_rank_in(
            cx,
            facts.hot_rif,
            Duration::from_nanos(facts.latency_ns),
            delay.map(Duration::from_nanos),
        )
    }

    type Key = u128;

    fn key(&self, cx: &HclContext, entry: &Entry, load: &ReplicaLoad) -> u128 {
        self.key_from(cx, entry, &self.facts_at(cx.work_scale, entry), load)
    }

    fn key_from(
        &self,
        cx: &HclContext,
        entry: &Entry,
        facts: &HclFacts,
        _load: &ReplicaLoad,
    ) -> u128 {
        let delay = self.band_delay_ns(cx, entry, facts);
        hcl_key(cx, facts.hot_rif, facts.latency_ns, delay)
    }

    fn values(&self, cx: &HclContext) -> Vec<(&'static str, f64)> {
        let mut values = vec![
            ("q_rif", self.q_rif),
            ("latency_band", self.latency_band),
            (
                "own_queries_raise_latency",
                f64::from(u8::from(self.own_queries_raise_latency)),
            ),
            ("max_cold_slowdown", self.max_cold_slowdown),
            (
                "band_ranks_by_delay",
                f64::from(u8::from(self.band_ranks_by_delay)),
            ),
            ("delay_concurrency", 1.0 / self.delay_per_rif),
            ("delay_power", self.delay_power),
            ("hot_by_work", f64::from(u8::from(self.hot_by_work))),
        ];
        if cx.threshold != Threshold::AllCold {
            values.push(("hot_rif_threshold", cx.threshold.as_f64()));
        }
        if let Some(c) = cx.ceiling {
            values.push(("latency_band_ceiling_s", c.as_secs_f64()));
        }
        if let Some(limit) = cx.slow_cold {
            values.push(("slow_cold_latency_s", limit.as_secs_f64()));
        }
        values
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn history(values: &[u32]) -> RifHistory {
        let mut h = RifHistory::default();
        for v in values {
            h.push(*v);
        }
        h
    }

    #[test]
    fn a_replica_observed_latency_averages_its_first_answers_then_weighs_each_at_the_fixed_weight()
    {
        let mut observed = Observed::default();
        assert_eq!(observed.known_ns(), None);
        // A slow first answer (a connection's set-up), then ten of 10 ms: a plain mean, known
        // once MIN_OBSERVED answers came.
        observed.record(100e6);
        for n in 1..=10 {
            observed.record(10e6);
            assert_eq!(observed.known_ns().is_some(), n + 1 >= MIN_OBSERVED, "{n}");
        }
        let mean = observed.known_ns().unwrap();
        assert!((mean - 200e6 / 11.0).abs() < 1.0, "{mean}");
        // Past 1 / OBSERVED_WEIGHT answers each weighs OBSERVED_WEIGHT.
        for _ in 0..1000 {
            observed.record(10e6);
        }
        let before = observed.known_ns().unwrap();
        observed.record(before + 1e6);
        let moved = observed.known_ns().unwrap() - before;
        assert!((moved - OBSERVED_WEIGHT * 1e6).abs() < 1e-3, "{moved}");
    }

    #[test]
    fn quantile_is_nearest_rank_and_bounded() {
        let h = history(&[5, 1, 4, 2, 3, 6, 7, 8, 9, 10]);
        assert_eq!(h.threshold(0.84), Threshold::Above(9));
        assert_eq!(h.threshold(0.5), Threshold::Above(5));
        assert_eq!(h.threshold(0.01), Threshold::Above(1));
        assert_eq!(h.threshold(1.0), Threshold::AllCold);
        assert_eq!(h.threshold(0.0), Threshold::AllHot);
        assert_eq!(RifHistory::default().threshold(0.5), Threshold::AllCold);
        let mut long = RifHistory::default();
        for v in 0..1000 {
            long.push(v);
        }
        assert_eq!(long.len(), HISTORY_LEN);
        assert_eq!(
            long.threshold(0.01),
            Threshold::Above(1000 - HISTORY_LEN as u32 + 1)
        );
    }

    #[test]
    fn cold_beats_hot_and_each_side_sorts_on_its_own_signal() {
        let t = Threshold::Above(3);
        let ms = Duration::from_millis;
        let cold_slow = hcl_rank(t, None, 3, ms(90));
        let cold_fast = hcl_rank(t, None, 2, ms(10));
        let hot_light = hcl_rank(t, None, 4, ms(1));
        let hot_heavy = hcl_rank(t, None, 9, ms(1));
        assert!(cold_fast.order(&cold_slow).is_lt());
        assert!(cold_slow.order(&hot_light).is_lt());
        assert!(hot_light.order(&hot_heavy).is_lt());
    }

    #[test]
    fn a_cold_reply_past_the_slowdown_limit_ranks_after_every_hot_one() {
        let t = Threshold::Above(3);
        let ms = Duration::from_millis;
        let cx = HclContext::new(t, None).with_slow_cold(Some(ms(100)));
        let cold_slow = hcl_rank_in(&cx, 0, ms(101), None);
        let cold_slower = hcl_rank_in(&cx, 0, ms(500), None);
        let cold_at_limit = hcl_rank_in(&cx, 1, ms(100), None);
        let hot_heavy = hcl_rank_in(&cx, 40, ms(20), None);
        assert!(cold_at_limit.order(&hot_heavy).is_lt());
        assert!(hot_heavy.order(&cold_slow).is_lt());
        assert!(cold_slow.order(&cold_slower).is_lt());
        for (rif, latency) in [(0, 101), (0, 500), (1, 100), (40, 20)] {
            assert_eq!(
                hcl_rank_in(&cx, rif, ms(latency), None).hot,
                rif > 3 || latency > 100,
                "{rif} {latency}"
            );
        }
    }

    #[test]
    fn inside_the_latency_band_the_lower_rif_wins() {
        let t = Threshold::Above(8);
        let ms = Duration::from_millis;
        let band = Some(ms(12));
        let fastest_busy = hcl_rank(t, band, 6, ms(10));
        let near_idle = hcl_rank(t, band, 1, ms(12));
        let slow_idle = hcl_rank(t, band, 0, ms(13));
        let hot = hcl_rank(t, band, 9, ms(1));
        assert!(
            near_idle.order(&fastest_busy).is_lt(),
            "same band: RIF decides"
        );
        assert!(
            fastest_busy.order(&slow_idle).is_lt(),
            "the band beats the rest"
        );
        assert!(slow_idle.order(&hot).is_lt(), "cold beats hot");
        // Without a band, the paper's rule: latency alone.
        assert!(
            hcl_rank(t, None, 6, ms(10))
                .order(&hcl_rank(t, None, 1, ms(12)))
                .is_lt()
        );
    }

    /// Every kind of hot threshold.
    fn thresholds() -> impl Strategy<Value = Threshold> {
        prop_oneof![
            Just(Threshold::AllCold),
            Just(Threshold::AllHot),
            (0u32..40).prop_map(Threshold::Above),
        ]
    }

    /// No latency band, or a band ceiling up to 5 s.
    fn ceilings() -> impl Strategy<Value = Option<Duration>> {
        prop_oneof![
            Just(None),
            (0u64..5_000_000_000).prop_map(|n| Some(Duration::from_nanos(n))),
        ]
    }

    proptest! {
        /// The multiset walk gives the same nearest-rank quantile as sorting the history.
        #[test]
        fn quantile_matches_a_sort(
            values in proptest::collection::vec(prop_oneof![0u32..30, 0u32..200], 1..400),
            q in 0.01f64..0.99,
        ) {
            let h = history(&values);
            let kept = &values[values.len().saturating_sub(HISTORY_LEN)..];
            let mut sorted = kept.to_vec();
            sorted.sort_unstable();
            let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            prop_assert_eq!(h.threshold(q), Threshold::Above(sorted[rank - 1]));
        }

        /// The integer key orders replies exactly as the rank does, with or without a limit on
        /// slow cold replies, with the band ranked by RIF or by expected delay.
        #[test]
        fn key_orders_like_rank(
            a in (prop_oneof![0u32..40, Just(u32::MAX)], prop_oneof![0u64..5_000_000_000, 0u64..1 << 52]),
            b in (prop_oneof![0u32..40, Just(u32::MAX)], prop_oneof![0u64..5_000_000_000, 0u64..1 << 52]),
            t in thresholds(),
            c in ceilings(),
            slow in ceilings(),
            by_delay in any::<bool>(),
            // A rule ranks the band by delay or by RIF, never both: both delays or neither.
            delays in (0u64..1 << 40, 0u64..1 << 40),
        ) {
            let (ra, rb) = (Duration::from_nanos(a.1), Duration::from_nanos(b.1));
            let cx = HclContext::new(t, c).with_slow_cold(slow);
            let (da, db) = (Some(delays.0).filter(|_| by_delay), Some(delays.1).filter(|_| by_delay));
            let dur = |d: Option<u64>| d.map(Duration::from_nanos);
            let by_rank = hcl_rank_in(&cx, a.0, ra, dur(da)).order(&hcl_rank_in(&cx, b.0, rb, dur(db)));
            prop_assert_eq!(hcl_key(&cx, a.0, a.1, da).cmp(&hcl_key(&cx, b.0, b.1, db)), by_rank);
            // Equal signals from different sides of the threshold, and near-equal latencies.
            let near = Duration::from_nanos(a.1 + 1);
            prop_assert_eq!(
                hcl_key(&cx, a.0, a.1, da).cmp(&hcl_key(&cx, a.0, a.1 + 1, da)),
                hcl_rank_in(&cx, a.0, ra, dur(da)).order(&hcl_rank_in(&cx, a.0, near, dur(da)))
            );
            // Without a limit, the rank in a context is the paper's (and the band's) rank.
            if slow.is_none() {
                prop_assert_eq!(hcl_rank_in(&cx, a.0, ra, None), hcl_rank(t, c, a.0, ra));
            }
        }

        /// The rule's own `key` and `rank` order pooled replies alike, replies this client has
        /// queries on (scaled latencies) included, with the scaling on or off, and with RIFs
        /// read as reported or as work queued (`hot_by_work`) on two replicas of different
        /// speeds.
        #[test]
        fn rule_key_orders_like_rule_rank_for_used_replies(
            a in (0u32..40, 0u64..5_000_000_000, 0u32..6, 0u32..6),
            b in (0u32..40, 0u64..5_000_000_000, 0u32..6, 0u32..6),
            t in thresholds(),
            c in ceilings(),
            slow in ceilings(),
            scaled in any::<bool>(),
            by_work in any::<bool>(),
            observed in prop_oneof![Just(None), (1u64..1_000_000_000).prop_map(Some)],
            speed in 1u64..8,
        ) {
            use crate::policies::probing::engine::Rule;
            let entry = |replica: u32, (rif, latency, uses, settled): (u32, u64, u32, u32)| Entry {
                replica: ReplicaId(replica),
                received: Time::ZERO,
                rif: rif + uses,
                latency: Duration::from_nanos(latency),
                latency_ns: latency,
                uses,
                settled: settled.min(uses),
                budget: 8,
                others: rif,
                slot: replica as usize,
            };
            let (ea, eb) = (entry(0, a), entry(1, b));
            // Ranking in the band by delay, with or without a latency observed from the
            // replicas (replica 1 `speed` times slower).
            let mut rule = Hcl::new(0.84, 1.5, scaled)
                .with_band_ranks_by_delay(observed.is_some())
                .with_hot_by_work(by_work);
            rule.on_replica_change(ReplicaChange::Insert(ReplicaId(0)));
            rule.on_replica_change(ReplicaChange::Insert(ReplicaId(1)));
            if let Some(latency) = observed {
                for (replica, latency) in [(0, latency), (1, latency * speed)] {
                    for q in 0..u64::from(MIN_OBSERVED) {
                        let completion = Completion {
                            query: crate::policy::QueryId(q),
                            latency: Duration::from_nanos(latency),
                            outcome: Outcome::Success,
                        };
                        rule.on_complete(ReplicaId(replica), &completion);
                    }
                }
            }
            let cx = HclContext::new(t, c)
                .with_slow_cold(slow)
                .with_work_scale(rule.work_scale());
            let load = ReplicaLoad::default();
            prop_assert_eq!(
                rule.key(&cx, &ea, &load).cmp(&rule.key(&cx, &eb, &load)),
                rule.rank(&cx, &ea, &load).order(&rule.rank(&cx, &eb, &load))
            );
            if !scaled && observed.is_none() {
                prop_assert_eq!(rule.key(&cx, &ea, &load), hcl_key(&cx, ea.rif, ea.latency_ns, None));
            }
        }

        /// Whenever a cold reply is present the minimum is cold; when all are hot the minimum
        /// has the lowest RIF.
        #[test]
        fn never_picks_hot_when_cold_exists(
            replies in proptest::collection::vec((0u32..20, 0u64..1000), 1..16),
            limit in 0u32..20,
            c in prop_oneof![Just(None), (0u64..1000).prop_map(|us| Some(Duration::from_micros(us)))],
        ) {
            let t = Threshold::Above(limit);
            let ranks: Vec<Rank> = replies
                .iter()
                .map(|&(rif, us)| hcl_rank(t, c, rif, Duration::from_micros(us)))
                .collect();
            let best = ranks.iter().min_by(|a, b| a.order(b)).copied();
            let any_cold = replies.iter().any(|&(rif, _)| rif <= limit);
            let best = best.ok_or_else(|| TestCaseError::fail("no best"))?;
            prop_assert_eq!(best.hot, !any_cold);
            if !any_cold {
                let min_rif = replies.iter().map(|r| r.0).min().unwrap_or(0);
                prop_assert_eq!(best.key, f64::from(min_rif));
            }
        }
    }
}
