//! End-to-end tests of the load generator against tiny hyper servers on 127.0.0.1. Timing is
//! only ever used as a lower bound the test itself imposes (a server that holds a response for
//! 300 ms makes it at least 300 ms late), never as a bound on how fast the machine is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Response, StatusCode, Version};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prequal_core::Time;
use prequal_model::scenario::Phase;
use prequal_testbed::backend::REPLICA_HEADER;
use prequal_testbed::loadgen::{self, LoadReport, LoadSpec, Progress, Schedule};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// How a test server answers its n-th request (counted from 1).
#[derive(Clone, Default)]
struct Behaviour {
    /// The `x-prequal-replica` value it sends.
    replica: Option<&'static str>,
    /// Answer 503 to every n-th request.
    error_every: Option<u64>,
    /// Hold every n-th request this long.
    delay_every: Option<(u64, Duration)>,
    /// At the n-th request, hold every response until this long after it arrived.
    stall_at: Option<(u64, Duration)>,
    /// Never answer.
    silent: bool,
    /// Answer 505 unless the request came over this version.
    version: Option<Version>,
}

#[derive(Default)]
struct Counts {
    arrivals: AtomicU64,
    errors: AtomicU64,
    delayed: AtomicU64,
    hold_until: Mutex<Option<Instant>>,
    first_arrival: Mutex<Option<SystemTime>>,
}

struct Server {
    addr: SocketAddr,
    counts: Arc<Counts>,
}

impl Server {
    fn uri(&self) -> http::Uri {
        format!("http://{}/work", self.addr).parse().unwrap()
    }
}

async fn answer(behaviour: &Behaviour, counts: &Counts, version: Version) -> Response<Full<Bytes>> {
    let n = counts.arrivals.fetch_add(1, Ordering::SeqCst) + 1;
    counts
        .first_arrival
        .lock()
        .unwrap()
        .get_or_insert_with(SystemTime::now);
    if behaviour.silent {
        std::future::pending::<()>().await;
    }
    let now = Instant::now();
    let hold = {
        let mut hold = counts.hold_until.lock().unwrap();
        match behaviour.stall_at {
            Some((at, stall)) if n == at => *hold = Some(now + stall),
            _ => {}
        }
        hold.filter(|&until| until > now)
    };
    if let Some(until) = hold {
        tokio::time::sleep_until(until).await;
    }
    if let Some((_, delay)) = behaviour
        .delay_every
        .filter(|&(every, _)| n.is_multiple_of(every))
    {
        counts.delayed.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
    }
    let mut status = StatusCode::OK;
    if behaviour.version.is_some_and(|v| v != version) {
        status = StatusCode::HTTP_VERSION_NOT_SUPPORTED;
    } else if behaviour
        .error_every
        .is_some_and(|every| n.is_multiple_of(every))
    {
        counts.errors.fetch_add(1, Ordering::SeqCst);
        status = StatusCode::SERVICE_UNAVAILABLE;
    }
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
    *response.status_mut() = status;
    if let Some(replica) = behaviour.replica {
        response
            .headers_mut()
            .insert(REPLICA_HEADER, replica.parse().unwrap());
    }
    response
}

/// A server on 127.0.0.1 speaking HTTP/1.1 and h2c; it lives as long as the test's runtime.
async fn serve(behaviour: Behaviour) -> Server {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(Counts::default());
    let shared = (Arc::new(behaviour), Arc::clone(&counts));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (behaviour, counts) = shared.clone();
            let service = service_fn(move |request: http::Request<Incoming>| {
                let (behaviour, counts) = (Arc::clone(&behaviour), Arc::clone(&counts));
                async move { Ok::<_, Infallible>(answer(&behaviour, &counts, request.version()).await) }
            });
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server { addr, counts }
}

fn constant(qps: f64, seconds: f64) -> Vec<Phase> {
    vec![Phase {
        label: format!("{qps} qps"),
        start: Time::ZERO,
        end: Time::from_nanos((seconds * 1e9) as u64),
        qps_start: qps,
        qps_end: qps,
    }]
}

