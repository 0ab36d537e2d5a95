//! The one crypto provider every TLS config here and in the proxy is built with ([`provider`]).

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

/// The crypto provider of every TLS config built here and in the proxy: rustls with `ring`.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}
