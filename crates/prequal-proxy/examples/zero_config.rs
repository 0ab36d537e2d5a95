//! The proxy library in its zero-config form, without the `prequal` command around it (the
//! benchmark uses it so that it does not need the whole command built):
//!
//! `cargo run --release -p prequal-proxy --example zero_config -- LISTEN POLICY UPSTREAM...`
//!
//! Stops, draining, on SIGINT or SIGTERM.

use std::process::ExitCode;

use prequal_proxy::{Proxy, ProxyConfig};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, policy, upstreams @ ..] = args.as_slice() else {
        eprintln!("usage: zero_config LISTEN POLICY UPSTREAM...");
        return ExitCode::FAILURE;
    };
    let Ok(listen) = listen.parse() else {
        eprintln!("LISTEN must be host:port, got {listen:?}");
        return ExitCode::FAILURE;
    };
    let mut config = match ProxyConfig::zero_config(listen, upstreams.to_vec(), policy) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    config.admin.enabled = false;
    let proxy = match Proxy::bind(&config).await {
        Ok(proxy) => proxy,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| eprintln!("{e}"))
            .ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    };
    proxy.run(stop).await;
    ExitCode::SUCCESS
}
