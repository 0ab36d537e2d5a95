//! Building a balancer: the policy and what surrounds it, the random source, the prober and
//! the probe limits.

use http::Request;
use prequal_core::{Balancer, BalancerConfig, ConfigError, PolicyConfig};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use tower::Service;
use tower::discover::Discover;

use crate::balance::Balance;
use crate::driver::{Driver, ProbeLimits};
use crate::probe::{MakeProbe, ThroughEndpoint};

/// Default for [`Builder::max_probes_per_replica`].
pub const MAX_PROBES_PER_REPLICA: usize = 8;
/// Default for [`Builder::max_probes_in_flight`].
pub const MAX_PROBES_IN_FLIGHT: usize = 256;

/// Builds a [`Balance`]. Every setting has a default; only the policy must be named.
///
/// ```
/// use prequal_tower::Builder;
///
/// let builder = Builder::from_name("prequal")
///     .unwrap()
///     .seed(7)                      // reproducible random choices (default: a random seed)
///     .max_probes_per_replica(4)   // default 8
///     .max_probes_in_flight(128);  // default 256
/// # let _ = builder;
/// ```
pub struct Builder {
    policy: PolicyConfig,
    balancer: BalancerConfig,
    rng: Option<Box<dyn RngCore + Send>>,
    limits: ProbeLimits,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("policy", &self.policy)
            .field("balancer", &self.balancer)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// A balancer running `policy` (validated when the balancer is built).
    pub fn new(policy: PolicyConfig) -> Self {
        Self {
            policy,
            balancer: BalancerConfig::default(),
            rng: None,
            limits: ProbeLimits {
                per_replica: MAX_PROBES_PER_REPLICA,
                in_flight: MAX_PROBES_IN_FLIGHT,
            },
        }
    }

    /// A balancer running the policy `name` with all its defaults (`prequal policies` lists
    /// them; `docs/policies.md` explains each).
    pub fn from_name(name: &str) -> Result<Self, ConfigError> {
        Ok(Self::new(PolicyConfig::from_name(name)?))
    }

    /// What surrounds the policy: outlier ejection (`outlier_ejection`, `outlier`) and slow
    /// start for replicas discovered after the first request (`slow_start`), with the proxy's
    /// defaults (`BalancerConfig::default()`: ejection on, a 30 s ramp). Its `max_attempts`,
    /// `retry_budget` and `hedge` are not used here: retries and hedging belong to tower's own
    /// layers around the balancer. Checked when the balancer is built.
    pub fn balancer(mut self, config: BalancerConfig) -> Self {
        self.balancer = config;
        self
    }

    /// The random source of every choice the policy makes by chance (default: seeded from the
    /// process's random hash keys).
    pub fn rng(mut self, rng: impl RngCore + Send + 'static) -> Self {
        self.rng = Some(Box::new(rng));
        self
    }

    /// Seeds the random source: the same seed and the same events give the same choices.
    pub fn seed(self, seed: u64) -> Self {
        self.rng(SmallRng::seed_from_u64(seed))
    }

    /// Probes in flight to one replica, late ones included, beyond which more are not sent
    /// (default 8, at least 1). A probe not sent does not count against its replica.
    pub fn max_probes_per_replica(mut self, max: usize) -> Self {
        self.limits.per_replica = max.max(1);
        self
    }

    /// Probes in flight from the balancer (default 256, at least 1).
    pub fn max_probes_in_flight(mut self, max: usize) -> Self {
        self.limits.in_flight = max.max(1);
        self
    }

    /// Builds a balancer over `discover` that probes each replica through its endpoint service
    /// ([`ThroughEndpoint`]).
    pub fn build<D, B>(self, discover: D) -> Result<Balance<D, B>, ConfigError>
    where
        D: Discover,
        D::Key: std::hash::Hash,
        B: 'static,
        D::Service: Service<Request<B>>,
        ThroughEndpoint<B>: MakeProbe<D::Key, D::Service>,
    {
        self.build_with_prober(discover, ThroughEndpoint::new())
    }

    /// Builds a balancer over `discover` that probes each replica through the service
    /// `prober` makes for it.
    pub fn build_with_prober<D, B, P>(
        self,
        discover: D,
        prober: P,
    ) -> Result<Balance<D, B>, ConfigError>
    where
        D: Discover,
        D::Key: std::hash::Hash,
        D::Service: Service<Request<B>>,
        P: MakeProbe<D::Key, D::Service> + Send + 'static,
    {
        let balancer = Balancer::new(self.policy.build()?, &self.balancer)?;
        let rng = self
            .rng
            .unwrap_or_else(|| Box::new(SmallRng::seed_from_u64(random_seed())));
        let driver = Driver::new(balancer, rng, self.limits);
        Ok(Balance::from_parts(discover, driver, prober))
    }
}

impl<D, B> Balance<D, B>
where
    D: Discover,
    D::Key: std::hash::Hash,
{
    /// A balancer over `discover` running `policy` with every other setting at its default
    /// (see [`Builder`]), probing each replica through its endpoint service.
    pub fn new(discover: D, policy: PolicyConfig) -> Result<Self, ConfigError>
    where
        B: 'static,
        D::Service: Service<Request<B>>,
        ThroughEndpoint<B>: MakeProbe<D::Key, D::Service>,
    {
        Builder::new(policy).build(discover)
    }
}

/// A seed from the standard library's per-process random hash keys: balancers need
/// independence from each other and between runs, not reproducibility (for that, `seed`).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
