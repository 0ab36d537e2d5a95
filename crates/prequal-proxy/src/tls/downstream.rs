//! TLS termination on the listener: certificates chosen by SNI, ALPN `h2` and `http/1.1`, and
//! certificates swapped on file change without touching open connections.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use prequal_http::tls::{PemFile, TlsError, certified_key, server_config};
use prequal_http::watch;

use super::config::ServerTlsConfig;
use crate::background::Background;

/// The listener's TLS: what accepts handshakes, and the certificates it serves.
#[derive(Debug)]
pub struct ServerTls {
    server: Arc<rustls::ServerConfig>,
    resolver: Arc<SniResolver>,
    handshake_timeout: Duration,
}

impl ServerTls {
    /// Reads every certificate and key of `config`. Returns the TLS with the watch of its files
    /// (every `watch_interval`) as background work for the caller to spawn; the watch ends once
    /// the TLS is dropped.
    pub fn load(config: &ServerTlsConfig) -> Result<(Self, Background), TlsError> {
        let resolver = Arc::new(SniResolver {
            certs: RwLock::new(Arc::new(Certs::load(config)?)),
            config: config.clone(),
        });
        let client_ca = config.client_ca.as_deref().map(|path| PemFile {
            key: "server.tls.client_ca",
            path,
        });
        let server = server_config(
            "server.tls",
            Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>,
            client_ca,
        )?;
        let watch = watch::from_now(&resolver, config.watch_interval);
        let tls = ServerTls {
            server: Arc::new(server),
            resolver,
            handshake_timeout: config.handshake_timeout,
        };
        Ok((tls, Background::one(watch)))
    }

    /// Reads the files again and, if all of them are good, serves the new certificates from
    /// the next handshake on. What the file watcher does on a change.
    pub fn reload(&self) -> Result<(), TlsError> {
        watch::Reload::reload(&*self.resolver)
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.server))
    }

    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }
}

/// Picks a certificate by the client's SNI from the set now in force.
#[derive(Debug)]
struct SniResolver {
    config: ServerTlsConfig,
    certs: RwLock<Arc<Certs>>,
}

impl SniResolver {
    fn current(&self) -> Arc<Certs> {
        // Only an `Arc` is swapped under the lock, so a poisoned one still holds a whole set.
        let guard = self.certs.read().unwrap_or_else(|p| p.into_inner());
        Arc::clone(&guard)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let certs = self.current();
        let chosen = certs.pick(hello.server_name());
        tracing::trace!(sni = hello.server_name(), "certificate chosen");
        Some(Arc::clone(chosen))
    }
}

impl watch::Reload for SniResolver {
    type Error = TlsError;

    fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.config.cert.clone(), self.config.key.clone()];
        for entry in &self.config.sni {
            files.extend([entry.cert.clone(), entry.key.clone()]);
        }
        files
    }

    fn reload(&self) -> Result<(), TlsError> {
        let certs = Arc::new(Certs::load(&self.config)?);
        *self.certs.write().unwrap_or_else(|p| p.into_inner()) = certs;
        tracing::info!(what = "server.tls", "TLS certificates reloaded");
        Ok(())
    }

    fn what(&self) -> &str {
        "server.tls"
    }
}

/// One complete set of certificates: the default and those by server name.
#[derive(Debug)]
struct Certs {
    default: Arc<CertifiedKey>,
    /// By lower-case name.
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// By the lower-case name after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl Certs {
    fn load(config: &ServerTlsConfig) -> Result<Self, TlsError> {
        let pair = |cert_key: &str, cert, key_key: &str, key| {
            certified_key(
                PemFile {
                    key: cert_key,
                    path: cert,
                },
                PemFile {
                    key: key_key,
                    path: key,
                },
            )
            .map(Arc::new)
        };
        let default = pair(
            "server.tls.cert",
            &config.cert,
            "server.tls.key",
            &config.key,
        )?;
        let mut certs = Certs {
            default,
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        };
        for (i, entry) in config.sni.iter().enumerate() {
            let cert_key = format!("server.tls.sni[{i}].cert");
            let key_key = format!("server.tls.sni[{i}].key");
            let certified = pair(&cert_key, &entry.cert, &key_key, &entry.key)?;
            let name = entry.server_name.to_ascii_lowercase();
            match name.strip_prefix("*.") {
                Some(parent) => certs.wildcard.insert(parent.to_string(), certified),
                None => certs.exact.insert(name, certified),
            };
        }
        Ok(certs)
    }

    /// The certificate for a client that asked for `name`: exact match, else wildcard match of
    /// the first label, else the default.
    fn pick(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = name else {
            return &self.default;
        };
        let name = name.to_ascii_lowercase();
        if let Some(certified) = self.exact.get(&name) {
            return certified;
        }
        name.split_once('.')
            .and_then(|(_, parent)| self.wildcard.get(parent))
            .unwrap_or(&self.default)
    }
}
