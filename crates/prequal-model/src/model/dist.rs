//! Latency and query-cost distributions.
//!
//! A scenario writes a distribution as a TOML table tagged by `kind` ([`DistSpec`]), or a
//! constant as a bare duration (`"10ms"`); it is
//! compiled once into a [`Distribution`] that samples nanoseconds from a caller-supplied
//! generator (any `RngCore`, a `&mut dyn RngCore` included). Supported kinds (all durations in humantime form, `"167ms"`):
//!
//! | kind | keys | meaning |
//! |---|---|---|
//! | `constant` | `value` | always `value` |
//! | `normal` | `mean`, `sd` | normal, truncated at zero by resampling (the Prequal testbed draws query cost this way with `sd = mean`) |
//! | `lognormal` | `mean`, `sd` | log-normal with that mean and standard deviation |
//! | `exponential` | `mean` | exponential with that mean |
//! | `uniform` | `low`, `high` | uniform on `[low, high]` |
//! | `trace` | `file`, `order` | replays recorded latencies: with `order = "random"` (the default) each sample is a uniformly chosen line of the file; with `order = "sequential"` each replica reads the file line after line from a random first line, wrapping around, so slow stretches of the recording stay together |
//! | `slow` | `base`, `factor` | `base` multiplied by `factor` (Finagle's "slow by a factor") |
//!
//! A trace file holds one latency per line, either with a unit (`12.5ms`, `2s`) or as a bare
//! number of milliseconds; blank lines and lines starting with `#` are skipped. Reading the file
//! is the caller's job ([`DistSpec::compile`] takes a loader), so this module stays free of I/O.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::{Rng, RngCore};
use rand_distr::{Distribution as _, Exp, LogNormal, StandardNormal};
use serde::{Deserialize, Serialize};

use super::error::ModelError;
use super::round::round_to_u64;

/// Reads a trace file into nanoseconds (see [`parse_trace`]).
pub type TraceLoader<'a> = dyn FnMut(&Path) -> Result<Arc<[u64]>, ModelError> + 'a;

/// A distribution as written in a scenario file: a table tagged by `kind`, or a bare duration
/// (`"10ms"`) for a constant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    remote = "Self",
    tag = "kind",
    rename_all = "kebab-case",
    deny_unknown_fields
)]
pub enum DistSpec {
    /// Always the same value.
    Constant {
        /// The value.
        #[serde(with = "humantime_serde")]
        value: Duration,
    },
    /// Normal, truncated at zero by resampling.
    Normal {
        /// Mean before truncation.
        #[serde(with = "humantime_serde")]
        mean: Duration,
        /// Standard deviation before truncation.
        #[serde(with = "humantime_serde")]
        sd: Duration,
    },
    /// Log-normal with the given mean and standard deviation.
    Lognormal {
        /// Mean.
        #[serde(with = "humantime_serde")]
        mean: Duration,
        /// Standard deviation.
        #[serde(with = "humantime_serde")]
        sd: Duration,
    },
    /// Exponential with the given mean.
    Exponential {
        /// Mean.
        #[serde(with = "humantime_serde")]
        mean: Duration,
    },
    /// Uniform between two bounds.
    Uniform {
        /// Lower bound.
        #[serde(with = "humantime_serde")]
        low: Duration,
        /// Upper bound.
        #[serde(with = "humantime_serde")]
        high: Duration,
    },
    /// Recorded latencies replayed from a file (relative paths resolve against the scenario).
    Trace {
        /// The trace file.
        file: PathBuf,
        /// In which order the lines are replayed.
        #[serde(default, skip_serializing_if = "TraceOrder::is_random")]
        order: TraceOrder,
    },
    /// Another distribution scaled by a factor.
    Slow {
        /// The distribution to scale.
        base: Box<DistSpec>,
        /// The multiplier (> 0).
        factor: f64,
    },
}

