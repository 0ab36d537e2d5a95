//! The `prequal backend` and `prequal sidecar` binaries end to end on loopback: a backend
//! replica, a sidecar in front of it, a request and a probe through the sidecar, and a clean
//! exit on SIGTERM; the same over mutual TLS (certificates made in the test with rcgen), and
//! TLS flags naming a bad file. Every wait is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

const BOUND: Duration = Duration::from_secs(20);

/// Kills the child on drop, so a failing test leaves no process behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_prequal"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Running(child)
}

/// The first line of a child's output, read on a helper thread so the wait is bounded.
fn first_line<R: Read + Send + 'static>(stream: R) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stream).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(BOUND).expect("child printed its address")
}

/// A one-shot HTTP/1.1 exchange; returns the raw response text.
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, BOUND).unwrap();
    stream.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

fn body(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

#[test]
fn sidecar_in_front_of_a_backend_replica() {
    let mut backend = spawn(&[
        "backend",
        "--replicas",
        "1",
        "--latency",
        "2ms",
        "--duration",
        "60s",
    ]);
    let stdout: ChildStdout = backend.0.stdout.take().unwrap();
    let line = first_line(stdout);
    // "replica 0 127.0.0.1:PORT"
    let replica: SocketAddr = line.split_whitespace().nth(2).unwrap().parse().unwrap();

    let mut sidecar = spawn(&[
        "sidecar",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &replica.to_string(),
    ]);
    let stderr: ChildStderr = sidecar.0.stderr.take().unwrap();
    let line = first_line(stderr);
    // "prequal sidecar: listening on 127.0.0.1:PORT, forwarding to ..."
    let listen = line.split("listening on ").nth(1).unwrap();
    let sidecar_addr: SocketAddr = listen.split(',').next().unwrap().parse().unwrap();

    let response = http_get(sidecar_addr, "/hello");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("x-prequal-replica: 0"),
        "{response}"
    );
    assert_eq!(body(&response), "ok\n");

    let reply = http_get(sidecar_addr, "/.prequal/probe?v=1");
    let report = prequal_server::protocol::parse_reply(body(&reply).as_bytes()).unwrap();
    assert_eq!(report.rif, 0);
    assert!(report.latency >= Duration::from_millis(2), "{report:?}");
    let refused = http_get(sidecar_addr, "/.prequal/probe?v=2");
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    // The backend answers probes itself, too.
    let direct = http_get(replica, "/.prequal/probe?v=1");
    assert!(prequal_server::protocol::parse_reply(body(&direct).as_bytes()).is_ok());

    // SIGTERM: both exit cleanly, on their own.
    for child in [&mut backend, &mut sidecar] {
        let pid = child.0.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + BOUND;
        let exit = loop {
            if let Some(exit) = child.0.try_wait().unwrap() {
                break exit;
            }
            assert!(Instant::now() < deadline, "pid {pid} ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(exit.success(), "{exit:?}");
    }
}

// --- TLS -----------------------------------------------------------------------------------

/// One emulated replica; its address.
fn start_backend() -> (Running, SocketAddr) {
    let mut backend = spawn(&[
        "backend",
        "--replicas",
        "1",
        "--latency",
        "1ms",
        "--duration",
        "60s",
    ]);
    let line = first_line(backend.0.stdout.take().unwrap());
    // "replica 0 127.0.0.1:PORT"
    let replica = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    (backend, replica)
}

/// A certificate authority, and certificates it signs as PEM (certificate, key).
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: CertificateDer<'static>,
}

impl Ca {
    fn new(name: &str) -> Ca {
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

    fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A directory of the test's own, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("prequal-cli-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A one-shot HTTP/1.1 exchange over TLS, trusting `ca` and presenting `client` (PEM
/// certificate and key) if given. Any failure, a refused handshake included, is an `Err`.
fn https_get(
    addr: SocketAddr,
    ca: &Ca,
    client: Option<&(String, String)>,
    path: &str,
) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let session = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect_timeout(&addr, BOUND).unwrap();
    socket.set_read_timeout(Some(BOUND)).unwrap();
    socket.set_write_timeout(Some(BOUND)).unwrap();
    let mut tls = rustls::StreamOwned::new(session, socket);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut response = Vec::new();
    match tls.read_to_end(&mut response) {
        Ok(_) => {}
        // A peer that closes without close_notify, after a whole response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    Ok(String::from_utf8_lossy(&response).into_owned())
}

#[test]
fn sidecar_over_mutual_tls() {
    let dir = Dir::new("mtls");
    let sidecars_ca = Ca::new("sidecars CA");
    let clients_ca = Ca::new("clients CA");
    let (cert, key) = sidecars_ca.leaf("127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth);
    let cert = dir.write("sidecar.pem", &cert);
    let key = dir.write("sidecar.key", &key);
    let client_ca = dir.write("clients.pem", &clients_ca.pem);
    let (_backend, replica) = start_backend();
    let mut sidecar = spawn(&[
        "sidecar",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &replica.to_string(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--tls-client-ca",
        client_ca.to_str().unwrap(),
    ]);
    let line = first_line(sidecar.0.stderr.take().unwrap());
    assert!(line.contains("TLS, client certificates required"), "{line}");
    let listen = line.split("listening on ").nth(1).unwrap();
    let addr: SocketAddr = listen.split(',').next().unwrap().parse().unwrap();

    let proxy = clients_ca.leaf("proxy", ExtendedKeyUsagePurpose::ClientAuth);
    let response = https_get(addr, &sidecars_ca, Some(&proxy), "/hello").unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(body(&response), "ok\n");
    let reply = https_get(addr, &sidecars_ca, Some(&proxy), "/.prequal/probe?v=1").unwrap();
    assert!(prequal_server::protocol::parse_reply(body(&reply).as_bytes()).is_ok());

    // No client certificate, or one of another CA: refused.
    let stranger = Ca::new("another CA").leaf("proxy", ExtendedKeyUsagePurpose::ClientAuth);
    for client in [None, Some(&stranger)] {
        let refused = https_get(addr, &sidecars_ca, client, "/hello");
        assert!(refused.is_err(), "{refused:?}");
    }
}

/// Runs `prequal ARGS`, which must exit on its own: its status and stderr.
fn exits(args: &[&str]) -> (ExitStatus, String) {
    let mut child = spawn(args);
    let mut stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let text = rx.recv_timeout(BOUND).expect("exited within the bound");
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return (status, text);
        }
        assert!(Instant::now() < deadline, "still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sidecar_tls_errors_name_the_flag_and_the_file() {
    let dir = Dir::new("errors");
    let missing = dir.0.join("missing.pem");
    let not_pem = dir.write("not-pem.txt", "hello\n");
    let sidecar = |extra: &[&Path]| {
        let names = ["--tls-cert", "--tls-key", "--tls-client-ca"];
        let mut args = vec![
            "sidecar".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            "127.0.0.1:9".into(),
        ];
        for (flag, path) in names.iter().zip(extra) {
            args.extend([flag.to_string(), path.display().to_string()]);
        }
        args
    };
    for (args, flag, path) in [
        (sidecar(&[&missing, &not_pem]), "--tls-cert", &missing),
        (sidecar(&[&not_pem, &not_pem]), "--tls-cert", &not_pem),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, stderr) = exits(&args);
        assert!(!status.success());
        assert!(stderr.contains(flag), "{stderr}");
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A key without a certificate is a usage error.
    let (status, stderr) = exits(&[
        "sidecar",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:9",
        "--tls-key",
        not_pem.to_str().unwrap(),
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--tls-cert"), "{stderr}");
}
