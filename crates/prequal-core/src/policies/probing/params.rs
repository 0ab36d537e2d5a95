//! The parameters the probing policies share: defaults, documentation, validation, and the
//! reuse budget they imply.
//!
//! Every default here is also written, as TOML, in the matching [`ParamDoc`]; a test in
//! `config.rs` checks the two agree.

use std::time::Duration;

use super::aversion::Aversion;
use crate::config::build_policy::{ConfigError, ParamDoc};

/// Default probes per query (r_probe), as in the paper's testbed.
pub const PROBE_RATE: f64 = 3.0;
/// Default pool size m: the paper found 16 enough, with modest gains beyond.
pub const POOL_SIZE: u32 = 16;
/// Default largest share of the replicas the pool may cover: 1, the paper's pool (see
/// [`pool_capacity`] for when a smaller share helps).
pub const POOL_SHARE: f64 = 1.0;
/// Default age limit of a reply.
pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Default δ in the b_reuse formula.
pub const DELTA: f64 = 1.0;
/// Default replies removed per query (r_remove).
pub const REMOVE_RATE: f64 = 1.0;
/// Default q_rif = 2^−0.25.
pub const Q_RIF: f64 = 0.840_896_415_253_714_5;
/// Default latency band of HCL's cold pick: replies within 3.5 times the fastest cold latency
/// rank first, by expected delay (0 is the paper's rule; see `hcl.rs` and docs/policies.md).
pub const LATENCY_BAND: f64 = 2.5;
/// Default for how replies inside the latency band rank: by expected delay (this client's
/// observed latency from the replica × (RIF + 1)), our addition; false ranks them by RIF.
pub const BAND_RANKS_BY_DELAY: bool = true;
/// Default for how many queries at once a replica is taken to serve when the band estimates a
/// reply's delay, observed latency × (1 + RIF / this): 2 (1 is Traefik's `leasttime` score; see
/// `hcl.rs` and docs/policies.md).
pub const DELAY_CONCURRENCY: f64 = 2.0;
/// Default power of the band's queueing factor: 1, each query ranks replicas by its own
/// expected delay (2 ranks by the delay it adds in all, which lowers the median at high load on
/// mixed-speed replicas and raises the tails; docs/policies.md).
pub const DELAY_POWER: f64 = 1.0;
/// Default for whether HCL's hot test weighs each reply's RIF by its replica's speed (RIF ×
/// this client's observed latency from it / the known replicas' mean): on, our addition (off
/// is the paper's test of the raw RIF; docs/policies.md has the evidence).
pub const HOT_BY_WORK: bool = true;
/// Default for whether a reply's RIF counts this client's own queries live (the reported RIF
/// less this client's queries in flight when it came, plus those in flight now): on, our
/// addition (off is the paper's pool, where each use adds one; docs/policies.md).
pub const OWN_RIF_LIVE: bool = true;
/// Default for whether a finished query lowers its replica's pooled reply RIF: on, our
/// addition (off is the paper's pool, where only a use changes a reply; docs/policies.md).
pub const COMPLETIONS_LOWER_RIF: bool = true;
/// Default: a piggybacked load report refreshes its replica's reply in the pool.
pub const REPORTS_REFRESH_POOL: bool = true;
/// Default `reports_replace_probes`: every query sends `probe_rate` probes, whatever reports
/// arrive.
pub const REPORTS_REPLACE_PROBES: bool = false;
/// Default for whether a pooled reply's latency grows with this client's unfinished queries
/// sent on it: on, our addition (off is the paper's rule; docs/policies.md).
pub const OWN_QUERIES_RAISE_LATENCY: bool = true;
/// Default for where a pick goes when the pool holds fewer than two replies while probing is
/// blind (probes fail and none has been answered lately): the less loaded, by this client's
/// queries in flight, of two random replicas; our addition (the paper picks a uniformly random
/// replica; docs/policies.md).
pub const FALLBACK_BY_LOCAL_RIF: bool = true;
/// Default for how many times slower than the fastest hot reply a cold reply may be and still
/// rank before the hot ones: 10, our addition (0, no limit, is the paper's rule; docs/policies.md).
pub const MAX_COLD_SLOWDOWN: f64 = 10.0;
/// Default idle-probe period: a tenth of the age limit, so an idle client, sending one probe
/// per period, still holds about ten fresh replies, well above the two HCL needs.
pub const MAX_IDLE: Duration = Duration::from_millis(100);
/// Default probe timeout (a datacenter round trip plus slack).
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(3);
/// Default error share above which a replica is avoided.
pub const ERROR_THRESHOLD: f64 = 0.1;
/// Default time constant of the error-share decay.
pub const ERROR_DECAY: Duration = Duration::from_secs(5);

