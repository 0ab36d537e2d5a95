//! Every balancing policy, one module each (one folder for Prequal), and the two modules they
//! share: [`probing`] (the asynchronous probing engine, pool, error aversion and probing
//! parameters behind `prequal`, `linear` and `c3`) and [`local`] (client-local load, the best of
//! d random draws, a polling schedule). A policy module depends on those, never on a sibling
//! policy.
//!
//! Each policy module exports a `Config` (serde, with documented defaults, implementing
//! [`crate::config::BuildPolicy`]) and the policy type it builds. The policies are listed, with
//! their signal and rule, in docs/policies.md and by `prequal policies`.

pub mod c3;
pub mod least_loaded;
pub mod least_loaded_p2c;
pub mod least_time;
pub mod linear;
pub mod local;
pub mod peak_ewma;
pub mod prequal;
pub mod probing;
pub mod random;
pub mod round_robin;
pub mod weighted_round_robin;
pub mod yarp_p2c;

/// `prequal-sync` lives beside `prequal` in its folder; this alias gives it a module path of
/// its own.
pub use prequal::sync as prequal_sync;
