//! # prequal-server
//!
//! The replica side of prequal: what a server needs so that Prequal clients can probe it.
//!
//! - [`tracker`]: [`SharedTracker`], the core's load tracker made thread-safe (atomic RIF,
//!   samples under a short lock).
//! - [`layer`]: [`ProbeLayer`], a tower layer for hyper, axum and tonic servers that counts
//!   requests in flight until their response body ends, records latency and outcome, and
//!   answers probes.
//! - [`sidecar`]: [`Forward`], the transparent forwarder behind `prequal sidecar`.
//!
//! The HTTP edge this crate shares with the proxy and the tower balancer lives in
//! `prequal-http`: the probe protocol, hop-by-hop headers, gRPC status classification, the
//! tracked response body, the serve loop, the shutdown signal and TLS. So that a replica's code
//! needs one dependency, the parts a replica uses are re-exported here unchanged:
//! [`protocol`], [`serve()`](serve()), [`serve_tls`] and the `tls` module (cargo feature
//! `tls`), [`shutdown_signal`] and [`BoxError`].

pub mod layer;
pub mod sidecar;
pub mod tracker;

/// The probe protocol, version 1 (re-exported from `prequal_http::protocol`).
pub use prequal_http::protocol;
/// TLS with rustls for the replica's listener (re-exported from `prequal_http::tls`).
#[cfg(feature = "tls")]
pub use prequal_http::tls;

pub use layer::{HintHook, ProbeBody, ProbeHook, ProbeLayer, ProbeService};
#[cfg(feature = "tls")]
pub use prequal_http::serve_tls;
pub use prequal_http::{BoxError, serve, shutdown_signal};
pub use sidecar::{Forward, ProxyBody, UpstreamError};
pub use tracker::{Clock, SharedTracker};
