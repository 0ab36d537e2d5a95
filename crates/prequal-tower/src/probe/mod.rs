//! How probes reach the replicas: a [`MakeProbe`] turns each endpoint that discovery inserts
//! into a probe service, a `tower::Service<Probe, Response = LoadReport>`.
//!
//! The balancer never needs to know how a replica is reached. When [`Discover`] inserts an
//! endpoint, the balancer asks its `MakeProbe` for that replica's probe service and, from then
//! on, sends it a [`Probe`] (with the query hint in sync mode) each time the policy asks for
//! one, as its own task, under the policy's probe timeout. Anything that yields a
//! [`LoadReport`] will do; two are provided:
//!
//! - [`ThroughEndpoint`] (the default): the probe is an HTTP request, `GET
//!   /.prequal/probe?v=1`, sent through a clone of the endpoint service itself, so it takes the
//!   same route, connection pool and middleware as the queries. It fits endpoints that are
//!   `Clone`: a hyper-util client wrapped to address one replica, a `tower::service_fn`, a
//!   tonic `Channel`.
//! - [`HttpProber`]: the probe goes through a hyper-util client of its own, to the address
//!   the discovery key names (`http://{key}/.prequal/probe?v=1`), for endpoints that cannot be
//!   cloned or that should keep probe traffic on separate connections.
//!
//! A reply is read as the probe protocol says (`docs/probe-protocol.md`): status 200 and one
//! line of at most 256 bytes, parsed strictly by [`prequal_http::protocol::parse_reply`].
//! Anything else (another status, a malformed or over-long body, a transport error, no reply
//! within the timeout) is a failed probe, which the policy hears of and which never breaks the
//! balancer.
//!
//! A custom prober is a closure: any `FnMut(&K, &S) -> P` where `P` is a cloneable probe
//! service is a `MakeProbe`, so `tower::service_fn` builds one in a line:
//!
//! ```
//! use prequal_core::LoadReport;
//! use prequal_tower::probe::{MakeProbe, Probe};
//! use std::time::Duration;
//!
//! // Replicas that report a fixed load (a test double, or a load source outside HTTP).
//! let mut make = |key: &u32, _endpoint: &()| {
//!     let rif = *key;
//!     tower::service_fn(move |_probe: Probe| async move {
//!         Ok::<_, std::convert::Infallible>(LoadReport {
//!             rif,
//!             latency: Duration::from_millis(5),
//!             ..LoadReport::default()
//!         })
//!     })
//! };
//! let _probe_service = make.make_probe(&3, &());
//! ```
//!
//! [`Discover`]: tower::discover::Discover

mod client;
mod endpoint;
mod make;

use futures_util::future::BoxFuture;
use prequal_core::LoadReport;
pub use prequal_http::protocol::Probe;
use tower::{Service, ServiceExt};

pub use self::client::{HttpProbe, HttpProber};
pub use self::endpoint::{EndpointProbe, ThroughEndpoint};
pub use self::make::MakeProbe;
use crate::box_error::BoxError;

/// One probe on its way: the replica's report or why there is none.
pub(crate) type ProbeFuture = BoxFuture<'static, Result<LoadReport, BoxError>>;

/// A replica's probe service with its type erased, so the driver holds one kind for all.
pub(crate) type SendProbe = Box<dyn Fn(Probe) -> ProbeFuture + Send>;

/// Erases the type of a probe service.
pub(crate) fn erase<P>(service: P) -> SendProbe
where
    P: Service<Probe, Response = LoadReport> + Clone + Send + 'static,
    P::Error: Into<BoxError>,
    P::Future: Send + 'static,
{
    Box::new(move |probe| {
        let service = service.clone();
        Box::pin(async move { service.oneshot(probe).await.map_err(Into::into) })
    })
}

/// Why a probe reply was refused.
pub use prequal_http::ProbeReplyError as ReplyError;
/// Reads a probe reply: status 200 and a body the strict v1 parser accepts.
pub use prequal_http::read_probe_reply as read_reply;
