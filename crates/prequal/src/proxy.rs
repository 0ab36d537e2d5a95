//! `prequal proxy`: the load-balancing proxy (crates/prequal-proxy), from a config file or flags.
//!
//! `prequal proxy --config prequal.toml` runs the configuration in the file (every key is in
//! docs/config.md); `prequal proxy --listen :8080 --upstream 127.0.0.1:9001 --upstream
//! 127.0.0.1:9002 --policy prequal` runs one cluster with every other setting at its default.
//! SIGTERM or SIGINT drains in-flight requests and stops; SIGHUP, or a change to the config
//! file (checked every `--watch-interval`), reloads it without dropping requests. A config that
//! fails to load on reload is logged and the running one stays in force. Logs go to stderr, as
//! text or, with `--log-format json`, JSON lines; `RUST_LOG` sets the filter (default `info`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::logging::LogFormat;
use prequal_proxy::{Proxy, ProxyConfig, ProxyHandle, reload, shutdown_signal};

/// Arguments of `prequal proxy`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A TOML config file (see docs/config.md). Excludes --listen/--upstream/--policy.
    #[arg(long, conflicts_with_all = ["listen", "upstream"])]
    config: Option<PathBuf>,
    /// Zero-config form: address to listen on, `host:port` or `:port` (all interfaces).
    #[arg(long, value_parser = parse_listen)]
    listen: Option<SocketAddr>,
    /// Zero-config form: a replica `host:port`; repeat for each replica.
    #[arg(long)]
    upstream: Vec<String>,
    /// Zero-config form: the balancing policy (`prequal policies` lists them).
    #[arg(long, default_value = "prequal")]
    policy: String,
    /// Zero-config form: the admin listener's address.
    #[arg(long, default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// How often the config file is checked for changes (0s disables the check; SIGHUP still
    /// reloads).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    watch_interval: Duration,
    /// Log lines as `text` or `json` (one object per line), on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    full.parse()
        .map_err(|e| format!("{text:?} is not `host:port` or `:port`: {e}"))
}

/// Runs the proxy until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<()> {
    crate::logging::init(args.log_format, "info");
    let config = load(args)?;
    // The proxy starts its other data-plane threads (`server.worker_threads`) itself; this one
    // accepts, and runs the admin listener, reloads and signals.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("prequal proxy: starting tokio")?;
    runtime.block_on(async {
        let proxy = Proxy::bind(&config).await.context("prequal proxy")?;
        let listen = proxy
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let admin = proxy.admin_addr().map(|a| a.to_string());
        let protocols = match config.server.tls {
            None => "HTTP/1.1 and h2c",
            Some(_) => "TLS: HTTP/1.1 and HTTP/2 by ALPN",
        };
        eprintln!(
            "prequal proxy: listening on {listen} ({protocols}); admin on {}",
            admin.as_deref().unwrap_or("(off)")
        );
        if let Some(path) = args.config.clone() {
            tokio::spawn(reload_on_hangup(path.clone(), proxy.handle()));
            if !args.watch_interval.is_zero() {
                tokio::spawn(reload::watch_file(
                    proxy.handle(),
                    path,
                    args.watch_interval,
                ));
            }
        }
        proxy.run(shutdown_signal()).await;
        eprintln!("prequal proxy: drained and stopped");
        Ok(())
    })
}

fn load(args: &Args) -> Result<ProxyConfig> {
    if let Some(path) = &args.config {
        return Ok(ProxyConfig::from_file(path)?);
    }
    let Some(listen) = args.listen else {
        bail!("prequal proxy: give --config FILE, or --listen and at least one --upstream");
    };
    let mut config = ProxyConfig::zero_config(listen, args.upstream.clone(), &args.policy)?;
    config.admin.listen = args.admin;
    Ok(config)
}

/// Reloads the config file on SIGHUP; file changes are picked up by
/// `prequal_proxy::reload::watch_file`.
async fn reload_on_hangup(path: PathBuf, handle: ProxyHandle) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; reload by editing the file instead");
            return;
        };
        while hangup.recv().await.is_some() {
            match reload::reload_from_file(&handle, &path) {
                Ok(()) => {}
                Err(error) => {
                    tracing::error!(%error, "reload refused; the running configuration stays")
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, handle);
    }
}
