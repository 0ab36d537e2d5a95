//! Body types: what the proxy sends upstream and downstream, and the wrapper that tells the
//! policy when a response has really finished.
//!
//! Bodies are streamed frame by frame, never collected. A try is "in flight" for the policy
//! (client-local RIF) until its response body has been read to the end, failed, or been dropped
//! because the client went away; [`Tracked`] reports that moment through a [`TryGuard`]. A try
//! counts as a success only once its body has ended: one whose client left first is
//! [`Outcome::Cancelled`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use prequal_core::{LoadReport, Outcome, QueryId, ReplicaId};

use crate::cluster::{Chosen, Cluster};

/// A boxed error, as body errors cross hyper's client and server.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type the proxy forwards in both directions.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// An empty body.
pub fn empty() -> ProxyBody {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A body holding `text`.
pub fn full(text: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(text.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// One try that the policy counts as in flight until this guard is dropped.
#[derive(Debug)]
pub struct TryGuard {
    /// The cluster the try went to.
    pub cluster: Arc<Cluster>,
    /// The replica it went to.
    pub replica: ReplicaId,
    /// The policy's id for it.
    pub query: QueryId,
    /// When it was dispatched.
    pub start: Instant,
    /// How it ended, as far as is known so far: [`Outcome::Cancelled`] until the response
    /// has ended or failed.
    pub outcome: Outcome,
    /// A load report piggybacked on the response, if any.
    pub report: Option<LoadReport>,
    /// How long the replica took to send the response head, once it has.
    pub answered: Option<std::time::Duration>,
}

impl TryGuard {
    /// A try dispatched now to `chosen`: cancelled until proven otherwise, so that if it is
    /// dropped (the client went away, or another try answered first) it is reported as such.
    pub fn dispatched(cluster: &Arc<Cluster>, chosen: &Chosen) -> Self {
        TryGuard {
            cluster: Arc::clone(cluster),
            replica: chosen.replica,
            query: chosen.query,
            start: Instant::now(),
            outcome: Outcome::Cancelled,
            report: None,
            answered: None,
        }
    }
}

impl Drop for TryGuard {
    fn drop(&mut self) {
        let latency = self.start.elapsed();
        self.cluster.complete(
            self.replica,
            self.query,
            (latency, self.answered),
            self.outcome,
            self.report.take(),
        );
    }
}

pub use prequal_server::edge::grpc_outcome;

/// Completes a try whose response body has ended: a success unless it already failed.
fn finish(guard: &mut Option<TryGuard>) {
    if let Some(mut guard) = guard.take()
        && guard.outcome == Outcome::Cancelled
    {
        guard.outcome = Outcome::Success;
    }
}

pin_project_lite::pin_project! {
    /// A response body that completes its [`TryGuard`] when it ends.
    pub struct Tracked<B> {
        #[pin]
        inner: B,
        guard: Option<TryGuard>,
    }
}

impl<B> Tracked<B> {
    /// Wraps `inner`; `guard` is completed at its end.
    pub fn new(inner: B, guard: TryGuard) -> Self {
        Self {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let outcome = grpc_outcome(trailers)
                    && outcome.is_failure()
                    && let Some(guard) = this.guard.as_mut()
                {
                    guard.outcome = outcome;
                }
                // Trailers are a body's last frame, and hyper polls no further a body that
                // says it has ended or has sent all its declared length: its end is now.
                if frame.is_trailers()
                    || this.inner.is_end_stream()
                    || this.inner.size_hint().exact() == Some(0)
                {
                    finish(this.guard);
                }
            }
            Poll::Ready(None) => finish(this.guard),
            Poll::Ready(Some(Err(_))) => {
                if let Some(mut guard) = this.guard.take() {
                    guard.outcome = Outcome::Error;
                }
            }
            _ => {}
        }
        polled.map(|frame| frame.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
