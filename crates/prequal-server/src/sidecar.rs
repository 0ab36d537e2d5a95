//! The sidecar: a transparent HTTP/1.1 + HTTP/2 forwarder in front of one replica, written in
//! any language, that tracks the replica's load and answers Prequal probes for it.
//!
//! Clients (and Prequal proxies) talk to the sidecar as if it were the replica. Each request is
//! forwarded to the upstream over a pooled connection of the same protocol version it arrived
//! with (HTTP/2 stays HTTP/2, so gRPC and its trailers pass through), with hop-by-hop headers
//! removed as RFC 9110 section 7.6.1 requires, by the rule the proxy follows too
//! (`prequal_http::headers`). Bodies stream in both directions; nothing is
//! buffered. The [`ProbeLayer`](crate::ProbeLayer) in front counts each request in flight until
//! the upstream's response body has been fully relayed, so the replica's RIF and latency are
//! what its clients see, minus the network.
//!
//! What changes on the way: the request URI's authority becomes the upstream address (an
//! HTTP/1.1 `Host` header is kept as sent); an upstream that cannot be reached or fails
//! mid-response yields `502 Bad Gateway`, which counts as an error.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::uri::{Authority, Scheme, Uri};
use http::{Request, Response, StatusCode, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_http::BoxError;
use prequal_http::headers::{Direction, strip_hop_by_hop};

/// The body the sidecar answers with: the upstream's, or a short error text.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// The upstream address a sidecar forwards to was not a valid `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("upstream address {address:?} is not a valid host:port ({reason})")]
pub struct UpstreamError {
    address: String,
    reason: String,
}

/// Forwards requests to one upstream; clone it freely (clones share the connection pools).
#[derive(Clone, Debug)]
pub struct Forward {
    upstream: Authority,
    http1: Client<HttpConnector, Incoming>,
    http2: Client<HttpConnector, Incoming>,
}

impl Forward {
    /// A forwarder to `upstream` (`host:port`, no scheme).
    pub fn new(upstream: &str) -> Result<Self, UpstreamError> {
        let invalid = |reason: String| UpstreamError {
            address: upstream.to_owned(),
            reason,
        };
        let upstream = upstream
            .parse::<Authority>()
            .map_err(|error| invalid(error.to_string()))?;
        if upstream.port_u16().is_none() {
            // Without one every request would go to port 80 of a host that is likely not
            // the replica, and fail only when traffic comes.
            return Err(invalid("no port".into()));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http1 = Client::builder(TokioExecutor::new()).build(connector.clone());
        let http2 = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(connector);
        Ok(Self {
            upstream,
            http1,
            http2,
        })
    }

    /// The upstream's address.
    pub fn upstream(&self) -> &Authority {
        &self.upstream
    }
}

impl tower::Service<Request<Incoming>> for Forward {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The pooled clients queue internally; there is no back-pressure to report.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let http2 = parts.version == Version::HTTP_2;
        strip_hop_by_hop(&mut parts.headers, Direction::Request);
        parts.uri = upstream_uri(&parts.uri, &self.upstream);
        let client = if http2 {
            self.http2.clone()
        } else {
            parts.version = Version::HTTP_11;
            self.http1.clone()
        };
        let request = Request::from_parts(parts, body);
        Box::pin(async move {
            match client.request(request).await {
                Ok(response) => {
                    let (mut parts, body) = response.into_parts();
                    strip_hop_by_hop(&mut parts.headers, Direction::Response);
                    let body = body.map_err(BoxError::from).boxed_unsync();
                    Ok(Response::from_parts(parts, body))
                }
                Err(error) => {
                    tracing::debug!(%error, "upstream request failed");
                    Ok(bad_gateway(&error))
                }
            }
        })
    }
}

/// The same path and query, aimed at `upstream` over cleartext HTTP.
fn upstream_uri(uri: &Uri, upstream: &Authority) -> Uri {
    let mut parts = uri.clone().into_parts();
    parts.scheme = Some(Scheme::HTTP);
    parts.authority = Some(upstream.clone());
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    // Scheme, authority and path are all set, so this cannot fail; fall back to the original
    // rather than panic if it ever did.
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

fn bad_gateway(error: &hyper_util::client::legacy::Error) -> Response<ProxyBody> {
    let text = format!("prequal sidecar: upstream unavailable ({error})\n");
    let body = Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_is_aimed_at_the_upstream() {
        let upstream: Authority = "127.0.0.1:9000".parse().unwrap();
        let uri = upstream_uri(&"/a/b?c=1".parse().unwrap(), &upstream);
        assert_eq!(uri, "http://127.0.0.1:9000/a/b?c=1");
        let absolute = upstream_uri(&"http://example.com/x".parse().unwrap(), &upstream);
        assert_eq!(absolute, "http://127.0.0.1:9000/x");
        assert!(Forward::new("not a host").is_err());
        let error = Forward::new("replica").unwrap_err().to_string();
        assert!(error.contains("no port"), "{error}");
        assert!(Forward::new("replica:8080").is_ok());
    }
}
