//! Scenario files: what to simulate, in TOML (the full key reference is docs/scenarios.md).
//!
//! A scenario names its replicas (`[servers]`, see [`crate::model::server`]), its clients
//! (`[clients]`), the offered load over time (`[load]`), the network (`[network]`), the
//! contenders (policy configs, by name or as tables), an optional `[sweep]`, a `seed` and a
//! `latency_objective`. Unknown keys are rejected everywhere. [`Scenario::load`] reads and
//! validates a file; every error names the file and the key, and says what was expected.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prequal_core::outlier::OutlierConfig;
use prequal_core::retry_budget::RetryBudgetConfig;
use prequal_core::slow_start::SlowStartConfig;
use prequal_core::{EstimatorConfig, HedgeConfig, PolicyConfig, Time};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::model::{DistSpec, Distribution, ModelError, ServersSpec, parse_trace};

mod balancer;

pub use self::balancer::BalancerKeys;

/// A scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read: {error}")]
    Io {
        /// The file.
        path: String,
        /// Why (in the message already, so not chained as a cause: it would print twice).
        error: std::io::Error,
    },
    /// The TOML did not parse or did not fit the format (toml's message names line and key).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// toml's message, with its line, column and key.
        message: String,
    },
    /// A value was out of range or inconsistent.
    #[error("{path}: {error}")]
    Invalid {
        /// The file.
        path: String,
        /// The key and what was wrong (in the message already, so not chained as a cause).
        error: ModelError,
    },
}

/// The longest load a scenario may schedule, its sweep's steps and ramps included.
const MAX_LOAD: Time = Time::from_secs(24 * 3600);

/// A whole scenario file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name used in reports (default: the file stem).
    #[serde(default)]
    pub name: String,
    /// One paragraph on what it reproduces.
    #[serde(default)]
    pub description: String,
    /// The seed of every random choice (default 1).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Successful queries at or below this latency count as "within objective" (default 1 s).
    #[serde(default = "default_objective", with = "humantime_serde")]
    pub latency_objective: Duration,
    /// The policies to compare, each optionally with its own hedging.
    #[serde(deserialize_with = "deserialize_contenders")]
    pub contenders: Vec<Contender>,
    /// The replicas.
    pub servers: ServersSpec,
    /// The clients.
    pub clients: ClientsSpec,
    /// Offered load over time.
    pub load: LoadSpec,
    /// Network delays.
    #[serde(default)]
    pub network: NetworkSpec,
    /// The replicas' load tracker settings (prequal-core defaults).
    #[serde(default)]
    pub estimator: EstimatorConfig,
    /// Optional sweep over load and one policy parameter.
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
    /// How `prequal experiment` runs the scenario live (the simulator ignores it).
    #[serde(default)]
    pub experiment: ExperimentSpec,
}

/// `[experiment]`: the live run of a scenario by `prequal experiment` (docs/testbed.md). The
/// simulator ignores this section; every key is optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Independent balancer instances per contender, the load spread evenly over them
    /// (default: `clients.count`, the simulator's independent clients).
    #[serde(default)]
    pub proxies: Option<u32>,
    /// HAProxy `balance` algorithms to run when HAProxy is installed (default: `roundrobin`,
    /// `leastconn`, `random(2)`; `[]` for none).
    #[serde(default)]
    pub haproxy: Option<Vec<String>>,
    /// nginx upstream methods to run when nginx is installed (default: `round-robin`,
    /// `least_conn`, `random two least_conn`; `[]` for none).
    #[serde(default)]
    pub nginx: Option<Vec<String>>,
    /// Traefik v3 load-balancer strategies to run when Traefik is installed (default: `wrr`,
    /// `p2c`, `leasttime`; `[]` for none).
    #[serde(default)]
    pub traefik: Option<Vec<String>>,
    /// Also run the load straight at the replicas, spread round robin (default false).
    #[serde(default)]
    pub direct: bool,
    /// Speak HTTP/2 (h2c) from the load generator to the balancers (default false: HTTP/1.1).
    #[serde(default)]
    pub http2: bool,
    /// A request unanswered after this long is a timeout (default: `clients.deadline`, else 30 s).
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
}

