//! # prequal-testbed
//!
//! The live testbed's parts: emulated replicas and an open-loop load generator. `prequal
//! experiment` (the `prequal-experiment` crate) runs them on loopback against each contender;
//! each also runs on its own.
//!
//! - [`backend`]: emulated replicas (`prequal backend`) driven by the replica model the
//!   simulator runs too ([`prequal_model::model`]), so one scenario file describes the replicas
//!   in simulation and on the testbed.
//! - [`loadgen`]: the open-loop load generator (`prequal loadgen`), latency timed from each
//!   query's intended send time, measured into the simulator's [`prequal_model::metrics`].
//!
//! Neither needs the simulator itself: the replica model, the scenario file and the metrics
//! come from `prequal-model`, which the simulator shares.

pub mod backend;
pub mod loadgen;
