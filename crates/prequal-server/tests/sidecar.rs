//! End-to-end tests of the sidecar (`Forward` behind `ProbeLayer`) over real loopback sockets,
//! each run over HTTP/1.1 and HTTP/2: traffic passes unchanged, gRPC trailers survive, the
//! replica's load is tracked and probes are answered, an unreachable upstream is a 502.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use common::{Proto, client, fetch, probe, probe_until, request, spawn};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use hyper::body::Incoming;
use prequal_core::EstimatorConfig;
use prequal_server::{Forward, ProbeLayer, SharedTracker};

/// The replica behind the sidecar: echoes what it received, and answers `/grpc` like a gRPC
/// server (length-prefixed message, then `grpc-status` trailers).
fn upstream_service() -> impl tower::Service<
    Request<Incoming>,
    Response = Response<Channel<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(|req: Request<Incoming>| async move {
        let (parts, body) = req.into_parts();
        let received = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let (mut sender, body) = Channel::<Bytes>::new(4);
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(
            "x-echo-method",
            HeaderValue::from_str(parts.method.as_str()).unwrap(),
        );
        headers.insert(
            "x-echo-path",
            HeaderValue::from_str(&parts.uri.to_string()).unwrap(),
        );
        headers.insert(
            "x-echo-version",
            HeaderValue::from_str(&format!("{:?}", parts.version)).unwrap(),
        );
        if let Some(custom) = parts.headers.get("x-custom") {
            headers.insert("x-echo-custom", custom.clone());
        }
        let grpc = parts.uri.path() == "/grpc";
        if grpc {
            headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        } else {
            *response.status_mut() = StatusCode::CREATED;
        }
        tokio::spawn(async move {
            if grpc {
                // One gRPC message frame: uncompressed flag, 4-byte length, payload.
                let mut frame = vec![0u8];
                frame.extend_from_slice(&u32::try_from(received.len()).unwrap().to_be_bytes());
                frame.extend_from_slice(&received);
                let _ = sender.send_data(Bytes::from(frame)).await;
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                trailers.insert("grpc-message", HeaderValue::from_static("fine"));
                let _ = sender.send_trailers(trailers).await;
            } else {
                let _ = sender.send_data(Bytes::from_static(b"echo: ")).await;
                let _ = sender.send_data(received).await;
            }
        });
        Ok::<_, Infallible>(response)
    })
}

struct Setup {
    upstream: common::Running,
    sidecar: common::Running,
    tracker: Arc<SharedTracker>,
}

async fn setup() -> Setup {
    let upstream = spawn(upstream_service()).await;
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    let forward = Forward::new(&upstream.addr.to_string()).unwrap();
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(Arc::clone(&tracker)))
        .service(forward);
    let sidecar = spawn(service).await;
    Setup {
        upstream,
        sidecar,
        tracker,
    }
}

async fn traffic_passes_through_unchanged(proto: Proto) {
    let setup = setup().await;
    let client = client(proto);
    let mut via_sidecar = Vec::new();
    let mut direct = Vec::new();
    for (addr, out) in [
        (setup.sidecar.addr, &mut via_sidecar),
        (setup.upstream.addr, &mut direct),
    ] {
        let mut req = request(proto, addr, "PUT", "/items/7?x=1", "payload");
        req.headers_mut()
            .insert("x-custom", HeaderValue::from_static("kept"));
        out.push(fetch(&client, req).await);
    }
    let (through, direct) = (&via_sidecar[0], &direct[0]);
    assert_eq!(through.status, StatusCode::CREATED);
    assert_eq!(through.version, proto.version());
    assert_eq!(&through.body[..], b"echo: payload");
    assert_eq!(through.body, direct.body);
    for name in ["x-echo-method", "x-echo-custom", "x-echo-version"] {
        assert_eq!(
            through.headers.get(name),
            direct.headers.get(name),
            "{name}"
        );
    }
    let path = through
        .headers
        .get("x-echo-path")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(path.ends_with("/items/7?x=1"), "{path}");
    let report = probe_until(&client, proto, setup.sidecar.addr, |r| {
        r.qps.is_some_and(|q| q > 0.0)
    })
    .await;
    assert_eq!(report.rif, 0);
    assert!(report.latency > std::time::Duration::ZERO);
    assert_eq!(report.error_rate, Some(0.0));
}
both_protocols!(traffic_passes_through_unchanged);

