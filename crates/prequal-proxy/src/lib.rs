//! # prequal-proxy
//!
//! A latency-aware HTTP/1.1 and HTTP/2 reverse proxy whose balancing decisions come from
//! prequal-core, the same sans-IO policies the simulator runs.
//!
//! How a request flows: the [`server`] accepts HTTP/1.1 and h2c on one listener (or both over
//! TLS with ALPN, [`tls`]); [`routing`] picks a cluster by host and path prefix; [`forward`]
//! asks the cluster's policy for a replica, sends the request over a pooled connection (plain
//! or TLS, [`upstream`]), and retries connect failures (and, for idempotent methods, 5xx and
//! timeouts) within the retry budget; a [`try_guard`] reports each try's end. Each [`cluster`]
//! keeps its policy instance, inside prequal-core's `Balancer` (outlier ejection, slow start,
//! retries, hedging), behind one short-held mutex, feeds it dispatches, completions (error
//! aversion sees every 5xx) and probe replies, and runs its timer. The [`prober`] sends the
//! probes the policy asks for; [`discovery`] keeps the replica lists current; `admin` serves
//! `/metrics`, `/ready`, `/live` and per-cluster JSON. Constructors start no task: the timers
//! and DNS watches come back as [`background`] work, which the server spawns.
//!
//! No source file uses itself through others (`crates/prequal/tests/module_graph.rs` checks it, for every crate): from the
//! leaves up, `body`, `config`, `metrics`, `headers`, `access_log`, [`clock`], `background`,
//! `tls`, `connector`, `replay`; `upstream`; `prober`; `cluster`; `try_guard`, `discovery`;
//! `forward`, `routing`; `shared`; `admin`; `server`; `reload`. All time is tokio's (see
//! [`clock`]), so tests can pause it.
//!
//! The configuration ([`config`]) is documented key by key in `docs/config.md`, and running the
//! proxy in `docs/proxy.md`.
//!
//! ```no_run
//! # async fn example() -> Result<(), prequal_proxy::ProxyError> {
//! use prequal_proxy::{Proxy, ProxyConfig};
//!
//! let config = ProxyConfig::zero_config(
//!     "127.0.0.1:8080".parse().unwrap(),
//!     vec!["127.0.0.1:9001".into(), "127.0.0.1:9002".into()],
//!     "prequal",
//! )?;
//! let proxy = Proxy::bind(&config).await?;
//! proxy.run(async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(())
//! # }
//! ```

pub mod access_log;
mod admin;
pub mod background;
pub mod body;
pub mod clock;
pub mod cluster;
pub mod config;
mod connector;
pub mod discovery;
pub mod forward;
pub mod headers;
pub mod metrics;
pub mod prober;
pub mod reload;
pub mod replay;
pub mod routing;
pub mod server;
mod shared;
pub mod tls;
pub mod try_guard;
pub mod upstream;

pub use config::{ClusterConfig, ConfigError, ProxyConfig, RouteConfig, UpstreamProtocol};
/// Completes on SIGINT or SIGTERM: the shutdown future `prequal proxy` passes to
/// [`Proxy::run`] (re-exported from `prequal_http::signal`).
pub use prequal_http::shutdown_signal;
pub use server::{Proxy, ProxyError, ProxyHandle};
