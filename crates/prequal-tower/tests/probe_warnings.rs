//! The warnings that say probing is blind to a replica: replicas answering probes with a 404
//! (no `ProbeLayer`) are each named once, over HTTP/1.1 and HTTP/2 on 127.0.0.1, and again only
//! after answering a probe in between; a replica whose replies come only after the probe
//! timeout is warned of at the twentieth in a row and at most once a minute, in process on
//! tokio's paused clock.
//!
//! Each test logs to a subscriber of its own, set on its thread, and runs everything on that
//! thread (a current-thread runtime), so every task's events reach it. A call site remembers
//! whether anything listens the first time it runs; every test of this binary sets its
//! subscriber before the balancer exists, so no call site is first reached unheard.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use prequal_core::{LoadReport, PolicyConfig};
use prequal_tower::Builder;
use prequal_tower::probe::Probe;
use tower::discover::ServiceList;
use tower::{Service, ServiceExt};

/// What the refusal warning says.
const REFUSED: &str = "replica does not answer probes";
/// What the info line says when a refusing replica answers a probe.
const AGAIN: &str = "replica answers probes again";
/// What the late-probe warning says.
const LATE: &str = "replica answers probes only after probe_timeout";

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// The lines that say `what` of the replica discovered under `key`.
    fn naming(&self, what: &str, key: &str) -> Vec<String> {
        let field = format!("key={key}");
        self.text()
            .lines()
            .filter(|line| line.contains(what))
            .filter(|line| {
                // `key=127.0.0.1:80` must not match `key=127.0.0.1:8080`.
                line.match_indices(&field).any(|(at, _)| {
                    !line[at + field.len()..].starts_with(|c: char| c.is_ascii_digit())
                })
            })
            .map(str::to_owned)
            .collect()
    }
}

/// Runs `test` on a current-thread runtime (on the paused clock if `paused`) under a subscriber
/// of its own that captures every event at info level and above.
fn run_captured<F: Future>(paused: bool, test: impl FnOnce(Captured) -> F) -> F::Output {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(paused)
        .build()
        .unwrap();
    runtime.block_on(test(captured))
}

async fn replicas_without_the_probe_layer_are_named_once_each(proto: Proto, log: Captured) {
    let replicas = [
        Replica::start().await,
        Replica::start().await,
        Replica::start().await,
    ];
    for replica in &replicas {
        replica.set_probe_mode(ProbeMode::NotFound);
    }
    let keys: Vec<String> = replicas.iter().map(|r| r.addr.to_string()).collect();
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let (mut balance, _changes) = balance("prequal", proto, &addrs);
    let answers = load(&mut balance, proto, 60, 4).await;
    assert!(
        answers.iter().all(|a| *a == Ok(StatusCode::OK)),
        "{answers:?}"
    );
    let refusals = |key: &str| log.naming(REFUSED, key).len();
    assert!(
        eventually(|| keys.iter().all(|key| refusals(key) >= 1)).await,
        "{}",
        log.text()
    );
    // Many more refused probes, no more warnings.
    load(&mut balance, proto, 60, 4).await;
    for key in &keys {
        assert_eq!(refusals(key), 1, "{key}: {}", log.text());
    }
    let warning = &log.naming(REFUSED, &keys[0])[0];
    for part in [
        "WARN",
        "replica=r0",
        "answer=probe answered with status 404 Not Found",
        "ProbeLayer",
        "prequal sidecar",
        "a policy that needs no probes",
    ] {
        assert!(warning.contains(part), "{part} missing: {warning}");
    }
    // Once it has answered a probe, a replica that refuses them again is warned of again.
    replicas[0].set_probe_mode(ProbeMode::Answer);
    assert!(
        eventually(|| log.naming(AGAIN, &keys[0]).len() == 1).await,
        "{}",
        log.text()
    );
    replicas[0].set_probe_mode(ProbeMode::NotFound);
    assert!(
        eventually(|| refusals(&keys[0]) == 2).await,
        "{}",
        log.text()
    );
    for key in &keys[1..] {
        assert_eq!(refusals(key), 1, "{key}: {}", log.text());
        assert!(log.naming(AGAIN, key).is_empty(), "{}", log.text());
    }
}

#[test]
fn replicas_without_the_probe_layer_are_named_once_each_http1() {
    run_captured(false, |log| {
        replicas_without_the_probe_layer_are_named_once_each(Proto::Http1, log)
    });
}

#[test]
fn replicas_without_the_probe_layer_are_named_once_each_http2() {
    run_captured(false, |log| {
        replicas_without_the_probe_layer_are_named_once_each(Proto::Http2, log)
    });
}

type Request = http::Request<Full<Bytes>>;

/// Replicas that answer every query at once.
fn instant_replicas(
    n: usize,
) -> Vec<impl Service<Request, Response = http::Response<Full<Bytes>>, Error = Infallible> + Clone>
{
    (0..n)
        .map(|_| {
            tower::service_fn(|_request: Request| async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
            })
        })
        .collect()
}

/// Replica 0 answers each probe 300 ms after it is sent: after the 100 ms probe timeout, well
/// within the prober's one-second linger. Replica 1 answers at once. On the paused clock the
/// idle prober sends about ten probes a second, so in 30 s replica 0 has had far more than 20
/// late replies, and 60 s later a second warning is due.
#[test]
fn probes_answered_after_the_timeout_are_warned_of_at_the_twentieth_in_a_row() {
    run_captured(true, |log| async move {
        let prober = |key: &usize, _endpoint: &_| {
            let late = *key == 0;
            tower::service_fn(move |_probe: Probe| async move {
                if late {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok::<_, Infallible>(LoadReport::default())
            })
        };
        let policy: PolicyConfig =
            toml::from_str("name = \"prequal\"\nprobe_timeout = \"100ms\"\n").unwrap();
        let mut balance = Builder::new(policy)
            .seed(11)
            .build_with_prober::<_, Full<Bytes>, _>(ServiceList::new(instant_replicas(2)), prober)
            .unwrap();
        // The first query starts the balancer; idle probing does the rest.
        let request = http::Request::new(Full::new(Bytes::new()));
        let response = balance.ready().await.unwrap().call(request).await.unwrap();
        response.into_body().collect().await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        let late = log.naming(LATE, "0");
        assert_eq!(late.len(), 1, "{}", log.text());
        for part in [
            "WARN",
            "replica=r0",
            "in_a_row=20",
            "probe_timeout=100ms",
            "took=",
        ] {
            assert!(late[0].contains(part), "{part} missing: {}", late[0]);
        }
        assert!(log.naming(LATE, "1").is_empty(), "{}", log.text());
        assert!(log.text().matches(REFUSED).next().is_none());
        // At most once a minute: the second warning comes a minute after the first.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(log.naming(LATE, "0").len(), 2, "{}", log.text());
        drop(balance);
    });
}
