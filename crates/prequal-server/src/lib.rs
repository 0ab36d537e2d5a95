//! # prequal-server
//!
//! The replica side of prequal: what a server needs so that Prequal clients can probe it.
//!
//! - [`protocol`]: the probe protocol, both sides, with no async dependencies (the proxy and
//!   the testbed reuse it); specified in `docs/probe-protocol.md`.
//! - [`tracker`]: [`SharedTracker`], the core's load tracker made thread-safe (atomic RIF,
//!   samples under a short lock).
//! - [`layer`]: [`ProbeLayer`], a tower layer for hyper, axum and tonic servers that counts
//!   requests in flight until their response body ends, records latency and outcome, and
//!   answers probes.
//! - [`serve`](mod@serve): serving a tower service with HTTP/1.1 and h2c on one listener, with graceful
//!   shutdown.
//! - [`sidecar`]: [`Forward`], the transparent forwarder behind `prequal sidecar`.
//! - [`edge`]: what every HTTP hop does the same way: hop-by-hop headers and what a gRPC
//!   status says about the replica (shared with the proxy and the tower balancer).
//! - `tls` (cargo feature `tls`): TLS with rustls shared by the sidecar and the proxy: PEM
//!   files with errors naming the setting and the path, listener configs with ALPN and client
//!   certificates, reload on file change, and `serve_tls`.

pub mod edge;
pub mod layer;
pub mod protocol;
pub mod serve;
pub mod sidecar;
#[cfg(feature = "tls")]
pub mod tls;
pub mod tracker;

pub use layer::{HintHook, ProbeHook, ProbeLayer, ProbeService, TrackedBody};
#[cfg(feature = "tls")]
pub use serve::serve_tls;
pub use serve::{BoxError, serve, shutdown_signal};
pub use sidecar::{Forward, ProxyBody, UpstreamError};
pub use tracker::{Clock, SharedTracker};
