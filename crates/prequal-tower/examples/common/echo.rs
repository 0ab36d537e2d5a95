//! A gRPC echo service without protobuf, protoc or a build script: a hand-written codec that
//! carries UTF-8 strings, and a hand-written service that tonic's server routes to. Replicas
//! run it behind prequal-server's `ProbeLayer` on loopback. Shared by `tonic_client.rs` and
//! the tonic test.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut};
use futures_util::future::BoxFuture;
use prequal_core::EstimatorConfig;
use prequal_server::{ProbeLayer, SharedTracker};
use tonic::Status;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;

/// The one method: `Say(string) returns (string)`.
pub const SAY: &str = "/demo.Echo/Say";

/// Messages are UTF-8 strings, framed by gRPC as any message is.
#[derive(Clone, Copy, Debug, Default)]
pub struct StringCodec;

impl Codec for StringCodec {
    type Encode = String;
    type Decode = String;
    type Encoder = StringCodec;
    type Decoder = StringCodec;

    fn encoder(&mut self) -> StringCodec {
        StringCodec
    }

    fn decoder(&mut self) -> StringCodec {
        StringCodec
    }
}

impl Encoder for StringCodec {
    type Item = String;
    type Error = Status;

    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for StringCodec {
    type Item = String;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

/// One replica of the echo service: answers `"{name}: {message}"` after `delay`, or
/// UNAVAILABLE while `failing` is set.
#[derive(Clone, Debug)]
pub struct Echo {
    pub name: String,
    pub delay: Duration,
    pub failing: Arc<AtomicBool>,
}

impl NamedService for Echo {
    const NAME: &'static str = "demo.Echo";
}

impl tower::Service<http::Request<Body>> for Echo {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let echo = self.clone();
        Box::pin(async move {
            if request.uri().path() != SAY {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let say = tower::service_fn(move |message: tonic::Request<String>| {
                let echo = echo.clone();
                async move {
                    tokio::time::sleep(echo.delay).await;
                    if echo.failing.load(Ordering::SeqCst) {
                        return Err(Status::unavailable("failing on purpose"));
                    }
                    let text = format!("{}: {}", echo.name, message.into_inner());
                    Ok(tonic::Response::new(text))
                }
            });
            let mut grpc = tonic::server::Grpc::new(StringCodec);
            Ok(grpc.unary(say, request).await)
        })
    }
}

/// A tonic server for `echo` on 127.0.0.1 (OS-chosen port) behind `ProbeLayer`; it stops when
/// `stop` is dropped.
pub async fn start(
    echo: Echo,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    // Small RPCs want their bytes on the wire at once, not after a delayed ACK.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = tonic::transport::Server::builder()
        .layer(ProbeLayer::new(tracker))
        .add_service(echo)
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop.await;
        });
    tokio::spawn(server);
    Ok(addr)
}
