//! # prequal-tower
//!
//! Prequal inside a Rust client: a [`tower::Service`] that balances requests over a set of
//! endpoint services with any policy of `prequal-core`, Prequal first among them, with no
//! proxy hop. It is the third driver of the same sans-IO core, beside the `prequal proxy` and
//! the simulator, and holds no balancing logic of its own.
//!
//! ## The algorithm
//!
//! Prequal (Wydrowski et al., "Load is not what you should balance: Introducing Prequal",
//! NSDI 2024) runs in each client's RPC library. The client probes replicas, off the query's
//! path, for their requests in flight (RIF) and their latency estimate at that RIF, keeps a
//! small pool of fresh replies (16, none older than 1 s, each used a bounded number of times),
//! and sends each query to the best reply's replica by the hot-cold lexicographic rule: a
//! reply is *hot* when its RIF is above the 84th percentile of recent RIFs; the cold reply
//! with the lowest latency wins, or the lowest RIF when all are hot. Each query triggers 3
//! probes to random replicas; an idle client probes every 100 ms. `docs/policies.md` has
//! every parameter and default.
//!
//! tower's own [`p2c`](https://docs.rs/tower/latest/tower/balance/p2c/index.html) balancer
//! compares two random endpoints by a load the *client* sees (`PeakEwma` latency or
//! `PendingRequests`). Prequal asks the *replicas*: a replica slowed by a noisy neighbour, a
//! garbage-collection pause or slower hardware says so in its probe replies before this client
//! has sent it anything.
//!
//! ## Using it
//!
//! Endpoints come from a [`Discover`](tower::discover::Discover), as for tower's balancer;
//! each must answer the probe protocol (`docs/probe-protocol.md`), which
//! `prequal_server::ProbeLayer` adds to any hyper, axum or tonic server, and `prequal sidecar`
//! to a server in any language. Here, three in-process replicas:
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use prequal_core::{EstimatorConfig, PolicyConfig};
//! use prequal_server::{ProbeLayer, SharedTracker};
//! use prequal_tower::Balance;
//! use tower::discover::ServiceList;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), prequal_tower::BoxError> {
//! // Each replica answers probes from its own load tracker.
//! let replicas: Vec<_> = (0..3)
//!     .map(|i| {
//!         let tracker = Arc::new(SharedTracker::new(EstimatorConfig::default()));
//!         ServiceBuilder::new()
//!             .layer(ProbeLayer::new(tracker))
//!             .service_fn(move |_request: http::Request<Full<Bytes>>| async move {
//!                 let body = Full::new(Bytes::from(format!("replica {i}")));
//!                 Ok::<_, Infallible>(http::Response::new(body))
//!             })
//!     })
//!     .collect();
//!
//! let policy = PolicyConfig::from_name("prequal")?;
//! let mut balance = Balance::new(ServiceList::new(replicas), policy)?;
//!
//! for _ in 0..10 {
//!     let request = http::Request::new(Full::new(Bytes::new()));
//!     let response = balance.ready().await?.call(request).await?;
//!     let body = response.into_body().collect().await?.to_bytes();
//!     assert!(body.starts_with(b"replica "));
//! }
//! // What the policy knows: per replica its RIF from this client, picks, and the probe pool.
//! let snapshot = balance.handle().snapshot();
//! assert_eq!(snapshot.replicas.len(), 3);
//! # Ok(())
//! # }
//! ```
//!
//! Over the network, each endpoint is an [`HttpEndpoint`] (a pooled hyper-util client
//! addressed to one replica) or a tonic `Channel`; `examples/hyper_client.rs` and
//! `examples/tonic_client.rs` show both. Any policy runs by name (`"peak-ewma"`,
//! `"least-loaded"`, `"prequal-sync"`, ... as `prequal policies` lists them) or from a
//! [`PolicyConfig`](prequal_core::PolicyConfig) with its parameters; [`Builder`] sets the random
//! source and the probe limits.
//!
//! ## What the balancer does for you
//!
//! - **Readiness and backpressure**, the tower way: `poll_ready` drives discovery, polls the
//!   endpoints that are not ready, and chooses one that is; with none ready it returns
//!   `Pending`. See [`balance`].
//! - **Probes** go to each replica as their own tokio tasks, through the service a
//!   [`probe::MakeProbe`] builds for it (by default through the endpoint itself), under the
//!   policy's probe timeout and bounded per replica and per balancer. A failed probe (error,
//!   timeout, malformed reply) is reported to the policy and never fails a request. A replica
//!   that refuses probes (a 404: no `ProbeLayer`) or answers them only after the timeout is
//!   named by its discovery key in a `tracing` warning, once rather than once per probe
//!   (`docs/library.md`, "How probes travel"); so keys must be `Debug`.
//! - **Timers** (idle probing, load polling, sync-mode deadlines) run on one tokio task per
//!   balancer, which ends when the balancer is gone.
//! - **Completions.** A query counts in flight until its response *body* ends; then the policy
//!   hears its latency and outcome (5xx, endpoint errors and gRPC fault statuses are errors,
//!   which Prequal's error aversion counts). A response future or body dropped early counts as
//!   cancelled, so RIF never leaks. A `prequal-load` header on a response is fed to the policy
//!   as a free load report when the query ends, right after its end. See [`response`].
//! - **Membership.** Inserts and removals from discovery reach the policy as they come, while
//!   requests flow; an endpoint whose `poll_ready` fails is dropped until discovery inserts it
//!   again.
//!
//! `Balance` needs a tokio runtime (probes and timers are tokio tasks) and, like tower's
//! balancer, is not `Clone`: share one between tasks with `tower::buffer::Buffer`, or give each
//! task its own (each then keeps its own probe pool, as each client does in the paper).

#![deny(missing_docs)]

pub mod balance;
mod box_error;
pub mod builder;
mod driver;
pub mod endpoint;
pub mod error;
pub mod probe;
mod probe_slot;
mod prober;
mod replica;
pub mod response;
mod rif;

pub use balance::{Balance, Handle};
pub use box_error::BoxError;
pub use builder::Builder;
pub use endpoint::HttpEndpoint;
pub use error::{DiscoverError, NotReady};
pub use probe::{HttpProber, MakeProbe, ThroughEndpoint};
pub use response::{ResponseBody, ResponseFuture};
