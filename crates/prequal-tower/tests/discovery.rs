//! Membership while requests flow, over HTTP/1.1 and HTTP/2: endpoints inserted and removed
//! through a channel-backed `Discover` mid-load, and an endpoint whose readiness fails dropped
//! from the balancer and its policy. Bounded loops, 127.0.0.1 only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use http::StatusCode;
use prequal_tower::Builder;
use tower::discover::Change;

fn all_ok(answers: &[Answer]) -> bool {
    answers.iter().all(|a| *a == Ok(StatusCode::OK))
}

async fn inserts_and_removals_while_requests_flow(proto: Proto) {
    let (a, b, c) = (
        Replica::start().await,
        Replica::start().await,
        Replica::start().await,
    );
    let (mut balance, changes) = balance("prequal", proto, &[a.addr, b.addr]);
    let client = client(proto);
    let handle = balance.handle();
    let answers = load(&mut balance, proto, 40, 4).await;
    assert!(all_ok(&answers), "{answers:?}");
    assert_eq!(c.hits(), 0);

    // C joins once the next batch is under way.
    let start = a.hits() + b.hits();
    let insert = async {
        eventually(|| a.hits() + b.hits() >= start + 20).await;
        changes
            .send(Change::Insert(c.addr, endpoint(&client, c.addr)))
            .unwrap();
    };
    let (answers, ()) = tokio::join!(load(&mut balance, proto, 300, 4), insert);
    assert!(all_ok(&answers), "{answers:?}");
    assert!(c.hits() > 0, "the inserted replica gets queries");
    assert_eq!(handle.snapshot().replicas.len(), 3);

    // A leaves mid-batch; the queries it has in flight still finish.
    let start = a.hits() + b.hits() + c.hits();
    let remove = async {
        eventually(|| a.hits() + b.hits() + c.hits() >= start + 20).await;
        changes.send(Change::Remove(a.addr)).unwrap();
    };
    let (answers, ()) = tokio::join!(load(&mut balance, proto, 300, 4), remove);
    assert!(all_ok(&answers), "{answers:?}");
    let a_hits = a.hits();
    let answers = load(&mut balance, proto, 100, 4).await;
    assert!(all_ok(&answers), "{answers:?}");
    assert_eq!(a.hits(), a_hits, "no query goes to a removed replica");
    assert_eq!(balance.len(), 2);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.replicas.len(), 2, "{snapshot:?}");
    assert_eq!(
        snapshot.replicas.iter().map(|r| r.local_rif).sum::<u32>(),
        0
    );
}
both_protocols!(inserts_and_removals_while_requests_flow);

async fn an_endpoint_failing_readiness_is_dropped(proto: Proto) {
    let replicas = [
        Replica::start().await,
        Replica::start().await,
        Replica::start().await,
    ];
    let client = client(proto);
    let (changes, discover) = discovery();
    let broken = Arc::new(AtomicBool::new(false));
    for (i, replica) in replicas.iter().enumerate() {
        let endpoint = Breakable {
            inner: endpoint(&client, replica.addr),
            broken: Arc::new(AtomicBool::new(false)),
        };
        let endpoint = match i {
            2 => Breakable {
                broken: Arc::clone(&broken),
                ..endpoint
            },
            _ => endpoint,
        };
        changes
            .send(Change::Insert(replica.addr, endpoint))
            .unwrap();
    }
    let mut balance = Builder::new(policy("prequal"))
        .seed(7)
        .build(discover)
        .unwrap();
    let answers = load(&mut balance, proto, 30, 4).await;
    assert!(all_ok(&answers), "{answers:?}");
    broken.store(true, Ordering::SeqCst);
    // A broken endpoint is never called: the balancer finds out when it checks the endpoint it
    // chose just before sending (and drops it), and the policy learns it from the probes,
    // which go through the endpoint and fail (and avoids it).
    let answers = load(&mut balance, proto, 100, 4).await;
    assert!(all_ok(&answers), "{answers:?}");
    let broken_hits = replicas[2].hits();
    let answers = load(&mut balance, proto, 100, 4).await;
    assert!(all_ok(&answers), "{answers:?}");
    assert_eq!(replicas[2].hits(), broken_hits);
    let snapshot = balance.handle().snapshot();
    let dropped = balance.len() == 2 && snapshot.replicas.len() == 2;
    let avoided = snapshot.replicas.get(2).is_some_and(|r| r.avoided);
    assert!(dropped || avoided, "{snapshot:?}");
    // Discovery can bring it back.
    broken.store(false, Ordering::SeqCst);
    let endpoint = Breakable {
        inner: endpoint(&client, replicas[2].addr),
        broken,
    };
    changes
        .send(Change::Insert(replicas[2].addr, endpoint))
        .unwrap();
    let answers = load(&mut balance, proto, 10, 4).await;
    assert!(all_ok(&answers), "{answers:?}");
    assert_eq!(balance.len(), 3);
}
both_protocols!(an_endpoint_failing_readiness_is_dropped);
