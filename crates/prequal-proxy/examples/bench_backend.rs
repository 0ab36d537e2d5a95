//! A trivial backend for the proxy benchmark: answers every request with `ok` at once, and
//! answers probes (`/.prequal/probe`) with its requests in flight and a zero latency estimate.
//!
//! `cargo run --release -p prequal-proxy --example bench_backend -- 127.0.0.1:9001`

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prequal_core::LoadReport;
use prequal_http::protocol::{PROBE_PATH, encode_reply};
use tokio::net::TcpListener;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".to_string());
    let listener = TcpListener::bind(&addr).await?;
    let in_flight = Arc::new(AtomicU32::new(0));
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let in_flight = Arc::clone(&in_flight);
        let service = service_fn(move |req| answer(Arc::clone(&in_flight), req));
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    in_flight: Arc<AtomicU32>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() == PROBE_PATH {
        let report = LoadReport {
            rif: in_flight.load(Ordering::Relaxed),
            ..LoadReport::default()
        };
        return Ok(Response::new(Full::new(Bytes::from(encode_reply(&report)))));
    }
    in_flight.fetch_add(1, Ordering::Relaxed);
    let response = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    in_flight.fetch_sub(1, Ordering::Relaxed);
    Ok(response)
}
