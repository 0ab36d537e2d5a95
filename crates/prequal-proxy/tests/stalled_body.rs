//! A replica that sends its response head and then nothing (a host stopped between the head
//! and the body, as under SIGSTOP): a small response is read whole within its try
//! (`response_buffer_limit`), so the try times out and the request is retried on another
//! replica; with the limit at 0 the head is passed on at once and the client waits on a body
//! that never comes, until `response_idle_timeout` cuts it off. Over HTTP/1.1 and HTTP/2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{HeaderMap, HeaderValue, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// What a test replica answers: a head declaring `len` bytes and then nothing, or a whole body
/// of declared length with optional trailers.
#[derive(Clone)]
enum Reply {
    Stalled(u64),
    Whole(Bytes, Option<HeaderMap>),
}

impl Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            Reply::Stalled(_) => Poll::Pending,
            Reply::Whole(data, trailers) if data.is_empty() => {
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            Reply::Whole(data, _) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(data))))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Reply::Stalled(len) => SizeHint::with_exact(*len),
            Reply::Whole(data, _) => SizeHint::with_exact(data.len() as u64),
        }
    }
}

/// A replica on 127.0.0.1 that answers every request (probes too) with `reply`, its length
/// declared in `Content-Length`.
async fn replica(reply: Reply) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let reply = reply.clone();
            let service = service_fn(move |_: Request<hyper::body::Incoming>| {
                let reply = reply.clone();
                async move {
                    let len = reply.size_hint().exact().unwrap_or_default();
                    let mut response = Response::new(reply);
                    response
                        .headers_mut()
                        .insert(header::CONTENT_LENGTH, len.into());
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(async move {
                let builder = auto::Builder::new(TokioExecutor::new());
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A replica that answers every request with a head declaring a `len`-byte body, and then
/// stalls.
async fn stalling_replica(len: u64) -> SocketAddr {
    replica(Reply::Stalled(len)).await
}

/// A config with round robin over the stalling replica and a healthy one, tries cut at
/// 300 ms, no hedging, and `extra` lines.
fn config(stalling: SocketAddr, healthy: &Backend, proto: Proto, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams = [\"{stalling}\", \"{}\"]\npolicy = \"round-robin\"\n\
         protocol = \"{}\"\ntry_timeout = \"300ms\"\noutlier_ejection = false\n{NO_HEDGING}\n{extra}\n",
        healthy.addr,
        proto.toml()
    )
}

async fn stalled_body_is_retried(proto: Proto) {
    let stalling = stalling_replica(5).await;
    let healthy = Backend::start().await;
    let proxy = start_proxy(&config(stalling, &healthy, proto, "")).await;
    let client = client(proto);
    // Round robin sends every other first try to the stalling replica; each of those times
    // out at 300 ms and is retried on the healthy one.
    for _ in 0..4 {
        let start = Instant::now();
        let answered = send_within(
            &client,
            proxy.addr,
            "GET",
            Vec::new(),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(answered, Some(200), "every request is answered in full");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never held past the client's patience"
        );
    }
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    let timeouts = metric_sum(
        &metrics,
        &[
            "upstream_tries_total",
            &stalling.to_string(),
            "outcome=\"timeout\"",
        ],
    );
    // Round robin's turn moves on with each retry's pick too, so how many first tries met the
    // stalling replica depends on the order; each was retried.
    let retries = metric(&metrics, "prequal_proxy_retries_total{cluster=\"test\"}");
    assert!(
        timeouts >= 1.0 && timeouts == retries,
        "the stalled tries count against their replica, and each was retried\n{metrics}"
    );
    assert_eq!(
        healthy.hits(),
        4,
        "each request served by the healthy replica"
    );
}

async fn stalled_body_is_hedged(proto: Proto) {
    // Hedging on, with a fixed 50 ms delay, and the default 10 s try timeout: a head whose
    // body is late re-times the hedge to the head plus the body allowance (the hedge delay,
    // while few late bodies are known), so the request is answered by the hedge, long before
    // the try would time out.
    let stalling = stalling_replica(5).await;
    let healthy = Backend::start().await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams = [\"{stalling}\", \"{}\"]\npolicy = \"round-robin\"\n\
         protocol = \"{}\"\noutlier_ejection = false\nhedge = {{ delay = \"50ms\" }}\n",
        healthy.addr,
        proto.toml()
    );
    let proxy = start_proxy(&text).await;
    let client = client(proto);
    for _ in 0..4 {
        let answered = send_within(
            &client,
            proxy.addr,
            "GET",
            Vec::new(),
            Duration::from_secs(3),
        )
        .await;
        assert_eq!(
            answered,
            Some(200),
            "answered in full well before the try timeout"
        );
    }
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    let won = metric(&metrics, "prequal_proxy_hedges_won_total{cluster=\"test\"}");
    assert!(
        won >= 1.0,
        "the stalled tries were rescued by hedges\n{metrics}"
    );
}

/// Two requests by round robin, one to a replica that declares a body of `len` bytes and
/// stalls, one to a healthy one, with `extra` cluster lines that make the stalled body
/// stream: its head is passed on as it comes, so that request holds its client (no try
/// timeout covers a streamed body, and the idle cut-off is a minute away).
async fn stalled_stream_holds_client(proto: Proto, len: u64, extra: &str) {
    let stalling = stalling_replica(len).await;
    let healthy = Backend::start().await;
    let proxy = start_proxy(&config(stalling, &healthy, proto, extra)).await;
    let client = client(proto);
    let mut answered = Vec::new();
    for _ in 0..2 {
        let patience = Duration::from_secs(1);
        answered.push(send_within(&client, proxy.addr, "GET", Vec::new(), patience).await);
    }
    answered.sort();
    assert_eq!(answered, vec![None, Some(200)]);
}

async fn streamed_when_the_limit_is_off(proto: Proto) {
    stalled_stream_holds_client(proto, 5, "response_buffer_limit = 0").await;
}

async fn large_stalled_body_streams(proto: Proto) {
    // Declared larger than the limit: the head is passed on at once, as with the limit off.
    stalled_stream_holds_client(proto, 1_000, "response_buffer_limit = 999").await;
}

async fn streamed_body_idle_is_cut_off(proto: Proto) {
    // Streamed (over the limit), with a short idle timeout: the client gets the head, then an
    // error once the replica has sent nothing for 300 ms, instead of waiting for ever.
    let stalling = stalling_replica(1_000).await;
    let healthy = Backend::start().await;
    let extra = "response_buffer_limit = 999\nresponse_idle_timeout = \"300ms\"";
    let proxy = start_proxy(&config(stalling, &healthy, proto, extra)).await;
    let client = client(proto);
    let mut cut_off = 0;
    for _ in 0..2 {
        let request = Request::get(format!("http://{}/work", proxy.addr))
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let start = Instant::now();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let body = tokio::time::timeout(
            Duration::from_secs(5),
            http_body_util::BodyExt::collect(response.into_body()),
        )
        .await
        .expect("the body ends, in full or cut off, well before the test's guard");
        if body.is_err() {
            cut_off += 1;
            assert!(start.elapsed() >= Duration::from_millis(300));
        }
    }
    assert_eq!(cut_off, 1, "the stalled body, and only it, is cut off");
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    let stalled = |outcome: &str| {
        metric_sum(
            &metrics,
            &[
                "upstream_tries_total",
                &stalling.to_string(),
                &format!("outcome=\"{outcome}\""),
            ],
        )
    };
    // A stream may rightly be quiet: the cut protects the client, and is no verdict on the
    // replica.
    assert_eq!(stalled("error"), 0.0, "{metrics}");
    assert_eq!(
        stalled("cancelled"),
        1.0,
        "the cut-off try ends cancelled\n{metrics}"
    );
}

/// Tries whose small body is read whole end as their answer says: a success, or, over HTTP/2
/// where trailers may follow a declared length, what the trailers' `grpc-status` says.
async fn read_whole_tries_end_as_answered(proto: Proto) {
    let ok = replica(Reply::Whole(Bytes::from_static(b"ok"), None)).await;
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("14"));
    let unavailable = replica(Reply::Whole(Bytes::from_static(b"no"), Some(trailers))).await;
    let upstreams = match proto {
        Proto::H1 => format!("\"{ok}\""),
        Proto::H2 => format!("\"{ok}\", \"{unavailable}\""),
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams = [{upstreams}]\npolicy = \"round-robin\"\n\
         protocol = \"{}\"\noutlier_ejection = false\nmax_attempts = 1\n{NO_HEDGING}\n",
        proto.toml()
    );
    let proxy = start_proxy(&text).await;
    let client = client(proto);
    for _ in 0..4 {
        let patience = Duration::from_secs(5);
        assert_eq!(
            send_within(&client, proxy.addr, "GET", Vec::new(), patience).await,
            Some(200)
        );
    }
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    let tries = |replica: SocketAddr, outcome: &str| {
        metric_sum(
            &metrics,
            &[
                "upstream_tries_total",
                &replica.to_string(),
                &format!("outcome=\"{outcome}\""),
            ],
        )
    };
    let (ok_tries, failing_tries) = match proto {
        Proto::H1 => (4.0, 0.0),
        Proto::H2 => (2.0, 2.0),
    };
    assert_eq!(tries(ok, "success"), ok_tries, "{metrics}");
    assert_eq!(tries(unavailable, "error"), failing_tries, "{metrics}");
    assert_eq!(
        tries(ok, "cancelled") + tries(unavailable, "cancelled"),
        0.0
    );
}

over_h1_and_h2!(stalled_body, stalled_body_is_retried);
over_h1_and_h2!(read_whole_outcomes, read_whole_tries_end_as_answered);
over_h1_and_h2!(stalled_body_hedged, stalled_body_is_hedged);
over_h1_and_h2!(idle_stream, streamed_body_idle_is_cut_off);
over_h1_and_h2!(limit_off, streamed_when_the_limit_is_off);
over_h1_and_h2!(over_the_limit, large_stalled_body_streams);
