//! `prequal sidecar`: track one replica's load and answer Prequal probes in front of it.
//!
//! The sidecar listens where clients expect the replica, forwards HTTP/1.1 and HTTP/2 (h2c)
//! traffic to the replica unchanged over pooled connections, counts each request in flight
//! until its response body has been relayed, and answers `GET /.prequal/probe?v=1` itself
//! (docs/probe-protocol.md). It stops on SIGINT/SIGTERM after draining open connections.
//!
//! With `--tls-cert` and `--tls-key` it accepts TLS only (ALPN `h2` and `http/1.1` on the same
//! port) and still forwards in cleartext to the replica on the same host; `--tls-client-ca`
//! admits only clients with a certificate signed by that CA, such as a proxy with
//! `[clusters.NAME.tls] client_cert`. The files are read again when they change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use prequal_core::EstimatorConfig;
use prequal_server::tls::{ReplicaTls, ReplicaTlsConfig};
use prequal_server::{
    Forward, ProbeLayer, ProbeService, SharedTracker, serve, serve_tls, shutdown_signal,
};

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
    /// Report the latency of the highest RIF with fresh samples as it is when the RIF has grown
    /// past it, instead of scaling it by (RIF + 1) (the Prequal paper's estimate).
    #[arg(long)]
    no_scale_above_samples: bool,
    /// On shutdown, how long open connections get to finish.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// Accept TLS only, serving this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by a CA in this PEM bundle (mutual TLS); needs
    /// --tls-cert. Default: any client.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// How often the TLS files are checked for change and read again ("0s": never).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    tls_watch_interval: Duration,
    /// How long a client may take to complete its TLS handshake.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    tls_handshake_timeout: Duration,
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
        scale_above_samples: !args.no_scale_above_samples,
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
    let tls = tls_config(args)?;
    let runtime = tokio::runtime::Runtime::new().context("prequal sidecar: starting tokio")?;
    runtime.block_on(listen_and_serve(args, service, tls))
}

/// Binds, says where on stderr, and serves (over TLS with `tls`) until SIGINT or SIGTERM.
async fn listen_and_serve(
    args: &Args,
    service: ProbeService<Forward>,
    tls: Option<ReplicaTlsConfig>,
) -> Result<()> {
    let tls = match &tls {
        Some(config) => {
            let (tls, watch) =
                ReplicaTls::load(config).context("prequal sidecar: cannot load the TLS files")?;
            // The file watch runs on this runtime until the TLS is dropped.
            tokio::spawn(watch);
            Some(tls)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("prequal sidecar: cannot listen on {}", args.listen))?;
    let security = match &tls {
        None => "",
        Some(tls) if tls.requires_client_certificates() => "; TLS, client certificates required",
        Some(_) => "; TLS",
    };
    eprintln!(
        "prequal sidecar: listening on {}, forwarding to {}, probes at /.prequal/probe{security}",
        listener.local_addr()?,
        args.upstream
    );
    match tls {
        Some(tls) => serve_tls(listener, service, tls, shutdown_signal(), args.drain).await,
        None => serve(listener, service, shutdown_signal(), args.drain).await,
    }
    Ok(())
}

/// The TLS flags as a listener config, or `None` without `--tls-cert`.
fn tls_config(args: &Args) -> Result<Option<ReplicaTlsConfig>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        // clap refuses one of the pair without the other.
        return Ok(None);
    };
    if args.tls_handshake_timeout.is_zero() {
        anyhow::bail!("prequal sidecar: --tls-handshake-timeout must be greater than zero");
    }
    let mut config = ReplicaTlsConfig::new(cert, key);
    config.client_ca = args.tls_client_ca.clone();
    config.watch_interval = args.tls_watch_interval;
    config.handshake_timeout = args.tls_handshake_timeout;
    Ok(Some(config))
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
