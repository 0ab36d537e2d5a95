//! HTTP handling end to end, over HTTP/1.1 and HTTP/2: trailers, forwarding headers, limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// A gRPC-style call through the proxy to the test backend, which answers with `code` as its
/// `grpc-status` trailer; the whole response, read to its end.
async fn grpc_call(
    client: &TestClient,
    proxy: std::net::SocketAddr,
    code: &str,
) -> http_body_util::Collected<bytes::Bytes> {
    let request = http::Request::post(format!("http://{proxy}/grpc/{code}"))
        .header("te", "trailers")
        .header("content-type", "application/grpc")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
}

async fn trailers_pass_through(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let collected = grpc_call(&client(proto), proxy.addr, "0").await;
    let trailers = collected.trailers().cloned().expect("trailers arrived");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(&collected.to_bytes()[..], b"payload");
}
over_h1_and_h2!(grpc_style_trailers_pass_through, trailers_pass_through);

async fn trailer_responses_keep_their_connection(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let client = client(proto);
    for _ in 0..20 {
        let collected = grpc_call(&client, proxy.addr, "0").await;
        assert!(collected.trailers().is_some());
    }
    let accepted = backend
        .connections
        .load(std::sync::atomic::Ordering::SeqCst);
    // A response that ends in trailers is as finished as any other: its connection is reused.
    assert!(
        (1..=3).contains(&accepted),
        "{accepted} connections carried 20 responses with trailers"
    );
}
over_h1_and_h2!(
    responses_with_trailers_keep_their_connection,
    trailer_responses_keep_their_connection
);

#[tokio::test]
async fn connect_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], Proto::H1, "\"round-robin\"", "")).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 405");
    assert_eq!(backend.hits(), 0);
}

/// A client whose streamed body is malformed gets a 400, and the replica it was streamed to
/// is not blamed, however long the body streamed first: once the hedge delay is learned a try
/// abandoned past it would count as a timeout, and five in a row would eject a healthy replica.
#[tokio::test]
async fn a_malformed_request_body_is_the_clients_fault_not_the_replicas() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backends = [Backend::start().await, Backend::start().await];
    let text = config_text(
        &[&backends[0], &backends[1]],
        Proto::H1,
        "\"round-robin\"",
        "",
    );
    let proxy = start_proxy(&text).await;
    // Enough answers for the hedger to learn its delay (and each replica its usual time).
    assert_eq!(load(&client(Proto::H1), proxy.addr, 60, 2).await, 60);
    let bad_body = |addr| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
            )
            .await
            .unwrap();
        // Well past the learned delay and the replicas' usual time, then a chunk size that is
        // not hexadecimal.
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        stream.write_all(b"zz\r\n").await.unwrap();
        let mut head = [0u8; 12];
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_exact(&mut head),
        )
        .await
        .expect("an answer within 10 s")
        .unwrap();
        head
    };
    // Ten at once: five to each replica, as many as eject one that fails them all.
    let heads: Vec<[u8; 12]> =
        futures_util::future::join_all((0..10).map(|_| bad_body(proxy.addr))).await;
    for head in heads {
        assert_eq!(&head, b"HTTP/1.1 400", "{}", String::from_utf8_lossy(&head));
    }
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    assert_eq!(ejected_replicas(&metrics), 0.0, "{metrics}");
    assert_eq!(load(&client(Proto::H1), proxy.addr, 20, 2).await, 20);
}

async fn forwarding_headers(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let mut request = http::Request::get(format!("http://{}/echo-headers", proxy.addr))
        .header("host", "app.example")
        .header("x-forwarded-for", "10.1.2.3");
    if proto == Proto::H1 {
        // Connection-specific headers exist only in HTTP/1.1.
        request = request
            .header("connection", "x-private")
            .header("x-private", "secret")
            .header("keep-alive", "timeout=5");
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = client(proto).request(request).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let seen = String::from_utf8_lossy(&body).into_owned();
    assert!(
        seen.contains("x-forwarded-for: 10.1.2.3, 127.0.0.1"),
        "{seen}"
    );
    assert!(
        seen.contains("forwarded: for=127.0.0.1;proto=http"),
        "{seen}"
    );
    assert!(
        seen.contains("via: 1.1 prequal") || seen.contains("via: 2 prequal"),
        "{seen}"
    );
    assert!(
        !seen.contains("x-private") && !seen.contains("keep-alive"),
        "{seen}"
    );
    match proto {
        Proto::H1 => assert!(seen.contains("host: app.example"), "{seen}"),
        Proto::H2 => assert!(seen.contains("x-forwarded-host: app.example"), "{seen}"),
    }
}
over_h1_and_h2!(
    forwarding_headers_are_set_and_hop_by_hop_removed,
    forwarding_headers
);

/// A replica's piggybacked load is for the balancer that chose it: the proxy reads it and
/// keeps it from the client.
async fn piggybacked_load(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"prequal\"", "")).await;
    let fetch = |addr: std::net::SocketAddr| {
        let request = http::Request::get(format!("http://{addr}/piggyback"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        client(proto).request(request)
    };
    let direct = fetch(backend.addr).await.unwrap();
    assert!(
        direct.headers().contains_key("prequal-load"),
        "the backend piggybacks"
    );
    let response = fetch(proxy.addr).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        !response.headers().contains_key("prequal-load"),
        "{:?}",
        response.headers()
    );
}
over_h1_and_h2!(piggybacked_load_stays_with_the_proxy, piggybacked_load);