#[tokio::test]
async fn grpc_call_keeps_its_trailers_over_http2() {
    let setup = setup().await;
    let client = client(Proto::Http2);
    let mut req = request(Proto::Http2, setup.sidecar.addr, "POST", "/grpc", "hello");
    req.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    req.headers_mut()
        .insert("te", HeaderValue::from_static("trailers"));
    let reply = fetch(&client, req).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers.get("content-type").unwrap(),
        "application/grpc"
    );
    assert_eq!(&reply.body[..], b"\0\0\0\0\x05hello");
    let trailers = reply.trailers.expect("gRPC trailers must pass through");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert_eq!(trailers.get("grpc-message").unwrap(), "fine");
    // The call was recorded as a completed success, not abandoned when the trailers ended it.
    let report = setup.tracker.report();
    assert_eq!(report.error_rate, Some(0.0));
    assert!(report.qps.is_some_and(|q| q > 0.0), "{report:?}");
    assert!(report.latency > std::time::Duration::ZERO, "{report:?}");
}

async fn unreachable_upstream_is_a_counted_502(proto: Proto) {
    // Bind and drop a listener to get a loopback port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(Arc::clone(&tracker)))
        .service(Forward::new(&closed.to_string()).unwrap());
    let sidecar = spawn(service).await;
    let client = client(proto);
    let reply = fetch(&client, request(proto, sidecar.addr, "GET", "/", "")).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let report = probe_until(&client, proto, sidecar.addr, |r| r.error_rate == Some(1.0)).await;
    assert_eq!(report.error_rate, Some(1.0));
}
both_protocols!(unreachable_upstream_is_a_counted_502);

async fn too_slow_for_its_clients_does_not_look_fast(proto: Proto) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    // A replica that answers after `delay_ms`, switched from 20 ms to 1 s mid-test.
    let delay_ms = Arc::new(AtomicU64::new(20));
    let delay = Arc::clone(&delay_ms);
    let slow = tower::service_fn(move |_req: Request<Incoming>| {
        let wait = Duration::from_millis(delay.load(Ordering::SeqCst));
        async move {
            tokio::time::sleep(wait).await;
            Ok::<_, Infallible>(Response::new(http_body_util::Full::new(
                Bytes::from_static(b"ok"),
            )))
        }
    });
    let upstream = spawn(slow).await;
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    let service = tower::ServiceBuilder::new()
        .layer(ProbeLayer::new(Arc::clone(&tracker)))
        .service(Forward::new(&upstream.addr.to_string()).unwrap());
    let sidecar = spawn(service).await;
    let client = client(proto);
    for _ in 0..20 {
        let reply = fetch(&client, request(proto, sidecar.addr, "GET", "/", "")).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let healthy = probe(&client, proto, sidecar.addr).await.latency;
    assert!(healthy < Duration::from_millis(200), "{healthy:?}");
    // Now every query takes 1 s, and clients give up after 250 ms.
    delay_ms.store(1_000, Ordering::SeqCst);
    for _ in 0..12 {
        let req = request(proto, sidecar.addr, "GET", "/", "");
        let gave_up = tokio::time::timeout(Duration::from_millis(250), client.request(req)).await;
        assert!(gave_up.is_err(), "the slow replica answered in time");
    }
    // Once the sidecar has seen them leave, nothing is in flight and the abandoned waits are
    // the newest evidence: the replica must not report its old 20 ms.
    let report = probe_until(&client, proto, sidecar.addr, |r| {
        r.rif == 0 && r.latency >= Duration::from_millis(200)
    })
    .await;
    assert_eq!(report.rif, 0, "{report:?}");
    assert!(report.latency >= Duration::from_millis(200), "{report:?}");
}
both_protocols!(too_slow_for_its_clients_does_not_look_fast);
