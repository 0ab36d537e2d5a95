//! What a response says about the replica that sent it: the outcome a balancing policy hears
//! (its error aversion counts failures) and a replica's load tracker records.
//!
//! The head decides first: a 5xx status is an [`Outcome::Error`]. Otherwise a `grpc-status`
//! decides, found in the head of a trailers-only response or in the trailers
//! ([`grpc_outcome`]), by [`Outcome::from_grpc_status`]:
//!
//! | `grpc-status` | outcome |
//! |---|---|
//! | none, OK (0), and the codes that blame the caller (NOT_FOUND, INVALID_ARGUMENT, ...) | success |
//! | DEADLINE_EXCEEDED (4) | [`Outcome::Timeout`] |
//! | UNKNOWN (2), RESOURCE_EXHAUSTED (8), INTERNAL (13), UNAVAILABLE (14), DATA_LOSS (15) | [`Outcome::Error`] |
//! | anything that is not one of these codes (garbled, empty, out of range) | success |
//!
//! DEADLINE_EXCEEDED is a timeout, not an error: the call ran out of time (the replica's own
//! deadline or one propagated from the client), which is what a timed-out HTTP try is too, so
//! every driver (proxy, sidecar, tower layer, tower balancer) reports the two alike. The proxy
//! once counted it as an error; it now follows this rule with everyone else. A garbled status
//! says nothing about the replica's health, so it does not count against it.

use http::StatusCode;
use http::header::{HeaderMap, HeaderName};
use prequal_core::Outcome;

/// The header (or trailer) field that carries a gRPC status code.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The outcome the `grpc-status` in `headers` (trailers, or the head of a trailers-only
/// response) implies for the replica: see the module docs. A success when there is none.
pub fn grpc_outcome(headers: &HeaderMap) -> Outcome {
    headers.get(GRPC_STATUS).map_or(Outcome::Success, |v| {
        Outcome::from_grpc_status(v.as_bytes())
    })
}

/// The outcome a response head implies, before its body is read: an error for a 5xx status,
/// else what its `grpc-status` (a trailers-only response) says.
pub fn head_outcome(status: StatusCode, headers: &HeaderMap) -> Outcome {
    if status.is_server_error() {
        Outcome::Error
    } else {
        grpc_outcome(headers)
    }
}