/// `probe_rate`.
pub const PROBE_RATE_DOC: ParamDoc = ParamDoc {
    key: "probe_rate",
    default: "3.0",
    doc: "probes sent per query (r_probe), > 0 and above remove_rate; fractional values round \
          deterministically, so 0.5 means one probe every other query",
};
/// The largest `pool_size` accepted.
pub const MAX_POOL_SIZE: u32 = 4096;

/// `pool_size`.
pub const POOL_SIZE_DOC: ParamDoc = ParamDoc {
    key: "pool_size",
    default: "16",
    doc: "most probe replies kept (m), 1 to 4096; a new reply evicts the oldest",
};
/// `pool_share`.
pub const POOL_SHARE_DOC: ParamDoc = ParamDoc {
    key: "pool_share",
    default: "1.0",
    doc: "the pool holds at most this share of the replicas (rounded up, at least 2) when that \
          is below pool_size, in (0, 1]; 1 is the paper's pool; 0.5 helps small clusters behind \
          several balancers",
};
/// `max_age`.
pub const MAX_AGE_DOC: ParamDoc = ParamDoc {
    key: "max_age",
    default: "\"1s\"",
    doc: "replies older than this are dropped, > 0",
};
/// `delta`.
pub const DELTA_DOC: ParamDoc = ParamDoc {
    key: "delta",
    default: "1.0",
    doc: "δ > 0 in b_reuse = max{1, (1+δ)/((1−m/n)·r_probe − r_remove)}, capped at m (also \
          when the denominator is <= 0)",
};
/// `remove_rate`.
pub const REMOVE_RATE_DOC: ParamDoc = ParamDoc {
    key: "remove_rate",
    default: "1.0",
    doc: "replies removed per query (r_remove), >= 0 and below probe_rate (or the pool \
          drains), alternating oldest and worst",
};
/// `q_rif`.
pub const Q_RIF_DOC: ParamDoc = ParamDoc {
    key: "q_rif",
    default: "0.8408964152537145",
    doc: "RIF quantile above which a reply is hot, in [0, 1]; 0 = RIF-only, 1 = latency-only",
};
/// `latency_band`.
pub const LATENCY_BAND_DOC: ParamDoc = ParamDoc {
    key: "latency_band",
    default: "2.5",
    doc: "cold replies whose latency is within (1 + band) × the lowest cold latency in the pool \
          rank before the other cold ones, by expected delay or RIF (band_ranks_by_delay); \
          band = latency_band × min(1, pool size / replicas); >= 0; 0 is the paper's HCL",
};
/// `band_ranks_by_delay`.
pub const BAND_RANKS_BY_DELAY_DOC: ParamDoc = ParamDoc {
    key: "band_ranks_by_delay",
    default: "true",
    doc: "replies inside the latency band rank by expected delay: this client's recent latency \
          from the replica (weighted mean of its successful queries there, about the last 200) \
          × (1 + RIF / delay_concurrency); a replica with fewer than 8 of them seen counts as \
          fast as the mean of those known, so with none known the RIF decides; false ranks them \
          by RIF alone; no effect with latency_band = 0",
};
/// `delay_concurrency`.
pub const DELAY_CONCURRENCY_DOC: ParamDoc = ParamDoc {
    key: "delay_concurrency",
    default: "2.0",
    doc: "how many queries at once a replica is taken to serve in the band's expected delay, \
          observed latency × (1 + RIF / delay_concurrency): the queries ahead of a new one are \
          worked off this many at a time; 1 is Traefik's leasttime score, larger values favour \
          a fast replica with queries in flight over a slow idle one; > 0",
};
/// `delay_power`.
pub const DELAY_POWER_DOC: ParamDoc = ParamDoc {
    key: "delay_power",
    default: "1.0",
    doc: "the band ranks by observed latency × (1 + RIF / delay_concurrency) ^ delay_power: \
          1 is the new query's own expected delay; 2 is close to the delay it adds in all, its \
          own and that of the queries after it, which spreads load off the fastest replicas \
          sooner: a lower median at high load on replicas of mixed speeds, higher tails; > 0",
};
/// `hot_by_work`.
pub const HOT_BY_WORK_DOC: ParamDoc = ParamDoc {
    key: "hot_by_work",
    default: "true",
    doc: "the hot test (q_rif) reads a reply's RIF as the work queued there: RIF × this \
          client's recent latency from the replica / the mean of the replicas known (the same \
          observed latency as band_ranks_by_delay's), rounded, both for the RIF history and \
          for each reply (hot replies then rank by it too, and so does the band where it ranks by \
          RIF); a fast replica's naturally higher \
          RIF then counts for less, a slow \
          one's for more; a replica with fewer than 8 queries seen counts at the mean; false \
          is the paper's test of the raw RIF, the default before 2026-11-27",
};
/// `own_rif_live`.
pub const OWN_RIF_LIVE_DOC: ParamDoc = ParamDoc {
    key: "own_rif_live",
    default: "true",
    doc: "a reply's RIF is split when it comes into the other clients' share (the reported RIF \
          less this client's queries in flight at the replica then, at least 0) and this \
          client's own, counted live: the RIF ranked and tested for hot is the others' share + \
          this client's queries in flight there now; so it counts this client's queries that \
          had not reached the replica when it answered and those sent since by any route, and \
          behind one balancer it is about that balancer's own count; false is the paper's pool, \
          where each use of a reply adds one (and completions_lower_rif takes one off), the \
          default before 2026-11-27",
};
/// `completions_lower_rif`.
pub const COMPLETIONS_LOWER_RIF_DOC: ParamDoc = ParamDoc {
    key: "completions_lower_rif",
    default: "true",
    doc: "a query of this client that finishes takes one off its replica's reply in the pool, \
          as a use adds one (if the query was in flight when the reply came, or went on it); \
          false is the paper's pool, where replies only rise; with own_rif_live (the default) \
          the reply's RIF follows this client's count either way, and this only matters with \
          own_rif_live = false",
};
/// `reports_refresh_pool`.
pub const REPORTS_REFRESH_POOL_DOC: ParamDoc = ParamDoc {
    key: "reports_refresh_pool",
    default: "true",
    doc: "a load report piggybacked on a response from a replica whose reply is in the pool \
          takes that reply's place (fresh RIF and latency, the reply's budget again), so the \
          replicas in use stay current with fewer probes; it never adds a replica to the pool \
          (those reports come only from replicas this client chose); false ignores them, as \
          the paper's pool holds probe replies alone",
};
/// `reports_replace_probes`.
pub const REPORTS_REPLACE_PROBES_DOC: ParamDoc = ParamDoc {
    key: "reports_replace_probes",
    default: "false",
    doc: "true: each piggybacked report that refreshed a reply in the pool \
          (reports_refresh_pool) stands in for one probe of the next query, never its last, so \
          with a report on every response a query sends up to one probe fewer (2.31 instead \
          of 3 live on piggyback-85-many), at a small cost in balancing quality \
          (docs/policies.md, \"Piggybacked reports\"); false sends probe_rate probes per query \
          whatever arrives; no effect without piggybacking, with reports_refresh_pool = false \
          or with probe_rate <= 1",
};
/// `own_queries_raise_latency`.
pub const OWN_QUERIES_RAISE_LATENCY_DOC: ParamDoc = ParamDoc {
    key: "own_queries_raise_latency",
    default: "true",
    doc: "the latency a reply ranks by grows with this client's queries sent on it that have \
          not finished: × (RIF + 1) / (RIF − those + 1); false is the paper's rule, where a \
          reply keeps its reported latency for every use",
};
/// Default for whether a query waits for fresh replies when the pool holds fewer than two
/// replies younger than this client's typical latency: on (our addition; the paper's pool is
/// always used as it is, `false`).
pub const WAIT_WHEN_STALE: bool = true;
/// `wait_when_stale`.
pub const WAIT_WHEN_STALE_DOC: ParamDoc = ParamDoc {
    key: "wait_when_stale",
    default: "true",
    doc: "true: a query that finds fewer than two replies in the pool younger than this \
          client's typical latency (a weighted mean of its successful queries) waits for two \
          replies to arrive, at most probe_timeout, and is placed among the replies that came \
          while it waited, or over the whole pool where the cluster has more replicas than the \
          pool's capacity, pool_size after pool_share (a client whose queries are rarer than \
          the replicas' state changes, behind many balancers); only while that latency is at \
          least ten probe round trips, and never while no replica answers probes; false uses \
          the pool as it is (the paper's rule)",
};
/// `fallback_by_local_rif`.
pub const FALLBACK_BY_LOCAL_RIF_DOC: ParamDoc = ParamDoc {
    key: "fallback_by_local_rif",
    default: "true",
    doc: "while probing is blind (probes fail and none has been answered within max_age: \
          replicas with no sidecar, a probe_timeout shorter than the round trip), a pick goes \
          to the one of two random replicas with fewer of this client's queries in flight (ties \
          to the first drawn), none avoided for failed probes; otherwise, and with false, a \
          pool of fewer than two replies gives the paper's uniformly random replica",
};
/// `max_cold_slowdown`.
pub const MAX_COLD_SLOWDOWN_DOC: ParamDoc = ParamDoc {
    key: "max_cold_slowdown",
    default: "10.0",
    doc: "a cold reply whose latency is more than this many times the fastest hot reply's \
          ranks after every hot reply, so an idle but very slow replica does not win only for \
          being idle; >= 1, or 0 for no limit (the paper's rule: every cold reply before every \
          hot one)",
};
/// `max_idle`.
pub const MAX_IDLE_DOC: ParamDoc = ParamDoc {
    key: "max_idle",
    default: "\"100ms\"",
    doc: "an idle client sends one probe after this long without probing, > 0",
};
/// `probe_timeout`.
pub const PROBE_TIMEOUT_DOC: ParamDoc = ParamDoc {
    key: "probe_timeout",
    default: "\"3ms\"",
    doc: "a probe not answered within this is counted as failed, > 0",
};
/// `error_threshold`.
pub const ERROR_THRESHOLD_DOC: ParamDoc = ParamDoc {
    key: "error_threshold",
    default: "0.1",
    doc: "a replica whose decayed error share exceeds this is avoided, in [0, 1]; 1 disables",
};
/// `error_decay`.
pub const ERROR_DECAY_DOC: ParamDoc = ParamDoc {
    key: "error_decay",
    default: "\"5s\"",
    doc: "time constant of the error-share decay, > 0; an avoided replica recovers within a few time constants",
};