/// The derived (tagged) form, plus the shorthand: a string is a constant's duration.
impl<'de> Deserialize<'de> for DistSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = DistSpec;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a distribution table such as { kind = \"normal\", mean = \"10ms\", \
                     sd = \"2ms\" }, or a duration such as \"10ms\" for a constant",
                )
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<DistSpec, E> {
                humantime::parse_duration(text)
                    .map(|value| DistSpec::Constant { value })
                    .map_err(|error| E::custom(format!("{text:?} is not a duration: {error}")))
            }

            fn visit_map<M: serde::de::MapAccess<'de>>(self, map: M) -> Result<DistSpec, M::Error> {
                DistSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Serialize for DistSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DistSpec::serialize(self, serializer)
    }
}

/// How a trace's latencies are replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceOrder {
    /// Each sample is a uniformly chosen line: the recording's distribution, without its order.
    #[default]
    Random,
    /// Line after line from a random first line, wrapping around: the recording's order too,
    /// so bursts of slow queries arrive together, as they were recorded.
    Sequential,
}

impl TraceOrder {
    fn is_random(&self) -> bool {
        *self == TraceOrder::Random
    }
}

/// The index of a sequential trace's next line: unset until the first sample picks a random
/// line. A clone starts unset, so no two samplers ever share a place in the recording.
#[derive(Debug)]
pub struct Cursor(AtomicUsize);

impl Cursor {
    const UNSET: usize = usize::MAX;

    fn new() -> Self {
        Cursor(AtomicUsize::new(Self::UNSET))
    }

    /// The line to read now (picking a random first one), advancing past it.
    fn advance<R: RngCore + ?Sized>(&self, len: usize, rng: &mut R) -> usize {
        // Relaxed is enough: a cursor is only ever sampled by the one thread that owns it.
        let mut i = self.0.load(Ordering::Relaxed);
        if i >= len {
            i = rng.random_range(0..len);
        }
        self.0.store((i + 1) % len, Ordering::Relaxed);
        i
    }
}

impl Clone for Cursor {
    fn clone(&self) -> Self {
        Cursor::new()
    }
}

/// A compiled distribution, ready to sample.
#[derive(Clone, Debug)]
pub enum Distribution {
    /// Always this many nanoseconds.
    Constant(u64),
    /// Normal in nanoseconds, truncated at zero.
    Normal {
        /// Mean in nanoseconds.
        mean: f64,
        /// Standard deviation in nanoseconds.
        sd: f64,
    },
    /// Log-normal in nanoseconds.
    Lognormal(LogNormal<f64>, f64),
    /// Exponential in nanoseconds.
    Exponential(Exp<f64>, f64),
    /// Uniform on `[low, high]` nanoseconds.
    Uniform(u64, u64),
    /// Samples drawn uniformly from a recorded list (nanoseconds).
    Empirical(Arc<[u64]>),
    /// A recorded list (nanoseconds) read in order, wrapping around. Each replica's model (and
    /// each simulation's network) samples its own clone, so each has its own place.
    Sequence(Arc<[u64]>, Cursor),
    /// A distribution multiplied by a factor.
    Scaled(Box<Distribution>, f64),
}

fn nanos(d: Duration) -> f64 {
    d.as_nanos() as f64
}

impl DistSpec {
    /// Checks the parameters; `key` is the path used in error messages.
    pub fn validate(&self, key: &str) -> Result<(), ModelError> {
        match self {
            DistSpec::Uniform { low, high } if low > high => Err(ModelError::invalid(
                key,
                format!("uniform needs low <= high, got low = {low:?}, high = {high:?}"),
            )),
            DistSpec::Lognormal { mean, .. } if mean.is_zero() => Err(ModelError::invalid(
                format!("{key}.mean"),
                "lognormal needs a mean above zero",
            )),
            DistSpec::Slow { base, factor } => {
                if !(factor.is_finite() && *factor > 0.0) {
                    return Err(ModelError::invalid(
                        format!("{key}.factor"),
                        format!("expected a finite number above 0, got {factor}"),
                    ));
                }
                base.validate(&format!("{key}.base"))
            }
            _ => Ok(()),
        }
    }

