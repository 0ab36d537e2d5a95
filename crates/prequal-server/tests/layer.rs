//! End-to-end tests of `ProbeLayer` over real loopback sockets, each run over HTTP/1.1 and
//! HTTP/2: in-flight counting, body-end tracking, probe errors, piggybacking and hints.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Proto, bounded, client, fetch, probe, probe_until, request, spawn};
use http::{Request, Response};
use http_body_util::channel::{Channel, Sender};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use prequal_core::{EstimatorConfig, LoadReport};
use prequal_server::{ProbeLayer, SharedTracker, protocol};
use tokio::sync::{Mutex, Semaphore, mpsc};

fn tracker() -> Arc<SharedTracker> {
    Arc::new(SharedTracker::new(EstimatorConfig::default()))
}

/// A handler that holds each request until the test adds a permit.
fn gated(
    gate: Arc<Semaphore>,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |_req: Request<Incoming>| {
        let gate = Arc::clone(&gate);
        async move {
            gate.acquire().await.unwrap().forget();
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    })
}

async fn rif_rises_and_falls_with_concurrent_requests(proto: Proto) {
    let tracker = tracker();
    let gate = Arc::new(Semaphore::new(0));
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(Arc::clone(&tracker)))
        .service(gated(Arc::clone(&gate)));
    let server = spawn(service).await;
    let client = client(proto);
    const N: u32 = 6;
    let pending: Vec<_> = (0..N)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                fetch(&client, request(proto, server.addr, "GET", "/work", "")).await
            })
        })
        .collect();
    let loaded = probe_until(&client, proto, server.addr, |r| r.rif == N).await;
    assert_eq!(loaded.rif, N, "all requests should be in flight");
    // Let half of them finish.
    gate.add_permits(N as usize / 2);
    let half = probe_until(&client, proto, server.addr, |r| r.rif == N / 2).await;
    assert_eq!(half.rif, N / 2);
    gate.add_permits(N as usize / 2);
    for task in pending {
        let fetched = bounded(task).await.unwrap();
        assert_eq!(fetched.status, 200);
        assert_eq!(&fetched.body[..], b"done");
    }
    let idle = probe_until(&client, proto, server.addr, |r| r.rif == 0).await;
    assert_eq!(idle.rif, 0);
    assert!(
        idle.latency > Duration::ZERO,
        "finished requests leave latency samples"
    );
    assert!(idle.qps.is_some_and(|q| q > 0.0));
    assert_eq!(idle.error_rate, Some(0.0));
    assert_eq!(tracker.rif(), 0);
}
both_protocols!(rif_rises_and_falls_with_concurrent_requests);

async fn a_request_counts_until_its_body_ends(proto: Proto) {
    // Each request hands the test the sender of its streamed response body.
    let (senders_tx, mut senders) = mpsc::unbounded_channel::<Sender<Bytes>>();
    let senders_tx = Arc::new(Mutex::new(senders_tx));
    let handler = tower::service_fn(move |_req: Request<Incoming>| {
        let senders_tx = Arc::clone(&senders_tx);
        async move {
            let (sender, body) = Channel::<Bytes>::new(4);
            let _ = senders_tx.lock().await.send(sender);
            Ok::<_, Infallible>(Response::new(body))
        }
    });
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(tracker()))
        .service(handler);
    let server = spawn(service).await;
    let client = client(proto);
    let response = bounded(client.request(request(proto, server.addr, "GET", "/stream", "")))
        .await
        .unwrap();
    let mut sender = bounded(senders.recv()).await.unwrap();
    // The response head has arrived, but its body is still streaming.
    bounded(sender.send_data(Bytes::from_static(b"part 1")))
        .await
        .unwrap();
    assert_eq!(probe(&client, proto, server.addr).await.rif, 1);
    drop(sender);
    let body = bounded(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"part 1");
    let idle = probe_until(&client, proto, server.addr, |r| r.rif == 0).await;
    assert_eq!(idle.rif, 0);
    // The body's end recorded a completion; it was not merely abandoned.
    assert!(idle.latency > Duration::ZERO, "{idle:?}");
    assert!(idle.qps.is_some_and(|q| q > 0.0), "{idle:?}");
}
both_protocols!(a_request_counts_until_its_body_ends);

