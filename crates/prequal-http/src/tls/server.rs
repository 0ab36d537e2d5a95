//! A rustls server config as every Prequal listener wants it: ALPN `h2` and `http/1.1` on one
//! port, and client certificates required when a client CA is given.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::{ResolvesServerCert, WebPkiClientVerifier};

use super::alpn::{ALPN_H2, ALPN_HTTP1};
use super::error::TlsError;
use super::pem::PemFile;
use super::provider::provider;

/// A server config serving the certificates `certs` picks, offering ALPN `h2` then
/// `http/1.1`. With `client_ca`, a PEM bundle, every client must present a certificate signed
/// by one of its authorities (mutual TLS); a client without one fails the handshake. `what`
/// names the whole setting in the rare error that no single file explains.
pub fn server_config(
    what: &str,
    certs: Arc<dyn ResolvesServerCert>,
    client_ca: Option<PemFile<'_>>,
) -> Result<ServerConfig, TlsError> {
    let invalid = |key: &str, message: String| TlsError::Invalid {
        key: key.to_string(),
        message,
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(what, e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(file) => {
            let roots = Arc::new(file.roots()?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| invalid(file.key, format!("{}: {e}", file.path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
    Ok(config)
}
