//! A tower layer that tracks a server's load and answers Prequal probes.
//!
//! [`ProbeLayer`] wraps any `tower::Service<http::Request<_>>` returning `http::Response<_>`,
//! so it fits hyper (through `hyper_util::service::TowerToHyperService`), axum
//! (`Router::layer`) and tonic (`Server::builder().layer`) servers alike. For each request:
//!
//! - a request to [`PROBE_PATH`] is answered here, from the
//!   [`SharedTracker`], and never reaches the service nor counts in flight; a malformed probe
//!   gets 400 (405 for a method other than GET/HEAD) with the reason as text;
//! - any other request counts in flight from arrival until its response **body** ends, because
//!   a streamed response still occupies the replica (the paper counts a query until the
//!   application hands its response back). The body is wrapped in prequal-http's
//!   [`TrackedBody`]: its end (or the frame after which it reports end of stream) records the
//!   latency and outcome; a body dropped before its end (the client went away) only leaves the
//!   in-flight count, so a truncated latency never enters the estimate;
//! - the outcome is an error for a service error, and otherwise the one rule of
//!   `prequal_http::grpc`: an error for a 5xx status, a body error, or a gRPC status that
//!   signals a server fault (UNKNOWN, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE, DATA_LOSS) in
//!   headers or trailers; DEADLINE_EXCEEDED is a timeout;
//! - optionally ([`ProbeLayer::piggyback`], default off) every response carries the current
//!   load in the [`LOAD_HEADER`] header, so clients learn it
//!   without probing.
//!
//! Sync-mode Prequal sends a query hint with its probes; [`ProbeLayer::hint_hook`] lets the
//! replica adjust its reported load for that query (for example scale it down tenfold when the
//! query's data is in its cache, as the paper describes for YouTube).
//!
//! ```
//! use std::sync::Arc;
//! use prequal_core::EstimatorConfig;
//! use prequal_server::{ProbeLayer, SharedTracker};
//!
//! let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
//! let service = tower::ServiceBuilder::new()
//!     .layer(ProbeLayer::new(Arc::clone(&tracker)).piggyback(true))
//!     .service_fn(|_req: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
//!     });
//! # let _ = service;
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use prequal_core::{Arrival, LoadReport, Outcome};
use prequal_http::protocol::{self, LOAD_HEADER, PROBE_PATH, RequestError};
use prequal_http::{OnEnd, TrackedBody};
use tower::{Layer, Service};

use crate::tracker::SharedTracker;

/// Adjusts the reported load for a query hint (sync mode): `(hint, report) -> report`.
pub type HintHook = Arc<dyn Fn(u64, LoadReport) -> LoadReport + Send + Sync>;

/// Called once for every well-formed probe, before it is answered (for example to charge an
/// emulated replica the probe's CPU cost).
pub type ProbeHook = Arc<dyn Fn() + Send + Sync>;

/// Builds [`ProbeService`]s that share one tracker. See the module docs.
#[derive(Clone)]
pub struct ProbeLayer {
    config: Arc<LayerConfig>,
}

struct LayerConfig {
    tracker: Arc<SharedTracker>,
    piggyback: bool,
    hint_hook: Option<HintHook>,
    probe_hook: Option<ProbeHook>,
}

impl ProbeLayer {
    /// A layer feeding `tracker`, answering probes, without piggybacking.
    pub fn new(tracker: Arc<SharedTracker>) -> Self {
        Self {
            config: Arc::new(LayerConfig {
                tracker,
                piggyback: false,
                hint_hook: None,
                probe_hook: None,
            }),
        }
    }

    /// Whether every response carries the load header (default `false`).
    pub fn piggyback(self, on: bool) -> Self {
        self.map_config(|c| c.piggyback = on)
    }

    /// Sets the hook that adjusts probe replies carrying a query hint (default: none, the
    /// hint is ignored).
    pub fn hint_hook(self, hook: HintHook) -> Self {
        self.map_config(|c| c.hint_hook = Some(hook))
    }

    /// Sets the hook called for every well-formed probe (default: none).
    pub fn probe_hook(self, hook: ProbeHook) -> Self {
        self.map_config(|c| c.probe_hook = Some(hook))
    }

    /// The tracker this layer feeds.
    pub fn tracker(&self) -> &Arc<SharedTracker> {
        &self.config.tracker
    }

    fn map_config(self, edit: impl FnOnce(&mut LayerConfig)) -> Self {
        let mut config = LayerConfig {
            tracker: Arc::clone(&self.config.tracker),
            piggyback: self.config.piggyback,
            hint_hook: self.config.hint_hook.clone(),
            probe_hook: self.config.probe_hook.clone(),
        };
        edit(&mut config);
        Self {
            config: Arc::new(config),
        }
    }
}

impl fmt::Debug for ProbeLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeLayer")
            .field("rif", &self.config.tracker.rif())
            .field("piggyback", &self.config.piggyback)
            .field("hint_hook", &self.config.hint_hook.is_some())
            .finish()
    }
}

