//! Cancellation keeps the client-local RIF right, over HTTP/1.1 and HTTP/2: a query counts in
//! flight from dispatch until its response body ends, and a response future or body dropped
//! before that (a timeout around the call, a caller that went away) ends it all the same.
//! Bounded loops, 127.0.0.1 only; the assertions read the policy's counts, not the clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::time::Duration;

use common::*;
use http_body_util::BodyExt;
use prequal_tower::Handle;
use tower::{Service, ServiceExt};

fn rif(handle: &Handle) -> u32 {
    handle.snapshot().replicas.iter().map(|r| r.local_rif).sum()
}

async fn dropped_futures_and_bodies_end_their_queries(proto: Proto) {
    let replicas = [Replica::start().await, Replica::start().await];
    for replica in &replicas {
        replica.set_delay_ms(2_000);
    }
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let (mut balance, _changes) = balance("prequal", proto, &addrs);
    let handle = balance.handle();

    // Response futures dropped before the response head.
    let mut futures = Vec::new();
    for _ in 0..12 {
        let call = bounded(balance.ready()).await.unwrap();
        futures.push(call.call(request(proto, "/")));
    }
    assert_eq!(rif(&handle), 12);
    for future in futures.drain(..6) {
        // A caller's timeout around the call: the future is dropped when it fires.
        let timed_out = tokio::time::timeout(Duration::from_millis(20), future).await;
        assert!(timed_out.is_err(), "the replica answers in 2 s");
    }
    assert_eq!(rif(&handle), 6);
    drop(futures);
    assert_eq!(rif(&handle), 0);

    // Bodies dropped before their end: the head alone does not end a query.
    for replica in &replicas {
        replica.set_delay_ms(1);
    }
    let mut responses = Vec::new();
    for _ in 0..6 {
        let call = bounded(balance.ready()).await.unwrap();
        let response = bounded(call.call(request(proto, "/"))).await.unwrap();
        responses.push(response);
    }
    assert_eq!(rif(&handle), 6, "bodies not read yet");
    let read = responses.split_off(3);
    drop(responses);
    assert_eq!(rif(&handle), 3);
    for response in read {
        let body = bounded(response.into_body().collect()).await.unwrap();
        assert_eq!(body.to_bytes(), "ok");
    }
    assert_eq!(rif(&handle), 0);

    // And queries read to their end after that leave nothing in flight either.
    let answers = load(&mut balance, proto, 20, 4).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(rif(&handle), 0);
}
both_protocols!(dropped_futures_and_bodies_end_their_queries);

async fn a_dropped_balancer_leaves_queries_to_end(proto: Proto) {
    let replica = Replica::start().await;
    let (mut balance, _changes) = balance("prequal", proto, &[replica.addr]);
    let handle = balance.handle();
    let call = bounded(balance.ready()).await.unwrap();
    let future = call.call(request(proto, "/"));
    drop(balance);
    assert_eq!(rif(&handle), 1);
    let response = bounded(future).await.unwrap();
    bounded(response.into_body().collect()).await.unwrap();
    assert_eq!(rif(&handle), 0);
    // The handle still reads the policy, but nothing probes any more (an idle balancer probes
    // every 100 ms): probes already out land first (a probe task lingers up to 1 s), then the
    // count stays put.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let probes = replica.probes();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        replica.probes(),
        probes,
        "no probe after the balancer is dropped"
    );
    assert_eq!(handle.snapshot().replicas.len(), 1);
}
both_protocols!(a_dropped_balancer_leaves_queries_to_end);
