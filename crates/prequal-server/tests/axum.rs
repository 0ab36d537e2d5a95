//! `ProbeLayer` on an axum `Router`: the layer type-checks as an axum layer, answers probes on
//! its reserved path, and tracks the router's requests. Run over HTTP/1.1 and HTTP/2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use common::{Proto, client, fetch, probe_until, request, spawn};
use prequal_core::EstimatorConfig;
use prequal_server::{ProbeLayer, SharedTracker};

async fn axum_router_with_the_layer(proto: Proto) {
    let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
    let app = Router::new()
        .route("/hello", get(|| async { "hello from axum" }))
        .layer(ProbeLayer::new(Arc::clone(&tracker)).piggyback(true));
    let server = spawn(app).await;
    let client = client(proto);
    let reply = fetch(&client, request(proto, server.addr, "GET", "/hello", "")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(&reply.body[..], b"hello from axum");
    assert!(
        reply
            .headers
            .contains_key(prequal_server::protocol::LOAD_HEADER)
    );
    let missing = fetch(&client, request(proto, server.addr, "GET", "/nope", "")).await;
    assert_eq!(missing.status, 404);
    let report = probe_until(&client, proto, server.addr, |r| {
        r.qps.is_some_and(|q| q > 0.0)
    })
    .await;
    assert_eq!(report.rif, 0);
    assert_eq!(report.error_rate, Some(0.0), "a 404 is not a server error");
    let bad = fetch(
        &client,
        request(proto, server.addr, "GET", "/.prequal/probe?v=0", ""),
    )
    .await;
    assert_eq!(bad.status, 400);
}
both_protocols!(axum_router_with_the_layer);
