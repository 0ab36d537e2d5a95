//! # prequal-model
//!
//! What the simulator and the live testbed must agree on, so that one scenario file means the
//! same replicas, the same load and the same measurements in virtual time (`prequal sim`) and
//! on loopback (`prequal experiment`):
//!
//! - [`model`]: the sans-IO replica models (latency distributions and traces, processor
//!   sharing, thread pools, episodes and faults). `prequal-sim` drives a
//!   [`model::ReplicaModel`] per server in virtual time; `prequal backend` drives the same state
//!   machine in real time.
//! - [`scenario`]: the scenario file (TOML) and its parsing, validation and compilation into a
//!   [`scenario::Compiled`] run: replicas, clients, load phases, network, contenders, sweep and
//!   the `[experiment]` section.
//! - [`metrics`]: the [`metrics::Recorder`] that attributes each query to the second and phase
//!   in which it was issued, and the serialisable [`metrics::Measured`] results that the
//!   simulator's engine and the live load generator both produce, so their reports line up.
//!
//! Nothing here reads a clock, sleeps, spawns threads or opens a socket: time comes in as a
//! [`prequal_core::Time`] and randomness as a caller's `&mut dyn RngCore`, so a seed and a
//! scenario always give the same replica behaviour. The one file access is reading the
//! scenario itself and the latency traces it names, when asked to ([`scenario::Scenario::load`],
//! [`model::TraceLoader`]). The event loop, event queue, reports and plots stay in
//! `prequal-sim`, which re-exports these modules under their old paths (`prequal_sim::model`,
//! `prequal_sim::scenario`, `prequal_sim::metrics`).
//!
//! ```
//! use std::path::Path;
//! use std::time::Duration;
//! use prequal_core::Time;
//! use prequal_model::model::{Admission, ReplicaModel};
//! use prequal_model::scenario::Scenario;
//! use rand::SeedableRng;
//! use rand::rngs::SmallRng;
//!
//! let text = r#"
//! contenders = ["prequal"]
//! [servers]
//! count = 2
//! latency = { kind = "constant", value = "20ms" }
//! [[servers.episodes]]
//! servers = [1]
//! start = "1s"
//! end = "2s"
//! latency = "500ms"
//! [clients]
//! count = 1
//! [load]
//! steps = [{ duration = "3s", level = 100.0 }]
//! "#;
//! let compiled = Scenario::parse(text, Path::new("example.toml")).unwrap();
//! assert_eq!(compiled.phases.len(), 1);
//!
//! // Replica 1 answers in 500 ms during its episode, like replica 0 otherwise.
//! let mut rng = SmallRng::seed_from_u64(1);
//! let servers = &compiled.scenario.servers;
//! let mut replica = ReplicaModel::new(servers, 1, compiled.service.clone(), &mut rng);
//! let mut done = Vec::new();
//! let mut admit = |at| replica.admit(Time::from_millis(at), &mut rng, &mut done).0;
//! assert_eq!(admit(500), Admission::After(Duration::from_millis(20)));
//! assert_eq!(admit(1500), Admission::After(Duration::from_millis(500)));
//! ```

pub mod metrics;
pub mod model;
pub mod scenario;
