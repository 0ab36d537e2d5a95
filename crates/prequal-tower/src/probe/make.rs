//! [`MakeProbe`], which gives the balancer a probe service for each endpoint that discovery
//! inserts (any closure of the right shape is one). Re-exported from [`crate::probe`], whose
//! docs tell how probes reach the replicas.

use std::future::Future;

use prequal_core::LoadReport;
use prequal_http::protocol::Probe;
use tower::Service;

use crate::box_error::BoxError;

/// Builds the probe service of each endpoint that discovery inserts.
///
/// `K` is the discovery key and `S` the endpoint service. The probe service is cloned for each
/// probe (`oneshot`), as hyper-util clients and tonic channels are meant to be.
pub trait MakeProbe<K, S> {
    /// The probe service's error.
    type Error: Into<BoxError>;
    /// The probe service's future.
    type Future: Future<Output = Result<LoadReport, Self::Error>> + Send + 'static;
    /// The probe service of one replica.
    type Probe: Service<Probe, Response = LoadReport, Error = Self::Error, Future = Self::Future>
        + Clone
        + Send
        + 'static;

    /// The probe service for the endpoint `endpoint`, discovered under `key`.
    fn make_probe(&mut self, key: &K, endpoint: &S) -> Self::Probe;
}

impl<K, S, F, P> MakeProbe<K, S> for F
where
    F: FnMut(&K, &S) -> P,
    P: Service<Probe, Response = LoadReport> + Clone + Send + 'static,
    P::Error: Into<BoxError>,
    P::Future: Send + 'static,
{
    type Error = P::Error;
    type Future = P::Future;
    type Probe = P;

    fn make_probe(&mut self, key: &K, endpoint: &S) -> P {
        self(key, endpoint)
    }
}
