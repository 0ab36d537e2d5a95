//! [`HttpEndpoint`]: a hyper-util client addressed to one replica, the endpoint service most
//! HTTP clients want to balance over.
//!
//! Requests to a balancer carry a path (`/users/7`), not a replica's address: the balancer
//! chooses the replica. An endpoint service must therefore put its replica's address into each
//! request before sending it. `HttpEndpoint` does that for a pooled hyper-util legacy
//! [`Client`] shared by every endpoint: it sets the scheme (`http`) and the authority
//! (`host:port`), keeps the path and query, and sends. It is `Clone`, so the default prober
//! ([`ThroughEndpoint`](crate::probe::ThroughEndpoint)) sends probes through it too.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use prequal_tower::HttpEndpoint;
//! use tower::discover::Change;
//!
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let change: Change<&str, _> =
//!     Change::Insert("127.0.0.1:8001", HttpEndpoint::new(client, "127.0.0.1:8001").unwrap());
//! # let _ = change;
//! ```

use std::fmt;
use std::task::{Context, Poll};

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::client::legacy::{Client, ResponseFuture};
use tower::Service;

/// A hyper-util client addressed to one replica. See the module docs.
pub struct HttpEndpoint<C, B> {
    client: Client<C, B>,
    authority: Authority,
}

impl<C, B> HttpEndpoint<C, B> {
    /// Sends to `authority` (`host:port`) over `client`; an error if it is not a valid
    /// authority.
    pub fn new(client: Client<C, B>, authority: &str) -> Result<Self, http::Error> {
        let authority = Authority::try_from(authority)?;
        Ok(Self { client, authority })
    }

    /// The replica's `host:port`.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }
}

impl<C: Clone, B> Clone for HttpEndpoint<C, B> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            authority: self.authority.clone(),
        }
    }
}

impl<C, B> fmt::Debug for HttpEndpoint<C, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEndpoint")
            .field("authority", &self.authority)
            .finish()
    }
}

impl<C, B> Service<Request<B>> for HttpEndpoint<C, B>
where
    C: Connect + Clone + Send + Sync + 'static,
    B: Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The client's pool queues requests until a connection is free; it is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> ResponseFuture {
        let path = request
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path);
        // Scheme, authority and path are all valid parts, so the URI is too.
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
        self.client.request(request)
    }
}