async fn body_limit(proto: Proto) {
    let backend = Backend::start().await;
    let text = config_text(&[&backend], proto, "\"round-robin\"", "").replace(
        "drain_timeout = \"5s\"",
        "drain_timeout = \"5s\"\nmax_body_bytes = 16",
    );
    let proxy = start_proxy(&text).await;
    let post = |len: usize| {
        http::Request::post(format!("http://{}/upload", proxy.addr))
            .body(http_body_util::Full::new(bytes::Bytes::from(vec![
                b'x';
                len
            ])))
            .unwrap()
    };
    let client = client(proto);
    assert_eq!(client.request(post(16)).await.unwrap().status(), 200);
    assert_eq!(client.request(post(17)).await.unwrap().status(), 413);
    assert_eq!(
        backend.hits(),
        1,
        "the oversized body never reached the replica"
    );
}
over_h1_and_h2!(bodies_over_the_limit_get_413, body_limit);

async fn grpc_status_outcomes(proto: Proto) {
    let backend = Backend::start().await;
    let text = config_text(
        &[&backend],
        proto,
        "\"round-robin\"",
        "outlier_ejection = false",
    );
    let proxy = start_proxy(&text).await;
    let client = client(proto);
    for code in ["0", "5", "14", "13"] {
        let collected = grpc_call(&client, proxy.addr, code).await;
        assert_eq!(collected.trailers().unwrap()["grpc-status"], code);
    }
    // A try completes when the proxy has finished relaying its body, which may be a moment
    // after the client saw the end: wait (bounded) until all four are counted.
    let series = |outcome: &str| {
        format!(
            "prequal_proxy_upstream_tries_total{{cluster=\"test\",replica=\"{}\",outcome=\"{outcome}\"}}",
            backend.addr
        )
    };
    let admin = client_again(Proto::H1);
    let mut counts = (0.0, 0.0);
    for _ in 0..200 {
        let metrics = get(&admin, proxy.admin, "/metrics").await.1;
        counts = (
            metric(&metrics, &series("success")),
            metric(&metrics, &series("error")),
        );
        if counts.0 + counts.1 >= 4.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // OK and NOT_FOUND are the replica doing its job; UNAVAILABLE and INTERNAL blame it.
    assert_eq!(counts, (2.0, 2.0));
}
over_h1_and_h2!(
    grpc_statuses_that_blame_the_server_count_as_errors,
    grpc_status_outcomes
);

async fn pooled_connections(proto: Proto) {
    let backend = Backend::start().await;
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", "")).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 100, 1).await, 100);
    let accepted = backend
        .connections
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(backend.hits(), 100);
    // A connection returns to the pool a moment after its response ends, so a sequential
    // client may occasionally find none idle; never anything like one per request.
    assert!(
        (1..=3).contains(&accepted),
        "{accepted} connections carried 100 requests"
    );
    // Round robin sends no probes, so every connection the replica accepted was a request's.
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    let opened = |purpose: &str| {
        let name = format!(
            "prequal_proxy_upstream_connections_total{{cluster=\"test\",purpose=\"{purpose}\"}}"
        );
        metric(&metrics, &name)
    };
    assert_eq!(opened("request"), accepted as f64);
    assert_eq!(opened("probe"), 0.0);
}
over_h1_and_h2!(upstream_connections_are_pooled, pooled_connections);

/// A proxy whose policy probes opens one probe connection to every replica from each
/// data-plane thread before any request, so that the first probes under load do not each
/// open their own; one whose policy does not probe opens none.
#[tokio::test]
async fn probe_connections_are_opened_before_the_first_request() {
    let backends = futures_join(2).await;
    let upstreams: Vec<String> = backends.iter().map(|b| format!("\"{}\"", b.addr)).collect();
    let config = |policy: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworker_threads = 2\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [clusters.test]\nupstreams = [{}]\npolicy = {policy}\n",
            upstreams.join(", ")
        )
    };
    let opened = |metrics: &str| {
        metric(
            metrics,
            "prequal_proxy_upstream_connections_total{cluster=\"test\",purpose=\"probe\"}",
        )
    };
    let admin = client_again(Proto::H1);
    // An idle-probe period of an hour: the only probe connections are the ones opened ahead.
    let proxy = start_proxy(&config(r#"{ name = "prequal", max_idle = "1h" }"#)).await;
    let mut probe_connections = 0.0;
    for _ in 0..400 {
        probe_connections = opened(&get(&admin, proxy.admin, "/metrics").await.1);
        if probe_connections >= 4.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Two threads, two replicas; perhaps one more for a first idle probe.
    assert!(
        (4.0..=5.0).contains(&probe_connections),
        "{probe_connections} probe connections opened ahead"
    );
    for backend in &backends {
        assert!(
            backend
                .connections
                .load(std::sync::atomic::Ordering::SeqCst)
                >= 2
        );
        assert_eq!(backend.hits(), 0);
    }
    let round_robin = start_proxy(&config("\"round-robin\"")).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let metrics = get(&admin, round_robin.admin, "/metrics").await.1;
    assert_eq!(opened(&metrics), 0.0);
}