    /// Validates and compiles the spec. `load_trace` reads a trace file (see
    /// [`parse_trace`]); it is only called for `kind = "trace"`.
    pub fn compile(
        &self,
        key: &str,
        load_trace: &mut TraceLoader<'_>,
    ) -> Result<Distribution, ModelError> {
        self.validate(key)?;
        Ok(match self {
            DistSpec::Constant { value } => Distribution::Constant(nanos(*value) as u64),
            DistSpec::Normal { mean, sd } => Distribution::Normal {
                mean: nanos(*mean),
                sd: nanos(*sd),
            },
            DistSpec::Lognormal { mean, sd } => {
                let (m, s) = (nanos(*mean), nanos(*sd));
                let sigma2 = (1.0 + (s * s) / (m * m)).ln();
                let mu = m.ln() - sigma2 / 2.0;
                let dist = LogNormal::new(mu, sigma2.sqrt())
                    .map_err(|e| ModelError::invalid(key, e.to_string()))?;
                Distribution::Lognormal(dist, m)
            }
            DistSpec::Exponential { mean } => {
                let m = nanos(*mean).max(1.0);
                let dist =
                    Exp::new(1.0 / m).map_err(|e| ModelError::invalid(key, e.to_string()))?;
                Distribution::Exponential(dist, m)
            }
            DistSpec::Uniform { low, high } => {
                Distribution::Uniform(nanos(*low) as u64, nanos(*high) as u64)
            }
            DistSpec::Trace { file, order } => {
                let samples = load_trace(file)?;
                if samples.is_empty() {
                    return Err(ModelError::invalid(
                        format!("{key}.file"),
                        format!("trace {} holds no latencies", file.display()),
                    ));
                }
                match order {
                    TraceOrder::Random => Distribution::Empirical(samples),
                    TraceOrder::Sequential => Distribution::Sequence(samples, Cursor::new()),
                }
            }
            DistSpec::Slow { base, factor } => Distribution::Scaled(
                Box::new(base.compile(&format!("{key}.base"), load_trace)?),
                *factor,
            ),
        })
    }

    /// Compiles a spec that must not refer to a trace file.
    pub fn compile_pure(&self, key: &str) -> Result<Distribution, ModelError> {
        self.compile(key, &mut |path| {
            Err(ModelError::invalid(
                key,
                format!("trace file {} cannot be read here", path.display()),
            ))
        })
    }
}

impl Distribution {
    /// One sample, in nanoseconds. Generic over the generator (a `&mut dyn RngCore` will do)
    /// so that a caller holding a concrete one gets its draws inlined.
    pub fn sample_nanos<R: RngCore + ?Sized>(&self, rng: &mut R) -> u64 {
        match self {
            Distribution::Constant(v) => *v,
            Distribution::Normal { mean, sd } => {
                if *sd <= 0.0 {
                    return mean.max(0.0) as u64;
                }
                // Resample until non-negative; give up after a few tries (only possible when
                // the mean is far below zero, which validation cannot rule out cheaply).
                for _ in 0..64 {
                    let z: f64 = rng.sample(StandardNormal);
                    let x = mean + sd * z;
                    if x >= 0.0 {
                        return x as u64;
                    }
                }
                0
            }
            Distribution::Lognormal(d, _) => d.sample(&mut AsRng(rng)) as u64,
            Distribution::Exponential(d, _) => d.sample(&mut AsRng(rng)) as u64,
            Distribution::Uniform(lo, hi) => {
                if lo == hi {
                    *lo
                } else {
                    rng.random_range(*lo..=*hi)
                }
            }
            Distribution::Empirical(samples) => samples[rng.random_range(0..samples.len())],
            Distribution::Sequence(samples, cursor) => samples[cursor.advance(samples.len(), rng)],
            Distribution::Scaled(base, factor) => {
                round_to_u64(base.sample_nanos(rng) as f64 * factor)
            }
        }
    }