impl<S> Layer<S> for ProbeLayer {
    type Service = ProbeService<S>;
    fn layer(&self, inner: S) -> ProbeService<S> {
        ProbeService {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service [`ProbeLayer`] builds: answers probes, tracks everything else.
#[derive(Clone)]
pub struct ProbeService<S> {
    inner: S,
    config: Arc<LayerConfig>,
}

impl<S: fmt::Debug> fmt::Debug for ProbeService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for ProbeService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body,
    ResB::Data: From<Bytes>,
{
    type Response = Response<ProbeBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        if request.uri().path() == PROBE_PATH {
            let reply = probe_reply(&self.config, request.method(), request.uri().query());
            return ResponseFuture {
                state: State::Reply { reply: Some(reply) },
            };
        }
        let tracker = Arc::clone(&self.config.tracker);
        let arrival = tracker.on_arrival();
        ResponseFuture {
            state: State::Inner {
                future: self.inner.call(request),
                guard: Some(Guard {
                    tracker,
                    arrival: Some(arrival),
                }),
                piggyback: self.config.piggyback,
            },
        }
    }
}

/// The status and text of a probe's answer.
fn probe_reply(config: &LayerConfig, method: &Method, query: Option<&str>) -> (StatusCode, String) {
    if method != Method::GET && method != Method::HEAD {
        let error = RequestError::Method(method.to_string());
        return (StatusCode::METHOD_NOT_ALLOWED, format!("{error}\n"));
    }
    match protocol::parse_probe_query(query) {
        Ok(probe) => {
            if let Some(hook) = &config.probe_hook {
                hook();
            }
            let mut report = config.tracker.report();
            if let (Some(hint), Some(hook)) = (probe.hint, &config.hint_hook) {
                report = hook(hint, report);
            }
            tracing::trace!(rif = report.rif, latency = ?report.latency, "probe answered");
            let mut line = protocol::encode_reply(&report);
            line.push('\n');
            (StatusCode::OK, line)
        }
        Err(error) => {
            tracing::debug!(%error, "malformed probe refused");
            (StatusCode::BAD_REQUEST, format!("{error}\n"))
        }
    }
}

pin_project! {
    /// The future of [`ProbeService::call`].
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Reply { reply: Option<(StatusCode, String)> },
        Inner { #[pin] future: F, guard: Option<Guard>, piggyback: bool },
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
    B::Data: From<Bytes>,
{
    type Output = Result<Response<ProbeBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Reply { reply } => {
                let (status, text) = reply.take().unwrap_or_default();
                let mut response = Response::new(ProbeBody::reply(Bytes::from(text)));
                *response.status_mut() = status;
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(protocol::REPLY_CONTENT_TYPE),
                );
                if status == StatusCode::METHOD_NOT_ALLOWED {
                    let allow = HeaderValue::from_static("GET, HEAD");
                    response.headers_mut().insert(header::ALLOW, allow);
                }
                Poll::Ready(Ok(response))
            }
            StateProj::Inner {
                future,
                guard,
                piggyback,
            } => {
                let result = ready!(future.poll(cx));
                let Some(guard) = guard.take() else {
                    // Polled again after completion: a contract breach by the caller.
                    return Poll::Pending;
                };
                Poll::Ready(match result {
                    Ok(response) => Ok(track_response(response, guard, *piggyback)),
                    Err(error) => {
                        guard.finish(Outcome::Error);
                        Err(error)
                    }
                })
            }
        }
    }
}

fn track_response<B: Body>(
    response: Response<B>,
    guard: Guard,
    piggyback: bool,
) -> Response<ProbeBody<B>> {
    let (mut parts, body) = response.into_parts();
    if piggyback {
        // The load as it will be once this response ends: without the query it rides on, which
        // is still counted until its body ends (docs/probe-protocol.md, "Piggybacking").
        let mut report = guard.tracker.report();
        report.rif = report.rif.saturating_sub(1);
        let line = protocol::encode_reply(&report);
        if let Ok(value) = HeaderValue::from_str(&line) {
            parts.headers.insert(LOAD_HEADER, value);
        }
    }
    let response = prequal_http::track(Response::from_parts(parts, body), guard);
    response.map(|body| ProbeBody {
        kind: Kind::Tracked { body },
    })
}

/// Keeps a query counted in flight until its response body ends (then its latency and outcome
/// are recorded) or is dropped before (then it only leaves the count).
struct Guard {
    tracker: Arc<SharedTracker>,
    arrival: Option<Arrival>,
}

impl Guard {
    fn finish(mut self, outcome: Outcome) {
        if let Some(arrival) = self.arrival.take() {
            self.tracker.on_finish(arrival, outcome);
        }
    }
}

impl OnEnd for Guard {
    fn on_end(self, outcome: Outcome) {
        self.finish(outcome);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(arrival) = self.arrival.take() {
            self.tracker.on_abandon(arrival);
        }
    }
}

pin_project! {
    /// The response body of a [`ProbeService`]: a probe reply, or the service's body in a
    /// [`TrackedBody`] that keeps the query in flight until it ends.
    pub struct ProbeBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Reply { data: Option<Bytes> },
        Tracked { #[pin] body: TrackedBody<B, Guard> },
    }
}

impl<B> ProbeBody<B> {
    fn reply(data: Bytes) -> Self {
        Self {
            kind: Kind::Reply { data: Some(data) },
        }
    }
}

impl<B> fmt::Debug for ProbeBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeBody").finish_non_exhaustive()
    }
}

impl<B> Body for ProbeBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Reply { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(B::Data::from(d)))))
            }
            KindProj::Tracked { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Reply { data } => data.is_none(),
            Kind::Tracked { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Reply { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Tracked { body } => body.size_hint(),
        }
    }
}
