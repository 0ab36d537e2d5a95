//! What every HTTP hop of prequal does the same way, written once: which headers belong to one
//! connection rather than the message (RFC 9110 section 7.6.1), what a gRPC status says about
//! the replica that sent it, and how a probe reply is read off a response. The sidecar, the
//! proxy and the tower balancer all use these.
//!
//! Hop-by-hop headers are removed in both directions: the fixed list below plus every header
//! named in `Connection`. `TE: trailers` is the one exception kept on requests, because gRPC
//! servers require it to promise trailers. `Trailer` is not hop-by-hop: it describes the
//! message, and an HTTP/1.1 sender needs it to forward trailers.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use prequal_core::{LoadReport, Outcome};

use crate::protocol::{MAX_REPLY_LEN, parse_reply};
use crate::serve::BoxError;

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// Headers that are always hop-by-hop.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    KEEP_ALIVE,
    PROXY_CONNECTION,
];

/// Removes hop-by-hop headers. `keep_te_trailers` keeps a `TE: trailers` request header.
///
/// It runs on every message, so it is shaped for the common case: one pass over the few
/// header names a message has, and the map is touched only if one of them is hop-by-hop.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_te_trailers: bool) {
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    let keep_te = keep_te_trailers
        && headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    // Names listed in Connection are hop-by-hop for this message too.
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    if keep_te {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// The outcome the `grpc-status` in `headers` (trailers, or the head of a trailers-only
/// response) implies for the replica: see [`Outcome::from_grpc_status`]. A success when there
/// is none.
pub fn grpc_outcome(headers: &HeaderMap) -> Outcome {
    headers.get(GRPC_STATUS).map_or(Outcome::Success, |v| {
        Outcome::from_grpc_status(v.as_bytes())
    })
}

/// Why a probe reply was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProbeReplyError {
    /// The replica answered with a status other than 200.
    #[error("probe answered with status {0}")]
    Status(StatusCode),
    /// The body could not be read, or ran over the protocol's 256 bytes.
    #[error("probe reply body could not be read: {0}")]
    Body(#[source] BoxError),
    /// The body broke the protocol's grammar.
    #[error(transparent)]
    Malformed(#[from] crate::protocol::ReplyError),
}

/// Reads a probe reply off `response`: status 200 and a body the strict v1 parser accepts
/// (docs/probe-protocol.md), read no further than one byte past the protocol's limit.
pub async fn read_probe_reply<B>(response: Response<B>) -> Result<LoadReport, ProbeReplyError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if response.status() != StatusCode::OK {
        return Err(ProbeReplyError::Status(response.status()));
    }
    // One byte over the limit is enough for the parser to reject an over-long reply.
    let body = Limited::new(response.into_body(), MAX_REPLY_LEN + 2);
    let bytes: Bytes = body
        .collect()
        .await
        .map_err(ProbeReplyError::Body)?
        .to_bytes();
    Ok(parse_reply(&bytes)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn strips_fixed_and_listed_hop_by_hop_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("x-secret, close"),
        );
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        headers.insert(header::TRAILER, HeaderValue::from_static("grpc-status"));
        strip_hop_by_hop(&mut headers, true);
        assert!(headers.get("x-secret").is_none());
        assert!(headers.get(header::CONNECTION).is_none());
        assert!(headers.get("keep-alive").is_none());
        assert_eq!(headers.get(header::TE).unwrap(), "trailers");
        assert_eq!(headers.get(header::ACCEPT).unwrap(), "*/*");
        // `Trailer` describes the message: it stays.
        assert_eq!(headers.get(header::TRAILER).unwrap(), "grpc-status");
        strip_hop_by_hop(&mut headers, false);
        assert!(headers.get(header::TE).is_none());
        let mut gzip = HeaderMap::new();
        gzip.insert(header::TE, HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut gzip, true);
        assert!(gzip.is_empty());
    }

    #[test]
    fn strips_each_fixed_header_alone() {
        for name in [
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "upgrade",
            "transfer-encoding",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
            headers.insert(name, HeaderValue::from_static("x"));
            strip_hop_by_hop(&mut headers, true);
            assert!(headers.get(name).is_none(), "{name} kept");
            assert_eq!(headers.len(), 1);
        }
        let mut clean = HeaderMap::new();
        clean.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut clean, false);
        assert_eq!(clean.len(), 1);
    }

    #[test]
    fn grpc_status_blames_the_replica_only_for_server_faults() {
        let with = |code: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("grpc-status", HeaderValue::from_static(code));
            grpc_outcome(&headers)
        };
        assert_eq!(grpc_outcome(&HeaderMap::new()), Outcome::Success);
        assert_eq!(with("0"), Outcome::Success);
        assert_eq!(with("5"), Outcome::Success);
        assert_eq!(with("3"), Outcome::Success);
        assert_eq!(with("4"), Outcome::Timeout);
        for code in ["2", "8", "13", "14", "15"] {
            assert_eq!(with(code), Outcome::Error, "{code}");
        }
    }
}