async fn malformed_probes_get_4xx_and_the_server_keeps_serving(proto: Proto) {
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(tracker()))
        .service(gated(Arc::new(Semaphore::new(1000))));
    let server = spawn(service).await;
    let client = client(proto);
    let cases = [
        ("GET", "/.prequal/probe", 400, "no `v`"),
        ("GET", "/.prequal/probe?v=9", 400, "version"),
        ("GET", "/.prequal/probe?v=1&hint=x", 400, "hint"),
        ("GET", "/.prequal/probe?v=1&v=1", 400, "repeats"),
        ("GET", "/.prequal/probe?v=1&zzz", 400, "unknown"),
        ("POST", "/.prequal/probe?v=1", 405, "GET"),
    ];
    for (method, path, status, reason) in cases {
        let reply = fetch(&client, request(proto, server.addr, method, path, "junk")).await;
        assert_eq!(reply.status, status, "{method} {path}");
        let text = String::from_utf8_lossy(&reply.body);
        assert!(text.contains(reason), "{method} {path}: {text}");
    }
    let post = fetch(
        &client,
        request(proto, server.addr, "POST", "/.prequal/probe?v=1", ""),
    )
    .await;
    assert_eq!(post.headers.get(http::header::ALLOW).unwrap(), "GET, HEAD");
    let ok = fetch(&client, request(proto, server.addr, "GET", "/after", "")).await;
    assert_eq!(ok.status, 200);
    let report = probe(&client, proto, server.addr).await;
    assert_eq!(report.rif, 0, "probes are not counted in flight");
}
both_protocols!(malformed_probes_get_4xx_and_the_server_keeps_serving);

async fn piggybacked_load_and_hint_hook(proto: Proto) {
    let layer = ProbeLayer::new(tracker())
        .piggyback(true)
        .hint_hook(Arc::new(|hint, report: LoadReport| LoadReport {
            rif: report.rif + u32::try_from(hint).unwrap_or(0),
            ..report
        }));
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .service(gated(Arc::new(Semaphore::new(1000))));
    let server = spawn(service).await;
    let client = client(proto);
    let reply = fetch(&client, request(proto, server.addr, "GET", "/x", "")).await;
    let header = reply
        .headers
        .get(protocol::LOAD_HEADER)
        .expect("load header");
    let report = protocol::parse_reply(header.as_bytes()).unwrap();
    assert_eq!(
        report.rif, 0,
        "the load without the request the report rides on (still in flight as its head is sent)"
    );
    let path = protocol::probe_path_and_query(Some(40));
    let hinted = fetch(&client, request(proto, server.addr, "GET", &path, "")).await;
    assert_eq!(protocol::parse_reply(&hinted.body).unwrap().rif, 40);
}
both_protocols!(piggybacked_load_and_hint_hook);

async fn server_errors_count_in_the_error_rate(proto: Proto) {
    let handler = tower::service_fn(|req: Request<Incoming>| async move {
        let mut response = Response::new(Full::new(Bytes::from_static(b"x")));
        if req.uri().path() == "/fail" {
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        }
        Ok::<_, Infallible>(response)
    });
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(tracker()))
        .service(handler);
    let server = spawn(service).await;
    let client = client(proto);
    for path in ["/ok", "/fail", "/ok", "/fail"] {
        fetch(&client, request(proto, server.addr, "GET", path, "")).await;
    }
    let report = probe_until(&client, proto, server.addr, |r| r.error_rate == Some(0.5)).await;
    assert_eq!(report.error_rate, Some(0.5));
}
both_protocols!(server_errors_count_in_the_error_rate);

/// gRPC reports failures in trailers (or, for trailers-only responses, in headers) under a
/// 200 status; the layer must count server faults as errors and other statuses as successes.
#[tokio::test]
async fn grpc_status_in_trailers_decides_the_outcome() {
    let handler = tower::service_fn(|req: Request<Incoming>| async move {
        let code = req.uri().path().trim_start_matches('/').to_owned();
        let (mut sender, body) = Channel::<Bytes>::new(2);
        let mut response = Response::new(body);
        response.headers_mut().insert(
            "content-type",
            http::HeaderValue::from_static("application/grpc"),
        );
        if let Some(code) = code.strip_prefix("header-") {
            response
                .headers_mut()
                .insert("grpc-status", code.parse().unwrap());
            drop(sender);
        } else {
            tokio::spawn(async move {
                let _ = sender.send_data(Bytes::from_static(b"\0\0\0\0\0")).await;
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", code.parse().unwrap());
                let _ = sender.send_trailers(trailers).await;
            });
        }
        Ok::<_, Infallible>(response)
    });
    let tracker = tracker();
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(Arc::clone(&tracker)))
        .service(handler);
    let server = spawn(service).await;
    let client = client(Proto::Http2);
    // UNAVAILABLE in trailers, OK in trailers, NOT_FOUND (a client error) in trailers,
    // INTERNAL in headers: two failures out of four.
    for path in ["/14", "/0", "/5", "/header-13"] {
        let reply = fetch(
            &client,
            request(Proto::Http2, server.addr, "POST", path, ""),
        )
        .await;
        assert_eq!(reply.status, 200);
    }
    let report = probe_until(&client, Proto::Http2, server.addr, |r| {
        r.error_rate == Some(0.5)
    })
    .await;
    assert_eq!(report.error_rate, Some(0.5), "{report:?}");
    assert_eq!(tracker.rif(), 0);
}