/// The probing, pool and removal parameters common to every async probing policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbingParams {
    /// Probes per query (r_probe).
    pub probe_rate: f64,
    /// Most replies held (m).
    pub pool_size: u32,
    /// Largest share of the replicas the pool may cover.
    pub pool_share: f64,
    /// Age limit of a reply.
    pub max_age: Duration,
    /// δ in the b_reuse formula.
    pub delta: f64,
    /// Replies removed per query (r_remove).
    pub remove_rate: f64,
    /// Whether a finished query of this client lowers its replica's reply RIF by one
    /// ([`Pool::on_finished`](super::pool::Pool::on_finished)); with `own_rif_live` the RIF
    /// follows this client's count either way.
    pub completions_lower_rif: bool,
    /// Whether a reply's RIF is the other clients' share it reported ([`Entry::with_own`](
    /// super::pool::Entry::with_own)) plus this client's queries in flight at the replica now.
    pub own_rif_live: bool,
    /// Whether a piggybacked load report from a replica whose reply is held replaces that
    /// reply ([`Pool::refresh`](super::pool::Pool::refresh)).
    pub reports_refresh_pool: bool,
    /// Whether such a refresh spares one probe of the next query (never its last).
    pub reports_replace_probes: bool,
    /// Whether a query waits for fresh replies when the pool's replies are older than the
    /// client's typical latency.
    pub wait_when_stale: bool,
    /// Whether a pick the pool cannot serve while probing is blind goes to the less loaded of
    /// two random replicas (by this client's queries in flight) rather than to a uniformly
    /// random one.
    pub fallback_by_local_rif: bool,
    /// Longest time without probing before an idle probe is sent.
    pub max_idle: Duration,
    /// How long a probe may take before the driver reports it failed.
    pub probe_timeout: Duration,
    /// Error aversion.
    pub aversion: Aversion,
}

