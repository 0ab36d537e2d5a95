//! Probing through the endpoint service itself.

use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use http::{Method, Request, Response, Uri};
use http_body::Body;
use prequal_core::LoadReport;
use prequal_http::protocol::probe_path_and_query;
use tower::Service;

use prequal_http::protocol::Probe;
use prequal_http::read_probe_reply as read_reply;

use super::make::MakeProbe;
use crate::box_error::BoxError;

/// The default [`MakeProbe`]: each replica is probed through a clone of its own endpoint
/// service, with `GET /.prequal/probe?v=1` and an empty body of the balanced requests' type
/// `B`.
///
/// The probe's URI is a path only, like the requests an application sends through a balancer,
/// so the endpoint service must say where its replica is: a tonic `Channel` and a service that
/// sets the authority of each request (see the crate docs) both do.
pub struct ThroughEndpoint<B> {
    _body: PhantomData<fn() -> B>,
}

impl<B> ThroughEndpoint<B> {
    /// Probes through the endpoints.
    pub fn new() -> Self {
        Self { _body: PhantomData }
    }
}

impl<B> Default for ThroughEndpoint<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B> Clone for ThroughEndpoint<B> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<B> fmt::Debug for ThroughEndpoint<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ThroughEndpoint")
    }
}

impl<K, S, B, RB> MakeProbe<K, S> for ThroughEndpoint<B>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Default + Send + 'static,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<LoadReport, BoxError>>;
    type Probe = EndpointProbe<S, B>;

    fn make_probe(&mut self, _key: &K, endpoint: &S) -> Self::Probe {
        EndpointProbe {
            endpoint: endpoint.clone(),
            _body: PhantomData,
        }
    }
}

/// A replica's probe service that sends probes through its endpoint service.
pub struct EndpointProbe<S, B> {
    endpoint: S,
    _body: PhantomData<fn() -> B>,
}

impl<S: Clone, B> Clone for EndpointProbe<S, B> {
    fn clone(&self) -> Self {
        Self {
            endpoint: self.endpoint.clone(),
            _body: PhantomData,
        }
    }
}

impl<S: fmt::Debug, B> fmt::Debug for EndpointProbe<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointProbe")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl<S, B, RB> Service<Probe> for EndpointProbe<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Default,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Response = LoadReport;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<LoadReport, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.endpoint.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, probe: Probe) -> Self::Future {
        let mut request = Request::new(B::default());
        *request.method_mut() = Method::GET;
        match Uri::try_from(probe_path_and_query(probe.hint)) {
            Ok(uri) => *request.uri_mut() = uri,
            Err(error) => return Box::pin(async move { Err(error.into()) }),
        }
        let response = self.endpoint.call(request);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            Ok(read_reply(response).await?)
        })
    }
}
