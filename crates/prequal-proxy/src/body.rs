//! Body types: what the proxy sends upstream and downstream.
//!
//! Bodies are streamed frame by frame, never collected. How the policy hears that a response
//! body has ended is [`crate::try_guard`]'s: the body is wrapped in prequal-http's
//! [`TrackedBody`](prequal_http::TrackedBody), which is handed the try's guard.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

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
