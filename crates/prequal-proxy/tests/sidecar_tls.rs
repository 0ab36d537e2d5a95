//! The proxy and the sidecar's TLS over mutual TLS, on loopback, with certificates made in the
//! test: replicas served by the listener TLS `prequal sidecar --tls-cert` serves with
//! (`prequal_http::tls::ReplicaTls` and `prequal_http::serve_tls`) that admit only clients with
//! a certificate from one CA; a proxy with that client certificate reaches them for requests
//! and probes over HTTP/1.1 and HTTP/2; clients without it are refused; the certificate and
//! client CA reload on file change; bad files are errors naming the flag and the path.
//!
//! The replicas answer requests and probes themselves, so this test needs nothing of
//! prequal-server: the sidecar's forwarding and probe layer behind this same TLS are tested
//! end to end through the `prequal sidecar` binary (crates/prequal/tests/replica_tools.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::certs::*;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prequal_http::tls::{ReplicaTls, ReplicaTlsConfig};
use rustls::pki_types::{CertificateDer, ServerName};

/// Bound on every network step of a test.
const GUARD: Duration = Duration::from_secs(10);

/// A replica on 127.0.0.1 behind the sidecar's listener TLS; stops when dropped.
struct TlsReplica {
    addr: SocketAddr,
    tls: Arc<ReplicaTls>,
    backend: Backend,
}

impl TlsReplica {
    async fn start(config: &ReplicaTlsConfig) -> TlsReplica {
        let (tls, watch) = ReplicaTls::load(config).unwrap();
        tokio::spawn(watch);
        let backend = Backend::start_replica_tls(Arc::clone(&tls)).await;
        TlsReplica {
            addr: backend.addr,
            tls,
            backend,
        }
    }

    fn hits(&self) -> u64 {
        self.backend.hits()
    }
}

/// The sidecar's files: its certificate (for 127.0.0.1) and key, and the client CA bundle.
struct SidecarFiles {
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    client_ca: std::path::PathBuf,
}

impl SidecarFiles {
    fn write(dir: &Dir, name: &str, server: &Leaf, clients: &Ca) -> SidecarFiles {
        let (cert, key) = dir.leaf(name, server);
        let client_ca = dir.write(&format!("{name}-clients.pem"), &clients.pem);
        SidecarFiles {
            cert,
            key,
            client_ca,
        }
    }

    /// Checked for change every 50 ms.
    fn config(&self) -> ReplicaTlsConfig {
        let mut config = ReplicaTlsConfig::new(&self.cert, &self.key).client_ca(&self.client_ca);
        config.watch_interval = Duration::from_millis(50);
        config
    }
}

/// What one exchange over TLS came back with.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
    alpn: Option<Vec<u8>>,
    peer: CertificateDer<'static>,
}

/// Connects to `addr` trusting `ca`, presenting `client` (or no certificate), offering only
/// `proto` by ALPN, and GETs `path`. Every failure on the way is an `Err` with its reason: in
/// TLS 1.3 a server refuses a client certificate after the client's side of the handshake is
/// done, so a refusal may show only when the request is sent.
async fn get_over_tls(
    addr: SocketAddr,
    ca: &Ca,
    client: Option<&Leaf>,
    proto: Proto,
    path: &str,
) -> Result<Answer, String> {
    let alpn: &[u8] = match proto {
        Proto::H1 => b"http/1.1",
        Proto::H2 => b"h2",
    };
    let config = client_config(ca, client, alpn);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (_, session) = tls.get_ref();
        let peer = session.peer_certificates().unwrap()[0].clone();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let response = send(TokioIo::new(tls), proto, path).await?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
            alpn,
            peer,
        })
    };
    tokio::time::timeout(GUARD, exchange)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

/// One GET over an open connection, as HTTP/1.1 or HTTP/2.
async fn send<IO>(
    io: TokioIo<IO>,
    proto: Proto,
    path: &str,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let empty = || Full::new(Bytes::new());
    match proto {
        Proto::H1 => {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("http1 handshake: {e}"))?;
            tokio::spawn(conn);
            let request = Request::get(path)
                .header(http::header::HOST, "127.0.0.1")
                .body(empty())
                .unwrap();
            sender
                .send_request(request)
                .await
                .map_err(|e| format!("request: {e}"))
        }
        Proto::H2 => {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(|e| format!("h2 handshake: {e}"))?;
            tokio::spawn(conn);
            let request = Request::get(format!("https://127.0.0.1{path}"))
                .body(empty())
                .unwrap();
            sender
                .send_request(request)
                .await
                .map_err(|e| format!("request: {e}"))
        }
    }
}

