//! # prequal-testbed
//!
//! The live testbed: real processes on loopback that put balancing policies side by side.
//!
//! - [`backend`]: emulated replicas (`prequal backend`) driven by the replica model the
//!   simulator runs too ([`prequal_model::model`]), so one scenario file describes the replicas
//!   in simulation and on the testbed.
//! - [`experiment`]: `prequal experiment`, a scenario run live with each contender in turn
//!   (prequal proxies, HAProxy, nginx, Traefik) against fresh replicas, and its report.
//! - [`loadgen`]: the open-loop load generator (`prequal loadgen`), latency timed from each
//!   query's intended send time.

pub mod backend;
pub mod experiment;
pub mod loadgen;