    /// One sample, as a duration.
    pub fn sample<R: RngCore + ?Sized>(&self, rng: &mut R) -> Duration {
        Duration::from_nanos(self.sample_nanos(rng))
    }

    /// The distribution's mean in nanoseconds (exact, including the truncation of `normal`).
    pub fn mean_nanos(&self) -> f64 {
        match self {
            Distribution::Constant(v) => *v as f64,
            Distribution::Normal { mean, sd } => truncated_normal_mean(*mean, *sd),
            Distribution::Lognormal(_, m) | Distribution::Exponential(_, m) => *m,
            Distribution::Uniform(lo, hi) => (*lo as f64 + *hi as f64) / 2.0,
            Distribution::Empirical(samples) | Distribution::Sequence(samples, _) => {
                samples.iter().map(|&s| s as f64).sum::<f64>() / samples.len() as f64
            }
            Distribution::Scaled(base, factor) => base.mean_nanos() * factor,
        }
    }
}

/// `rand_distr` wants a sized `Rng`; this forwards to one that may be a trait object.
struct AsRng<'a, R: ?Sized>(&'a mut R);

impl<R: RngCore + ?Sized> RngCore for AsRng<'_, R> {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst)
    }
}

/// Mean of N(mean, sd) conditioned on being non-negative: mean + sd·φ(a)/Φ(a), a = mean/sd.
fn truncated_normal_mean(mean: f64, sd: f64) -> f64 {
    if sd <= 0.0 {
        return mean.max(0.0);
    }
    let a = mean / sd;
    let pdf = (-a * a / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = 0.5 * (1.0 + erf(a / std::f64::consts::SQRT_2));
    if cdf <= 0.0 {
        return 0.0;
    }
    mean + sd * pdf / cdf
}

/// The error function (Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7), enough for
/// converting a load target into a query rate; std has no erf.
fn erf(x: f64) -> f64 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    sign * (1.0 - poly * (-x * x).exp())
}

