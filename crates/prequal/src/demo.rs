//! `prequal demo`: the "Beyond Round Robin" comparison, live on this machine in about a minute.
//!
//! Eleven emulated replicas answer in about 167 ms; one is pinned at 2 s for the middle half of
//! the run. Round robin, least-loaded, peak EWMA and Prequal (each as a `prequal proxy`), and
//! HAProxy's `leastconn` and Traefik's `leasttime` when they are installed, each face it in turn at 1000 queries per
//! second on a 9 s schedule (0.15 of the original 60 s). The command prints the comparison table
//! (p50, p99, p99.9, share within 1 s, and the simulator's prediction beside each) and where the
//! report is. `--sim` runs the same comparison in the simulator instead (30 s schedule, well
//! under a second of wall time).

use std::path::PathBuf;
use std::time::Duration;

use std::io::Write as _;

use anyhow::{Context, Result};
use prequal_core::PolicyConfig;
use prequal_experiment::Options;
use prequal_sim::report;
use prequal_sim::scenario::Scenario;

/// The shipped scenario, embedded so the demo works from any directory.
const SCENARIO: &str = include_str!("../../../scenarios/beyond-round-robin.toml");

/// The live demo's share of the original schedule: 9 s of load per contender.
const LIVE_TIME_SCALE: f64 = 0.15;

/// Arguments of `prequal demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the report (default: reports/demo-beyond-round-robin).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of the load and the replicas.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the comparison in the simulator (virtual time) instead of live.
    #[arg(long)]
    pub sim: bool,
    /// Leave out HAProxy and Traefik even when they are installed.
    #[arg(long)]
    pub no_external: bool,
}

fn contenders() -> Result<Vec<PolicyConfig>> {
    Ok(["round-robin", "least-loaded", "peak-ewma", "prequal"]
        .into_iter()
        .map(PolicyConfig::from_name)
        .collect::<Result<Vec<_>, _>>()?)
}

/// Runs `prequal demo`.
pub fn run(args: &Args) -> Result<()> {
    if args.sim {
        return simulated(args);
    }
    let path = PathBuf::from("scenarios/beyond-round-robin.toml");
    let contenders = contenders()?;
    let compiled = Scenario::parse_adjusted(SCENARIO, &path, |s| {
        s.seed = args.seed;
        s.contenders = contenders.into_iter().map(Into::into).collect();
        s.sweep = None;
        s.experiment.haproxy = Some(vec!["leastconn".into()]);
        s.experiment.nginx = Some(Vec::new());
        s.experiment.traefik = Some(vec!["leasttime".into()]);
        s.scale_time(LIVE_TIME_SCALE);
    })?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports/demo-beyond-round-robin"));
    let options = Options {
        out: out.clone(),
        prequal_exe: std::env::current_exe().context("finding the prequal executable")?,
        external: !args.no_external,
        only: Vec::new(),
        predict: true,
        startup: Duration::from_millis(1500),
    };
    eprintln!(
        "prequal demo: LIVE on loopback. 11 emulated replicas at ~167 ms; replica 10 answers in \
         2 s for the middle half of each run; 1000 queries/s for {:.0} s per contender.",
        compiled.end().as_secs_f64()
    );
    let Some(report) = crate::experiment::run_live(&compiled, &options, false)? else {
        return Ok(());
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "\n{}", report.summary())?;
    let written = report.write_to(&out)?;
    writeln!(
        stdout,
        "report: {}/index.html ({} files; the last column is the simulator's prediction)",
        out.display(),
        written.len()
    )?;
    crate::experiment::fail_if_interrupted(&report)
}

/// The same comparison in the simulator, on a 30 s schedule.
fn simulated(args: &Args) -> Result<()> {
    let path = PathBuf::from("scenarios/beyond-round-robin.toml");
    let contenders = contenders()?;
    let compiled = Scenario::parse_adjusted(SCENARIO, &path, |s| {
        s.seed = args.seed;
        s.contenders = contenders.into_iter().map(Into::into).collect();
        s.sweep = None;
        s.scale_time(0.5);
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "prequal demo --sim: a SIMULATION in virtual time (run without --sim for the live demo)."
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