fn default_seed() -> u64 {
    1
}

fn default_objective() -> Duration {
    Duration::from_secs(1)
}

/// One contender: a policy config (a name, or a table with `name` and parameters) and, when
/// its table has a `hedge` key, its own hedging (which replaces `[clients.hedge]` for it), and
/// when it has balancer keys (`max_attempts`, `outlier`, ...), its own values of those.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Contender {
    /// The policy.
    #[serde(flatten)]
    pub policy: PolicyConfig,
    /// Hedging for this contender only (`hedge = { ... }` in its table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeConfig>,
    /// Balancer keys for this contender only, each replacing the same key of `[clients]`.
    #[serde(flatten)]
    pub balancer: BalancerKeys,
}

impl Contender {
    /// Whether `other` is the same run: the same table once written out (policy, hedging and
    /// balancer keys, defaults filled in).
    pub fn same_run(&self, other: &Contender) -> bool {
        match (toml::Value::try_from(self), toml::Value::try_from(other)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl From<PolicyConfig> for Contender {
    fn from(policy: PolicyConfig) -> Self {
        Contender {
            policy,
            hedge: None,
            balancer: BalancerKeys::default(),
        }
    }
}

impl<'de> Deserialize<'de> for Contender {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NameOrTable;
        impl<'de> Visitor<'de> for NameOrTable {
            type Value = Contender;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a policy name such as \"prequal\", or a table with a `name` key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Contender, E> {
                PolicyConfig::from_name(v)
                    .map(Contender::from)
                    .map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Contender, A::Error> {
                let mut table =
                    toml::Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let hedge = match table.remove("hedge") {
                    Some(v) => Some(
                        HedgeConfig::deserialize(v)
                            .map_err(|e| de::Error::custom(format!("hedge: {}", e.message())))?,
                    ),
                    None => None,
                };
                let mut keys = toml::Table::new();
                for name in BalancerKeys::NAMES {
                    if let Some(v) = table.remove(name) {
                        keys.insert(name.to_string(), v);
                    }
                }
                let balancer =
                    BalancerKeys::deserialize(keys).map_err(|e| de::Error::custom(e.message()))?;
                let policy =
                    PolicyConfig::deserialize(table).map_err(|e| de::Error::custom(e.message()))?;
                Ok(Contender {
                    policy,
                    hedge,
                    balancer,
                })
            }
        }
        d.deserialize_any(NameOrTable)
    }
}

fn deserialize_contenders<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Contender>, D::Error> {
    Vec::<Contender>::deserialize(d)
}

/// `[clients]`: the balancing clients (each with its own policy instance and RNG).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientsSpec {
    /// Number of clients (>= 1); the load is split evenly among them.
    pub count: u32,
    /// `"poisson"` (default) or `"constant"` inter-arrival times.
    #[serde(default)]
    pub arrivals: Arrivals,
    /// A query not answered within this time fails as a timeout (default: none).
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
    /// Every response carries the replica's load report (its RIF without the query answered),
    /// handed to the policy through `on_load_report` right after that query's `on_complete`
    /// (default false: reports come only from probes).
    #[serde(default)]
    pub piggyback_reports: bool,
    /// `[clients.hedge]`: every client hedges its queries with this config (prequal-core's
    /// [`HedgeConfig`], every key optional) unless a contender sets its own `hedge`
    /// (default: no hedging).
    #[serde(default)]
    pub hedge: Option<HedgeConfig>,
    /// Tries per query, the first included, hedges included; a query whose try fails with an
    /// error or times out is tried again on a replica it has not tried, within the retry budget
    /// (default 3, as the proxy; 1 disables retries and hedges).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// How long one try may wait for its response before it fails as timed out (and may be
    /// retried); never past the query's `deadline`. Default 10 s, the proxy's `try_timeout`.
    #[serde(default, with = "humantime_serde")]
    pub try_timeout: Option<Duration>,
    /// `[clients.retry_budget]`: each client's retry budget (prequal-core's
    /// [`RetryBudgetConfig`]; default: its defaults).
    #[serde(default)]
    pub retry_budget: Option<RetryBudgetConfig>,
    /// Whether each client ejects replicas that keep failing (default true, as the proxy).
    #[serde(default)]
    pub outlier_ejection: Option<bool>,
    /// `[clients.outlier]`: ejection parameters (prequal-core's [`OutlierConfig`]).
    #[serde(default)]
    pub outlier: Option<OutlierConfig>,
    /// `[clients.slow_start]`: slow start for replicas that join after the start
    /// (prequal-core's [`SlowStartConfig`]).
    #[serde(default)]
    pub slow_start: Option<SlowStartConfig>,
}

/// The proxy's default `try_timeout`, and so the simulator's.
pub const DEFAULT_TRY_TIMEOUT: Duration = Duration::from_secs(10);

impl ClientsSpec {
    /// How long one try may wait for its response (`try_timeout`, default 10 s).
    pub fn try_timeout(&self) -> Duration {
        self.try_timeout.unwrap_or(DEFAULT_TRY_TIMEOUT)
    }

