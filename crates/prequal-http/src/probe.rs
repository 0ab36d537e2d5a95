//! The client side of a probe over HTTP: reading a replica's reply off a response, as the
//! proxy's prober and the tower balancer both do.
//!
//! A reply counts only with status 200 and a body that the strict v1 parser accepts
//! ([`protocol::parse_reply`](crate::protocol::parse_reply), `docs/probe-protocol.md`). The body
//! is read no further than one byte past the protocol's limit, so a replica that answers with
//! something large costs the prober nothing more than a refused reply.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use prequal_core::LoadReport;

use crate::error::BoxError;
use crate::protocol::{MAX_REPLY_LEN, ReplyError, parse_reply};

/// Why a probe reply was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeReplyError {
    /// The replica answered with a status other than 200.
    #[error("probe answered with status {0}")]
    Status(StatusCode),
    /// The body could not be read (the connection broke, or the body was cut off).
    #[error("probe reply body could not be read: {0}")]
    Body(#[source] BoxError),
    /// The body ran over the protocol's 256 bytes: a page, not a reply.
    #[error("probe answered with a body longer than the protocol's {MAX_REPLY_LEN} bytes")]
    TooLong,
    /// The body broke the protocol's grammar.
    #[error(transparent)]
    Malformed(#[from] ReplyError),
}

/// Reads a probe reply off `response`: status 200 and a body the strict v1 parser accepts,
/// read no further than one byte past the protocol's limit.
pub async fn read_probe_reply<B>(response: Response<B>) -> Result<LoadReport, ProbeReplyError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if response.status() != StatusCode::OK {
        return Err(ProbeReplyError::Status(response.status()));
    }
    // One byte over the limit is enough for the parser to reject an over-long reply.
    let body = Limited::new(response.into_body(), MAX_REPLY_LEN + 2);
    let bytes: Bytes = body
        .collect()
        .await
        .map_err(|error| {
            if error.is::<LengthLimitError>() {
                ProbeReplyError::TooLong
            } else {
                ProbeReplyError::Body(error)
            }
        })?
        .to_bytes();
    Ok(parse_reply(&bytes)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use http_body_util::Full;

    use super::*;

    fn reply(status: StatusCode, body: &[u8]) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::copy_from_slice(body)));
        *response.status_mut() = status;
        response
    }

    #[tokio::test]
    async fn a_reply_needs_status_200_and_a_well_formed_line() {
        let good = read_probe_reply(reply(StatusCode::OK, b"v=1 rif=3 latency_us=1520\n"));
        let report = good.await.unwrap();
        assert_eq!(
            (report.rif, report.latency),
            (3, Duration::from_micros(1520))
        );
        let refused = read_probe_reply(reply(StatusCode::SERVICE_UNAVAILABLE, b"v=1 rif=3"));
        assert!(matches!(
            refused.await,
            Err(ProbeReplyError::Status(StatusCode::SERVICE_UNAVAILABLE))
        ));
        let garbled = read_probe_reply(reply(StatusCode::OK, b"rif=3"));
        assert!(matches!(garbled.await, Err(ProbeReplyError::Malformed(_))));
        let long = vec![b'v'; 10 * MAX_REPLY_LEN];
        let too_long = read_probe_reply(reply(StatusCode::OK, &long)).await;
        assert!(matches!(too_long, Err(ProbeReplyError::TooLong)));
    }
}
