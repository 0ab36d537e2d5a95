//! A replica's listener TLS: one certificate and key, and optionally a client CA whose
//! certificates every client must present (mutual TLS, so that only the proxy gets through).
//! The files are polled every `watch_interval` by the watch [`ReplicaTls::load`] returns (for
//! the caller to spawn); on a change all of them are read again and the next handshake uses
//! them, while connections already open keep theirs.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::sign::SingleCertAndKey;
use tokio_rustls::TlsAcceptor;

use super::error::TlsError;
use super::pem::{PemFile, certified_key};
use super::server::server_config;
use crate::watch::{self, Watch};

/// How often the files are checked for change, unless configured.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(5);
/// How long a client may take to complete its handshake, unless configured.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files of a replica's TLS and how they are watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaTlsConfig {
    /// The certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Certificate authorities (a PEM bundle): when set, clients must present a certificate
    /// signed by one of them. Default none: any client.
    pub client_ca: Option<PathBuf>,
    /// How often the files are checked for change; zero turns the check off. Default 5 s.
    pub watch_interval: Duration,
    /// How long a client may take to complete the handshake. Default 10 s.
    pub handshake_timeout: Duration,
    /// How the files are named in errors.
    pub labels: FileLabels,
}

/// The settings that name the files of a [`ReplicaTlsConfig`], as errors quote them. By
/// default the flags of `prequal sidecar`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLabels {
    /// The certificate's: `--tls-cert`.
    pub cert: String,
    /// The key's: `--tls-key`.
    pub key: String,
    /// The client CA's: `--tls-client-ca`.
    pub client_ca: String,
}

impl Default for FileLabels {
    fn default() -> Self {
        FileLabels {
            cert: "--tls-cert".into(),
            key: "--tls-key".into(),
            client_ca: "--tls-client-ca".into(),
        }
    }
}

impl ReplicaTlsConfig {
    /// Serving `cert` and `key` to any client, every other setting at its default.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        ReplicaTlsConfig {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            watch_interval: DEFAULT_WATCH_INTERVAL,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            labels: FileLabels::default(),
        }
    }

    /// The same, admitting only clients with a certificate signed by a CA in `bundle`.
    pub fn client_ca(mut self, bundle: impl Into<PathBuf>) -> Self {
        self.client_ca = Some(bundle.into());
        self
    }

    /// Reads every file into a server config.
    fn build(&self) -> Result<ServerConfig, TlsError> {
        let labels = &self.labels;
        let certified = certified_key(
            PemFile {
                key: &labels.cert,
                path: &self.cert,
            },
            PemFile {
                key: &labels.key,
                path: &self.key,
            },
        )?;
        let client_ca = self.client_ca.as_deref().map(|path| PemFile {
            key: &labels.client_ca,
            path,
        });
        server_config(
            &labels.cert,
            Arc::new(SingleCertAndKey::from(certified)),
            client_ca,
        )
    }
}

/// A listener's TLS, shared by every connection so that a reload reaches the next handshake.
#[derive(Debug)]
pub struct ReplicaTls {
    config: ReplicaTlsConfig,
    server: RwLock<Arc<ServerConfig>>,
}

impl ReplicaTls {
    /// Reads the files. Returns the TLS with the watch of its files (every `watch_interval`),
    /// for the caller to spawn on its runtime: until it runs, a change is not picked up. The
    /// watch ends once the TLS is dropped.
    pub fn load(config: &ReplicaTlsConfig) -> Result<(Arc<Self>, Watch), TlsError> {
        let tls = Arc::new(ReplicaTls {
            server: RwLock::new(Arc::new(config.build()?)),
            config: config.clone(),
        });
        let watch = watch::from_now(&tls, config.watch_interval);
        Ok((tls, watch))
    }

    /// Reads the files again and, if all of them are good, uses them from the next handshake
    /// on; on error the ones in force stay. What the file watcher does on a change.
    pub fn reload(&self) -> Result<(), TlsError> {
        watch::Reload::reload(self)
    }

    /// An acceptor with the certificates now in force.
    pub fn acceptor(&self) -> TlsAcceptor {
        // Only an `Arc` is swapped under the lock, so a poisoned one still holds a whole config.
        let guard = self.server.read().unwrap_or_else(|p| p.into_inner());
        TlsAcceptor::from(Arc::clone(&guard))
    }

    /// How long a client may take to complete the handshake.
    pub fn handshake_timeout(&self) -> Duration {
        self.config.handshake_timeout
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificates(&self) -> bool {
        self.config.client_ca.is_some()
    }
}

impl watch::Reload for ReplicaTls {
    type Error = TlsError;

    fn files(&self) -> Vec<PathBuf> {
        let config = &self.config;
        [
            Some(&config.cert),
            Some(&config.key),
            config.client_ca.as_ref(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }

    fn reload(&self) -> Result<(), TlsError> {
        let server = Arc::new(self.config.build()?);
        *self.server.write().unwrap_or_else(|p| p.into_inner()) = server;
        tracing::info!(what = self.config.labels.cert, "TLS certificates reloaded");
        Ok(())
    }

    fn what(&self) -> &str {
        &self.config.labels.cert
    }
}
