//! The response side of a balanced query: its future, its body, and how it is judged.
//!
//! A query ends when its response body ends, not when the response head arrives: a streamed
//! response still occupies the replica, and a gRPC call's status usually comes in the trailers.
//! So the balancer hands the response back with its body wrapped in a [`ResponseBody`] that
//! carries the query's in-flight count to the end.
//!
//! The outcome the policy hears (its error aversion counts failures), by the rule the proxy and
//! the replica side follow too (`prequal_http::grpc`):
//!
//! - [`Outcome::Error`] for an endpoint error (connection refused or reset, a service that
//!   failed), a 5xx status, a body error, or a `grpc-status` that signals a server fault
//!   (UNKNOWN, RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE, DATA_LOSS), in the head or the
//!   trailers; [`Outcome::Timeout`] for DEADLINE_EXCEEDED;
//! - [`Outcome::Cancelled`] for a response future or body dropped before the end;
//! - [`Outcome::Success`] otherwise.
//!
//! A response that carries the replica's load in the `prequal-load` header (a replica behind
//! `ProbeLayer::piggyback(true)` or `prequal sidecar --piggyback`) feeds it to the policy as a
//! free load report when the query ends, right after the end (the report leaves the query
//! out, and the policy takes the query's one off when it hears of the end); a malformed header
//! is ignored.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use prequal_core::Outcome;
use prequal_http::TrackedBody;
use prequal_http::protocol::{LOAD_HEADER, parse_reply};

use crate::box_error::BoxError;
use crate::rif::InFlight;

pin_project! {
    /// The future of [`Balance::call`](crate::Balance): the endpoint's response, with its body
    /// wrapped so that the query counts in flight until the body ends.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Failed { error: Option<BoxError> },
        Waiting { #[pin] future: F, in_flight: Option<InFlight> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(future: F, in_flight: InFlight) -> Self {
        Self {
            state: State::Waiting {
                future,
                in_flight: Some(in_flight),
            },
        }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: Body,
{
    type Output = Result<Response<ResponseBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(|| "response future polled after completion".into()))),
            StateProj::Waiting { future, in_flight } => {
                let result = ready!(future.poll(cx));
                let Some(mut in_flight) = in_flight.take() else {
                    return Poll::Ready(Err("response future polled after completion".into()));
                };
                Poll::Ready(match result {
                    Ok(response) => Ok(track(response, in_flight)),
                    Err(error) => {
                        in_flight.end(Outcome::Error);
                        Err(error.into())
                    }
                })
            }
        }
    }
}

/// Reads a piggybacked load, then wraps the body so that the query ends with it (at once, if
/// it is already at its end), judged from the head first.
fn track<B: Body>(response: Response<B>, mut in_flight: InFlight) -> Response<ResponseBody<B>> {
    if let Some(report) = response
        .headers()
        .get(LOAD_HEADER)
        .and_then(|value| parse_reply(value.as_bytes()).ok())
    {
        in_flight.load_report(report);
    }
    prequal_http::track(response, in_flight).map(|body| ResponseBody { body })
}

pin_project! {
    /// A balanced response's body: the endpoint's body, unchanged, that ends its query (for the
    /// policy's RIF and latency) when it ends, fails, or is dropped. prequal-http's
    /// [`TrackedBody`] does the tracking, as it does for the proxy and the replica side.
    pub struct ResponseBody<B> {
        #[pin]
        body: TrackedBody<B, InFlight>,
    }
}

impl<B> ResponseBody<B> {
    /// The endpoint's body (ending the query now, as cancelled, if it had not ended).
    pub fn into_inner(self) -> B {
        self.body.into_inner()
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("in_flight", &!self.body.has_ended())
            .finish_non_exhaustive()
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
