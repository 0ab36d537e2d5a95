//! The server model, free of I/O and clocks, shared by the simulator and the live backend.
//!
//! - [`dist`]: latency and query-cost distributions (constant, truncated normal, log-normal,
//!   exponential, uniform, replayed traces, "slow by a factor"), configured in TOML and sampled
//!   with a caller's `&mut dyn RngCore`.
//! - [`cpu`]: processor sharing of a replica's cores among the queries in flight, as a state
//!   machine driven by `now` (`arrive`, `next_completion`, `advance`, `set_cores`, `cancel`).
//! - [`episode`]: things that happen to some replicas between two times (slow, pinned latency,
//!   errors, capacity loss) and how overlapping episodes combine.
//! - [`server`]: the scenario's `[servers]` section and [`server::ReplicaModel`], one
//!   replica's model: speed, antagonists, episodes, and the latency or capacity model.
//!
//! Everything here takes time as a [`prequal_core::Time`] argument and randomness as
//! `&mut dyn RngCore`, so the same seed always gives the same replica behaviour, in virtual time
//! or in real time.

pub mod cpu;
pub mod dist;
pub mod episode;
pub mod server;

pub use cpu::{CpuModel, JobId};
pub use dist::{DistSpec, Distribution, TraceLoader, parse_trace};
pub use episode::{Effects, EpisodeSpec, ServerSet};
pub use server::{Admission, AntagonistSpec, CapacitySpec, ReplicaModel, ServersSpec, SpeedSpec};

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
