//! A trivial backend for the proxy benchmark: answers every request with `ok` at once, and
//! answers probes (`/.prequal/probe`) with its requests in flight and a zero latency estimate.
//! With `PIGGYBACK=1` in the environment every response also carries that report in the
//! `prequal-load` header (its RIF without the request answered), as `prequal sidecar
//! --piggyback` does.
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
use prequal_http::protocol::{LOAD_HEADER, PROBE_PATH, encode_reply};
use tokio::net::TcpListener;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9001".to_string());
    let listener = TcpListener::bind(&addr).await?;
    let in_flight = Arc::new(AtomicU32::new(0));
    let piggyback = std::env::var("PIGGYBACK").is_ok_and(|v| v == "1");
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let in_flight = Arc::clone(&in_flight);
        let service = service_fn(move |req| answer(Arc::clone(&in_flight), piggyback, req));
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    in_flight: Arc<AtomicU32>,
    piggyback: bool,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() == PROBE_PATH {
        let report = LoadReport {
            rif: in_flight.load(Ordering::Relaxed),
            ..LoadReport::default()
        };
        return Ok(Response::new(Full::new(Bytes::from(encode_reply(&report)))));
    }
    let others = in_flight.fetch_add(1, Ordering::Relaxed);
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok\n")));
    if piggyback {
        let report = LoadReport {
            rif: others,
            ..LoadReport::default()
        };
        if let Ok(value) = http::HeaderValue::from_str(&encode_reply(&report)) {
            response.headers_mut().insert(LOAD_HEADER, value);
        }
    }
    in_flight.fetch_sub(1, Ordering::Relaxed);
    Ok(response)
}