fn spec(targets: Vec<http::Uri>, phases: Vec<Phase>) -> LoadSpec {
    LoadSpec {
        targets,
        http2: false,
        phases,
        poisson: false,
        timeout: Duration::from_secs(5),
        objective: Duration::from_secs(1),
        replicas: 1,
        seed: 1,
        start_at: None,
        max_in_flight: 10_000,
    }
}

async fn run(spec: &LoadSpec) -> (LoadReport, Vec<Progress>) {
    run_until(spec, std::future::pending()).await
}

async fn run_until(spec: &LoadSpec, stop: impl Future<Output = ()>) -> (LoadReport, Vec<Progress>) {
    let mut seconds = Vec::new();
    let report = loadgen::run(spec, &mut |p: &Progress| seconds.push(p.clone()), stop)
        .await
        .unwrap();
    (report, seconds)
}

/// Every query is accounted for exactly once, in the report and in the progress lines.
fn assert_counts_add_up(report: &LoadReport, seconds: &[Progress]) {
    let s = &report.measured.summary;
    assert_eq!(
        report.sent,
        report.successes + report.errors + report.timeouts
    );
    assert_eq!(s.queries, report.sent + report.not_sent);
    assert_eq!(s.successes, report.successes);
    assert_eq!(s.errors, report.errors + report.not_sent);
    assert_eq!(s.timeouts, report.timeouts);
    assert_eq!(report.per_target.iter().sum::<u64>(), report.sent);
    let statuses: u64 = report.status.values().sum();
    assert_eq!(statuses, report.successes + report.errors);
    assert_eq!(seconds.iter().map(|p| p.sent).sum::<u64>(), report.sent);
    assert_eq!(
        seconds.iter().map(|p| p.completed).sum::<u64>(),
        report.sent + report.not_sent
    );
    assert_eq!(seconds.iter().map(|p| p.timeouts).sum::<u64>(), s.timeouts);
    assert_eq!(seconds.iter().map(|p| p.errors).sum::<u64>(), s.errors);
    assert_eq!(seconds.last().map(|p| p.in_flight), Some(0));
}

