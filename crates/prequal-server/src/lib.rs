//! # prequal-server
//!
//! The replica side of prequal: what a server needs so that Prequal clients can probe it.
//!
//! - [`protocol`]: the probe protocol, both sides, with no async dependencies (the proxy and
//!   the testbed reuse it); specified in `docs/probe-protocol.md`.

pub mod protocol;
