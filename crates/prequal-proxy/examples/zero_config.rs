//! The proxy library in its zero-config form, without the `prequal` command around it (the
//! benchmark uses it so that it does not need the whole command built):
//!
//! `cargo run --release -p prequal-proxy --example zero_config -- LISTEN POLICY UPSTREAM...`
//!
//! POLICY is a policy name, or a TOML inline table with its settings, as a scenario's
//! contenders are written: `'{ name = "prequal", probe_rate = 2 }'`.
//!
//! Stops, draining, on SIGINT or SIGTERM.

use std::process::ExitCode;

use prequal_proxy::{Proxy, ProxyConfig};

fn main() -> ExitCode {
    // The proxy starts its other data-plane threads itself; this one runs the accept loop.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, policy, upstreams @ ..] = args.as_slice() else {
        eprintln!("usage: zero_config LISTEN POLICY UPSTREAM...");
        return ExitCode::FAILURE;
    };
    let Ok(listen) = listen.parse() else {
        eprintln!("LISTEN must be host:port, got {listen:?}");
        return ExitCode::FAILURE;
    };
    let inline = policy.trim_start().starts_with('{');
    let name = if inline {
        "round-robin"
    } else {
        policy.as_str()
    };
    let mut config = match ProxyConfig::zero_config(listen, upstreams.to_vec(), name) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    if inline {
        #[derive(serde::Deserialize)]
        struct Inline {
            policy: prequal_core::PolicyConfig,
        }
        let parsed = toml::from_str::<Inline>(&format!("policy = {policy}"))
            .map_err(|e| e.to_string())
            .and_then(|p| {
                p.policy
                    .validate()
                    .map(|()| p.policy)
                    .map_err(|e| e.to_string())
            });
        match parsed {
            Ok(parsed) => {
                for cluster in config.clusters.values_mut() {
                    cluster.policy = parsed.clone();
                }
            }
            Err(error) => {
                eprintln!("POLICY {policy}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    // PREQUAL_ADMIN=host:port turns the admin listener on (the benchmark reads /metrics).
    match std::env::var("PREQUAL_ADMIN").ok().map(|a| a.parse()) {
        Some(Ok(addr)) => config.admin.listen = addr,
        Some(Err(_)) => {
            eprintln!("PREQUAL_ADMIN must be host:port");
            return ExitCode::FAILURE;
        }
        None => config.admin.enabled = false,
    }
    // PREQUAL_WORKERS=N sets `server.worker_threads` (default 0: one per core).
    if let Some(workers) = std::env::var("PREQUAL_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.server.worker_threads = workers;
    }
    let proxy = match Proxy::bind(&config).await {
        Ok(proxy) => proxy,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    proxy.run(prequal_proxy::shutdown_signal()).await;
    ExitCode::SUCCESS
}