async fn counts_add_up_over(http2: bool, poisson: bool) {
    let version = if http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    let server = serve(Behaviour {
        replica: Some("0"),
        version: Some(version),
        ..Behaviour::default()
    })
    .await;
    let mut spec = spec(vec![server.uri()], constant(300.0, 1.0));
    spec.http2 = http2;
    spec.poisson = poisson;
    let (report, seconds) = run(&spec).await;
    let scheduled = Schedule::new(&spec.phases, poisson, spec.seed).count() as u64;
    assert_eq!(report.sent, scheduled);
    assert_eq!(report.not_sent, 0);
    // Every request came over the requested protocol (the server answers 505 otherwise).
    assert_eq!(report.successes, report.sent, "{:?}", report.status);
    assert_eq!(report.status.get("200"), Some(&report.sent));
    assert_eq!(server.counts.arrivals.load(Ordering::SeqCst), report.sent);
    assert_eq!(report.measured.servers[0].queries, report.sent);
    assert_eq!(report.measured.summary.within_objective, 1.0);
    assert!(!report.stopped_early);
    assert_counts_add_up(&report, &seconds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_over_http1() {
    counts_add_up_over(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_over_http2() {
    counts_add_up_over(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisson_arrivals_follow_the_seeded_schedule() {
    counts_add_up_over(false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_share_the_load_and_replicas_are_read_from_the_header() {
    let mut servers = Vec::new();
    for replica in ["0", "1", "not-a-number"] {
        let behaviour = Behaviour {
            replica: Some(replica),
            error_every: Some(4),
            ..Behaviour::default()
        };
        servers.push(serve(behaviour).await);
    }
    let mut spec = spec(
        servers.iter().map(Server::uri).collect(),
        constant(300.0, 1.0),
    );
    spec.replicas = 3;
    let (report, seconds) = run(&spec).await;
    assert_eq!(report.per_target, vec![100, 100, 100]);
    let served: Vec<u64> = report.measured.servers.iter().map(|s| s.queries).collect();
    // A malformed replica header is ignored.
    assert_eq!(served, vec![100, 100, 0]);
    // 5xx are errors, and only they are.
    let errors: u64 = servers
        .iter()
        .map(|s| s.counts.errors.load(Ordering::SeqCst))
        .sum();
    assert_eq!(errors, 75);
    assert_eq!(report.errors, errors);
    assert_eq!(report.status.get("503"), Some(&errors));
    assert_eq!(report.successes, 300 - errors);
    assert_counts_add_up(&report, &seconds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_are_timeouts_counted_at_the_timeout() {
    let server = serve(Behaviour {
        delay_every: Some((5, Duration::from_secs(3))),
        ..Behaviour::default()
    })
    .await;
    let mut spec = spec(vec![server.uri()], constant(200.0, 1.0));
    spec.timeout = Duration::from_millis(250);
    let (report, seconds) = run(&spec).await;
    let delayed = server.counts.delayed.load(Ordering::SeqCst);
    assert!(delayed > 0);
    // Every held request timed out (perhaps a few more on a busy machine).
    assert!(
        report.timeouts >= delayed,
        "{} < {delayed}",
        report.timeouts
    );
    // A timeout counts at the timeout, and nothing counts later than that.
    let latency = &report.measured.summary.latency_ms;
    assert!(
        latency.max >= 250.0 && latency.max <= 250.0 * 1.001,
        "{latency:?}"
    );
    assert_counts_add_up(&report, &seconds);
}

/// The coordinated-omission test. At its 100th request (due at 0.25 s) the server stops
/// answering for 300 ms. A request due at time `d` inside that window is answered no earlier
/// than the window's end, so its latency from `d` is at least the rest of the window, however
/// late it was actually sent: the requests due in the first 200 ms of the stall (80 of 600)
/// all take 100 ms or more, those due in its first 150 ms (60) 150 ms or more. A generator that
/// timed from the actual send, or waited for responses, would see one slow request instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_shows_in_the_tail() {
    let stall = Duration::from_millis(300);
    let server = serve(Behaviour {
        stall_at: Some((100, stall)),
        ..Behaviour::default()
    })
    .await;
    let spec = spec(vec![server.uri()], constant(400.0, 1.5));
    let (report, seconds) = run(&spec).await;
    let latency = &report.measured.summary.latency_ms;
    assert!(latency.max >= 300.0, "{latency:?}");
    assert!(latency.p99 >= 150.0, "{latency:?}");
    assert!(latency.p90 >= 100.0, "{latency:?}");
    assert_eq!(report.timeouts, 0);
    assert_counts_add_up(&report, &seconds);
}

/// The generator's own stall: the whole runtime (sender included) is blocked for 600 ms at
/// about 0.25 s, so the requests due in that window go out late, all at once, to a server that
/// answers at once. Timed from their intended send times, those due in the first 300 ms of the
/// block (60 of 400, 15%) still show at least 300 ms; timed from the late send they would not.
#[tokio::test(flavor = "current_thread")]
async fn a_stalled_sender_still_times_from_the_intended_send() {
    let server = serve(Behaviour::default()).await;
    let mut spec = spec(vec![server.uri()], constant(200.0, 2.0));
    spec.http2 = true;
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        std::thread::sleep(Duration::from_millis(600));
    });
    let (report, seconds) = run(&spec).await;
    let latency = &report.measured.summary.latency_ms;
    assert!(latency.p90 >= 300.0, "{latency:?}");
    assert!(
        report.max_send_lag_ms >= 300.0,
        "{}",
        report.max_send_lag_ms
    );
    assert_counts_add_up(&report, &seconds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_past_the_in_flight_bound_are_not_sent() {
    let server = serve(Behaviour {
        silent: true,
        ..Behaviour::default()
    })
    .await;
    let mut spec = spec(vec![server.uri()], constant(200.0, 0.5));
    spec.timeout = Duration::from_secs(1);
    spec.max_in_flight = 5;
    let (report, seconds) = run(&spec).await;
    assert_eq!(report.sent + report.not_sent, 100);
    // The first five go out; none answers, so none frees a slot before 1 s, after the last is due.
    assert!(report.sent >= 5, "{}", report.sent);
    assert!(report.not_sent >= 1);
    assert_eq!(report.timeouts, report.sent);
    assert_eq!(report.measured.summary.errors, report.not_sent);
    assert_counts_add_up(&report, &seconds);
}

/// A rate far beyond what the generator can send does not keep it running for as long as the
/// backlog would take: still sending a timeout after the schedule's end, it stops and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_beyond_the_sender_stops_once_it_is_a_timeout_behind() {
    let server = serve(Behaviour {
        silent: true,
        ..Behaviour::default()
    })
    .await;
    // A hundred billion queries in 0.2 s: years of sending at any real rate.
    let mut spec = spec(vec![server.uri()], constant(5e11, 0.2));
    spec.timeout = Duration::from_millis(300);
    spec.max_in_flight = 4;
    let (report, seconds) = run(&spec).await;
    assert!(report.fell_behind);
    assert!(report.stopped_early);
    assert!(report.sent + report.not_sent < 100_000_000_000);
    assert_counts_add_up(&report, &seconds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_the_load_early_with_a_report() {
    let server = serve(Behaviour::default()).await;
    let spec = spec(vec![server.uri()], constant(400.0, 10.0));
    let stop = tokio::time::sleep(Duration::from_millis(300));
    let (report, seconds) = run_until(&spec, stop).await;
    assert!(report.stopped_early);
    assert!(report.sent < 4000, "{}", report.sent);
    assert_eq!(report.measured.summary.queries, report.sent);
    assert_counts_add_up(&report, &seconds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_starts_no_earlier_than_start_at() {
    let server = serve(Behaviour::default()).await;
    let mut spec = spec(vec![server.uri()], constant(100.0, 0.2));
    let start_at = SystemTime::now() + Duration::from_millis(300);
    spec.start_at = Some(start_at);
    let (report, seconds) = run(&spec).await;
    assert_eq!(report.sent, 20);
    let first = server.counts.first_arrival.lock().unwrap().unwrap();
    assert!(first >= start_at);
    assert_counts_add_up(&report, &seconds);
}

#[tokio::test]
async fn bad_specs_are_refused_with_the_field_named() {
    let good = spec(
        vec!["http://127.0.0.1:1/".parse().unwrap()],
        constant(1.0, 1.0),
    );
    let message = |spec: LoadSpec| async move {
        let mut ignore = |_: &Progress| {};
        loadgen::run(&spec, &mut ignore, std::future::pending())
            .await
            .unwrap_err()
            .to_string()
    };
    let mut no_targets = good.clone();
    no_targets.targets.clear();
    assert!(message(no_targets).await.contains("no targets"));
    let mut tls = good.clone();
    tls.targets.push("https://127.0.0.1:1/".parse().unwrap());
    let text = message(tls).await;
    assert!(
        text.contains("target 1") && text.contains("http://"),
        "{text}"
    );
    let mut relative = good.clone();
    relative.targets = vec!["/work".parse().unwrap()];
    assert!(message(relative).await.contains("absolute URI"));
    let mut negative = good.clone();
    negative.phases[0].qps_end = -1.0;
    let text = message(negative).await;
    assert!(
        text.contains("phase 0") && text.contains("qps_end"),
        "{text}"
    );
    let mut no_phases = good.clone();
    no_phases.phases.clear();
    assert!(message(no_phases).await.contains("no phases"));
    let mut zero = good.clone();
    zero.timeout = Duration::ZERO;
    assert!(message(zero).await.contains("timeout"));
    let mut bound = good.clone();
    bound.max_in_flight = 0;
    assert!(message(bound).await.contains("max_in_flight"));
    let mut replicas = good;
    replicas.replicas = u32::MAX as usize;
    assert!(message(replicas).await.contains("replicas"));
}
