//! TLS for the replica side and the proxy alike, with rustls (its `ring` provider; no OpenSSL).
//! Behind the cargo feature `tls`.
//!
//! The pieces both sides of a Prequal deployment need, written once:
//!
//! - [`PemFile`] and [`certified_key`]: certificates, keys and CA bundles read from PEM files,
//!   with every error naming the setting that names the file (a config key such as
//!   `server.tls.cert`, or a flag such as `--tls-cert`) and the path.
//! - [`server_config`]: a rustls server config offering ALPN `h2` and `http/1.1` on one port,
//!   and, given a client CA bundle, requiring client certificates signed by it (mutual TLS).
//! - [`handshake`]: a server handshake bounded by a timeout, failures logged at debug level.
//! - file watching: every type here that is built from files implements
//!   [`watch::Reload`](crate::watch::Reload), so [`crate::watch`] reloads it when they change;
//!   a reload that fails keeps what is in force and is tried again. The watch is a future
//!   ([`Watch`]) that the constructor returns and the caller spawns; nothing here spawns a task.
//! - [`ReplicaTls`]: a listener's TLS from one certificate and key and an optional client CA,
//!   reloaded on file change once the caller spawns the [`Watch`] that [`ReplicaTls::load`]
//!   returns: what `prequal sidecar --tls-cert` serves with ([`serve_tls`](crate::serve_tls)).
//!
//! Every config is built with the `ring` provider named explicitly ([`provider`]), never the
//! process default, so a dependency that enables another provider cannot make the choice
//! ambiguous.

mod alpn;
mod error;
mod handshake;
mod pem;
mod provider;
mod replica;
mod server;

pub use self::alpn::{ALPN_H2, ALPN_HTTP1};
pub use self::error::TlsError;
pub use self::handshake::{builder_for_alpn, handshake};
pub use self::pem::{PemFile, certified_key};
pub use self::provider::provider;
pub use self::replica::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_WATCH_INTERVAL, FileLabels, ReplicaTls, ReplicaTlsConfig,
};
pub use self::server::server_config;
/// The file watch [`ReplicaTls::load`] returns (re-exported from [`crate::watch`], so that a
/// replica using `prequal_server::tls` can name it).
pub use crate::watch::Watch;
