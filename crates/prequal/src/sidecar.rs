//! `prequal sidecar`: track one replica's load and answer Prequal probes in front of it.
//!
//! The sidecar listens where clients expect the replica, forwards HTTP/1.1 and HTTP/2 (h2c)
//! traffic to the replica unchanged over pooled connections, counts each request in flight
//! until its response body has been relayed, and answers `GET /.prequal/probe?v=1` itself
//! (docs/probe-protocol.md). It stops on SIGINT/SIGTERM after draining open connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use prequal_core::EstimatorConfig;
use prequal_server::{Forward, ProbeLayer, SharedTracker, serve, shutdown_signal};

/// Arguments of `prequal sidecar`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on, e.g. 127.0.0.1:8081 (HTTP/1.1 and h2c on the same port).
    #[arg(long)]
    listen: SocketAddr,
    /// The replica to forward to, as host:port.
    #[arg(long)]
    upstream: String,
    /// Add the `prequal-load` header with the current load to every response.
    #[arg(long)]
    piggyback: bool,
    /// Latency samples that finished within this span count as recent.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Below this many recent samples near the current RIF, use this many newest ones (1-32).
    #[arg(long, default_value_t = 16)]
    min_samples: usize,
    /// Span over which qps and error rate are measured (10ms-1h).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    rate_window: Duration,
    /// On shutdown, how long open connections get to finish.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    drain: Duration,
}

/// Runs the sidecar until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<()> {
    let estimator = EstimatorConfig {
        window: args.window,
        min_samples: args.min_samples,
        rate_window: args.rate_window,
    };
    estimator
        .validate()
        .context("prequal sidecar: bad estimator flag")?;
    let forward = Forward::new(&args.upstream).context("prequal sidecar: bad --upstream")?;
    let tracker = Arc::new(SharedTracker::new(estimator));
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(tracker).piggyback(args.piggyback))
        .service(forward);
    let runtime = tokio::runtime::Runtime::new().context("prequal sidecar: starting tokio")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("prequal sidecar: cannot listen on {}", args.listen))?;
        eprintln!(
            "prequal sidecar: listening on {}, forwarding to {}, probes at /.prequal/probe",
            listener.local_addr()?,
            args.upstream
        );
        serve(listener, service, shutdown_signal(), args.drain).await;
        Ok(())
    })
}
