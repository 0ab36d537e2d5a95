//! # prequal-sim
//!
//! A discrete-event simulator that drives prequal-core's policies in virtual time, and the
//! sans-IO server model ([`model`]) it shares with the live backend (`prequal backend`).
//!
//! A run reads a [`scenario`] (TOML: replicas, clients, load schedule, network, episodes,
//! contenders, sweep), plans one run per contender and sweep point ([`report::plan`]), runs
//! them in parallel ([`report::run_all`]), each through the [`engine`], and collects a
//! [`report::Report`]: a table, byte-stable JSON, and [`plot`]s. Time is integer nanoseconds
//! ([`prequal_core::Time`]); events wait in a radix heap ([`queue`]) that pops equal times in
//! the order they were pushed; every random choice comes from streams seeded by the
//! scenario's seed, so a seed and a file always give the same report.
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
pub mod metrics;
pub mod model;
pub mod plot;
pub mod queue;
pub mod report;
pub mod scenario;
