//! A request body that can be sent again: what makes a request with a body retryable and
//! hedgeable.
//!
//! A body whose `Content-Length` is at most the cluster's `replay_body_limit` (64 KiB by
//! default) is read whole before the first try, and every try gets a copy. Any other body
//! streams to the first try as it arrives and is never sent twice: a second try cannot have
//! it. The length must be declared up front: waiting for a body of unknown length to end before
//! sending anything would deadlock a streaming exchange (a gRPC bidirectional stream sends a
//! message, then waits for the answer before sending the next).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::body::{BoxError, ProxyBody, empty};

/// A request's body, as its tries will send it.
pub enum RequestBody {
    /// Read whole (or empty): every try sends a copy.
    Replayable {
        /// The bytes.
        data: Bytes,
        /// Trailers, if the client sent any.
        trailers: Option<HeaderMap>,
    },
    /// Streamed to the first try (`None` once that try has taken it), with a flag set if the
    /// client's body fails on the way ([`RequestBody::client_failed`]).
    Streamed(Option<ProxyBody>, ClientFailed),
}

/// Set once a streamed request body failed on the client's side (a malformed chunk, more
/// bytes than allowed, the client gone), so that the try sending it fails as the client's
/// fault, not the replica's.
#[derive(Clone, Debug, Default)]
pub struct ClientFailed(Arc<AtomicBool>);

impl ClientFailed {
    /// Whether the client's body failed.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl RequestBody {
    /// Reads `body` whole when its declared length is at most `replay_limit`, otherwise keeps
    /// it as a stream of at most `max_bytes`. An error means the client's body failed while it
    /// was being read (it went away, or sent more than it declared).
    pub async fn read(
        body: Incoming,
        headers: &HeaderMap,
        replay_limit: u64,
        max_bytes: u64,
    ) -> Result<RequestBody, BoxError> {
        let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        if body.is_end_stream() {
            return Ok(RequestBody::Replayable {
                data: Bytes::new(),
                trailers: None,
            });
        }
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match declared {
            Some(len) if len <= replay_limit => {
                let limit = usize::try_from(len.min(max_bytes)).unwrap_or(usize::MAX);
                let collected = Limited::new(body, limit).collect().await?;
                let trailers = collected.trailers().cloned();
                Ok(RequestBody::Replayable {
                    data: collected.to_bytes(),
                    trailers,
                })
            }
            _ => {
                let failed = ClientFailed::default();
                let body = Watched {
                    inner: Limited::new(body, max).boxed_unsync(),
                    failed: failed.clone(),
                };
                Ok(RequestBody::Streamed(Some(body.boxed_unsync()), failed))
            }
        }
    }

    /// Whether more than one try can send this body.
    pub fn is_replayable(&self) -> bool {
        matches!(self, RequestBody::Replayable { .. })
    }

    /// The body for one more try: a copy, or the stream if no try has taken it yet.
    pub fn for_try(&mut self) -> Option<ProxyBody> {
        match self {
            RequestBody::Replayable { data, trailers } if data.is_empty() && trailers.is_none() => {
                Some(empty())
            }
            RequestBody::Replayable { data, trailers } => Some(
                Copy {
                    data: (!data.is_empty()).then(|| data.clone()),
                    trailers: trailers.clone(),
                }
                .boxed_unsync(),
            ),
            RequestBody::Streamed(stream, _) => stream.take(),
        }
    }

    /// For a streamed body, the flag that says whether the client's side of it failed.
    pub fn client_failed(&self) -> Option<&ClientFailed> {
        match self {
            RequestBody::Streamed(_, failed) => Some(failed),
            RequestBody::Replayable { .. } => None,
        }
    }
}

/// A streamed request body that sets its [`ClientFailed`] flag when it fails.
struct Watched {
    inner: ProxyBody,
    failed: ClientFailed,
}

impl Body for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            self.failed.0.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// One try's copy of a replayable body: its data in one frame, then its trailers.
struct Copy {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for Copy {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = match self.data.take() {
            Some(data) => Some(Frame::data(data)),
            None => self.trailers.take().map(Frame::trailers),
        };
        std::task::Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}
