//! How much latency the sidecar adds: a fixed-rate open-loop load on loopback, sent straight to
//! a trivial upstream and then through a sidecar in front of it, over HTTP/1.1 and HTTP/2.
//!
//! Run: `cargo run --release -p prequal-server --example sidecar_latency -- [RATE] [SECONDS]`
//! (defaults 1000 requests/s for 5 s per run; four runs). Each request is sent on schedule from
//! its own task, whether or not earlier ones have finished (open loop), and its latency is
//! measured from the moment it is handed to the client until its body has been read. Servers
//! run on their own 2-thread runtime, the load loop on a separate single thread. In-flight
//! requests are capped at 2000; requests over the cap are counted as dropped, not sent.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prequal_core::EstimatorConfig;
use prequal_server::{Forward, ProbeLayer, SharedTracker, serve};
use tokio::net::TcpListener;

const MAX_IN_FLIGHT: usize = 2000;

async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Starts the upstream and the sidecar; returns their addresses.
fn start_servers(runtime: &tokio::runtime::Runtime) -> (SocketAddr, SocketAddr) {
    runtime.block_on(async {
        let upstream = tower::service_fn(|_req: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        let (listener, upstream_addr) = listen().await;
        tokio::spawn(serve(
            listener,
            upstream,
            std::future::pending(),
            Duration::ZERO,
        ));
        let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
        let sidecar = tower::ServiceBuilder::new()
            .layer(ProbeLayer::new(tracker))
            .service(Forward::new(&upstream_addr.to_string()).unwrap());
        let (listener, sidecar_addr) = listen().await;
        tokio::spawn(serve(
            listener,
            sidecar,
            std::future::pending(),
            Duration::ZERO,
        ));
        (upstream_addr, sidecar_addr)
    })
}

struct RunResult {
    histogram: Histogram<u64>,
    errors: usize,
    dropped: usize,
}

/// Sends `rate` requests per second to `addr` for `duration`, open loop.
async fn run(addr: SocketAddr, http2: bool, rate: u64, duration: Duration) -> RunResult {
    let mut builder = Client::builder(TokioExecutor::new());
    builder.http2_only(http2);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = builder.build(connector);
    let histogram = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap(),
    ));
    let errors = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut dropped = 0;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let total = (rate as f64 * duration.as_secs_f64()) as u64;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        tokio::time::sleep_until(start + period * u32::try_from(i).unwrap()).await;
        if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            dropped += 1;
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (client, histogram, errors, in_flight) = (
            client.clone(),
            Arc::clone(&histogram),
            Arc::clone(&errors),
            Arc::clone(&in_flight),
        );
        tasks.push(tokio::spawn(async move {
            let request = Request::get(format!("http://{addr}/work"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let sent = Instant::now();
            let ok = match client.request(request).await {
                Ok(response) => {
                    response.status().is_success() && response.into_body().collect().await.is_ok()
                }
                Err(_) => false,
            };
            let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
            if ok {
                histogram.lock().unwrap().saturating_record(micros.max(1));
            } else {
                errors.fetch_add(1, Ordering::Relaxed);
            }
            in_flight.fetch_sub(1, Ordering::Relaxed);
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let histogram = histogram.lock().unwrap().clone();
    RunResult {
        histogram,
        errors: errors.load(Ordering::Relaxed),
        dropped,
    }
}

fn print(label: &str, result: &RunResult) {
    let h = &result.histogram;
    println!(
        "{label:<22} n={:<6} p50={:>5}us p90={:>5}us p99={:>5}us p99.9={:>6}us max={:>6}us errors={} dropped={}",
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        result.errors,
        result.dropped
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rate: u64 = args
        .next()
        .map_or(1000, |a| a.parse().expect("RATE must be an integer"));
    let seconds: f64 = args
        .next()
        .map_or(5.0, |a| a.parse().expect("SECONDS must be a number"));
    let duration = Duration::from_secs_f64(seconds);
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (upstream, sidecar) = start_servers(&servers);
    let load = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("open loop, {rate} requests/s for {seconds} s per run, loopback");
    for (proto, http2) in [("HTTP/1.1", false), ("HTTP/2", true)] {
        // A short warm-up fills connection pools and caches before measuring.
        load.block_on(run(upstream, http2, rate, Duration::from_millis(300)));
        load.block_on(run(sidecar, http2, rate, Duration::from_millis(300)));
        let direct = load.block_on(run(upstream, http2, rate, duration));
        let through = load.block_on(run(sidecar, http2, rate, duration));
        print(&format!("{proto} direct"), &direct);
        print(&format!("{proto} via sidecar"), &through);
        let added = |q: f64| {
            through.histogram.value_at_quantile(q) as i64
                - direct.histogram.value_at_quantile(q) as i64
        };
        println!(
            "{proto} added by sidecar: p50 {}us, p99 {}us",
            added(0.5),
            added(0.99)
        );
    }
}
