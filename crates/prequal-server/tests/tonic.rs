//! `ProbeLayer` on a tonic server (`Server::builder().layer(..)`): probes are answered before
//! routing, gRPC calls are tracked, and a gRPC status that signals a server fault counts as an
//! error. tonic serves HTTP/2 only, so this runs over HTTP/2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use common::{Proto, client, fetch, probe_until, request};
use http::HeaderValue;
use prequal_core::EstimatorConfig;
use prequal_server::{ProbeLayer, SharedTracker};
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;

/// A hand-written gRPC service: `/test.Flaky/Ok` succeeds, `/test.Flaky/Fail` is UNAVAILABLE.
#[derive(Clone)]
struct Flaky;

impl NamedService for Flaky {
    const NAME: &'static str = "test.Flaky";
}

impl tower::Service<http::Request<Body>> for Flaky {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let status = if request.uri().path().ends_with("/Fail") {
            Status::unavailable("down for the test")
        } else {
            Status::ok("")
        };
        ready(Ok(status.into_http()))
    }
}

#[tokio::test]
async fn tonic_server_with_the_layer() {
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .layer(ProbeLayer::new(Arc::clone(&tracker)))
        .add_service(Flaky)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
            let _ = stopped.await;
        });
    let server = tokio::spawn(server);
    let client = client(Proto::Http2);
    for path in ["/test.Flaky/Ok", "/test.Flaky/Fail"] {
        let mut call = request(Proto::Http2, addr, "POST", path, "");
        let headers = call.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        let reply = fetch(&client, call).await;
        assert_eq!(reply.status, 200);
        assert!(reply.headers.contains_key("grpc-status"), "{reply:?}");
    }
    let report = probe_until(&client, Proto::Http2, addr, |r| r.error_rate == Some(0.5)).await;
    assert_eq!(report.error_rate, Some(0.5), "{report:?}");
    assert_eq!(report.rif, 0);
    drop(stop);
    server.await.unwrap().unwrap();
}
