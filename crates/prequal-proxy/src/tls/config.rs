//! The TLS tables of the configuration: `[server.tls]` (the listener terminates TLS) and
//! `[clusters.NAME.tls]` (the proxy speaks TLS to a cluster's replicas). Both are off when
//! absent. Their keys and defaults are listed in `docs/config.md`; this module only checks
//! what can be checked without reading files (names, pairs of keys, ranges). The files
//! themselves are read when the listener or the cluster is built, and an unreadable one is an
//! error naming its key and path (see [`super::TlsError`]).

use std::path::PathBuf;
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};

// The same defaults as the sidecar's TLS.
use prequal_http::tls::{DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_WATCH_INTERVAL};

fn default_watch_interval() -> Duration {
    DEFAULT_WATCH_INTERVAL
}

fn default_handshake_timeout() -> Duration {
    DEFAULT_HANDSHAKE_TIMEOUT
}

/// `[server.tls]`: TLS termination on the data-plane listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsConfig {
    /// The certificate chain (PEM), leaf first: served to clients whose SNI names no other
    /// certificate, and to clients that send no SNI. Required.
    pub cert: PathBuf,
    /// The private key of `cert` (PEM: PKCS#8, PKCS#1 or SEC1). Required.
    pub key: PathBuf,
    /// More certificates, each served to clients that ask for its `server_name`.
    #[serde(default)]
    pub sni: Vec<SniCertConfig>,
    /// Certificate authorities (a PEM bundle) whose client certificates the listener demands:
    /// with it, a client without a certificate signed by one of them is refused at the
    /// handshake (mutual TLS). Read when the listener starts; a change needs a restart.
    /// Default none: clients are not asked for certificates.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// How often the certificate and key files are checked for change; `0s` turns the check
    /// off. Default `5s`.
    #[serde(default = "default_watch_interval", with = "humantime_serde")]
    pub watch_interval: Duration,
    /// How long a client may take to complete the handshake. Default `10s`.
    #[serde(default = "default_handshake_timeout", with = "humantime_serde")]
    pub handshake_timeout: Duration,
}

/// `[[server.tls.sni]]`: a certificate for one server name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniCertConfig {
    /// The name clients ask for: `api.example.com`, or `*.example.com` for any one label in
    /// its place. Matched case-insensitively; an exact name wins over a wildcard. Required.
    pub server_name: String,
    /// The certificate chain (PEM), leaf first. Required.
    pub cert: PathBuf,
    /// Its private key (PEM). Required.
    pub key: PathBuf,
}

/// `[clusters.NAME.tls]`: TLS to the cluster's replicas (and their probes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// The name sent as SNI and checked against the replicas' certificates. Default: each
    /// replica's own host (a DNS name, or an IP address checked against the certificate's IP
    /// addresses).
    #[serde(default)]
    pub server_name: Option<String>,
    /// The certificate authorities to trust (a PEM bundle). Default: the system's trust store.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A client certificate chain (PEM) presented to the replicas (mutual TLS). Needs
    /// `client_key`. Default none.
    #[serde(default)]
    pub client_cert: Option<PathBuf>,
    /// The private key of `client_cert` (PEM). Default none.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
    /// How often `ca`, `client_cert` and `client_key` are checked for change; `0s` turns the
    /// check off. Default `5s`.
    #[serde(default = "default_watch_interval", with = "humantime_serde")]
    pub watch_interval: Duration,
}

impl Default for UpstreamTlsConfig {
    fn default() -> Self {
        UpstreamTlsConfig {
            server_name: None,
            ca: None,
            client_cert: None,
            client_key: None,
            watch_interval: DEFAULT_WATCH_INTERVAL,
        }
    }
}

impl ServerTlsConfig {
    /// A config serving `cert` and `key`, every other key at its default.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        ServerTlsConfig {
            cert: cert.into(),
            key: key.into(),
            sni: Vec::new(),
            client_ca: None,
            watch_interval: DEFAULT_WATCH_INTERVAL,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// Checks names and ranges; the error is `(key below server.tls, message)`.
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        if self.handshake_timeout.is_zero() {
            return Err((
                "handshake_timeout".into(),
                "must be greater than zero".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, entry) in self.sni.iter().enumerate() {
            let key = format!("sni[{i}].server_name");
            check_sni_name(&entry.server_name).map_err(|m| (key.clone(), m))?;
            if !seen.insert(entry.server_name.to_ascii_lowercase()) {
                return Err((key, format!("repeats {:?}", entry.server_name)));
            }
        }
        Ok(())
    }
}

impl UpstreamTlsConfig {
    /// Checks names and pairs of keys; the error is `(key below the cluster, message)`.
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        if let Some(name) = &self.server_name
            && ServerName::try_from(name.as_str()).is_err()
        {
            return Err((
                "tls.server_name".into(),
                format!("is {name:?}; expected a DNS name or an IP address"),
            ));
        }
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => Err((
                "tls.client_key".into(),
                "is required with `client_cert`".into(),
            )),
            (None, Some(_)) => Err((
                "tls.client_cert".into(),
                "is required with `client_key`".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// An SNI name is a DNS name, optionally with `*.` in place of its first label.
fn check_sni_name(name: &str) -> Result<(), String> {
    let bare = name.strip_prefix("*.").unwrap_or(name);
    match ServerName::try_from(bare) {
        Ok(ServerName::DnsName(_)) if !bare.contains('*') => Ok(()),
        _ => Err(format!(
            "is {name:?}; expected a DNS name such as `api.example.com` or `*.example.com`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_names_are_dns_names_or_one_leading_wildcard() {
        assert!(check_sni_name("api.example.com").is_ok());
        assert!(check_sni_name("*.example.com").is_ok());
        assert!(check_sni_name("a.*.example.com").is_err());
        assert!(check_sni_name("127.0.0.1").is_err());
        assert!(check_sni_name("").is_err());
    }

    #[test]
    fn client_cert_and_key_come_together() {
        let half = UpstreamTlsConfig {
            client_cert: Some("c.pem".into()),
            ..UpstreamTlsConfig::default()
        };
        assert_eq!(half.validate().unwrap_err().0, "tls.client_key");
        let other = UpstreamTlsConfig {
            client_key: Some("k.pem".into()),
            ..UpstreamTlsConfig::default()
        };
        assert_eq!(other.validate().unwrap_err().0, "tls.client_cert");
        let bad_name = UpstreamTlsConfig {
            server_name: Some("not a name".into()),
            ..UpstreamTlsConfig::default()
        };
        assert_eq!(bad_name.validate().unwrap_err().0, "tls.server_name");
    }

    #[test]
    fn repeated_sni_names_are_refused() {
        let entry = |name: &str| SniCertConfig {
            server_name: name.into(),
            cert: "c.pem".into(),
            key: "k.pem".into(),
        };
        let mut config = ServerTlsConfig::new("c.pem", "k.pem");
        config.sni = vec![entry("a.example"), entry("A.example")];
        assert_eq!(config.validate().unwrap_err().0, "sni[1].server_name");
    }
}
