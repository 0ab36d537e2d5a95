//! The `prequal backend` and `prequal sidecar` binaries end to end on loopback: a backend
//! replica, a sidecar in front of it, a request and a probe through the sidecar, and a clean
//! exit on SIGTERM. Every wait is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
