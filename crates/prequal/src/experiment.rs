//! `prequal experiment SCENARIO.toml`: the scenario live on loopback, each contender in turn.
//!
//! Contenders are the scenario's policies (each run as `prequal proxy`), HAProxy, nginx and
//! Traefik with the algorithms of its `[experiment]` section when they are installed (skipped with a message
//! when not), and optionally the load straight at the replicas. Every contender gets fresh
//! replicas (`prequal backend`) and the same open-loop load. The command prints one line per
//! second while a contender runs, the comparison table at the end, and writes the report folder
//! (default `reports/<scenario>-live/`): report.json, summary.txt, summary.md, plots and a
//! self-contained index.html. SIGINT or SIGTERM stops every process it started.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use prequal_experiment::{self as experiment, Event, ExperimentReport, Options};
use prequal_sim::scenario::Compiled;

/// Arguments of `prequal experiment`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario file (TOML; see docs/scenarios.md and docs/testbed.md).
    pub scenario: PathBuf,
    /// Directory for the report (default: `reports/<scenario name>-live`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Multiply every time in the load schedule and the episodes (0.25 = four times shorter).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Run only this contender (repeatable), by its label: a policy name, `haproxy leastconn`,
    /// `nginx least_conn`, `traefik leasttime`, `direct (client round robin)`.
    #[arg(long)]
    pub only: Vec<String>,
    /// Leave out HAProxy, nginx and Traefik even when installed.
    #[arg(long)]
    pub no_external: bool,
    /// Do not simulate each contender beside the live run.
    #[arg(long)]
    pub no_prediction: bool,
    /// Print the plan (contenders, skipped ones, instances) and exit without running.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `prequal experiment`.
pub fn run(args: &Args) -> Result<()> {
    let compiled = crate::sim::load(&args.scenario, args.seed, args.time_scale)?;
    if let Some(note) = crate::sim::time_scale_note(&compiled, args.time_scale) {
        eprintln!("{note}");
    }
    let (out, name) = (args.out.as_deref(), &compiled.scenario.name);
    let out = match args.dry_run {
        true => crate::sim::report_path(out, name, "-live"),
        false => crate::sim::report_dir(out, name, "-live")?,
    };
    let options = Options {
        out,
        prequal_exe: std::env::current_exe().context("finding the prequal executable")?,
        external: !args.no_external,
        only: args.only.clone(),
        predict: !args.no_prediction,
        startup: Duration::from_millis(1500),
    };
    let report = run_live(&compiled, &options, args.dry_run)
        .with_context(|| args.scenario.display().to_string())?;
    let Some(report) = report else {
        return Ok(());
    };
    println!("\n{}", report.summary());
    let written = report.write_to(&options.out)?;
    println!(
        "report: {}/index.html ({} files)",
        options.out.display(),
        written.len()
    );
    fail_if_interrupted(&report)
}

/// An error when SIGINT or SIGTERM cut `report` short (call it after writing the report, so the
/// contenders that finished are kept and the command still exits with a failure).
pub fn fail_if_interrupted(report: &ExperimentReport) -> Result<()> {
    if report.interrupted {
        bail!(
            "interrupted: the report holds the {} contender(s) that finished",
            report.report.runs.len()
        );
    }
    Ok(())
}

/// Plans and runs an experiment, printing progress on stderr; `None` for a dry run.
pub fn run_live(
    compiled: &Compiled,
    options: &Options,
    dry_run: bool,
) -> Result<Option<ExperimentReport>> {
    let plan = experiment::plan(compiled, options)
        .with_context(|| format!("scenario {}", compiled.scenario.name))?;
    let mut err = std::io::stderr().lock();
    for s in &plan.skipped {
        writeln!(err, "skipping {}: {}", s.label, s.reason)?;
    }
    let names: Vec<&str> = plan.contenders.iter().map(|c| c.label.as_str()).collect();
    writeln!(
        err,
        "LIVE experiment {} ({:.0} s of load per contender, {} balancer instance{} each): {}",
        compiled.scenario.name,
        compiled.end().as_secs_f64(),
        plan.instances,
        if plan.instances == 1 { "" } else { "s" },
        names.join(", ")
    )?;
    drop(err);
    if dry_run {
        return Ok(None);
    }
    if plan.contenders.is_empty() {
        bail!("no contender to run");
    }
    let runtime = tokio::runtime::Runtime::new().context("starting tokio")?;
    let interrupted = Arc::new(AtomicBool::new(false));
    runtime.spawn(watch_signals(Arc::clone(&interrupted)));
    let report = experiment::run(
        compiled,
        &plan,
        options,
        &runtime,
        &interrupted,
        &mut print_event,
    );
    if interrupted.load(Ordering::Relaxed) {
        eprintln!("interrupted: every process the experiment started has been stopped");
    }
    let report = report?;
    if report.report.runs.is_empty() {
        let reasons: Vec<String> = report
            .skipped
            .iter()
            .map(|s| format!("{}: {}", s.label, s.reason))
            .collect();
        bail!("no contender ran:\n{}", reasons.join("\n"));
    }
    Ok(Some(report))
}

fn print_event(event: Event<'_>) {
    match event {
        Event::Starting {
            label,
            index,
            total,
        } => eprintln!("[{}/{total}] {label}", index + 1),
        Event::Started { what, pid } => eprintln!("  started {what} (pid {pid})"),
        Event::Second(p) => eprintln!(
            "  t={:>3}s sent={:<6} done={:<6} inflight={:<5} err={:<4} timeouts={:<4} p50={:.1}ms p99={:.1}ms",
            p.t, p.sent, p.completed, p.in_flight, p.errors, p.timeouts, p.p50_ms, p.p99_ms
        ),
        Event::Failed { label, reason } => eprintln!("  {label} {reason}"),
        Event::Finished(r) => {
            let s = &r.output.measured.summary;
            eprintln!(
                "  done: {} queries, p99 {:.1} ms, p99.9 {:.1} ms, {:.3}% within objective",
                s.queries,
                s.latency_ms.p99,
                s.latency_ms.p999,
                s.within_objective * 100.0
            );
        }
    }
}

/// Sets `interrupted` on the first SIGINT or SIGTERM.
async fn watch_signals(interrupted: Arc<AtomicBool>) {
    prequal_server::shutdown_signal().await;
    interrupted.store(true, Ordering::Relaxed);
}
