//! The balancer over in-process `tower::service_fn` endpoints, on tokio's paused clock: custom
//! probers (a closure making a probe service), the idle prober's timer, and a sync-mode pick
//! whose probes never answer. No sockets; the paused clock makes every run the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use prequal_core::{LoadReport, PolicyConfig};
use prequal_tower::Builder;
use prequal_tower::probe::Probe;
use tower::discover::ServiceList;
use tower::{Service, ServiceExt};

type Request = http::Request<Full<Bytes>>;

/// Counters of queries, one per replica.
fn counters(n: usize) -> Vec<Arc<AtomicU64>> {
    (0..n).map(|_| Arc::default()).collect()
}

/// Replicas (`tower::service_fn`) that count their queries in `hits` and answer at once.
fn replicas(
    hits: &[Arc<AtomicU64>],
) -> Vec<impl Service<Request, Response = http::Response<Full<Bytes>>, Error = Infallible> + Clone>
{
    hits.iter()
        .map(|hits| {
            let hits = Arc::clone(hits);
            tower::service_fn(move |_request: Request| {
                hits.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok")))) }
            })
        })
        .collect()
}

async fn send(
    balance: &mut impl Service<
        Request,
        Response = http::Response<prequal_tower::ResponseBody<Full<Bytes>>>,
        Error = prequal_tower::BoxError,
    >,
) {
    let response = balance
        .ready()
        .await
        .unwrap()
        .call(http::Request::new(Full::new(Bytes::new())))
        .await
        .unwrap();
    response.into_body().collect().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn reported_load_steers_queries_away_from_a_busy_replica() {
    let hits = counters(3);
    let services = replicas(&hits);
    // Replica 2 says it is busy and slow; 0 and 1 say they are idle and fast.
    let prober = |key: &usize, _endpoint: &_| {
        let busy = *key == 2;
        tower::service_fn(move |_probe: Probe| async move {
            Ok::<_, Infallible>(LoadReport {
                rif: if busy { 40 } else { 0 },
                latency: Duration::from_millis(if busy { 200 } else { 2 }),
                ..LoadReport::default()
            })
        })
    };
    let mut balance = Builder::from_name("prequal")
        .unwrap()
        .seed(3)
        .build_with_prober::<_, Full<Bytes>, _>(ServiceList::new(services), prober)
        .unwrap();
    // Let the first idle probes fill the pool.
    send(&mut balance).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = hits[2].load(Ordering::SeqCst);
    for _ in 0..200 {
        send(&mut balance).await;
        tokio::task::yield_now().await;
    }
    let busy = hits[2].load(Ordering::SeqCst) - before;
    assert!(busy <= 4, "{busy} of 200 queries went to the busy replica");
    let snapshot = balance.handle().snapshot();
    let busy_reply = snapshot.pool.iter().find(|e| e.replica.0 == 2);
    assert!(
        busy_reply.is_some_and(|e| e.rif >= 40 && e.latency_us == 200_000),
        "{snapshot:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_balancer_keeps_probing() {
    let hits = counters(4);
    let services = replicas(&hits);
    let probes = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&probes);
    let prober = move |_key: &usize, _endpoint: &_| {
        let probes = Arc::clone(&counted);
        tower::service_fn(move |_probe: Probe| {
            probes.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(LoadReport::default()) }
        })
    };
    let mut balance = Builder::from_name("prequal")
        .unwrap()
        .seed(5)
        .build_with_prober::<_, Full<Bytes>, _>(ServiceList::new(services), prober)
        .unwrap();
    send(&mut balance).await;
    // The query's own probes (3) run as soon as the runtime gets to them.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let after_query = probes.load(Ordering::SeqCst);
    // `max_idle` is 100 ms: one probe per period.
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let idle = probes.load(Ordering::SeqCst) - after_query;
    assert!((9..=11).contains(&idle), "{idle} idle probes in about 1 s");
}

#[tokio::test(start_paused = true)]
async fn a_sync_pick_whose_probes_never_answer_still_sends() {
    let hits = counters(3);
    let services = replicas(&hits);
    let prober = |_key: &usize, _endpoint: &_| {
        tower::service_fn(|_probe: Probe| std::future::pending::<Result<LoadReport, Infallible>>())
    };
    let policy = PolicyConfig::from_name("prequal-sync").unwrap();
    let mut balance = Builder::new(policy)
        .seed(9)
        .build_with_prober::<_, Full<Bytes>, _>(ServiceList::new(services), prober)
        .unwrap();
    for _ in 0..10 {
        send(&mut balance).await;
    }
    let total: u64 = hits.iter().map(|h| h.load(Ordering::SeqCst)).sum();
    assert_eq!(total, 10);
}
