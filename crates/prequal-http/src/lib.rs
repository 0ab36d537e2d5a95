//! # prequal-http
//!
//! The HTTP edge of prequal, written once: what every hop that speaks HTTP does the same way,
//! whether it balances (the proxy in `prequal-proxy`, the tower balancer in `prequal-tower`) or
//! is balanced (the sidecar and the tower layer in `prequal-server`, the testbed's backends).
//! Those crates depend on this one and not on each other; this one depends only on
//! `prequal-core` (for [`Outcome`](prequal_core::Outcome) and
//! [`LoadReport`](prequal_core::LoadReport)) and the HTTP stack (http, http-body, hyper,
//! hyper-util, tower, tokio; rustls with the `tls` feature).
//!
//! - [`protocol`]: the probe protocol, both sides, with no async or HTTP dependencies; specified
//!   in `docs/probe-protocol.md`. [`probe`] reads a reply off an HTTP response.
//! - [`probe_health`]: how a replica answers probes when it does not answer them as it should
//!   (it refuses them, or answers only after the timeout), kept per replica by the proxy's
//!   prober and the tower balancer's so that each warns once, not once per probe.
//! - [`headers`]: which headers are hop-by-hop, removed in both directions (RFC 9110 section
//!   7.6.1; `Trailer` kept, `Proxy-Authenticate` removed, `TE: trailers` kept on requests).
//! - [`grpc`]: what a response's status and `grpc-status` say about the replica (5xx and server
//!   faults are errors, DEADLINE_EXCEEDED is a timeout).
//! - [`body`]: [`TrackedBody`], the one response body that reports its end (read to the end,
//!   failed, or dropped before) to a driver's [`OnEnd`] type.
//! - [`serve`](mod@serve): the accept loop, one connection's task, the graceful drain, and
//!   [`serve()`] for a tower service with HTTP/1.1 and h2c on one listener.
//! - [`signal`]: [`shutdown_signal`], SIGINT or SIGTERM.
//! - [`watch`]: polling files for change (modification time and size) and reloading what was
//!   built from them, one rule for TLS certificates, the proxy's config file and replica lists;
//!   a watch is a future for the caller to spawn, never a task started here.
//! - `tls` (cargo feature `tls`): TLS with rustls shared by the sidecar and the proxy: PEM
//!   files with errors naming the setting and the path, listener configs with ALPN and client
//!   certificates, the bounded handshake, reload on file change, and `serve_tls`.
//!
//! `tests/edge_rules.rs` pins the rules that once drifted between copies: the hop-by-hop set
//! in both directions, the gRPC classification, and the tracked body's single report.
//!
//! ```
//! use http::header::{HeaderMap, HeaderValue};
//! use prequal_core::Outcome;
//! use prequal_http::grpc::grpc_outcome;
//! use prequal_http::headers::{Direction, strip_hop_by_hop};
//!
//! let mut trailers = HeaderMap::new();
//! trailers.insert("grpc-status", HeaderValue::from_static("4"));
//! assert_eq!(grpc_outcome(&trailers), Outcome::Timeout);
//!
//! let mut head = HeaderMap::new();
//! head.insert("connection", HeaderValue::from_static("close"));
//! head.insert("trailer", HeaderValue::from_static("grpc-status"));
//! strip_hop_by_hop(&mut head, Direction::Response);
//! assert_eq!(head.len(), 1, "Trailer describes the message and stays");
//! ```

pub mod body;
mod error;
pub mod grpc;
pub mod headers;
pub mod probe;
pub mod probe_health;
pub mod protocol;
pub mod serve;
pub mod signal;
#[cfg(feature = "tls")]
pub mod tls;
pub mod watch;

pub use body::{OnEnd, TrackedBody, track};
pub use error::BoxError;
pub use grpc::{grpc_outcome, head_outcome};
pub use headers::{Direction, strip_hop_by_hop};
pub use probe::{ProbeReplyError, read_probe_reply};
pub use probe_health::ProbeHealth;
#[cfg(feature = "tls")]
pub use serve::serve_tls;
pub use serve::{DEFAULT_DRAIN, serve};
pub use signal::shutdown_signal;
