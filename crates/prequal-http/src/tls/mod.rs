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
//!   a reload that fails keeps what is in force and is tried again.
//! - [`ReplicaTls`]: a listener's TLS from one certificate and key and an optional client CA,
//!   reloaded on file change: what `prequal sidecar --tls-cert` serves with
//!   ([`serve_tls`](crate::serve_tls)).
//!
//! Every config is built with the `ring` provider named explicitly ([`provider`]), never the
//! process default, so a dependency that enables another provider cannot make the choice
//! ambiguous.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

mod handshake;
mod pem;
mod replica;
mod server;

pub use self::handshake::{builder_for_alpn, handshake};
pub use self::pem::{PemFile, certified_key};
pub use self::replica::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_WATCH_INTERVAL, FileLabels, ReplicaTls, ReplicaTlsConfig,
};
pub use self::server::server_config;

/// Why certificates or keys could not be loaded. The message names the setting (config key or
/// flag) and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{key}: cannot read {}: {source}", path.display())]
    Read {
        /// The setting that names the file, for example `server.tls.cert` or `--tls-cert`.
        key: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file was read but does not hold what the setting needs.
    #[error("{key}: {}: {message}", path.display())]
    Content {
        /// The setting that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// What was wrong and what was expected.
        message: String,
    },
    /// Something other than one file's content: no trusted roots, an unusable name.
    #[error("{key}: {message}")]
    Invalid {
        /// The setting concerned.
        key: String,
        /// What was wrong.
        message: String,
    },
}

/// The crypto provider of every TLS config built here and in the proxy: rustls with `ring`.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

/// ALPN protocol id of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN protocol id of HTTP/1.1.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";
