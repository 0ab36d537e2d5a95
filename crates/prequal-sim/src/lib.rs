//! # prequal-sim
//!
//! A discrete-event simulator that drives prequal-core's policies in virtual time.
//!
//! A run reads a [`scenario`] (TOML: replicas, clients, load schedule, network, episodes,
//! contenders, sweep), plans one run per contender and sweep point ([`report::plan`]), runs
//! them in parallel ([`report::run_all`]), each through the [`engine`], and collects a
//! [`report::Report`]: a table, byte-stable JSON, and [`plot`]s. Time is integer nanoseconds
//! ([`prequal_core::Time`]); events wait in a radix heap ([`queue`]) that pops equal times in
//! the order they were pushed; every random choice comes from streams seeded by the
//! scenario's seed, so a seed and a file always give the same report.
//!
//! The replica models, the scenario file and the metrics are not this crate's own: they live
//! in `prequal-model`, shared with the live testbed, and are re-exported here under the paths
//! they had before the split. [`model`] is [`prequal_model::model`] (the sans-IO server model
//! the live backend, `prequal backend`, runs too), [`scenario`] is
//! [`prequal_model::scenario`] and [`metrics`] is [`prequal_model::metrics`]. The [`engine`],
//! the event [`queue`], the [`report`]s and [`plot`]s are the simulator's.
//!
//! ```
//! use std::path::Path;
//! use prequal_sim::report;
//! use prequal_sim::scenario::Scenario;
//!
//! let text = r#"
//! contenders = ["round-robin", "prequal"]
//! latency_objective = "100ms"
//! [servers]
//! count = 4
//! latency = { kind = "normal", mean = "20ms", sd = "2ms" }
//! [[servers.episodes]]
//! servers = [3]
//! start = "1s"
//! end = "2s"
//! latency = "500ms"
//! [clients]
//! count = 2
//! [load]
//! steps = [{ duration = "3s", level = 200.0 }]
//! "#;
//! let compiled = Scenario::parse(text, Path::new("example.toml")).unwrap();
//! let plans = report::plan(&compiled).unwrap();
//! let report = report::run_all(&compiled, &plans, &|_| {}).unwrap();
//! // Round robin sends a quarter of the queries to the slow replica for a third of the run.
//! let slow = |i: usize| 1.0 - report.runs[i].output.measured.summary.within_objective;
//! assert!((slow(0) - 1.0 / 12.0).abs() < 0.02);
//! assert!(slow(1) < slow(0) / 2.0, "prequal steers around the slow replica");
//! ```

pub mod engine;
pub mod plot;
pub mod queue;
pub mod report;

#[doc(no_inline)]
pub use prequal_model::{metrics, model, scenario};
