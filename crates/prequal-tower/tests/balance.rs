//! The balancer end to end over loopback, HTTP/1.1 and HTTP/2: requests spread over every
//! replica, probes reach every replica through the endpoints, and every policy of the core
//! runs by name. Bounded loops, 127.0.0.1 only, no wall-clock assertions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::*;
use http::StatusCode;

async fn requests_reach_every_replica(proto: Proto) {
    let replicas = [
        Replica::start().await,
        Replica::start().await,
        Replica::start().await,
    ];
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let (mut balance, _changes) = balance("prequal", proto, &addrs);
    let handle = balance.handle();
    let answers = load(&mut balance, proto, 150, 8).await;
    assert!(
        answers.iter().all(|a| *a == Ok(StatusCode::OK)),
        "{answers:?}"
    );
    let hits: Vec<u64> = replicas.iter().map(Replica::hits).collect();
    assert_eq!(hits.iter().sum::<u64>(), 150, "{hits:?}");
    assert!(
        hits.iter().all(|&h| h > 0),
        "every replica gets queries: {hits:?}"
    );
    let probes: Vec<u64> = replicas.iter().map(Replica::probes).collect();
    assert!(
        probes.iter().all(|&p| p > 0),
        "every replica is probed: {probes:?}"
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.policy, "prequal");
    assert_eq!(snapshot.replicas.len(), 3);
    let rif: u32 = snapshot.replicas.iter().map(|r| r.local_rif).sum();
    assert_eq!(rif, 0, "every query ended: {snapshot:?}");
    let picks: u64 = snapshot.replicas.iter().map(|r| r.picks).sum();
    assert!(picks >= 150, "{snapshot:?}");
}
both_protocols!(requests_reach_every_replica);

async fn every_policy_balances_by_name(proto: Proto) {
    let replicas = [Replica::start().await, Replica::start().await];
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let mut sent = 0;
    for info in prequal_core::catalog() {
        let (mut balance, _changes) = balance(info.name, proto, &addrs);
        let answers = load(&mut balance, proto, 20, 4).await;
        assert!(
            answers.iter().all(|a| *a == Ok(StatusCode::OK)),
            "{}: {answers:?}",
            info.name
        );
        assert_eq!(balance.handle().policy(), info.name);
        sent += 20;
    }
    let hits: u64 = replicas.iter().map(Replica::hits).sum();
    assert_eq!(hits, sent);
}
both_protocols!(every_policy_balances_by_name);