    /// The balancer keys `[clients]` sets, for every contender.
    pub fn balancer_keys(&self) -> BalancerKeys {
        BalancerKeys {
            max_attempts: self.max_attempts,
            retry_budget: self.retry_budget.clone(),
            outlier_ejection: self.outlier_ejection,
            outlier: self.outlier.clone(),
            slow_start: self.slow_start.clone(),
        }
    }
}

/// Inter-arrival process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Exponential gaps (open-loop Poisson).
    #[default]
    Poisson,
    /// Equal gaps.
    Constant,
}

/// `[network]`: one-way delays.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way delay of queries and responses (default 0).
    #[serde(default)]
    pub delay: Option<DistSpec>,
    /// One-way delay of probes and replies (default: `delay`).
    #[serde(default)]
    pub probe_delay: Option<DistSpec>,
}

/// `[load]`: the schedule of offered load.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Explicit steps, run in order.
    #[serde(default)]
    pub steps: Vec<LoadStep>,
    /// A geometric ramp (the Prequal load-ramp experiment), run after `steps`.
    #[serde(default)]
    pub ramp: Option<RampSpec>,
}

/// Unit of a load level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadUnit {
    /// Aggregate queries per second over all clients.
    #[default]
    Qps,
    /// Multiple of the servers' aggregate allocation (capacity or thread-pool model):
    /// qps = level × count × allocation_cores (or workers) / mean query cost (or service time).
    /// Speed factors are not counted.
    Allocation,
    /// Multiple of the servers' aggregate capacity (capacity or thread-pool model): like
    /// `"allocation"`, with each replica weighted by its speed factor, so qps = level × Σ
    /// speed × allocation_cores (or workers) / mean query cost (or service time).
    Capacity,
}

/// One load step.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadStep {
    /// How long it lasts.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// Level at the start.
    pub level: f64,
    /// Level at the end (default: `level`; otherwise the rate ramps linearly).
    #[serde(default)]
    pub ramp_to: Option<f64>,
    /// Unit of `level` (default `"qps"`).
    #[serde(default)]
    pub unit: LoadUnit,
}

/// A geometric ramp: `steps` levels `start, start·factor, ...`, each `step_duration` long.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RampSpec {
    /// First level.
    pub start: f64,
    /// Multiplier between steps.
    pub factor: f64,
    /// Number of steps (>= 1).
    pub steps: u32,
    /// Length of each step.
    #[serde(with = "humantime_serde")]
    pub step_duration: Duration,
    /// Unit of the levels (default `"qps"`).
    #[serde(default)]
    pub unit: LoadUnit,
}

