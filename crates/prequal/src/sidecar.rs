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
    /// Address to listen on, `host:port` or `:port` (all interfaces); HTTP/1.1 and h2c on the
    /// same port.
    #[arg(long, value_parser = parse_listen)]
    listen: SocketAddr,
    /// The replica to forward to, as host:port (an `http://` prefix is accepted).
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
    /// Samples older than this never stand for the current RIF (at least --window).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    max_age: Duration,
    /// Report the median latency alone, without growing it while a query is stalled in flight.
    #[arg(long)]
    no_in_flight_floor: bool,
    /// An idle replica's stale estimate halves every this long past --max-age ("0s": never).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    stale_half_life: Duration,
    /// On shutdown, how long open connections get to finish.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// Log lines as `text` or `json` (one object per line), on stderr.
    #[arg(long, value_enum, default_value_t = crate::logging::LogFormat::Text)]
    log_format: crate::logging::LogFormat,
}

fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    full.parse()
        .map_err(|e| format!("{text:?} is not `host:port` or `:port`: {e}"))
}

/// Runs the sidecar until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<()> {
    crate::logging::init(args.log_format, "warn");
    let estimator = EstimatorConfig {
        window: args.window,
        min_samples: args.min_samples,
        rate_window: args.rate_window,
        max_age: args.max_age,
        in_flight_floor: !args.no_in_flight_floor,
        stale_half_life: args.stale_half_life,
    };
    estimator
        .validate()
        .context("prequal sidecar: bad estimator flag")?;
    let upstream = args
        .upstream
        .strip_prefix("http://")
        .unwrap_or(&args.upstream);
    let upstream = upstream.trim_end_matches('/');
    let forward = Forward::new(upstream).context("prequal sidecar: bad --upstream")?;
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

/// Logs to stderr as text, filtered by `RUST_LOG` (default: warnings and errors).
pub fn init_logging() {
    crate::logging::init(crate::logging::LogFormat::Text, "warn");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_accepts_a_bare_port() {
        assert_eq!(parse_listen(":8081"), Ok("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(
            parse_listen("127.0.0.1:1"),
            Ok("127.0.0.1:1".parse().unwrap())
        );
        assert!(parse_listen("nowhere").is_err());
    }
}
