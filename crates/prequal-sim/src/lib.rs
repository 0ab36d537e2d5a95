//! # prequal-sim
//!
//! A discrete-event simulator that drives prequal-core's policies in virtual time, and the
//! sans-IO server model ([`model`]) it shares with the live backend.

pub mod engine;
pub mod hash;
pub mod metrics;
pub mod model;
pub mod plot;
pub mod queue;
pub mod report;
pub mod scenario;