/// `[sweep]`: every contender × every load multiplier × every parameter value.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Multipliers of the whole load schedule (default `[1.0]`).
    #[serde(default)]
    pub load: Vec<f64>,
    /// A policy parameter to vary (applied to contenders that have it).
    #[serde(default)]
    pub param: Option<String>,
    /// Its values.
    #[serde(default)]
    pub values: Vec<toml::Value>,
}

/// One load phase after resolution: a time span and the aggregate rate at its two ends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phase {
    /// Label for tables (`"step 3"`, `"0.93x"`).
    pub label: String,
    /// Start, in virtual time.
    pub start: Time,
    /// End, in virtual time.
    pub end: Time,
    /// Aggregate qps at the start.
    pub qps_start: f64,
    /// Aggregate qps at the end.
    pub qps_end: f64,
}

impl Phase {
    /// The aggregate rate at `now` inside this phase (linear between the ends).
    pub fn qps_at(&self, now: Time) -> f64 {
        let span = self.end.as_nanos().saturating_sub(self.start.as_nanos()) as f64;
        if span <= 0.0 {
            return self.qps_start;
        }
        let x = now.as_nanos().saturating_sub(self.start.as_nanos()) as f64 / span;
        self.qps_start + (self.qps_end - self.qps_start) * x.clamp(0.0, 1.0)
    }
}

/// A scenario with its distributions compiled and its load schedule resolved.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The scenario as written.
    pub scenario: Scenario,
    /// The replicas' latency distribution (latency model) or query cost (capacity model).
    pub service: Distribution,
    /// One-way query delay.
    pub delay: Option<Distribution>,
    /// One-way probe delay.
    pub probe_delay: Option<Distribution>,
    /// The load phases, back to back from time zero.
    pub phases: Vec<Phase>,
}

impl Compiled {
    /// When the offered load stops.
    pub fn end(&self) -> Time {
        self.phases.last().map_or(Time::ZERO, |p| p.end)
    }
}

fn bad(key: impl Into<String>, message: impl Into<String>) -> ModelError {
    ModelError::invalid(key, message)
}

impl Scenario {
    /// Parses and validates TOML text; `path` labels errors and anchors trace files.
    pub fn parse(text: &str, path: &Path) -> Result<Compiled, ScenarioError> {
        Self::parse_adjusted(text, path, |_| {})
    }

