//! Hop-by-hop headers: the fields that describe one connection rather than the message, which
//! every prequal hop (the proxy, the sidecar) removes before it forwards a message, in both
//! directions.
//!
//! The rule (RFC 9110 section 7.6.1): every field named in `Connection`, then `Connection`
//! itself, then the fields known to be hop-by-hop whether listed or not: `Proxy-Connection`,
//! `Keep-Alive`, `TE`, `Transfer-Encoding` and `Upgrade`, which RFC 9110 names, and
//! `Proxy-Authenticate` and `Proxy-Authorization`, which RFC 2616 section 13.5.1 listed and
//! RFC 9110 section 11.7 still scopes to the nearest proxy (a challenge from, and credentials
//! for, the hop that asked; never the replica's).
//!
//! Two deliberate choices:
//!
//! - `TE: trailers` is kept on requests ([`Direction::Request`]), because gRPC servers require
//!   it as the client's promise that it accepts trailers; any other `TE` goes.
//! - `Trailer` is **kept**. RFC 2616's list named it (as "Trailers", a known erratum, 4522),
//!   but RFC 9110 section 6.6.2 makes it part of the message: it announces which trailer fields
//!   follow the body. hyper's HTTP/1.1 encoder sends only the trailer fields the head
//!   announces, so a hop that stripped it would silently drop a gRPC status riding in the
//!   trailers of an HTTP/1.1 response.
//!
//! The sidecar once kept `Proxy-Authenticate` and stripped `Trailer` while the proxy did the
//! opposite; this module is the one rule both now follow, and `tests/edge_rules.rs` pins it.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The fields that are always hop-by-hop, whether `Connection` lists them or not.
pub const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    PROXY_CONNECTION,
    KEEP_ALIVE,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
];

/// Which way a message travels, for the one difference between the two: `TE: trailers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to replica: `TE: trailers` is kept (gRPC needs it).
    Request,
    /// Replica to client: every hop-by-hop field goes.
    Response,
}

/// Removes the hop-by-hop fields from a message travelling `direction` (see the module docs).
///
/// It runs on every message, so it is shaped for the common case: one pass over the few
/// header names a message has, and the map is touched only if one of them is hop-by-hop.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, direction: Direction) {
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    let keep_te = direction == Direction::Request
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
