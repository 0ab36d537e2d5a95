//! TLS to a cluster's replicas: the roots to verify them with, the name to verify, the client
//! certificate to present, and ALPN by the cluster's protocol.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use http::uri::Authority;
use rustls::pki_types::ServerName;
use rustls::sign::SingleCertAndKey;
use rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use prequal_http::tls::{ALPN_H2, ALPN_HTTP1, PemFile, TlsError, certified_key, provider};
use prequal_http::watch;

use super::config::UpstreamTlsConfig;
use crate::background::Background;
use crate::config::UpstreamProtocol;

/// One cluster's client-side TLS, shared by its connection pools (requests and probes, every
/// data-plane thread), so that a reload reaches all of them.
#[derive(Debug)]
pub struct ClientTls {
    /// `clusters.NAME.tls`, the prefix of every key in messages.
    prefix: String,
    config: UpstreamTlsConfig,
    protocol: UpstreamProtocol,
    /// `server_name`, parsed once.
    server_name: Option<ServerName<'static>>,
    client: RwLock<Arc<ClientConfig>>,
}

impl ClientTls {
    /// Reads the CA bundle (or the system's roots) and the client certificate of cluster
    /// `cluster`; the config must have been validated. Returns the TLS with the watch of its
    /// files (every `watch_interval`) as background work for the caller to spawn; the watch
    /// ends once the TLS is dropped.
    pub fn load(
        cluster: &str,
        config: &UpstreamTlsConfig,
        protocol: UpstreamProtocol,
    ) -> Result<(Arc<Self>, Background), TlsError> {
        let prefix = format!("clusters.{cluster}.tls");
        let server_name = match &config.server_name {
            None => None,
            Some(name) => {
                Some(
                    ServerName::try_from(name.clone()).map_err(|e| TlsError::Invalid {
                        key: format!("{prefix}.server_name"),
                        message: format!("{name:?}: {e}"),
                    })?,
                )
            }
        };
        let client = client_config(&prefix, config, protocol)?;
        let tls = Arc::new(ClientTls {
            prefix,
            config: config.clone(),
            protocol,
            server_name,
            client: RwLock::new(Arc::new(client)),
        });
        let watch = watch::from_now(&tls, config.watch_interval);
        Ok((tls, Background::one(watch)))
    }

    /// Reads the files again and, if all of them are good, uses them from the next connection
    /// on. What the file watcher does on a change.
    pub fn reload(&self) -> Result<(), TlsError> {
        watch::Reload::reload(self)
    }

    /// A connector with the configuration now in force.
    pub(crate) fn connector(&self) -> TlsConnector {
        let guard = self.client.read().unwrap_or_else(|p| p.into_inner());
        TlsConnector::from(Arc::clone(&guard))
    }

    /// The name to send as SNI and verify for the replica at `authority`.
    pub(crate) fn server_name(
        &self,
        authority: &Authority,
    ) -> Result<ServerName<'static>, std::io::Error> {
        match &self.server_name {
            Some(name) => Ok(name.clone()),
            None => host_name(authority),
        }
    }
}

/// The replica's own host as a TLS server name: a DNS name, or an IP address.
fn host_name(authority: &Authority) -> Result<ServerName<'static>, std::io::Error> {
    // `[::1]` is a host in an authority, `::1` an address to ServerName.
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("replica host {host:?} is no TLS server name ({e}); set tls.server_name"),
        )
    })
}

impl watch::Reload for ClientTls {
    type Error = TlsError;

    fn files(&self) -> Vec<PathBuf> {
        [
            &self.config.ca,
            &self.config.client_cert,
            &self.config.client_key,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }

    fn reload(&self) -> Result<(), TlsError> {
        let client = Arc::new(client_config(&self.prefix, &self.config, self.protocol)?);
        *self.client.write().unwrap_or_else(|p| p.into_inner()) = client;
        tracing::info!(what = self.prefix, "TLS certificates reloaded");
        Ok(())
    }

    fn what(&self) -> &str {
        &self.prefix
    }
}

/// The rustls client config for `config`; `prefix` names the table in errors.
fn client_config(
    prefix: &str,
    config: &UpstreamTlsConfig,
    protocol: UpstreamProtocol,
) -> Result<ClientConfig, TlsError> {
    let roots = roots(prefix, config)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Invalid {
            key: prefix.to_string(),
            message: e.to_string(),
        })?
        .with_root_certificates(roots);
    let mut client = match (&config.client_cert, &config.client_key) {
        (Some(cert), Some(key)) => {
            let cert_key = format!("{prefix}.client_cert");
            let key_key = format!("{prefix}.client_key");
            let certified = certified_key(
                PemFile {
                    key: &cert_key,
                    path: cert,
                },
                PemFile {
                    key: &key_key,
                    path: key,
                },
            )?;
            builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(certified)))
        }
        _ => builder.with_no_client_auth(),
    };
    client.alpn_protocols = match protocol {
        UpstreamProtocol::Http1 => vec![ALPN_HTTP1.to_vec()],
        UpstreamProtocol::Http2 => vec![ALPN_H2.to_vec()],
    };
    Ok(client)
}

/// The `ca` bundle's certificates, or the system's trust store without one.
fn roots(prefix: &str, config: &UpstreamTlsConfig) -> Result<RootCertStore, TlsError> {
    let key = format!("{prefix}.ca");
    if let Some(path) = &config.ca {
        return PemFile { key: &key, path }.roots();
    }
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(TlsError::Invalid {
            key,
            message: format!(
                "not set, and the system's trust store has no certificate{}; name a PEM bundle",
                match errors.is_empty() {
                    true => String::new(),
                    false => format!(" ({})", errors.join("; ")),
                }
            ),
        });
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_host_is_the_default_server_name() {
        let name = |text: &str| host_name(&text.parse::<Authority>().unwrap());
        assert_eq!(
            name("replica.test:443").unwrap(),
            ServerName::try_from("replica.test").unwrap()
        );
        assert_eq!(
            name("[::1]:443").unwrap(),
            ServerName::try_from("::1").unwrap()
        );
        assert_eq!(
            name("127.0.0.1:8443").unwrap(),
            ServerName::try_from("127.0.0.1").unwrap()
        );
    }
}
