//! Probing through a hyper-util client of its own, addressed by the discovery key.

use std::fmt;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Method, Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::Connect;
use prequal_core::LoadReport;
use prequal_http::protocol::probe_path_and_query;
use tower::Service;

use prequal_http::protocol::Probe;
use prequal_http::read_probe_reply as read_reply;

use super::make::MakeProbe;
use crate::box_error::BoxError;

/// A [`MakeProbe`] that probes each replica over a hyper-util client of its own, at
/// `http://{key}/.prequal/probe?v=1`, where `{key}` is the discovery key written with
/// `Display` (a `SocketAddr`, or a `host:port` string).
///
/// Build the client the way the replicas speak: `Client::builder(TokioExecutor::new())
/// .http2_only(true)` for h2c replicas (gRPC), the default builder for HTTP/1.1. Its
/// connections are kept apart from the queries' ones.
pub struct HttpProber<C> {
    client: Client<C, Empty<Bytes>>,
}

impl<C> HttpProber<C> {
    /// Probes over `client`.
    pub fn new(client: Client<C, Empty<Bytes>>) -> Self {
        Self { client }
    }
}

impl<C: Clone> Clone for HttpProber<C> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
        }
    }
}

impl<C> fmt::Debug for HttpProber<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HttpProber")
    }
}

impl<K, S, C> MakeProbe<K, S> for HttpProber<C>
where
    K: fmt::Display,
    C: Connect + Clone + Send + Sync + 'static,
{
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<LoadReport, BoxError>>;
    type Probe = HttpProbe<C>;

    fn make_probe(&mut self, key: &K, _endpoint: &S) -> HttpProbe<C> {
        HttpProbe {
            client: self.client.clone(),
            authority: key.to_string(),
        }
    }
}

/// One replica's probe service over a hyper-util client.
pub struct HttpProbe<C> {
    client: Client<C, Empty<Bytes>>,
    authority: String,
}

impl<C: Clone> Clone for HttpProbe<C> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            authority: self.authority.clone(),
        }
    }
}

impl<C> fmt::Debug for HttpProbe<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProbe")
            .field("authority", &self.authority)
            .finish()
    }
}

impl<C> Service<Probe> for HttpProbe<C>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    type Response = LoadReport;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<LoadReport, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The client queues requests in its pool; it is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, probe: Probe) -> Self::Future {
        let uri = Uri::builder()
            .scheme("http")
            .authority(self.authority.as_str())
            .path_and_query(probe_path_and_query(probe.hint))
            .build();
        let client = self.client.clone();
        Box::pin(async move {
            let mut request = Request::new(Empty::new());
            *request.method_mut() = Method::GET;
            *request.uri_mut() = uri?;
            let response = client.request(request).await?;
            Ok(read_reply(response).await?)
        })
    }
}