    /// Like [`Scenario::parse`], with a chance to change the scenario (seed, time scale)
    /// before it is validated and compiled.
    pub fn parse_adjusted(
        text: &str,
        path: &Path,
        adjust: impl FnOnce(&mut Scenario),
    ) -> Result<Compiled, ScenarioError> {
        let label = path.display().to_string();
        let mut scenario: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: label.clone(),
            message: e.to_string(),
        })?;
        if scenario.name.is_empty() {
            scenario.name = path
                .file_stem()
                .map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
        }
        adjust(&mut scenario);
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        scenario
            .compile(&base)
            .map_err(|error| ScenarioError::Invalid { path: label, error })
    }

    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Compiled, ScenarioError> {
        Self::load_adjusted(path, |_| {})
    }

    /// Reads a scenario file, lets `adjust` change it, then validates and compiles it.
    pub fn load_adjusted(
        path: &Path,
        adjust: impl FnOnce(&mut Scenario),
    ) -> Result<Compiled, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::Io {
            path: path.display().to_string(),
            error,
        })?;
        Self::parse_adjusted(&text, path, adjust)
    }

    /// Validates and compiles, resolving trace files against `base`.
    pub fn compile(self, base: &Path) -> Result<Compiled, ModelError> {
        self.servers.validate()?;
        self.validate_rest()?;
        let mut loader = |file: &Path| -> Result<Arc<[u64]>, ModelError> {
            let full: PathBuf = base.join(file);
            let text = std::fs::read_to_string(&full).map_err(|e| {
                bad(
                    "trace",
                    format!("cannot read trace {}: {e}", full.display()),
                )
            })?;
            parse_trace(&text, &full.display().to_string())
        };
        let service = match self.servers.service_spec() {
            Some((key, d)) => d.compile(key, &mut loader)?,
            None => return Err(bad("servers", "no server model")),
        };
        let delay = match &self.network.delay {
            Some(d) => Some(d.compile("network.delay", &mut loader)?),
            None => None,
        };
        let probe_delay = match &self.network.probe_delay {
            Some(d) => Some(d.compile("network.probe_delay", &mut loader)?),
            None => delay.clone(),
        };
        let phases = self.phases(&service)?;
        let end = phases.last().map_or(Time::ZERO, |p| p.end);
        if end > MAX_LOAD {
            // Each simulated second keeps its own histograms (some 60 KB), from the start.
            return Err(bad(
                "load",
                format!(
                    "lasts {:.0} s in all; at most {} s (a day) can be simulated",
                    end.as_secs_f64(),
                    MAX_LOAD.as_secs_f64()
                ),
            ));
        }
        Ok(Compiled {
            scenario: self,
            service,
            delay,
            probe_delay,
            phases,
        })
    }

    fn validate_rest(&self) -> Result<(), ModelError> {
        if self.contenders.is_empty() {
            return Err(bad(
                "contenders",
                "expected at least one policy, e.g. [\"prequal\"]",
            ));
        }
        for (j, c) in self.contenders.iter().enumerate() {
            if let Some(i) = self.contenders[..j].iter().position(|d| d.same_run(c)) {
                return Err(bad(
                    format!("contenders[{j}]"),
                    format!("repeats contenders[{i}]: a seed gives the same run twice"),
                ));
            }
        }
        for (i, c) in self.contenders.iter().enumerate() {
            c.policy
                .validate()
                .map_err(|e| bad(format!("contenders[{i}]"), e.to_string()))?;
            if let Some(h) = &c.hedge {
                h.validate()
                    .map_err(|e| bad(format!("contenders[{i}].hedge.{}", e.key), e.message))?;
            }
            c.balancer.validate(&format!("contenders[{i}]."))?;
        }
        if let Some(h) = &self.clients.hedge {
            h.validate()
                .map_err(|e| bad(format!("clients.hedge.{}", e.key), e.message))?;
        }
        self.clients.balancer_keys().validate("clients.")?;
        if self.experiment.timeout.is_some_and(|t| t.is_zero()) {
            return Err(bad(
                "experiment.timeout",
                "must be above 0 (omit it for clients.deadline, else 30 s)",
            ));
        }
        if self.latency_objective.is_zero() {
            return Err(bad(
                "latency_objective",
                "must be above 0 (the share of queries within it is reported)",
            ));
        }
        if self.clients.count == 0 {
            return Err(bad("clients.count", "expected at least 1 client"));
        }
        if self.clients.count > crate::model::server::MAX_COUNT {
            return Err(bad(
                "clients.count",
                format!(
                    "expected at most {} clients, got {}",
                    crate::model::server::MAX_COUNT,
                    self.clients.count
                ),
            ));
        }
        if self.clients.deadline.is_some_and(|d| d.is_zero()) {
            return Err(bad(
                "clients.deadline",
                "must be above 0 (omit it for no deadline)",
            ));
        }
        if self.clients.try_timeout.is_some_and(|d| d.is_zero()) {
            return Err(bad(
                "clients.try_timeout",
                "must be above 0 (the default is \"10s\")",
            ));
        }
        self.estimator
            .validate()
            .map_err(|e| bad(format!("estimator.{}", e.key), e.message))?;
        if let Some(s) = &self.sweep {
            for (i, &l) in s.load.iter().enumerate() {
                if !(l.is_finite() && l > 0.0) {
                    return Err(bad(
                        format!("sweep.load[{i}]"),
                        format!("expected > 0, got {l}"),
                    ));
                }
            }
            if s.param.is_some() == s.values.is_empty() {
                return Err(bad(
                    "sweep.values",
                    "set both `param` and a non-empty `values`",
                ));
            }
        }
        Ok(())
    }

    /// Converts a level in `unit` to aggregate qps.
    fn qps(
        &self,
        key: &str,
        level: f64,
        unit: LoadUnit,
        service: &Distribution,
    ) -> Result<f64, ModelError> {
        if !(level.is_finite() && level >= 0.0) {
            return Err(bad(
                key,
                format!("expected a non-negative level, got {level}"),
            ));
        }
        match unit {
            LoadUnit::Qps => Ok(level),
            LoadUnit::Allocation | LoadUnit::Capacity => {
                let name = if unit == LoadUnit::Capacity {
                    "capacity"
                } else {
                    "allocation"
                };
                let Some(per_replica) = self.servers.allocation() else {
                    return Err(bad(
                        key,
                        format!(
                            "unit \"{name}\" needs the capacity model ([servers.capacity]) \
                             or the thread-pool model ([servers.thread_pool])"
                        ),
                    ));
                };
                let mean_s = service.mean_nanos() / 1e9;
                if mean_s <= 0.0 {
                    return Err(bad(
                        key,
                        format!("unit \"{name}\" needs a query cost above zero"),
                    ));
                }
                let replicas = if unit == LoadUnit::Capacity {
                    (0..self.servers.count)
                        .map(|i| self.servers.speed_of(i))
                        .sum()
                } else {
                    f64::from(self.servers.count)
                };
                Ok(level * replicas * per_replica / mean_s)
            }
        }
    }

    fn phases(&self, service: &Distribution) -> Result<Vec<Phase>, ModelError> {
        let mut out = Vec::new();
        let mut at = Time::ZERO;
        for (i, s) in self.load.steps.iter().enumerate() {
            let key = format!("load.steps[{i}]");
            if s.duration.is_zero() {
                return Err(bad(format!("{key}.duration"), "must be above 0"));
            }
            let q0 = self.qps(&format!("{key}.level"), s.level, s.unit, service)?;
            let q1 = self.qps(
                &format!("{key}.ramp_to"),
                s.ramp_to.unwrap_or(s.level),
                s.unit,
                service,
            )?;
            out.push(Phase {
                label: format!("step {}", i + 1),
                start: at,
                end: at + s.duration,
                qps_start: q0,
                qps_end: q1,
            });
            at = at + s.duration;
        }
        if let Some(r) = &self.load.ramp {
            if r.steps == 0
                || r.step_duration.is_zero()
                || !(r.factor.is_finite() && r.factor > 0.0)
            {
                return Err(bad(
                    "load.ramp",
                    "expected steps >= 1, step_duration > 0, factor > 0",
                ));
            }
            let mut level = r.start;
            for i in 0..r.steps {
                let q = self.qps("load.ramp.start", level, r.unit, service)?;
                out.push(Phase {
                    label: match r.unit {
                        LoadUnit::Allocation | LoadUnit::Capacity => format!("{level:.2}x"),
                        LoadUnit::Qps => format!("step {} ({q:.0} qps)", i + 1),
                    },
                    start: at,
                    end: at + r.step_duration,
                    qps_start: q,
                    qps_end: q,
                });
                at = at + r.step_duration;
                level *= r.factor;
            }
        }
        if out.is_empty() {
            return Err(bad("load", "expected `steps = [...]` or `ramp = {...}`"));
        }
        Ok(out)
    }

    /// Scales every time in the schedule and the episodes by `factor` (for short demo and
    /// test runs); rates are unchanged. A factor that is not a finite number above zero leaves
    /// the scenario as it is (callers validate user input first).
    pub fn scale_time(&mut self, factor: f64) {
        if !(factor.is_finite() && factor > 0.0) {
            return;
        }
        let f = |d: Duration| Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(d);
        for s in &mut self.load.steps {
            s.duration = f(s.duration);
        }
        if let Some(r) = &mut self.load.ramp {
            r.step_duration = f(r.step_duration);
        }
        for e in &mut self.servers.episodes {
            e.start = f(e.start);
            e.end = f(e.end);
        }
    }
}

#[cfg(test)]
mod tests;
