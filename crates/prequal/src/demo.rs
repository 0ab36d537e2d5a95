//! `prequal demo`: the "Beyond Round Robin" comparison, in the simulator for now.
//!
//! Eleven replicas answer in about 167 ms; one is pinned at 2 s for the middle half of the run.
//! Round robin, least-loaded, peak EWMA and Prequal each face it in turn, on a 30 s schedule
//! (half the original 60 s), and the command prints p50, p99, p99.9 and the share of queries
//! answered within 1 s. Until the live testbed exists, this runs in virtual time and says so.

use std::path::PathBuf;

use std::io::Write as _;

use anyhow::Result;
use prequal_core::PolicyConfig;
use prequal_sim::report;
use prequal_sim::scenario::Scenario;

/// The shipped scenario, embedded so the demo works from any directory.
const SCENARIO: &str = include_str!("../../../scenarios/beyond-round-robin.toml");

/// Arguments of `prequal demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the report (default: reports/demo-beyond-round-robin).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `prequal demo`.
pub fn run(args: &Args) -> Result<()> {
    let path = PathBuf::from("scenarios/beyond-round-robin.toml");
    let contenders = ["round-robin", "least-loaded", "peak-ewma", "prequal"]
        .into_iter()
        .map(PolicyConfig::from_name)
        .collect::<Result<Vec<_>, _>>()?;
    let compiled = Scenario::parse_adjusted(SCENARIO, &path, |s| {
        s.seed = args.seed;
        s.contenders = contenders;
        s.sweep = None;
        s.scale_time(0.5);
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "prequal demo: a SIMULATION in virtual time (the live testbed is not wired in yet)."
    )?;
    if let Some(e) = compiled.scenario.servers.episodes.first() {
        writeln!(
            out,
            "{} replicas at ~167 ms; replicas {} answer in 2 s from {:.1} s to {:.1} s of a {:.0} s \
             run; 1 client at 1000 qps.\n",
            compiled.scenario.servers.count,
            e.servers,
            e.start.as_secs_f64(),
            e.end.as_secs_f64(),
            compiled.end().as_secs_f64()
        )?;
    }
    let plans = report::plan(&compiled)?;
    let report = crate::sim::run_plans(&compiled, &plans)?;
    writeln!(
        out,
        "{:<14} {:>9} {:>9} {:>9} {:>12}",
        "policy", "p50 ms", "p99 ms", "p99.9 ms", "within 1 s"
    )?;
    for r in &report.runs {
        let s = &r.output.measured.summary;
        writeln!(
            out,
            "{:<14} {:>9.1} {:>9.1} {:>9.1} {:>11.2}%",
            r.label,
            s.latency_ms.p50,
            s.latency_ms.p99,
            s.latency_ms.p999,
            s.within_objective * 100.0
        )?;
    }
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports/demo-beyond-round-robin"));
    let written = report.write_to(&dir, true)?;
    writeln!(
        out,
        "\nreport (JSON, table, plots): {} ({} files)",
        dir.display(),
        written.len()
    )?;
    Ok(())
}
