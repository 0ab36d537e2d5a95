//! A response body that reports its end: the moment a query stops occupying its replica, and
//! how it went.
//!
//! A query counts in flight until its response **body** ends, not when the head arrives: a
//! streamed response still occupies the replica (the paper counts a query until the
//! application hands its response back), and a gRPC call's status usually comes in the
//! trailers. Three drivers need that moment: the replica's tower layer (server-local RIF and
//! latency), the proxy (client-local RIF, per try) and the tower balancer (per query). Each
//! wraps the body in a [`TrackedBody`] and names what should hear the end with a type of its
//! own that implements [`OnEnd`].
//!
//! The body ends, and [`OnEnd::on_end`] is called exactly once, with:
//!
//! - the outcome judged so far, at the first of: the inner body returns `None`; it yields its
//!   trailers (always the last frame); it says [`is_end_stream`](Body::is_end_stream); or its
//!   size hint says no data is left. The last two matter because hyper stops polling a body
//!   that says it has ended, or that has sent all of its declared `Content-Length`, so no
//!   `None` would ever be seen. A body already at its end when wrapped reports at once;
//! - [`Outcome::Error`] if the inner body fails.
//!
//! The outcome starts as the head's ([`head_outcome`]) and, while it is still a success, the
//! trailers' `grpc-status` may turn it into a failure ([`grpc_outcome`]). A body dropped before
//! its end (the client went away) never calls `on_end`: the [`OnEnd`] value is simply dropped,
//! and its own `Drop` says what an abandoned query means to its driver (the tracker leaves the
//! latency out, the proxy reports a cancelled try).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use prequal_core::Outcome;

use crate::grpc::{grpc_outcome, head_outcome};

/// What hears a tracked body's end. Implemented by each driver's in-flight guard.
///
/// Dropping the value without calling [`on_end`](OnEnd::on_end) means the body was abandoned
/// before its end; an implementor that cares says so in its `Drop`.
pub trait OnEnd {
    /// The body ended with `outcome` (read to its end, or failed). Called at most once.
    fn on_end(self, outcome: Outcome);
}

pin_project! {
    /// A body, unchanged frame for frame, that tells its [`OnEnd`] when it ends. See the
    /// module docs.
    pub struct TrackedBody<B, E> {
        #[pin]
        body: B,
        on_end: Option<E>,
        outcome: Outcome,
    }
}

impl<B: Body, E: OnEnd> TrackedBody<B, E> {
    /// Wraps `body`, whose response has been judged `outcome` so far; `on_end` hears its end
    /// (at once, if the body is already at its end).
    pub fn new(body: B, outcome: Outcome, on_end: E) -> Self {
        let on_end = if body.is_end_stream() {
            on_end.on_end(outcome);
            None
        } else {
            Some(on_end)
        };
        Self {
            body,
            on_end,
            outcome,
        }
    }
}

impl<B, E> TrackedBody<B, E> {
    /// The inner body. If it had not ended, the [`OnEnd`] is dropped: abandoned.
    pub fn into_inner(self) -> B {
        self.body
    }

    /// The outcome judged so far (final once the body has ended).
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Whether the end has been reported.
    pub fn has_ended(&self) -> bool {
        self.on_end.is_none()
    }
}

/// Wraps `response`'s body in a [`TrackedBody`], its outcome judged from the head
/// ([`head_outcome`]: a 5xx, or a failing `grpc-status` in a trailers-only response).
pub fn track<B: Body, E: OnEnd>(response: Response<B>, on_end: E) -> Response<TrackedBody<B, E>> {
    let (parts, body) = response.into_parts();
    let outcome = head_outcome(parts.status, &parts.headers);
    Response::from_parts(parts, TrackedBody::new(body, outcome, on_end))
}

impl<B, E> fmt::Debug for TrackedBody<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackedBody")
            .field("ended", &self.on_end.is_none())
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

impl<B: Body, E: OnEnd> Body for TrackedBody<B, E> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let mut body = this.body;
        let polled = ready!(body.as_mut().poll_frame(cx));
        let ended = match &polled {
            None => true,
            Some(Err(_)) => {
                *this.outcome = Outcome::Error;
                true
            }
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref()
                    && *this.outcome == Outcome::Success
                {
                    *this.outcome = grpc_outcome(trailers);
                }
                frame.is_trailers() || body.is_end_stream() || body.size_hint().exact() == Some(0)
            }
        };
        if ended && let Some(on_end) = this.on_end.take() {
            on_end.on_end(*this.outcome);
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
