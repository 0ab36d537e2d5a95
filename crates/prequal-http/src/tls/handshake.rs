//! The server side of a TLS handshake, bounded in time.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Completes the handshake of a client at `remote` within `limit`. A client that fails it (no
/// certificate where one is required, an unknown CA, no common protocol) or takes longer is
/// logged at debug level and gets `None`: such failures are the client's, and common enough
/// (port scanners, health checks speaking plain TCP) not to be warnings.
pub async fn handshake<IO>(
    acceptor: TlsAcceptor,
    stream: IO,
    limit: Duration,
    remote: SocketAddr,
) -> Option<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(limit, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tracing::debug!(%remote, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%remote, ?limit, "TLS handshake timed out");
            None
        }
    }
}

/// The connection builder for a finished handshake: HTTP/2 only when the client negotiated
/// `h2` by ALPN, HTTP/1.1 only when it negotiated `http/1.1`, and `builder` as it is (the first
/// bytes decide) when it offered no ALPN.
pub fn builder_for_alpn<E: Clone, IO>(
    builder: &hyper_util::server::conn::auto::Builder<E>,
    stream: &TlsStream<IO>,
) -> hyper_util::server::conn::auto::Builder<E> {
    let builder = builder.clone();
    match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => builder.http2_only(),
        Some(b"http/1.1") => builder.http1_only(),
        _ => builder,
    }
}
