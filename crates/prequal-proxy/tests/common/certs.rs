//! Certificates made in the test (rcgen) and a directory for their files, for the TLS tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

/// rustls with `ring`, for the test's own clients and replicas.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client config trusting `ca`, presenting `client`'s certificate when given, offering
/// `alpn`.
pub fn client_config(ca: &Ca, client: Option<&Leaf>, alpn: &[u8]) -> rustls::ClientConfig {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(ca.roots());
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(leaf) => {
            let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
            builder
                .with_client_auth_cert(vec![leaf.der.clone()], key)
                .unwrap()
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// A certificate authority made for one test.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
    pub der: CertificateDer<'static>,
}

/// A certificate and its key, signed by a [`Ca`].
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Leaf {
        self.leaf(names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate (for mutual TLS).
    pub fn client(&self, name: &str) -> Leaf {
        self.leaf(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, &names[0]);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        roots
    }
}

/// A directory of its own for one test's files, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(test: &str) -> Dir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("prequal-tls-{}-{test}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    /// Writes `text` to `name` as a replacement does: a new file renamed over the old one.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        let temporary = self.0.join(format!(".{name}.new"));
        std::fs::write(&temporary, text).unwrap();
        std::fs::rename(&temporary, &path).unwrap();
        path
    }

    /// Writes a leaf's certificate and key as `NAME.pem` and `NAME.key`.
    pub fn leaf(&self, name: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
        let cert = self.write(&format!("{name}.pem"), &leaf.cert_pem);
        let key = self.write(&format!("{name}.key"), &leaf.key_pem);
        (cert, key)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// TOML for a path.
pub fn toml_path(path: &Path) -> String {
    toml::Value::String(path.display().to_string()).to_string()
}
