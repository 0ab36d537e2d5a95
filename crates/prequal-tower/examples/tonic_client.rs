//! A tonic client balancing over three tonic servers with Prequal, in one process on loopback.
//!
//! Each server runs a gRPC echo service (no protobuf: a hand-written string codec, see
//! `common/echo.rs`) behind prequal-server's `ProbeLayer`, which answers probes with the
//! server's requests in flight and latency. The third server is ten times slower. The client
//! gives `prequal_tower::Balance` one tonic `Channel` per server, shares it between eight
//! tasks through `tower::buffer::Buffer`, and makes 400 calls; the slow server should get few
//! of them.
//!
//! ```sh
//! cargo run -p prequal-tower --example tonic_client
//! ```

#[path = "common/echo.rs"]
mod echo;

use std::collections::BTreeMap;
use std::time::Duration;

use http::uri::PathAndQuery;
use prequal_core::PolicyConfig;
use prequal_tower::{Balance, BoxError};
use tonic::transport::{Channel, Endpoint};
use tower::buffer::Buffer;
use tower::discover::ServiceList;

const TASKS: usize = 8;
const CALLS_PER_TASK: usize = 50;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (_stop, stops) = (0..3)
        .map(|_| tokio::sync::oneshot::channel::<()>())
        .unzip::<_, _, Vec<_>, Vec<_>>();
    let mut channels: Vec<Channel> = Vec::new();
    for (i, stop) in stops.into_iter().enumerate() {
        let delay = Duration::from_millis(if i == 2 { 20 } else { 2 });
        let echo = echo::Echo {
            name: format!("replica-{i}"),
            delay,
            failing: Default::default(),
        };
        let addr = echo::start(echo, stop).await?;
        println!("replica-{i} on {addr}, answering in {delay:?}");
        channels.push(Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy());
    }

    // Each Channel is an endpoint; probes go through it too (`GET /.prequal/probe?v=1`). The
    // policy's parameters are those of docs/policies.md; the probe timeout is raised from the
    // datacenter default (3 ms) so that a debug build on a busy laptop keeps its probes.
    let policy: PolicyConfig = toml::from_str("name = \"prequal\"\nprobe_timeout = \"20ms\"")?;
    let balance = Balance::new(ServiceList::new(channels), policy)?;
    let handle = balance.handle();
    let grpc = tonic::client::Grpc::new(Buffer::new(balance, 64));

    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let mut grpc = grpc.clone();
        tasks.spawn(async move {
            let mut replies = Vec::with_capacity(CALLS_PER_TASK);
            for call in 0..CALLS_PER_TASK {
                grpc.ready().await?;
                let request = tonic::Request::new(format!("hello {task}/{call}"));
                let path = PathAndQuery::from_static(echo::SAY);
                let reply = grpc.unary(request, path, echo::StringCodec).await?;
                replies.push(reply.into_inner());
            }
            Ok::<_, BoxError>(replies)
        });
    }
    let mut per_replica: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        for reply in joined?? {
            let replica = reply.split(':').next().unwrap_or_default().to_string();
            *per_replica.entry(replica).or_default() += 1;
        }
    }
    println!("\ncalls per replica:");
    for (replica, calls) in &per_replica {
        println!("  {replica}: {calls}");
    }
    let snapshot = handle.snapshot();
    println!("\nprobe pool now ({} replies):", snapshot.pool.len());
    for entry in &snapshot.pool {
        let heat = if entry.hot { "hot" } else { "cold" };
        println!(
            "  {} rif={} latency_us={} {heat}",
            entry.replica, entry.rif, entry.latency_us
        );
    }
    Ok(())
}
