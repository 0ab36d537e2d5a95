//! Header handling for a forwarding proxy (RFC 9110 section 7.6).
//!
//! Hop-by-hop headers describe one connection, not the message, so they are removed in both
//! directions by [`strip_hop_by_hop`], the one rule the sidecar follows too
//! (`prequal_http::headers`, re-exported here). On requests the proxy then records itself: the client's address is appended to
//! `X-Forwarded-For` and to `Forwarded` (RFC 7239), and `Via` gets this hop. This runs on
//! every request, so the client's address is formatted once per connection ([`ClientHop`]),
//! not once per request.

use std::net::{IpAddr, SocketAddr};

use http::Version;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub use prequal_http::headers::{Direction, strip_hop_by_hop};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client end of one connection, with its forwarding header values formatted once.
#[derive(Debug, Clone)]
pub struct ClientHop {
    ip: IpAddr,
    /// The address alone, the `X-Forwarded-For` value when the request has none.
    xff: HeaderValue,
    /// `for=...;proto=http` (or `https`), the `Forwarded` element for this hop.
    forwarded: HeaderValue,
}

impl ClientHop {
    /// Formats the values for a client at `client` on a plain connection.
    pub fn new(client: SocketAddr) -> Self {
        Self::with_proto(client, "http")
    }

    /// Formats the values for a client at `client` on a TLS connection (`proto=https`).
    pub fn over_tls(client: SocketAddr) -> Self {
        Self::with_proto(client, "https")
    }

    fn with_proto(client: SocketAddr, proto: &str) -> Self {
        let ip = client.ip();
        // RFC 7239: IPv6 addresses are quoted and bracketed.
        let node = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("\"[{v6}]\""),
        };
        // An IP address in text is always a valid header value.
        let value = |text: String| {
            HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
        };
        ClientHop {
            ip,
            xff: value(ip.to_string()),
            forwarded: value(format!("for={node};proto={proto}")),
        }
    }

    /// The client's address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }
}

/// Appends this hop to `X-Forwarded-For`, `Forwarded` and `Via`.
pub fn add_forwarding(headers: &mut HeaderMap, client: &ClientHop, version: Version) {
    let xff = match headers.get(&X_FORWARDED_FOR) {
        None => Some(client.xff.clone()),
        Some(prior) => {
            let mut joined = Vec::with_capacity(prior.len() + 2 + client.xff.len());
            joined.extend_from_slice(prior.as_bytes());
            joined.extend_from_slice(b", ");
            joined.extend_from_slice(client.xff.as_bytes());
            HeaderValue::from_bytes(&joined).ok()
        }
    };
    if let Some(value) = xff {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.append(header::FORWARDED, client.forwarded.clone());
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
    fn forwarding_headers_append() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        let client = ClientHop::new("127.0.0.1:5555".parse().unwrap());
        add_forwarding(&mut headers, &client, Version::HTTP_11);
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(headers[header::FORWARDED], "for=127.0.0.1;proto=http");
        assert_eq!(headers[header::VIA], "1.1 prequal");
        let v6 = ClientHop::new("[::1]:5555".parse().unwrap());
        add_forwarding(&mut headers, &v6, Version::HTTP_2);
        let forwarded: Vec<_> = headers.get_all(header::FORWARDED).iter().collect();
        assert_eq!(forwarded[1], "for=\"[::1]\";proto=http");
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 127.0.0.1, ::1");
        let mut fresh = HeaderMap::new();
        add_forwarding(&mut fresh, &client, Version::HTTP_10);
        assert_eq!(fresh["x-forwarded-for"], "127.0.0.1");
        assert_eq!(fresh[header::VIA], "1.0 prequal");
    }
}
