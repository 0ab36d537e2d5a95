//! The server model, free of I/O and clocks, shared by the simulator and the live backend.
//!
//! - [`dist`]: latency and query-cost distributions (constant, truncated normal, log-normal,
//!   exponential, uniform, replayed traces, "slow by a factor"), configured in TOML and sampled
//!   with a caller's `&mut dyn RngCore`.
//! - [`cpu`]: processor sharing of a replica's cores among the queries in flight, as a state
//!   machine driven by `now` (`arrive`, `next_completion`, `advance`, `set_cores`, `cancel`).
//! - [`episode`]: things that happen to some replicas between two times (slow, pinned latency,
//!   errors, capacity loss, whole-replica faults) and how overlapping episodes combine.
//! - [`threads`]: a thread pool (k workers, FIFO queue), the third server model.
//! - [`work`]: processor sharing or thread pool behind one interface for the drivers.
//! - [`server`]: the scenario's `[servers]` section and [`server::ReplicaModel`], one
//!   replica's model: speed, antagonists, episodes, and the latency, capacity or thread-pool
//!   model.
//!
//! Everything here takes time as a [`prequal_core::Time`] argument and randomness as
//! `&mut dyn RngCore`, so the same seed always gives the same replica behaviour, in virtual time
//! or in real time.

pub mod cpu;
pub mod dist;
pub mod episode;
pub mod server;
pub mod threads;
pub mod work;

pub use cpu::{CpuModel, JobId};
pub use dist::{DistSpec, Distribution, TraceLoader, parse_trace};
pub use episode::{Effects, EpisodeSpec, Fault, ServerSet};
pub use server::{
    Admission, AntagonistSpec, CapacitySpec, ReplicaModel, ServersSpec, SpeedSpec, ThreadPoolSpec,
};
pub use threads::ThreadPool;
pub use work::Work;

/// `v.round() as u64` (halves away from zero, negative and NaN to 0, saturating), without the
/// call into libm that `f64::round` costs on the baseline x86-64 target.
pub fn round_to_u64(v: f64) -> u64 {
    /// From 2^52 on, every `f64` is a whole number.
    const WHOLE: f64 = 4_503_599_627_370_496.0;
    if v.is_nan() || v < 0.0 {
        return 0;
    }
    if v >= WHOLE {
        return v as u64;
    }
    // Below 2^52 the truncation and the fraction left are both exact.
    let whole = v as u64;
    whole + u64::from(v - whole as f64 >= 0.5)
}

/// A model parameter was wrong; `key` is the dotted path in the scenario file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A value was out of range or inconsistent.
    #[error("`{key}`: {message}")]
    Invalid {
        /// Dotted key path, such as `servers.episodes[0].end`.
        key: String,
        /// What was wrong and what is expected.
        message: String,
    },
    /// A trace file line could not be read.
    #[error("{file}:{line}: {message}")]
    Trace {
        /// The trace file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
}

impl ModelError {
    /// Shorthand for [`ModelError::Invalid`].
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_to_u64;

    #[test]
    fn round_to_u64_matches_round_then_cast() {
        let mut values = vec![
            0.0,
            -0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            -0.4,
            -0.5,
            -3.7,
            1e300,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            4503599627370495.5,
            4503599627370496.0,
            9007199254740993.0,
            1.8446744073709552e19,
            2e19,
            f64::MIN_POSITIVE,
        ];
        let mut x = 0.3_f64;
        for _ in 0..100_000 {
            // A spread of magnitudes and fractions.
            x = (x * 7.919 + 0.123).fract();
            values.push(x * 10f64.powi((x * 1e6) as i32 % 20));
        }
        for v in values {
            assert_eq!(round_to_u64(v), v.round() as u64, "{v:e}");
        }
    }
}
