//! TLS on both sides of the proxy, with rustls (its `ring` provider; no OpenSSL).
//!
//! **Downstream** (`[server.tls]`): the listener terminates TLS. The certificate a client gets
//! is chosen during the handshake from the name it sends as SNI: an `[[server.tls.sni]]` entry
//! whose `server_name` matches exactly, else one whose `*.` wildcard matches the first label,
//! else the default `cert`. The listener offers ALPN `h2` and `http/1.1` on the same port, and
//! the connection is then served as HTTP/2 or HTTP/1.1 exactly as a plain one is
//! ([`crate::server`]). A client must complete its handshake within `handshake_timeout`.
//!
//! **Upstream** (`[clusters.NAME.tls]`): connections to the replicas, for requests and probes
//! alike, are TLS. The server name sent as SNI and verified is `server_name`, or each replica's
//! own host; the roots are the `ca` bundle, or the system's trust store; `client_cert` and
//! `client_key` make it mutual TLS (a sidecar that admits only the proxy). ALPN offers the
//! cluster's `protocol` alone (`h2` or `http/1.1`), since the proxy speaks it with prior
//! knowledge anyway. The TLS handshake counts towards `connect_timeout`, and a failed
//! handshake is a connect failure: nothing reached the replica, so it is retried elsewhere.
//!
//! **Reload.** Certificate, key and CA files are polled every `watch_interval` (modification
//! time and size, as the config file and `upstreams_file` are). When one changes, every file of
//! that table is read again and the new certificates are swapped in behind a lock that a
//! handshake holds only to clone an `Arc`: connections already open keep the keys they were
//! made with, and the next handshake uses the new ones. Files that cannot be read or do not
//! match (a key written before its certificate, say) leave the certificates in use in place,
//! are logged with the file's name, and are tried again at the next poll. Write the new files
//! beside the old ones and rename them over, so that a poll never sees half a file.
//!
//! Every file error names the config key and the path, for example
//! `server.tls.cert: cannot read /etc/prequal/cert.pem: No such file or directory`.
//!
//! What does not depend on the proxy's config (reading PEM files, the server config with its
//! ALPN, the bounded handshake, the file watch) lives in `prequal_http::tls`, where
//! `prequal sidecar` uses it too.

pub mod config;
pub(crate) mod downstream;
pub(crate) mod upstream;

pub use self::config::{ServerTlsConfig, SniCertConfig, UpstreamTlsConfig};
pub use self::downstream::ServerTls;
pub use self::upstream::ClientTls;
/// Why certificates or keys could not be loaded; the message names the config key and the
/// file. Shared with the sidecar, whose messages name its flags instead.
pub use prequal_http::tls::TlsError;
