//! Opening a connection to a replica: TCP, then TLS when the cluster has `[clusters.NAME.tls]`.
//!
//! Both connection pools ([`crate::upstream`]: the HTTP/1.1 pool and the HTTP/2 client) and so
//! both requests and probes open their connections here, which is what makes probes use the
//! cluster's transport. The whole of it, TCP connect and TLS handshake, is bounded by
//! `connect_timeout`; any failure is an `io::Error` that the pools report as a connect failure
//! (nothing reached the replica). Addresses without a port get port 80.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::Authority;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls::ClientTls;

/// The port of an address given without one.
const DEFAULT_PORT: u16 = 80;

/// Opens connections to one cluster's replicas.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    timeout: Duration,
    tls: Option<Arc<ClientTls>>,
    /// Counts the TCP connections opened.
    opened: Counter,
}

impl Connector {
    /// Connections within `timeout`, over TLS when `tls` is given.
    pub(crate) fn new(timeout: Duration, tls: Option<Arc<ClientTls>>, opened: Counter) -> Self {
        Connector {
            timeout,
            tls,
            opened,
        }
    }

    /// `https` over TLS, else `http`: the `:scheme` of HTTP/2 requests.
    pub(crate) fn scheme(&self) -> http::uri::Scheme {
        match self.tls {
            Some(_) => http::uri::Scheme::HTTPS,
            None => http::uri::Scheme::HTTP,
        }
    }

    /// A connection to `authority`, ready for HTTP.
    pub(crate) async fn connect(&self, authority: &Authority) -> io::Result<Stream> {
        match tokio::time::timeout(self.timeout, self.open(authority)).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")),
        }
    }

    async fn open(&self, authority: &Authority) -> io::Result<Stream> {
        let port = authority.port_u16().unwrap_or(DEFAULT_PORT);
        // A replica whose host is no valid TLS server name fails before any connection opens.
        let name = match &self.tls {
            Some(tls) => Some(tls.server_name(authority)?),
            None => None,
        };
        let tcp = TcpStream::connect((authority.host(), port)).await?;
        self.opened.inc();
        let _ = tcp.set_nodelay(true);
        let (Some(tls), Some(name)) = (&self.tls, name) else {
            return Ok(Stream::Plain(tcp));
        };
        let stream = tls.connector().connect(name, tcp).await?;
        Ok(Stream::Tls(Box::new(stream)))
    }
}

/// The connector of hyper-util's pooled client (the HTTP/2 pools): it is handed the request's
/// URI, whose authority is the replica's.
impl tower::Service<http::Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            let authority = uri.into_parts().authority.ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "no replica address in the URI")
            })?;
            Ok(TokioIo::new(connector.connect(&authority).await?))
        })
    }
}

/// A connection to a replica, plain or TLS.
#[derive(Debug)]
pub(crate) enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP (boxed: the session state is a few hundred bytes).
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        let connected = Connected::new();
        match self {
            Stream::Plain(_) => connected,
            Stream::Tls(tls) => match tls.get_ref().1.alpn_protocol() {
                Some(prequal_http::tls::ALPN_H2) => connected.negotiated_h2(),
                _ => connected,
            },
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}