/// A proxy config with one cluster of `sidecars`, spoken to over TLS with `tls_lines`.
fn proxy_config(sidecars: &[&TlsReplica], proto: Proto, tls_lines: &str) -> String {
    let upstreams: Vec<String> = sidecars.iter().map(|s| format!("\"{}\"", s.addr)).collect();
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout = \"5s\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams = [{}]\npolicy = {PREQUAL}\nprotocol = \"{}\"\n{NO_HEDGING}\n\
         [clusters.test.tls]\n{tls_lines}",
        upstreams.join(", "),
        proto.toml()
    )
}

/// `ca`, and a client certificate when given, as `[clusters.test.tls]` lines.
fn tls_lines(ca: &Path, client: Option<(&Path, &Path)>) -> String {
    let mut text = format!("ca = {}\n", toml_path(ca));
    if let Some((cert, key)) = client {
        text += &format!(
            "client_cert = {}\nclient_key = {}\n",
            toml_path(cert),
            toml_path(key)
        );
    }
    text
}

// --- Proxy to sidecar --------------------------------------------------------------------

async fn proxy_reaches_sidecars_over_mutual_tls(proto: Proto) {
    let dir = Dir::new("sidecar-mtls");
    let sidecars_ca = Ca::new("sidecars CA");
    let clients_ca = Ca::new("clients CA");
    let files = SidecarFiles::write(
        &dir,
        "sidecar",
        &sidecars_ca.server(&["127.0.0.1"]),
        &clients_ca,
    );
    let ca_path = dir.write("sidecars-ca.pem", &sidecars_ca.pem);
    let (client_cert, client_key) = dir.leaf("proxy-client", &clients_ca.client("proxy"));
    let sidecars = [
        TlsReplica::start(&files.config()).await,
        TlsReplica::start(&files.config()).await,
    ];
    let text = proxy_config(
        &[&sidecars[0], &sidecars[1]],
        proto,
        &tls_lines(&ca_path, Some((&client_cert, &client_key))),
    );
    let proxy = start_proxy(&text).await;
    let http = client(proto);
    for _ in 0..20 {
        assert_eq!(get(&http, proxy.addr, "/work").await, (200, "ok".into()));
    }
    // Probes reach the sidecars through the same TLS, and their replies come back.
    let mut probed = 0.0;
    for _ in 0..100 {
        let text = get(&client(Proto::H1), proxy.admin, "/metrics").await.1;
        probed = metric_sum(&text, &["prequal_proxy_probes_total", "result=\"ok\""]);
        if probed > 0.0 {
            break;
        }
        get(&http, proxy.addr, "/work").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(probed > 0.0, "probes over mutual TLS were answered");
    let hits: u64 = sidecars.iter().map(TlsReplica::hits).sum();
    assert!(hits >= 20, "{hits}");

    // Without a client certificate, the replicas refuse the proxy: nothing gets through.
    let text = proxy_config(
        &[&sidecars[0], &sidecars[1]],
        proto,
        &tls_lines(&ca_path, None),
    );
    let refused = start_proxy(&text).await;
    assert_eq!(get(&http, refused.addr, "/work").await.0, 502);
    assert_eq!(sidecars.iter().map(TlsReplica::hits).sum::<u64>(), hits);
}

over_h1_and_h2!(
    proxy_to_sidecar_over,
    proxy_reaches_sidecars_over_mutual_tls
);

// --- The sidecar's own checks ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_admits_only_clients_of_its_ca() {
    let dir = Dir::new("sidecar-clients");
    let sidecars_ca = Ca::new("sidecars CA");
    let clients_ca = Ca::new("clients CA");
    let stranger = Ca::new("another CA");
    let files = SidecarFiles::write(
        &dir,
        "sidecar",
        &sidecars_ca.server(&["127.0.0.1"]),
        &clients_ca,
    );
    let sidecar = TlsReplica::start(&files.config()).await;
    let member = clients_ca.client("proxy");
    for proto in [Proto::H1, Proto::H2] {
        let answer = get_over_tls(sidecar.addr, &sidecars_ca, Some(&member), proto, "/work")
            .await
            .unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok"));
        let expected: &[u8] = match proto {
            Proto::H1 => b"http/1.1",
            Proto::H2 => b"h2",
        };
        assert_eq!(answer.alpn.as_deref(), Some(expected));
        // Probes are answered over the same TLS.
        let probe = get_over_tls(
            sidecar.addr,
            &sidecars_ca,
            Some(&member),
            proto,
            "/.prequal/probe?v=1",
        )
        .await
        .unwrap();
        assert_eq!(probe.status, 200);
        prequal_http::protocol::parse_reply(probe.body.as_bytes()).unwrap();
    }
    let outsiders = [
        (None, "no certificate"),
        (Some(stranger.client("proxy")), "another CA"),
    ];
    for (leaf, what) in &outsiders {
        for proto in [Proto::H1, Proto::H2] {
            let error = get_over_tls(sidecar.addr, &sidecars_ca, leaf.as_ref(), proto, "/work")
                .await
                .expect_err(what);
            assert!(
                !error.contains("timed out"),
                "{what}: refused, not hung: {error}"
            );
        }
    }
    assert_eq!(sidecar.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_certificates_and_client_ca_reload_on_change() {
    let dir = Dir::new("sidecar-reload");
    let sidecars_ca = Ca::new("sidecars CA");
    let clients_ca = Ca::new("clients CA");
    let later_ca = Ca::new("later clients CA");
    let first = sidecars_ca.server(&["127.0.0.1"]);
    let files = SidecarFiles::write(&dir, "sidecar", &first, &clients_ca);
    let sidecar = TlsReplica::start(&files.config()).await;
    let member = clients_ca.client("proxy");
    let newcomer = later_ca.client("proxy");
    let answer = get_over_tls(
        sidecar.addr,
        &sidecars_ca,
        Some(&member),
        Proto::H1,
        "/work",
    )
    .await
    .unwrap();
    assert_eq!(answer.peer, first.der);
    assert!(
        get_over_tls(
            sidecar.addr,
            &sidecars_ca,
            Some(&newcomer),
            Proto::H1,
            "/work"
        )
        .await
        .is_err()
    );

    // A new certificate (one more name, so its size differs for a coarse file clock) and a
    // bundle with both client CAs.
    let second = sidecars_ca.server(&["127.0.0.1", "sidecar.test"]);
    dir.leaf("sidecar", &second);
    dir.write(
        "sidecar-clients.pem",
        &format!("{}{}", clients_ca.pem, later_ca.pem),
    );
    let mut reloaded = false;
    for _ in 0..200 {
        let answer = get_over_tls(
            sidecar.addr,
            &sidecars_ca,
            Some(&newcomer),
            Proto::H2,
            "/work",
        )
        .await;
        if let Ok(answer) = answer {
            assert_eq!(answer.status, 200);
            reloaded = answer.peer == second.der;
            if reloaded {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        reloaded,
        "after a poll, the new certificate is served and the new CA admitted"
    );

    // A broken key is refused with the flag and the path; what is in force stays.
    let broken = dir.write("sidecar.key", "not a key\n");
    let error = sidecar.tls.reload().unwrap_err().to_string();
    assert!(error.contains("--tls-key"), "{error}");
    assert!(error.contains(&broken.display().to_string()), "{error}");
    let answer = get_over_tls(
        sidecar.addr,
        &sidecars_ca,
        Some(&member),
        Proto::H1,
        "/work",
    )
    .await
    .unwrap();
    assert_eq!((answer.status, &answer.peer), (200, &second.der));
}

#[tokio::test]
async fn bad_or_missing_sidecar_files_are_named() {
    let dir = Dir::new("sidecar-errors");
    let ca = Ca::new("test CA");
    let (cert, key) = dir.leaf("sidecar", &ca.server(&["127.0.0.1"]));
    let (_, other_key) = dir.leaf("other", &ca.server(&["other.test"]));
    let bundle = dir.write("clients.pem", &ca.pem);
    let missing = dir.0.join("missing.pem");
    let garbage = dir.write("garbage.pem", "-----BEGIN CERTIFICATE-----\n!!!\n");
    let config = |cert: &Path, key: &Path, client_ca: &Path| {
        ReplicaTlsConfig::new(cert, key).client_ca(client_ca)
    };
    let cases = [
        (config(&missing, &key, &bundle), "--tls-cert", &missing),
        (config(&garbage, &key, &bundle), "--tls-cert", &garbage),
        (config(&cert, &missing, &bundle), "--tls-key", &missing),
        (config(&cert, &cert, &bundle), "--tls-key", &cert),
        (config(&cert, &other_key, &bundle), "--tls-key", &other_key),
        (config(&cert, &key, &missing), "--tls-client-ca", &missing),
        (config(&cert, &key, &key), "--tls-client-ca", &key),
    ];
    for (config, flag, path) in cases {
        let error = ReplicaTls::load(&config).unwrap_err().to_string();
        assert!(error.contains(flag), "{flag}: {error}");
        assert!(
            error.contains(&path.display().to_string()),
            "{flag}: {error}"
        );
    }
    assert!(ReplicaTls::load(&config(&cert, &key, &bundle)).is_ok());
}
