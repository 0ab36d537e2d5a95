//! One query over hyper-util's pooled client, and how its result is classified.

use bytes::Bytes;
use http::{Request, Uri, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_core::Outcome;

use crate::backend::REPLICA_HEADER;

/// The pooled client all queries share.
pub(super) type LoadClient = Client<HttpConnector, Empty<Bytes>>;

/// A client with a connection pool as large as the in-flight bound, so open-loop bursts reuse
/// connections instead of opening and dropping them; `http2` speaks h2c with prior knowledge.
pub(super) fn build(http2: bool, max_in_flight: usize) -> LoadClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_max_idle_per_host(max_in_flight)
        .http2_only(http2);
    builder.build(connector)
}

/// How one query ended (before the deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Answer {
    /// The status code, or `None` for a transport failure.
    pub status: Option<u16>,
    /// The replica named by the response header, if present and well formed.
    pub replica: Option<usize>,
}

impl Answer {
    /// Statuses below 400 succeed; 4xx, 5xx and transport failures are errors.
    pub fn outcome(&self) -> Outcome {
        match self.status {
            Some(code) if code < 400 => Outcome::Success,
            _ => Outcome::Error,
        }
    }
}

/// Sends a GET to `uri` and reads the whole body.
pub(super) async fn query(client: &LoadClient, uri: &Uri, http2: bool) -> Answer {
    let failed = Answer {
        status: None,
        replica: None,
    };
    let version = if http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let Ok(request) = Request::get(uri.clone())
        .version(version)
        .body(Empty::<Bytes>::new())
    else {
        return failed;
    };
    let Ok(response) = client.request(request).await else {
        return failed;
    };
    let (parts, body) = response.into_parts();
    let replica = parts
        .headers
        .get(REPLICA_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse().ok());
    // A response whose body breaks off is a transport failure, whatever its status said.
    if body.collect().await.is_err() {
        return failed;
    }
    Answer {
        status: Some(parts.status.as_u16()),
        replica,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_below_400_succeed() {
        let answer = |status| Answer {
            status,
            replica: None,
        };
        assert_eq!(answer(Some(200)).outcome(), Outcome::Success);
        assert_eq!(answer(Some(304)).outcome(), Outcome::Success);
        assert_eq!(answer(Some(404)).outcome(), Outcome::Error);
        assert_eq!(answer(Some(503)).outcome(), Outcome::Error);
        assert_eq!(answer(None).outcome(), Outcome::Error);
    }
}
