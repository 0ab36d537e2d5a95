//! Header handling for a forwarding proxy (RFC 9110 section 7.6).
//!
//! Hop-by-hop headers describe one connection, not the message, so they are removed in both
//! directions: the fixed list below plus every header named in `Connection`. `TE: trailers` is
//! the one exception kept on requests, because gRPC servers require it to promise trailers. On
//! requests the proxy then records itself: the client's address is appended to
//! `X-Forwarded-For` and to `Forwarded` (RFC 7239), and `Via` gets this hop.

use std::net::SocketAddr;

use http::Version;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that are always hop-by-hop.
/// (`Trailer` is not among them: it describes the message, and HTTP/1.1 senders need it to
/// forward trailers.)
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers. `keep_te_trailers` keeps a `TE: trailers` request header.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_te_trailers: bool) {
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
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    if keep_te {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Appends this hop to `X-Forwarded-For`, `Forwarded` and `Via`.
pub fn add_forwarding(headers: &mut HeaderMap, client: SocketAddr, version: Version) {
    let ip = client.ip();
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {ip}"),
        None => ip.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", value);
    }
    // RFC 7239: IPv6 addresses are quoted and bracketed.
    let node = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("\"[{v6}]\""),
    };
    if let Ok(value) = HeaderValue::from_str(&format!("for={node};proto=http")) {
        headers.append(header::FORWARDED, value);
    }
    let via = match version {
        Version::HTTP_2 => "2 prequal",
        Version::HTTP_10 => "1.0 prequal",
        _ => "1.1 prequal",
    };
    headers.append(header::VIA, HeaderValue::from_static(via));
}

#[cfg(test)]
mod tests {
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
        strip_hop_by_hop(&mut headers, true);
        assert!(headers.get("x-secret").is_none());
        assert!(headers.get(header::CONNECTION).is_none());
        assert!(headers.get("keep-alive").is_none());
        assert_eq!(headers.get(header::TE).unwrap(), "trailers");
        assert_eq!(headers.get(header::ACCEPT).unwrap(), "*/*");
        strip_hop_by_hop(&mut headers, false);
        assert!(headers.get(header::TE).is_none());
    }

    #[test]
    fn forwarding_headers_append() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        let client: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        add_forwarding(&mut headers, client, Version::HTTP_11);
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(headers[header::FORWARDED], "for=127.0.0.1;proto=http");
        assert_eq!(headers[header::VIA], "1.1 prequal");
        let v6: SocketAddr = "[::1]:5555".parse().unwrap();
        add_forwarding(&mut headers, v6, Version::HTTP_2);
        let forwarded: Vec<_> = headers.get_all(header::FORWARDED).iter().collect();
        assert_eq!(forwarded[1], "for=\"[::1]\";proto=http");
    }
}
