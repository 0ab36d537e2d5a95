//! The balancer's errors. Like tower's, the balancer returns [`BoxError`]:
//! an endpoint's own error passes through unchanged, and the balancer adds these.

use crate::box_error::BoxError;

/// Discovery failed: the `Discover` stream yielded an error.
#[derive(Debug, thiserror::Error)]
#[error("service discovery failed: {0}")]
pub struct DiscoverError(#[source] pub BoxError);

/// `call` came without a `poll_ready` that returned `Ready(Ok(()))` before it, against the
/// `tower::Service` contract (tower's own balancer panics here; this one fails the request).
#[derive(Debug, thiserror::Error)]
#[error("Balance::call before poll_ready chose an endpoint")]
pub struct NotReady;
