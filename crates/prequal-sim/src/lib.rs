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
//! let p99 = |i: usize| report.runs[i].output.measured.summary.latency_ms.p99;
//! assert!(p99(1) < p99(0), "prequal steers around the slow replica");
//! ```

pub mod engine;
pub mod hash;
pub mod metrics;
pub mod model;
pub mod plot;
pub mod queue;
pub mod report;
pub mod scenario;
