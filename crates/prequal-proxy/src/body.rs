//! Body types: what the proxy sends upstream and downstream.
//!
//! Bodies are streamed frame by frame, with two exceptions, each bounded by a cluster setting:
//! a small request body is kept for a second try ([`crate::replay`]), and a small response body
//! is read whole within its try ([`WholeBody`]). How the policy hears that a streamed response
//! body has ended is [`crate::try_guard`]'s: the body is wrapped in prequal-http's
//! [`TrackedBody`](prequal_http::TrackedBody), which is handed the try's guard.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use tokio::time::{Instant, Sleep};

/// A boxed error, as body errors cross hyper's client and server.
pub use prequal_http::BoxError;

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

/// A response body read whole from the replica before the proxy answers (see
/// `response_buffer_limit`), replayed to the client frame for frame: its data, then its
/// trailers if it had any.
#[derive(Debug, Default)]
pub struct WholeBody {
    /// The data chunks still to send, in order. Most bodies that fit the limit arrive in one
    /// chunk, which this holds without an allocation of its own.
    first: Option<Bytes>,
    rest: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
}

impl WholeBody {
    /// The trailers the body ended with, if any.
    pub fn trailers(&self) -> Option<&HeaderMap> {
        self.trailers.as_ref()
    }
}

impl Body for WholeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match self.first.take().or_else(|| self.rest.pop_front()) {
            Some(data) => Some(Ok(Frame::data(data))),
            None => self.trailers.take().map(|t| Ok(Frame::trailers(t))),
        };
        Poll::Ready(next)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let left = self
            .first
            .iter()
            .chain(&self.rest)
            .map(|d| d.len() as u64)
            .sum();
        SizeHint::with_exact(left)
    }
}

/// Reads a body to its end into a [`WholeBody`]; fails as the body does (the replica broke off
/// mid-body). `Unpin`, so a caller can poll it once and, if the body is not all there yet,
/// move it on to finish later.
#[derive(Debug)]
pub struct ReadWhole<B> {
    body: B,
    whole: WholeBody,
}

impl<B> ReadWhole<B> {
    /// Starts reading `body`.
    pub fn new(body: B) -> Self {
        ReadWhole {
            body,
            whole: WholeBody::default(),
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Future for ReadWhole<B> {
    type Output = Result<WholeBody, B::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        while let Some(frame) = ready!(Pin::new(&mut this.body).poll_frame(cx)) {
            let whole = &mut this.whole;
            match frame?.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) if whole.first.is_none() && whole.rest.is_empty() => {
                    whole.first = Some(data)
                }
                Ok(data) => whole.rest.push_back(data),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        match &mut whole.trailers {
                            Some(earlier) => earlier.extend(trailers),
                            None => whole.trailers = Some(trailers),
                        }
                    }
                }
            }
        }
        Poll::Ready(Ok(std::mem::take(&mut this.whole)))
    }
}

/// A streamed response body that fails if its replica sends nothing for `idle` (the cluster's
/// `response_idle_timeout`): the client's response then ends in an error instead of waiting on
/// a replica that stopped mid-body. (The proxy puts it outside the try's tracking, so that the
/// cut-off try counts as cancelled, not against the replica.) The timer is made only when the
/// body first has to wait, and moved on only when it fires, so a body whose frames are ready
/// when asked for never touches tokio's timer.
#[derive(Debug)]
pub struct IdleTimeout<B> {
    body: B,
    idle: Duration,
    /// When the body fails unless a frame comes first; set when it starts waiting, cleared by
    /// each frame.
    deadline: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> IdleTimeout<B> {
    /// Wraps `body`, which may wait at most `idle` for each frame.
    pub fn new(body: B, idle: Duration) -> Self {
        IdleTimeout {
            body,
            idle,
            deadline: None,
            timer: None,
        }
    }
}

/// The error a body of [`IdleTimeout`] fails with.
#[derive(Debug)]
pub struct IdleTimedOut(Duration);

impl std::fmt::Display for IdleTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the replica sent nothing of its response body for {:?} (response_idle_timeout)",
            self.0
        )
    }
}

impl std::error::Error for IdleTimedOut {}

impl<B> Body for IdleTimeout<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.deadline = None;
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = match this.deadline {
            Some(deadline) => deadline,
            None => match Instant::now().checked_add(this.idle) {
                Some(deadline) => *this.deadline.insert(deadline),
                // An idle time too long to add to the clock never runs out.
                None => return Poll::Pending,
            },
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        // The timer may be set for an earlier wait's deadline: when it fires before this one,
        // it is moved on to it.
        while timer.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                return Poll::Ready(Some(Err(IdleTimedOut(this.idle).into())));
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use bytes::Bytes;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};
    use tokio::time::Instant;

    use super::*;

    /// A body that sends `frames` chunks, `gap` apart, then waits for ever.
    fn trickle(frames: u32, gap: Duration) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        let stream = futures_util::stream::unfold(0, move |sent| async move {
            if sent == frames {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(gap).await;
            Some((Ok(Frame::data(Bytes::from_static(b"x"))), sent + 1))
        });
        StreamBody::new(Box::pin(stream))
    }

    #[tokio::test(start_paused = true)]
    async fn idle_body_fails_once_silent_for_the_whole_time() {
        let start = Instant::now();
        let mut body =
            IdleTimeout::new(trickle(3, Duration::from_secs(40)), Duration::from_secs(60));
        // Three frames 40 s apart: each gap is under the idle time, so none is cut off,
        // although the first timer, armed at the first wait, is long past by the third.
        for _ in 0..3 {
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"x"));
        }
        assert_eq!(start.elapsed(), Duration::from_secs(120));
        // Then silence: cut off 60 s after the last frame, not before.
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(180));
        assert!(
            error.to_string().contains("response_idle_timeout"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_time_past_the_clock_never_runs_out() {
        let mut body = IdleTimeout::new(trickle(0, Duration::ZERO), Duration::MAX);
        let waited = tokio::time::timeout(Duration::from_secs(3600), body.frame()).await;
        assert!(waited.is_err(), "still waiting after an hour");
    }

    #[tokio::test]
    async fn read_whole_keeps_chunks_in_order_and_the_trailers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let frames = vec![
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"ab"))),
            Ok(Frame::data(Bytes::new())),
            Ok(Frame::data(Bytes::from_static(b"cd"))),
            Ok(Frame::trailers(trailers)),
        ];
        let body = StreamBody::new(futures_util::stream::iter(frames));
        let whole = ReadWhole::new(body).await.unwrap();
        assert_eq!(whole.size_hint().exact(), Some(4));
        assert_eq!(whole.trailers().unwrap()["grpc-status"], "0");
        let collected = whole.collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        assert_eq!(collected.to_bytes(), Bytes::from_static(b"abcd"));
    }
}
