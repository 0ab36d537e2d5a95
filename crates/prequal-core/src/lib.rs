//! # prequal-core
//!
//! The sans-IO heart of prequal: every load-balancing policy, the Prequal probe pool and its
//! hot-cold lexicographic (HCL) rule, the server-side load estimator, and the resilience building
//! blocks (peak EWMA, retry budget, hedging, outlier ejection, slow start) that the proxy and the
//! simulator share. [`balancer`] puts them together around one policy: the [`Balancer`] that the
//! proxy and the simulator both drive. [`hedge`] decides when a request earns a second try (Dean
//! and Barroso's hedged requests) over a recent-latency quantile ([`latency_quantile`]) and a
//! budget.
//!
//! Nothing in this crate performs I/O, reads a clock, sleeps, spawns, or touches a global random
//! source. Time comes in as [`Time`] and randomness as `&mut dyn RngCore`; decisions come out as
//! values. The simulator drives it in virtual time, the proxy in real time, and both run the same
//! lines. See [`policy`] for the event flow and [`config`] for building a policy by name.
//!
//! ```
//! use prequal_core::{PolicyConfig, Query, QueryId, Pick, ReplicaChange, ReplicaId, Time};
//! use rand::SeedableRng;
//!
//! let mut policy = PolicyConfig::from_name("round-robin").unwrap().build().unwrap();
//! for id in 0..3 {
//!     policy.on_replica_change(ReplicaChange::Insert(ReplicaId(id)), Time::ZERO);
//! }
//! let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
//! let query = Query { id: QueryId(1), hint: None };
//! // Round robin starts at a random replica, then takes each in turn.
//! let Pick::Replica(first) = policy.pick(&query, Time::ZERO, &mut rng) else { panic!() };
//! let next = ReplicaId((first.0 + 1) % 3);
//! assert_eq!(policy.pick(&query, Time::ZERO, &mut rng), Pick::Replica(next));
//! ```

pub mod balancer;
pub mod config;
pub mod estimator;
pub mod ewma;
pub mod hedge;
pub mod latency_quantile;
pub mod outlier;
pub mod policies;
pub mod policy;
pub mod replica;
pub mod retry_budget;
pub mod rounding;
mod sampling;
mod sliding_window;
pub mod slow_start;
pub mod time;

#[cfg(test)]
mod testing;

pub use balancer::{Balancer, BalancerConfig, RetryDecision, Strict};
pub use config::{BuildPolicy, ConfigError, ParamDoc, PolicyConfig, PolicyInfo, catalog};
pub use estimator::{
    Arrival, EstimatorConfig, EstimatorConfigError, LatencyEstimator, LoadTracker,
};
pub use ewma::PeakEwma;
pub use hedge::{HedgeConfig, HedgeDecision, HedgeStats, Hedger};
pub use latency_quantile::LatencyQuantile;
pub use outlier::{Ejection, EjectionReason, OutlierConfig, OutlierDetector};
pub use policy::{
    Completion, LoadReport, Outcome, Pick, Policy, PoolEntryView, ProbeEnd, ProbeId, ProbeRequest,
    Query, QueryId, ReplicaView, Snapshot,
};
pub use replica::{ReplicaChange, ReplicaId, Replicas};
pub use retry_budget::{BlockConfigError, RetryBudget, RetryBudgetConfig};
pub use slow_start::SlowStartConfig;
pub use time::Time;
