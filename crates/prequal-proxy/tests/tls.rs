//! TLS end to end, over loopback, with certificates made in the test (rcgen): termination with
//! ALPN `h2` and `http/1.1` on one port, SNI choosing among certificates, upstream TLS with a
//! custom CA and a client certificate (requests and probes), reload of changed certificate
//! files without dropping connections, and errors that name the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::certs::*;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prequal_proxy::{Proxy, ProxyConfig};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, ServerName};

/// Bound on every network step of a test.
const GUARD: Duration = Duration::from_secs(10);

/// `[server.tls]` serving `cert` and `key`, checked for change every 50 ms.
fn server_tls(cert: &Path, key: &Path) -> String {
    format!(
        "\n[server.tls]\ncert = {}\nkey = {}\nwatch_interval = \"50ms\"\n",
        toml_path(cert),
        toml_path(key)
    )
}

/// One client connection over TLS, as HTTP/1.1 or HTTP/2.
struct Conn {
    sender: Sender,
    /// The certificate the proxy presented.
    peer: CertificateDer<'static>,
    /// The protocol ALPN settled on.
    alpn: Option<Vec<u8>>,
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    /// Connects to `addr` asking for `sni` (an IP address sends no SNI), offering `alpn`,
    /// and speaks `proto` over it.
    async fn open(
        addr: SocketAddr,
        roots: RootCertStore,
        sni: &str,
        alpn: &[&[u8]],
        proto: Proto,
    ) -> Result<Conn, std::io::Error> {
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let opened = async {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            connector.connect(name, tcp).await
        };
        let tls = tokio::time::timeout(GUARD, opened)
            .await
            .expect("handshake within the guard")?;
        let (_, session) = tls.get_ref();
        let peer = session.peer_certificates().unwrap()[0].clone();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let io = TokioIo::new(tls);
        let sender = match proto {
            Proto::H1 => {
                let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
                tokio::spawn(conn);
                Sender::H1(sender)
            }
            Proto::H2 => {
                let (sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                        .await
                        .unwrap();
                tokio::spawn(conn);
                Sender::H2(sender)
            }
        };
        Ok(Conn { sender, peer, alpn })
    }

    /// Connects offering exactly `proto` by ALPN and checks that the proxy agreed to it.
    async fn with_alpn(addr: SocketAddr, roots: RootCertStore, sni: &str, proto: Proto) -> Conn {
        let alpn: &[u8] = match proto {
            Proto::H1 => b"http/1.1",
            Proto::H2 => b"h2",
        };
        let conn = Conn::open(addr, roots, sni, &[alpn], proto).await.unwrap();
        assert_eq!(conn.alpn.as_deref(), Some(alpn));
        conn
    }

    /// GET `path`: status and body.
    async fn get(&mut self, path: &str) -> (u16, String) {
        let exchange = async {
            let response = match &mut self.sender {
                Sender::H1(sender) => {
                    let request = Request::get(path)
                        .header(http::header::HOST, "proxy.test")
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    sender.ready().await.unwrap();
                    sender.send_request(request).await.unwrap()
                }
                Sender::H2(sender) => {
                    let request = Request::get(format!("https://proxy.test{path}"))
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    sender.ready().await.unwrap();
                    sender.send_request(request).await.unwrap()
                }
            };
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        tokio::time::timeout(GUARD, exchange)
            .await
            .expect("answered within the guard")
    }
}

/// A TLS replica's server config: `leaf` as its certificate, and client certificates signed by
/// `clients` demanded when given.
fn replica_tls(leaf: &Leaf, clients: Option<&Ca>) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(ca.roots()),
                provider(),
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = builder
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

async fn metrics(admin: SocketAddr) -> String {
    get(&client(Proto::H1), admin, "/metrics").await.1
}

// --- Termination -------------------------------------------------------------------------

async fn terminates_tls_with_alpn(proto: Proto) {
    let dir = Dir::new("alpn");
    let ca = Ca::new("test CA");
    let (cert, key) = dir.leaf("proxy", &ca.server(&["proxy.test"]));
    let backend = Backend::start().await;
    let text = config_text(&[&backend], proto, "\"round-robin\"", "") + &server_tls(&cert, &key);
    let proxy = start_proxy(&text).await;

    let mut conn = Conn::with_alpn(proxy.addr, ca.roots(), "proxy.test", proto).await;
    for _ in 0..3 {
        assert_eq!(conn.get("/work").await, (200, "ok".to_string()));
    }
    // The replica hears that the client came over TLS.
    let (_, headers) = conn.get("/echo-headers").await;
    assert!(headers.contains("proto=https"), "{headers}");
    assert_eq!(backend.hits(), 3);
}

over_h1_and_h2!(terminates_tls_with_alpn_over, terminates_tls_with_alpn);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_port_offers_h2_first_then_http1() {
    let dir = Dir::new("offer");
    let ca = Ca::new("test CA");
    let (cert, key) = dir.leaf("proxy", &ca.server(&["proxy.test"]));
    let backend = Backend::start().await;
    let text =
        config_text(&[&backend], Proto::H1, "\"round-robin\"", "") + &server_tls(&cert, &key);
    let proxy = start_proxy(&text).await;
    let both: &[&[u8]] = &[b"http/1.1", b"h2"];
    let mut conn = Conn::open(proxy.addr, ca.roots(), "proxy.test", both, Proto::H2)
        .await
        .unwrap();
    assert_eq!(conn.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(conn.get("/work").await.0, 200);
    // A client that offers no ALPN gets HTTP/1.1 (the auto builder reads what it sends).
    let mut conn = Conn::open(proxy.addr, ca.roots(), "proxy.test", &[], Proto::H1)
        .await
        .unwrap();
    assert_eq!(conn.alpn, None);
    assert_eq!(conn.get("/work").await.0, 200);
}

/// One GET `/work` over HTTP/1.1 and TLS to `addr`, presenting `client` when given: the status,
/// or the error (a refused client certificate may show at the handshake or at the request).
async fn get_with_client_cert(
    addr: SocketAddr,
    ca: &Ca,
    client: Option<&Leaf>,
) -> Result<u16, String> {
    let config = client_config(ca, client, b"http/1.1");
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let name = ServerName::try_from("proxy.test").unwrap();
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let request = Request::get("/work")
            .header(http::header::HOST, "proxy.test")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(response.status().as_u16())
    };
    tokio::time::timeout(GUARD, exchange)
        .await
        .expect("answered or refused within the guard")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ca_demands_a_client_certificate_it_signed() {
    let dir = Dir::new("client-ca");
    let ca = Ca::new("test CA");
    let clients = Ca::new("client CA");
    let other = Ca::new("other CA");
    let (cert, key) = dir.leaf("proxy", &ca.server(&["proxy.test"]));
    let client_ca = dir.write("clients.pem", &clients.pem);
    let backend = Backend::start().await;
    let text = config_text(&[&backend], Proto::H1, "\"round-robin\"", "")
        + &server_tls(&cert, &key)
        + &format!("client_ca = {}\n", toml_path(&client_ca));
    let proxy = start_proxy(&text).await;

    let good = clients.client("service-a");
    assert_eq!(
        get_with_client_cert(proxy.addr, &ca, Some(&good)).await,
        Ok(200)
    );
    let none = get_with_client_cert(proxy.addr, &ca, None).await;
    assert!(
        none.is_err(),
        "no client certificate must be refused: {none:?}"
    );
    let stranger = other.client("service-b");
    let wrong = get_with_client_cert(proxy.addr, &ca, Some(&stranger)).await;
    assert!(
        wrong.is_err(),
        "another CA's certificate must be refused: {wrong:?}"
    );
    assert_eq!(backend.hits(), 1);

    // A missing bundle is an error naming the key and the file.
    let missing = dir.0.join("missing.pem");
    let text = config_text(&[&backend], Proto::H1, "\"round-robin\"", "")
        + &server_tls(&cert, &key)
        + &format!("client_ca = {}\n", toml_path(&missing));
    let error = bind_error(&text).await;
    assert!(
        error.contains("server.tls.client_ca") && error.contains("missing.pem"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_picks_the_certificate() {
    let dir = Dir::new("sni");
    let ca = Ca::new("test CA");
    let default = ca.server(&["default.test", "other.test", "127.0.0.1"]);
    let api = ca.server(&["api.test"]);
    let wild = ca.server(&["*.wild.test"]);
    let (cert, key) = dir.leaf("default", &default);
    let (api_cert, api_key) = dir.leaf("api", &api);
    let (wild_cert, wild_key) = dir.leaf("wild", &wild);
    let backend = Backend::start().await;
    let sni = format!(
        "[[server.tls.sni]]\nserver_name = \"API.test\"\ncert = {}\nkey = {}\n\
         [[server.tls.sni]]\nserver_name = \"*.wild.test\"\ncert = {}\nkey = {}\n",
        toml_path(&api_cert),
        toml_path(&api_key),
        toml_path(&wild_cert),
        toml_path(&wild_key),
    );
    let text = config_text(&[&backend], Proto::H1, "\"round-robin\"", "")
        + &server_tls(&cert, &key)
        + &sni;
    let proxy = start_proxy(&text).await;
    let cases = [
        ("api.test", &api.der),
        ("a.wild.test", &wild.der),
        ("other.test", &default.der),
        // An IP address is sent as no SNI at all: the default certificate.
        ("127.0.0.1", &default.der),
    ];
    for (name, expected) in cases {
        for proto in [Proto::H1, Proto::H2] {
            let mut conn = Conn::with_alpn(proxy.addr, ca.roots(), name, proto).await;
            assert_eq!(&conn.peer, expected, "{name} over {proto:?}");
            assert_eq!(conn.get("/work").await.0, 200, "{name} over {proto:?}");
        }
    }
    // A name below the wildcard's one label is not covered by it.
    let deep = Conn::open(proxy.addr, ca.roots(), "a.b.wild.test", &[], Proto::H1).await;
    assert!(
        deep.is_err(),
        "the default certificate does not name a.b.wild.test"
    );
}

async fn drain_finishes_requests_and_closes_tls_connections(proto: Proto) {
    let dir = Dir::new("drain");
    let ca = Ca::new("test CA");
    let (cert, key) = dir.leaf("proxy", &ca.server(&["proxy.test"]));
    let backend = Backend::start().await;
    backend.set_delay_ms(300);
    // A drain limit far beyond the test's guard: only closing the connections ends it. Two
    // data-plane threads: the first connection goes to the second thread, whose runtime ends
    // with its drain, so a connection it does not watch would be cut there.
    let text = (config_text(&[&backend], proto, "\"round-robin\"", "") + &server_tls(&cert, &key))
        .replace(
            "drain_timeout = \"5s\"",
            "drain_timeout = \"1h\"\nworker_threads = 2",
        );
    let mut proxy = start_proxy(&text).await;
    let mut busy = Conn::with_alpn(proxy.addr, ca.roots(), "proxy.test", proto).await;
    let mut idle = Conn::with_alpn(proxy.addr, ca.roots(), "proxy.test", proto).await;
    assert_eq!(idle.get("/work").await.0, 200);
    let in_flight = tokio::spawn(async move { busy.get("/work").await.0 });
    for _ in 0..400 {
        if backend.in_flight.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.shutdown();
    assert_eq!(
        in_flight.await.unwrap(),
        200,
        "the request in flight finishes"
    );
    tokio::time::timeout(GUARD, &mut proxy.task)
        .await
        .expect("the drain closed the TLS connections")
        .unwrap();
}

over_h1_and_h2!(
    drain_over,
    drain_finishes_requests_and_closes_tls_connections
);

// --- Reload ------------------------------------------------------------------------------

async fn certificates_reload_without_dropping_connections(proto: Proto) {
    let dir = Dir::new("reload");
    let ca = Ca::new("test CA");
    let first = ca.server(&["proxy.test"]);
    let (cert, key) = dir.leaf("proxy", &first);
    let backend = Backend::start().await;
    let text = config_text(&[&backend], proto, "\"round-robin\"", "") + &server_tls(&cert, &key);
    let proxy = start_proxy(&text).await;
    let mut old = Conn::with_alpn(proxy.addr, ca.roots(), "proxy.test", proto).await;
    assert_eq!(old.peer, first.der);
    assert_eq!(old.get("/work").await.0, 200);

    // The new certificate names one more host, so even a coarse file clock sees the change
    // (its size differs).
    let second = ca.server(&["proxy.test", "www.proxy.test"]);
    dir.leaf("proxy", &second);
    let mut seen = None;
    for _ in 0..200 {
        let conn = Conn::with_alpn(proxy.addr, ca.roots(), "proxy.test", proto).await;
        if conn.peer == second.der {
            seen = Some(conn);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut new = seen.expect("a new connection gets the new certificate after a poll");
    assert_eq!(new.get("/work").await.0, 200);
    // The connection made before the change is still open and still answers.
    assert_eq!(old.get("/work").await.0, 200);

    // A broken certificate file is refused with its name; the one in use stays.
    let tls = Arc::clone(proxy.handle.shared().tls().unwrap());
    let broken = dir.write("proxy.pem", "not a certificate\n");
    let error = tls.reload().unwrap_err().to_string();
    assert!(error.contains("server.tls.cert"), "{error}");
    assert!(error.contains(&broken.display().to_string()), "{error}");
    let conn = Conn::with_alpn(proxy.addr, ca.roots(), "proxy.test", proto).await;
    assert_eq!(conn.peer, second.der);
    assert_eq!(old.get("/work").await.0, 200);
}

over_h1_and_h2!(
    certificates_reload_over,
    certificates_reload_without_dropping_connections
);

// --- Upstream TLS ------------------------------------------------------------------------

/// `[clusters.test.tls]` with `ca`, and a client certificate when given.
fn cluster_tls(ca: &Path, client: Option<(&Path, &Path)>, server_name: Option<&str>) -> String {
    let mut text = format!("\n[clusters.test.tls]\nca = {}\n", toml_path(ca));
    if let Some((cert, key)) = client {
        text += &format!(
            "client_cert = {}\nclient_key = {}\n",
            toml_path(cert),
            toml_path(key)
        );
    }
    if let Some(name) = server_name {
        text += &format!("server_name = \"{name}\"\n");
    }
    text
}

async fn upstream_mutual_tls_carries_requests_and_probes(proto: Proto) {
    let dir = Dir::new("mtls");
    let replicas_ca = Ca::new("replicas CA");
    let clients_ca = Ca::new("clients CA");
    let ca_path = dir.write("replicas-ca.pem", &replicas_ca.pem);
    let (client_cert, client_key) = dir.leaf("proxy-client", &clients_ca.client("proxy"));
    // One replica is verified by its IP address (no server_name), the other pair by name.
    let by_ip = replica_tls(&replicas_ca.server(&["127.0.0.1"]), Some(&clients_ca));
    let by_name = replica_tls(&replicas_ca.server(&["replica.test"]), Some(&clients_ca));
    let ip_backends = [
        Backend::start_tls(Arc::clone(&by_ip)).await,
        Backend::start_tls(by_ip).await,
    ];
    let named_backend = Backend::start_tls(by_name).await;

    for (backends, server_name) in [
        (vec![&ip_backends[0], &ip_backends[1]], None),
        (vec![&named_backend], Some("replica.test")),
    ] {
        let text = config_text(&backends, proto, PREQUAL, NO_HEDGING)
            + &cluster_tls(&ca_path, Some((&client_cert, &client_key)), server_name);
        let proxy = start_proxy(&text).await;
        let client = client(proto);
        for _ in 0..20 {
            assert_eq!(get(&client, proxy.addr, "/work").await.0, 200);
        }
        // Probes go over the same TLS: some of them have been answered.
        let mut probed = 0.0;
        for _ in 0..100 {
            let text = metrics(proxy.admin).await;
            probed = metric_sum(&text, &["prequal_proxy_probes_total", "result=\"ok\""]);
            if probed > 0.0 {
                break;
            }
            get(&client, proxy.addr, "/work").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(probed > 0.0, "probes over TLS were answered");
    }
    let hits: u64 = ip_backends.iter().map(Backend::hits).sum::<u64>() + named_backend.hits();
    assert!(hits >= 40, "{hits}");
}

over_h1_and_h2!(
    upstream_mutual_tls_over,
    upstream_mutual_tls_carries_requests_and_probes
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tls_refuses_what_it_cannot_verify() {
    let dir = Dir::new("refuse");
    let replicas_ca = Ca::new("replicas CA");
    let clients_ca = Ca::new("clients CA");
    let stranger = Ca::new("another CA");
    let replica_ca = dir.write("replicas-ca.pem", &replicas_ca.pem);
    let stranger_ca = dir.write("stranger-ca.pem", &stranger.pem);
    let backend = Backend::start_tls(replica_tls(
        &replicas_ca.server(&["127.0.0.1"]),
        Some(&clients_ca),
    ))
    .await;
    let (client_cert, client_key) = dir.leaf("proxy-client", &clients_ca.client("proxy"));
    let cases = [
        // No client certificate: the replica refuses the handshake.
        cluster_tls(&replica_ca, None, None),
        // A CA that did not sign the replica's certificate.
        cluster_tls(&stranger_ca, Some((&client_cert, &client_key)), None),
        // A name the replica's certificate does not hold.
        cluster_tls(
            &replica_ca,
            Some((&client_cert, &client_key)),
            Some("elsewhere.test"),
        ),
    ];
    for tls in cases {
        let text = config_text(&[&backend], Proto::H1, "\"round-robin\"", NO_HEDGING) + &tls;
        let proxy = start_proxy(&text).await;
        let (status, _) = get(&client(Proto::H1), proxy.addr, "/work").await;
        assert_eq!(status, 502, "{tls}");
    }
    assert_eq!(backend.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_trust_reloads_on_file_change() {
    let dir = Dir::new("upstream-reload");
    let replicas_ca = Ca::new("replicas CA");
    let stranger = Ca::new("another CA");
    let backend = Backend::start_tls(replica_tls(&replicas_ca.server(&["127.0.0.1"]), None)).await;
    // The bundle first holds a CA that did not sign the replica's certificate.
    let bundle = dir.write("ca.pem", &stranger.pem);
    let text = config_text(&[&backend], Proto::H1, "\"round-robin\"", NO_HEDGING)
        + &cluster_tls(&bundle, None, None)
        + "watch_interval = \"50ms\"\n";
    let proxy = start_proxy(&text).await;
    let client = client(Proto::H1);
    assert_eq!(get(&client, proxy.addr, "/work").await.0, 502);
    // Both CAs now: the next connection verifies the replica.
    dir.write("ca.pem", &format!("{}{}", stranger.pem, replicas_ca.pem));
    let mut status = 0;
    for _ in 0..200 {
        status = get(&client, proxy.addr, "/work").await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status, 200, "the new bundle is used after a poll");
}

// --- Errors ------------------------------------------------------------------------------

async fn bind_error(text: &str) -> String {
    let config = ProxyConfig::from_toml(text, "test.toml").unwrap();
    Proxy::bind(&config).await.unwrap_err().to_string()
}

#[tokio::test]
async fn bad_or_missing_files_are_named() {
    let dir = Dir::new("errors");
    let ca = Ca::new("test CA");
    let leaf = ca.server(&["proxy.test"]);
    let other = ca.server(&["other.test"]);
    let (cert, key) = dir.leaf("proxy", &leaf);
    let (_, other_key) = dir.leaf("other", &other);
    let missing = dir.0.join("missing.pem");
    let garbage = dir.write("garbage.pem", "-----BEGIN CERTIFICATE-----\n!!!\n");
    let empty = dir.write("empty.pem", "");
    let backend = Backend::start().await;
    let base = || config_text(&[&backend], Proto::H1, "\"round-robin\"", "");
    let cases = [
        (server_tls(&missing, &key), "server.tls.cert", &missing),
        (server_tls(&garbage, &key), "server.tls.cert", &garbage),
        (server_tls(&cert, &empty), "server.tls.key", &empty),
        (server_tls(&cert, &cert), "server.tls.key", &cert),
        // A key of another certificate.
        (server_tls(&cert, &other_key), "server.tls.key", &other_key),
        (
            server_tls(&cert, &key)
                + &format!(
                    "[[server.tls.sni]]\nserver_name = \"a.test\"\ncert = {}\nkey = {}\n",
                    toml_path(&cert),
                    toml_path(&missing)
                ),
            "server.tls.sni[0].key",
            &missing,
        ),
        (
            cluster_tls(&missing, None, None),
            "clusters.test.tls.ca",
            &missing,
        ),
        (cluster_tls(&key, None, None), "clusters.test.tls.ca", &key),
        (
            cluster_tls(&cert, Some((&cert, &other_key)), None),
            "clusters.test.tls.client_key",
            &other_key,
        ),
    ];
    for (extra, key, path) in cases {
        let error = bind_error(&(base() + &extra)).await;
        assert!(error.contains(key), "{key}: {error}");
        assert!(
            error.contains(&path.display().to_string()),
            "{key}: {error}"
        );
    }
    // What can be checked without the files is checked with the config.
    let half = base() + &format!("[clusters.test.tls]\nclient_cert = {}\n", toml_path(&cert));
    let error = ProxyConfig::from_toml(&half, "test.toml")
        .unwrap_err()
        .to_string();
    assert!(error.contains("clusters.test.tls.client_key"), "{error}");
}