/// Parses a trace file's text into nanoseconds; `name` labels errors.
pub fn parse_trace(text: &str, name: &str) -> Result<Arc<[u64]>, ModelError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let nanos = if let Ok(ms) = line.parse::<f64>() {
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(ModelError::Trace {
                    file: name.to_string(),
                    line: i + 1,
                    message: format!("expected a non-negative latency, got {line:?}"),
                });
            }
            (ms * 1e6).round() as u64
        } else {
            humantime::parse_duration(line)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .map_err(|e| ModelError::Trace {
                    file: name.to_string(),
                    line: i + 1,
                    message: format!("expected a latency like 12.5ms or 12.5, got {line:?} ({e})"),
                })?
        };
        out.push(nanos);
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn sample_mean(d: &Distribution, n: usize) -> f64 {
        let mut rng = SmallRng::seed_from_u64(3);
        (0..n).map(|_| d.sample_nanos(&mut rng) as f64).sum::<f64>() / n as f64
    }

    #[test]
    fn a_bare_duration_is_a_constant_and_a_table_is_written_back() {
        #[derive(Deserialize, Serialize)]
        struct Holder {
            d: DistSpec,
        }
        let short: Holder = toml::from_str("d = \"10ms\"").unwrap();
        let constant = DistSpec::Constant {
            value: Duration::from_millis(10),
        };
        assert_eq!(short.d, constant);
        let text = toml::to_string(&short).unwrap();
        assert!(text.contains("kind = \"constant\""), "{text}");
        let back: Holder = toml::from_str(&text).unwrap();
        assert_eq!(back.d, constant);
        for (bad, says) in [
            ("d = \"fast\"", "not a duration"),
            ("d = 5", "a duration such as"),
        ] {
            let err = toml::from_str::<Holder>(bad).err().unwrap().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn sample_means_match_analytic_means() {
        let specs = [
            "kind = \"normal\"\nmean = \"10ms\"\nsd = \"10ms\"",
            "kind = \"lognormal\"\nmean = \"10ms\"\nsd = \"5ms\"",
            "kind = \"exponential\"\nmean = \"10ms\"",
            "kind = \"uniform\"\nlow = \"5ms\"\nhigh = \"15ms\"",
            "kind = \"slow\"\nfactor = 3.0\nbase = { kind = \"constant\", value = \"2ms\" }",
        ];
        for text in specs {
            let spec: DistSpec = toml::from_str(text).unwrap();
            let d = spec.compile_pure("latency").unwrap();
            let (want, got) = (d.mean_nanos(), sample_mean(&d, 200_000));
            assert!((got - want).abs() / want < 0.02, "{text}: {got} vs {want}");
        }
    }

    #[test]
    fn truncated_normal_never_negative_and_mean_shifts_up() {
        let d = Distribution::Normal { mean: 1e6, sd: 1e6 };
        // E[X | X >= 0] for N(1, 1) is about 1.2876.
        assert!((d.mean_nanos() / 1e6 - 1.2876).abs() < 1e-3);
    }

    #[test]
    fn unknown_key_and_bad_factor_are_errors() {
        let err = toml::from_str::<DistSpec>("kind = \"constant\"\nvalue = \"1ms\"\nsd = \"1ms\"")
            .unwrap_err();
        assert!(err.to_string().contains("sd"), "{err}");
        let spec: DistSpec = toml::from_str(
            "kind = \"slow\"\nfactor = 0.0\nbase = { kind = \"constant\", value = \"1ms\" }",
        )
        .unwrap();
        let err = spec.compile_pure("servers.latency").unwrap_err();
        assert!(err.to_string().contains("servers.latency.factor"), "{err}");
    }

    fn compile_trace(order: &str) -> Distribution {
        let spec: DistSpec =
            toml::from_str(&format!("kind = \"trace\"\nfile = \"t.txt\"\n{order}")).unwrap();
        let trace: Arc<[u64]> = Arc::from(vec![1, 2, 3, 4, 5]);
        spec.compile("latency", &mut |_| Ok(trace.clone())).unwrap()
    }

    #[test]
    fn a_sequential_trace_replays_its_lines_in_order_from_a_random_start() {
        let d = compile_trace("order = \"sequential\"");
        let mut rng = SmallRng::seed_from_u64(9);
        let got: Vec<u64> = (0..12).map(|_| d.sample_nanos(&mut rng)).collect();
        for pair in got.windows(2) {
            assert_eq!(pair[1], pair[0] % 5 + 1, "in order, wrapping: {got:?}");
        }
        // Another replica's clone keeps a place of its own.
        let other = compile_trace("order = \"sequential\"");
        let mut rng = SmallRng::seed_from_u64(1);
        let starts: std::collections::HashSet<u64> = (0..20)
            .map(|_| other.clone().sample_nanos(&mut rng))
            .collect();
        assert!(starts.len() > 1, "random first lines: {starts:?}");
    }

    #[test]
    fn a_random_trace_is_the_default_and_writes_back_without_order() {
        let d = compile_trace("");
        assert!(matches!(d, Distribution::Empirical(_)));
        let spec: DistSpec = toml::from_str("kind = \"trace\"\nfile = \"t.txt\"").unwrap();
        assert!(!toml::to_string(&spec).unwrap().contains("order"));
        let err =
            toml::from_str::<DistSpec>("kind = \"trace\"\nfile = \"t\"\norder = \"shuffled\"")
                .unwrap_err();
        assert!(err.to_string().contains("sequential"), "{err}");
    }

    #[test]
    fn trace_parses_units_and_bare_millis() {
        let t = parse_trace("# header\n12.5ms\n\n2\n1s\n", "t.txt").unwrap();
        assert_eq!(&*t, &[12_500_000, 2_000_000, 1_000_000_000]);
        let err = parse_trace("1ms\nfast\n", "t.txt").unwrap_err();
        assert!(err.to_string().contains("t.txt:2"), "{err}");
    }
}