impl ProbingParams {
    /// Range-checks every parameter, naming the offending key.
    pub fn validate(&self, policy: &'static str) -> Result<(), ConfigError> {
        let bad = |key, msg: &str| Err(ConfigError::invalid(policy, key, msg));
        if !(self.probe_rate.is_finite() && self.probe_rate > 0.0) {
            return bad("probe_rate", "must be a finite number > 0");
        }
        if self.pool_size == 0 {
            return bad("pool_size", "must be at least 1");
        }
        if self.pool_size > MAX_POOL_SIZE {
            // Every pick ranks the whole pool, and a pool holds one reply per replica: a larger
            // pool only costs memory and time.
            return bad("pool_size", &format!("must be at most {MAX_POOL_SIZE}"));
        }
        if !(self.pool_share > 0.0 && self.pool_share <= 1.0) {
            return bad("pool_share", "must be above 0 and at most 1");
        }
        if self.max_age.is_zero() {
            return bad("max_age", "must be longer than zero");
        }
        if !(self.delta.is_finite() && self.delta > 0.0) {
            return bad("delta", "must be a finite number > 0");
        }
        if !(self.remove_rate.is_finite() && self.remove_rate >= 0.0) {
            return bad("remove_rate", "must be a finite number >= 0");
        }
        if self.remove_rate >= self.probe_rate {
            // Fewer replies arrive per query than are removed: the pool drains and most picks
            // fall back to a uniformly random replica, which overloads slow replicas.
            return Err(ConfigError::invalid(
                policy,
                "remove_rate",
                format!(
                    "must be below probe_rate (remove_rate {} >= probe_rate {}; remove_rate \
                     defaults to 1): with no more probes than removals per query the pool \
                     drains and picks fall back to random; lower remove_rate (0.25 in \
                     scenarios/probe-rate.toml) or raise probe_rate",
                    self.remove_rate, self.probe_rate
                ),
            ));
        }
        if self.max_idle.is_zero() {
            return bad("max_idle", "must be longer than zero");
        }
        if self.probe_timeout.is_zero() {
            return bad("probe_timeout", "must be longer than zero");
        }
        validate_aversion(policy, &self.aversion)
    }
}

