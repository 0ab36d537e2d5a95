//! A hyper client balancing with Prequal over HTTP replicas that answer probes.
//!
//! With no arguments it starts three replicas in this process on loopback, each a hyper server
//! behind prequal-server's `ProbeLayer`, the third ten times slower than the others. With
//! arguments it balances over the `host:port`s given instead: services in any language behind
//! `prequal sidecar`, or the testbed's `prequal backend` replicas, which answer probes
//! themselves. For example:
//!
//! ```sh
//! python3 -m http.server 9001 &
//! cargo run --release -p prequal -- sidecar --listen 127.0.0.1:8081 --upstream 127.0.0.1:9001 &
//! cargo run --release -p prequal -- backend --replicas 2 --base-port 8082 --latency 5ms &
//! cargo run -p prequal-tower --example hyper_client -- 127.0.0.1:8081 127.0.0.1:8082 127.0.0.1:8083
//! ```
//!
//! Each endpoint is a `prequal_tower::HttpEndpoint`: one pooled hyper-util client shared by all
//! replicas, addressed to one of them. The probes go through the same endpoints. The client
//! sends 400 requests, 8 at a time, and prints what the policy did.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prequal_core::{EstimatorConfig, PolicyConfig};
use prequal_server::{ProbeLayer, SharedTracker, serve};
use prequal_tower::{Balance, BoxError, HttpEndpoint};
use tower::discover::ServiceList;
use tower::{Service, ServiceExt};

const REQUESTS: usize = 400;
const CONCURRENCY: usize = 8;

/// A replica on 127.0.0.1 that answers after `delay`, behind `ProbeLayer`.
async fn start_replica(delay: Duration) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(tracker))
        .service_fn(
            move |_request: http::Request<hyper::body::Incoming>| async move {
                tokio::time::sleep(delay).await;
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            },
        );
    // Runs until the process ends.
    tokio::spawn(serve(
        listener,
        service,
        std::future::pending(),
        Duration::ZERO,
    ));
    Ok(addr)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut addrs: Vec<String> = std::env::args().skip(1).collect();
    if addrs.is_empty() {
        for i in 0..3 {
            let delay = Duration::from_millis(if i == 2 { 20 } else { 2 });
            let addr = start_replica(delay).await?;
            println!("replica {i} on {addr}, answering in {delay:?}");
            addrs.push(addr.to_string());
        }
    }

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let endpoints = addrs
        .iter()
        .map(|addr| HttpEndpoint::new(client.clone(), addr))
        .collect::<Result<Vec<_>, _>>()?;
    // The probe timeout is raised from the datacenter default (3 ms) for debug builds.
    let policy: PolicyConfig = toml::from_str("name = \"prequal\"\nprobe_timeout = \"20ms\"")?;
    let mut balance = Balance::new(ServiceList::new(endpoints), policy)?;
    let handle = balance.handle();

    let mut in_flight = tokio::task::JoinSet::new();
    let mut failed = 0;
    for _ in 0..REQUESTS {
        while in_flight.len() >= CONCURRENCY {
            failed += usize::from(
                in_flight
                    .join_next()
                    .await
                    .is_some_and(|r| !matches!(r, Ok(Ok(())))),
            );
        }
        let request = http::Request::get("/").body(Full::new(Bytes::new()))?;
        let response = balance.ready().await?.call(request);
        in_flight.spawn(async move {
            let response = response.await?;
            response.into_body().collect().await?;
            Ok::<_, BoxError>(())
        });
    }
    while let Some(done) = in_flight.join_next().await {
        failed += usize::from(!matches!(done, Ok(Ok(()))));
    }

    println!("\n{REQUESTS} requests, {failed} failed");
    let snapshot = handle.snapshot();
    for (replica, addr) in snapshot.replicas.iter().zip(&addrs) {
        println!("  {addr}: picked {} times", replica.picks);
    }
    Ok(())
}
