//! tonic channels as endpoints and tonic servers behind `ProbeLayer` as replicas (HTTP/2, as
//! tonic speaks it): calls are balanced over every replica through `tonic::client::Grpc`, and a
//! replica whose calls fail with UNAVAILABLE (a status that travels in the trailers) is
//! avoided. Bounded loops, 127.0.0.1 only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/common/echo.rs"]
mod echo;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use http::uri::PathAndQuery;
use prequal_core::PolicyConfig;
use prequal_tower::Balance;
use tonic::transport::Endpoint;
use tower::buffer::Buffer;
use tower::discover::ServiceList;

const BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_channels_balanced_and_a_failing_replica_avoided() {
    let mut stops = Vec::new();
    let mut channels = Vec::new();
    let failing = Arc::new(AtomicBool::new(true));
    for i in 0..3 {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        let echo = echo::Echo {
            name: format!("replica-{i}"),
            delay: Duration::from_millis(1),
            failing: match i {
                2 => Arc::clone(&failing),
                _ => Arc::default(),
            },
        };
        let addr = echo::start(echo, stopped).await.unwrap();
        let endpoint = Endpoint::from_shared(format!("http://{addr}")).unwrap();
        channels.push(endpoint.connect_lazy());
    }
    let policy: PolicyConfig =
        toml::from_str("name = \"prequal\"\nprobe_timeout = \"100ms\"").unwrap();
    let balance = Balance::new(ServiceList::new(channels), policy).unwrap();
    let handle = balance.handle();
    let mut grpc = tonic::client::Grpc::new(Buffer::new(balance, 16));
    let mut replies = [0usize; 3];
    let mut unavailable = 0;
    for call in 0..150 {
        tokio::time::timeout(BOUND, grpc.ready())
            .await
            .unwrap()
            .unwrap();
        let request = tonic::Request::new(format!("call {call}"));
        let path = PathAndQuery::from_static(echo::SAY);
        let reply = tokio::time::timeout(BOUND, grpc.unary(request, path, echo::StringCodec))
            .await
            .unwrap();
        match reply {
            Ok(reply) => {
                let text = reply.into_inner();
                assert!(text.ends_with(&format!(": call {call}")), "{text}");
                let replica = text.as_bytes()["replica-".len()] - b'0';
                replies[usize::from(replica)] += 1;
            }
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                unavailable += 1;
            }
        }
    }
    assert_eq!(replies[0] + replies[1] + unavailable, 150, "{replies:?}");
    assert!(replies[0] > 0 && replies[1] > 0, "{replies:?}");
    let snapshot = handle.snapshot();
    assert!(
        snapshot.replicas[2].avoided,
        "UNAVAILABLE counts as an error: {snapshot:?}"
    );
    assert!(unavailable <= 30, "{unavailable} calls failed");
    let rif: u32 = snapshot.replicas.iter().map(|r| r.local_rif).sum();
    assert_eq!(rif, 0, "{snapshot:?}");
    drop(stops);
}