/// Range-checks the error-aversion parameters.
pub fn validate_aversion(policy: &'static str, aversion: &Aversion) -> Result<(), ConfigError> {
    if !(aversion.threshold >= 0.0 && aversion.threshold <= 1.0) {
        return Err(ConfigError::invalid(
            policy,
            "error_threshold",
            "must be between 0 and 1 (1 disables error aversion)",
        ));
    }
    if aversion.decay.is_zero() {
        return Err(ConfigError::invalid(
            policy,
            "error_decay",
            "must be longer than zero",
        ));
    }
    Ok(())
}

/// The pool's capacity with `n` replicas: `pool_size`, but at most `pool_share` of the replicas
/// (rounded up, and at least 2 so that a rule always has a choice); exactly `pool_size` when
/// `pool_share` is 1, as in the paper.
///
/// The paper's m = 16 is small beside its hundreds of replicas. With ten replicas a pool of 16
/// holds a reply from every one: m/n > 1 makes b_reuse's denominator negative, so each reply may
/// be reused up to m times, and every pick sees the whole cluster, so the fastest replicas
/// are chosen until they queue (thread-pool replicas at 93-99% busy while the slow ones idle),
/// and independent clients pile onto the same replica. Half the replicas keep b_reuse finite
/// and each pick among a changing subset. Measured with the paper's HCL rule on the whole
/// simulated matrix (docs/policies.md): geometric mean of prequal's p50 / p99 / p99.9 over the best other
/// contender's 1.13 / 0.69 / 0.72 with 1.0, 1.04 / 0.64 / 0.67 with 0.5, no row worse. The cost:
/// a shunned slow replica is somewhat more often the only cold reply (Beyond Round Robin,
/// 99.952% within 1 s against 99.956%, mean of six seeds). The default latency band now does
/// most of what a smaller pool did for small clusters.
pub fn pool_capacity(params: &ProbingParams, n: usize) -> u32 {
    if n == 0 || params.pool_share >= 1.0 {
        return params.pool_size;
    }
    let share = (params.pool_share * n as f64).ceil();
    let share = if share >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        share as u32
    };
    params.pool_size.min(share.max(2))
}

/// The reuse budget b_reuse = max{1, (1+δ) / ((1 − m/n)·r_probe − r_remove)} (Prequal paper,
/// equation 1), capped at `m`.
///
/// The denominator is the net number of fresh replies a query adds to the pool beyond what it
/// removes, allowing for the share m/n of probes that land on replicas already in the pool.
/// When it is zero or negative (few replicas, or removal faster than probing) the formula has no
/// finite value; the pool then cannot be kept full by probing alone, so replies are allowed the
/// largest reuse, `m`. The same cap bounds huge values from a tiny positive denominator: a reply
/// used `m` times has already had its RIF raised by `m`, enough for the rules to pass it over.
pub fn b_reuse(m: u32, n: usize, r_probe: f64, r_remove: f64, delta: f64) -> f64 {
    let cap = f64::from(m.max(1));
    if n == 0 {
        return cap;
    }
    let denominator = (1.0 - f64::from(m) / n as f64) * r_probe - r_remove;
    if denominator.is_nan() || denominator <= 0.0 {
        return cap;
    }
    ((1.0 + delta) / denominator).clamp(1.0, cap)
}
