//! Every balancing policy, one module each (one folder for Prequal).
//!
//! Each module exports a `Config` (serde, with documented defaults, implementing
//! [`crate::config::BuildPolicy`]) and the policy type it builds. The policies are listed, with
//! their signal and rule, in docs/policies.md and by `prequal policies`.

pub mod least_loaded;
pub mod least_loaded_p2c;
pub mod peak_ewma;
pub mod random;
pub mod round_robin;
pub mod weighted_round_robin;
pub mod yarp_p2c;
