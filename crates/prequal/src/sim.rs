//! `prequal sim SCENARIO.toml`: runs a scenario in the discrete-event simulator.
//!
//! Every contender (and every sweep point) runs in virtual time on all cores; the command
//! prints the comparison table and writes `report.json`, `summary.txt` and the plots (SVG and
//! PNG) to the output directory (default `reports/<scenario>/`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use std::io::Write as _;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use prequal_core::HedgeConfig;
use prequal_sim::report::{self, Report, RunPlan};
use prequal_sim::scenario::{Compiled, Contender, Scenario};

/// Arguments of `prequal sim`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario file (TOML; see docs/scenarios.md).
    pub scenario: PathBuf,
    /// Directory for report.json, summary.txt and plots (default: `reports/<scenario name>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Multiply every time in the load schedule and the episodes (0.1 = ten times shorter).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Write no plots (JSON and table only).
    #[arg(long)]
    pub no_plots: bool,
    /// Print the JSON report on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also run each contender that does not hedge with hedging at prequal-core's defaults
    /// (a `+hedge` run right after it; docs/reliability.md).
    #[arg(long)]
    pub hedge: bool,
}

/// After every contender that does not hedge, the same policy with default hedging.
fn add_hedged_copies(s: &mut Scenario) {
    if s.clients.hedge.as_ref().is_some_and(|h| h.enabled) {
        return; // Every contender hedges already.
    }
    let mut out = Vec::new();
    for c in s.contenders.drain(..) {
        let hedged = c.hedge.is_none().then(|| Contender {
            policy: c.policy.clone(),
            hedge: Some(HedgeConfig::default()),
            balancer: c.balancer.clone(),
        });
        out.push(c);
        out.extend(hedged);
    }
    s.contenders = out;
}

/// Loads a scenario with the command-line adjustments applied.
pub fn load(path: &Path, seed: Option<u64>, time_scale: f64) -> Result<Compiled> {
    if !(time_scale.is_finite() && time_scale > 0.0) {
        bail!("--time-scale: expected a number above 0, got {time_scale}");
    }
    Ok(Scenario::load_adjusted(path, |s| {
        if let Some(seed) = seed {
            s.seed = seed;
        }
        s.scale_time(time_scale);
    })?)
}

/// Runs every plan with a progress bar on stderr (hidden when stderr is not a terminal).
pub fn run_plans(compiled: &Compiled, plans: &[RunPlan]) -> Result<Report> {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(plans.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = |p: &RunPlan| {
        bar.set_message(p.label.clone());
        bar.inc(1);
    };
    let report = report::run_all(compiled, plans, &progress)?;
    bar.finish_and_clear();
    Ok(report)
}

/// Runs `prequal sim`.
pub fn run(args: &Args) -> Result<()> {
    let mut compiled = load(&args.scenario, args.seed, args.time_scale)?;
    if args.hedge {
        add_hedged_copies(&mut compiled.scenario);
    }
    let plans =
        report::plan(&compiled).with_context(|| format!("{}: sweep", args.scenario.display()))?;
    let started = Instant::now();
    let report = run_plans(&compiled, &plans)?;
    let wall = started.elapsed();
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("reports").join(&report.scenario));
    let written = report.write_to(&dir, !args.no_plots)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", report.to_json()?)?;
        return Ok(());
    }
    writeln!(
        out,
        "SIMULATION of {} ({} runs, {:.0} simulated s each, seed {}) in {:.2} s wall time",
        report.scenario,
        report.runs.len(),
        report.duration_s,
        report.seed,
        wall.as_secs_f64()
    )?;
    write!(out, "{}", report.table())?;
    writeln!(out, "report: {} ({} files)", dir.display(), written.len())?;
    Ok(())
}
