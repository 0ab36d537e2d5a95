//! Reading PEM files into what rustls needs, with errors that name the setting and the file.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::error::TlsError;
use super::provider::provider;

/// One file, and the setting that names it (a dotted config key or a flag), for messages.
#[derive(Debug, Clone, Copy)]
pub struct PemFile<'a> {
    /// The setting, for example `server.tls.cert` or `--tls-cert`.
    pub key: &'a str,
    /// The file.
    pub path: &'a Path,
}

impl PemFile<'_> {
    fn read(&self) -> Result<Vec<u8>, TlsError> {
        std::fs::read(self.path).map_err(|source| TlsError::Read {
            key: self.key.to_string(),
            path: self.path.to_path_buf(),
            source,
        })
    }

    fn content(&self, message: impl Into<String>) -> TlsError {
        TlsError::Content {
            key: self.key.to_string(),
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }

    /// Every `CERTIFICATE` section, in order; at least one.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let bytes = self.read()?;
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, pem::Error>>()
            .map_err(|e| self.content(describe(&e)))?;
        if certs.is_empty() {
            return Err(self.content("holds no PEM `CERTIFICATE` section"));
        }
        Ok(certs)
    }

    /// The first private key (PKCS#8, PKCS#1 or SEC1).
    pub fn private_key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        let bytes = self.read()?;
        PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
            pem::Error::NoItemsFound => self.content("holds no PEM private key section"),
            other => self.content(describe(&other)),
        })
    }

    /// A CA bundle: every certificate in it, as trust anchors; at least one.
    pub fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        for cert in self.certificates()? {
            roots
                .add(cert)
                .map_err(|e| self.content(format!("not a usable CA certificate: {e}")))?;
        }
        Ok(roots)
    }
}

/// A certificate chain and its key, loaded and checked to belong together.
pub fn certified_key(cert: PemFile<'_>, key: PemFile<'_>) -> Result<CertifiedKey, TlsError> {
    let chain = cert.certificates()?;
    let private = key.private_key()?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| {
        let cert = cert.path.display();
        key.content(match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                format!("is not the key of the certificate in {cert}")
            }
            other => format!("not a usable key for the certificate in {cert}: {other}"),
        })
    })
}

/// A PEM parse error in words (the library's own text shows bytes as numbers).
fn describe(error: &pem::Error) -> String {
    match error {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "not valid PEM: a `{}` section has no END line",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => format!(
            "not valid PEM: bad section start `{}`",
            String::from_utf8_lossy(line)
        ),
        other => format!("not valid PEM: {other}"),
    }
}
