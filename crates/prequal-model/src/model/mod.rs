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
//! - [`ModelError`] (in `error.rs`) and [`round_to_u64`] (in `round.rs`): what the files above
//!   share, each in a leaf file of its own.
//!
//! Everything here takes time as a [`prequal_core::Time`] argument and randomness as
//! `&mut dyn RngCore`, so the same seed always gives the same replica behaviour, in virtual time
//! or in real time.

pub mod cpu;
pub mod dist;
pub mod episode;
mod error;
mod round;
pub mod server;
pub mod threads;
pub mod work;

pub use cpu::{CpuModel, JobId};
pub use dist::{DistSpec, Distribution, TraceLoader, parse_trace};
pub use episode::{Effects, EpisodeSpec, Fault, ServerSet};
pub use error::ModelError;
pub use round::round_to_u64;
pub use server::{
    Admission, AntagonistSpec, CancelledWork, CapacitySpec, ReplicaModel, ServersSpec, SpeedSpec,
    ThreadPoolSpec,
};
pub use threads::ThreadPool;
pub use work::Work;
