//! Failures over HTTP/1.1 and HTTP/2: a replica answering 5xx and a replica that refuses
//! connections are reported to the caller and avoided by the policy; probes that fail in every
//! way (malformed, 500, no answer) never fail a request. Bounded loops, 127.0.0.1 only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use common::*;
use http::StatusCode;
use prequal_core::{BalancerConfig, ReplicaId, Snapshot};
use prequal_tower::Builder;

/// Whether the policy avoids replica `id`, or the balancer ejected it.
fn avoided_or_ejected(snapshot: &Snapshot, ejected: &[ReplicaId], id: u32) -> bool {
    let id = ReplicaId(id);
    ejected.contains(&id)
        || snapshot
            .replicas
            .iter()
            .any(|r| r.id == Some(id) && r.avoided)
}

/// Three replicas, the third answering 503, and their addresses.
async fn three_replicas_the_last_failing() -> ([Replica; 3], Vec<std::net::SocketAddr>) {
    let replicas = [
        Replica::start().await,
        Replica::start().await,
        Replica::start().await,
    ];
    replicas[2].set_status(503);
    let addrs = replicas.iter().map(|r| r.addr).collect();
    (replicas, addrs)
}

async fn a_replica_answering_errors_is_avoided(proto: Proto) {
    let (replicas, addrs) = three_replicas_the_last_failing().await;
    let (mut balance, _changes) = balance("prequal", proto, &addrs);
    let answers = load(&mut balance, proto, 200, 4).await;
    let ok = answers.iter().filter(|a| **a == Ok(StatusCode::OK)).count();
    let unavailable = answers
        .iter()
        .filter(|a| **a == Ok(StatusCode::SERVICE_UNAVAILABLE))
        .count();
    assert_eq!(ok + unavailable, 200, "{answers:?}");
    assert!(unavailable > 0, "the errors reach the caller");
    let snapshot = balance.handle().snapshot();
    let ejected = balance.handle().ejected();
    // Replica ids follow the order of insertion.
    assert!(
        avoided_or_ejected(&snapshot, &ejected, 2),
        "{snapshot:?} {ejected:?}"
    );
    let before = replicas[2].hits();
    let answers = load(&mut balance, proto, 100, 4).await;
    let failing = replicas[2].hits() - before;
    assert!(
        failing <= 5,
        "{failing} of 100 queries went to the failing replica"
    );
    let ok = answers.iter().filter(|a| **a == Ok(StatusCode::OK)).count() as u64;
    assert_eq!(ok, 100 - failing);
}
both_protocols!(a_replica_answering_errors_is_avoided);

/// Round robin has no error aversion of its own: the balancer's outlier ejection (on by
/// default, as in the proxy) is what keeps it off a replica answering 503.
async fn outlier_ejection_takes_a_failing_replica_out(proto: Proto) {
    let (replicas, addrs) = three_replicas_the_last_failing().await;
    let failing_share = |ejection: bool| {
        let builder = Builder::new(policy("round-robin")).balancer(BalancerConfig {
            outlier_ejection: ejection,
            ..BalancerConfig::default()
        });
        let (mut balance, _changes) = balance_with(builder, proto, &addrs);
        let replicas = &replicas;
        async move {
            let before = replicas[2].hits();
            load(&mut balance, proto, 150, 1).await;
            let ejected = balance.handle().ejected();
            (replicas[2].hits() - before, ejected)
        }
    };
    let (with, ejected) = failing_share(true).await;
    let (without, none) = failing_share(false).await;
    assert_eq!(ejected, vec![ReplicaId(2)]);
    assert!(none.is_empty(), "{none:?}");
    // Five failures in a row eject it (outlier defaults); without ejection it keeps a third.
    assert!(
        with <= 10,
        "{with} of 150 queries reached the failing replica"
    );
    assert!(without >= 40, "without ejection: {without} of 150");
}
both_protocols!(outlier_ejection_takes_a_failing_replica_out);

async fn an_unreachable_replica_is_avoided(proto: Proto) {
    let replicas = [Replica::start().await, Replica::start().await];
    // A port that was just free: connections to it are refused.
    let dead = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let addrs = [replicas[0].addr, replicas[1].addr, dead];
    let (mut balance, _changes) = balance("prequal", proto, &addrs);
    let answers = load(&mut balance, proto, 200, 4).await;
    let ok = answers.iter().filter(|a| **a == Ok(StatusCode::OK)).count();
    let errors = answers.iter().filter(|a| a.is_err()).count();
    assert_eq!(
        ok + errors,
        200,
        "every request answered or failed: {answers:?}"
    );
    let snapshot = balance.handle().snapshot();
    let ejected = balance.handle().ejected();
    assert!(
        avoided_or_ejected(&snapshot, &ejected, 2),
        "{snapshot:?} {ejected:?}"
    );
    let answers = load(&mut balance, proto, 100, 4).await;
    let errors = answers.iter().filter(|a| a.is_err()).count();
    assert!(errors <= 5, "{errors} of 100 queries failed: {answers:?}");
}
both_protocols!(an_unreachable_replica_is_avoided);

async fn failed_probes_never_fail_a_request(proto: Proto) {
    let replicas = [
        Replica::start().await,
        Replica::start().await,
        Replica::start().await,
    ];
    replicas[0].set_probe_mode(ProbeMode::Malformed);
    replicas[1].set_probe_mode(ProbeMode::ServerError);
    replicas[2].set_probe_mode(ProbeMode::Hang);
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let (mut balance, _changes) = balance("prequal", proto, &addrs);
    let handle = balance.handle();
    let answers = load(&mut balance, proto, 150, 4).await;
    assert!(
        answers.iter().all(|a| *a == Ok(StatusCode::OK)),
        "{answers:?}"
    );
    assert_eq!(replicas.iter().map(Replica::hits).sum::<u64>(), 150);
    assert!(
        handle.snapshot().pool.is_empty(),
        "no failed probe enters the pool"
    );
    // Once the replicas answer probes again, the idle probes fill the pool.
    for replica in &replicas {
        replica.set_probe_mode(ProbeMode::Answer);
    }
    assert!(eventually(|| handle.snapshot().pool.len() >= 2).await);
    let answers = load(&mut balance, proto, 30, 4).await;
    assert!(
        answers.iter().all(|a| *a == Ok(StatusCode::OK)),
        "{answers:?}"
    );
}
both_protocols!(failed_probes_never_fail_a_request);
