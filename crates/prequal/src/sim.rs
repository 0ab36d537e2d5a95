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
    let given = s.contenders.clone();
    let mut out = Vec::new();
    for c in s.contenders.drain(..) {
        let hedged = c.hedge.is_none().then(|| Contender {
            policy: c.policy.clone(),
            hedge: Some(HedgeConfig::default()),
            balancer: c.balancer.clone(),
        });
        // A contender the file already runs with default hedging is not run twice.
        let hedged = hedged.filter(|h| !given.iter().any(|g| g.same_run(h)));
        out.push(c);
        out.extend(hedged);
    }
    s.contenders = out;
}

/// The range of `--time-scale`: beyond it the scaled durations round to nothing or overflow.
const MIN_TIME_SCALE: f64 = 1e-6;
const MAX_TIME_SCALE: f64 = 1e6;

/// Loads a scenario with the command-line adjustments applied.
pub fn load(path: &Path, seed: Option<u64>, time_scale: f64) -> Result<Compiled> {
    if !(time_scale.is_finite() && time_scale > 0.0) {
        bail!("--time-scale: expected a number above 0, got {time_scale}");
    }
    if !(MIN_TIME_SCALE..=MAX_TIME_SCALE).contains(&time_scale) {
        bail!(
            "--time-scale: expected a factor between {MIN_TIME_SCALE} and {MAX_TIME_SCALE}, \
             got {time_scale}"
        );
    }
    Ok(Scenario::load_adjusted(path, |s| {
        if let Some(seed) = seed {
            s.seed = seed;
        }
        s.scale_time(time_scale);
    })?)
}

/// A note for a run shortened with `--time-scale` whose scenario has episodes: the schedule
/// and the episodes shrink, the replicas' load tracker keeps its time constants, so a replica
/// shunned during a shortened episode takes as long to be tried again as at full length.
pub fn time_scale_note(compiled: &Compiled, time_scale: f64) -> Option<String> {
    let estimator = &compiled.scenario.estimator;
    (time_scale < 1.0 && !compiled.scenario.servers.episodes.is_empty()).then(|| {
        format!(
            "note: --time-scale {time_scale} shortens the load and the episodes, not the \
             replicas' load tracker (max_age {}, stale_half_life {}): a replica shunned during \
             a shortened episode takes as long to be tried again as at full length, a larger \
             share of a shorter run (docs/scenarios.md)",
            humantime::format_duration(estimator.max_age),
            humantime::format_duration(estimator.stale_half_life),
        )
    })
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

/// The directory a report goes to: `out` if given, else `reports/<name><suffix>` with the
/// scenario's name made a single plain path component (so that a name cannot place the report
/// elsewhere).
pub fn report_path(out: Option<&Path>, name: &str, suffix: &str) -> PathBuf {
    if let Some(out) = out {
        return out.to_path_buf();
    }
    let plain: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    let plain = match plain.trim_matches('.') {
        "" => "scenario".to_string(),
        _ => plain,
    };
    Path::new("reports").join(format!("{plain}{suffix}"))
}

/// [`report_path`], created now, so that a path that cannot be a directory fails before any
/// run rather than after.
pub fn report_dir(out: Option<&Path>, name: &str, suffix: &str) -> Result<PathBuf> {
    let dir = report_path(out, name, suffix);
    if dir.exists() && !dir.is_dir() {
        bail!(
            "report directory {}: exists and is not a directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("report directory {}: cannot be created", dir.display()))?;
    Ok(dir)
}

/// Runs `prequal sim`.
pub fn run(args: &Args) -> Result<()> {
    let mut compiled = load(&args.scenario, args.seed, args.time_scale)?;
    if let Some(note) = time_scale_note(&compiled, args.time_scale) {
        eprintln!("{note}");
    }
    if args.hedge {
        add_hedged_copies(&mut compiled.scenario);
    }
    let plans =
        report::plan(&compiled).with_context(|| format!("{}: sweep", args.scenario.display()))?;
    // Made before the runs, so that a directory that cannot be written fails now, not after.
    let dir = report_dir(args.out.as_deref(), &compiled.scenario.name, "")?;
    let started = Instant::now();
    let report = run_plans(&compiled, &plans)?;
    let wall = started.elapsed();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_name_cannot_place_its_report_outside_reports() {
        let reports = Path::new("reports");
        for (name, want) in [
            ("prequal-ramp", "prequal-ramp"),
            ("../../../tmp/x", ".._.._.._tmp_x"),
            ("/etc/passwd", "_etc_passwd"),
            ("a\u{0}b", "a_b"),
            ("..", "scenario"),
            ("", "scenario"),
        ] {
            let path = report_path(None, name, "-live");
            assert_eq!(path, reports.join(format!("{want}-live")), "{name:?}");
            assert_eq!(path.components().count(), 2, "{name:?}");
        }
        let out = Path::new("/somewhere/else");
        assert_eq!(report_path(Some(out), "x", ""), out);
    }

    #[test]
    fn hedged_copies_are_not_added_where_the_file_runs_one_already() {
        let faults = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/faults.toml");
        let mut scenario = load(&faults, None, 1.0).unwrap().scenario;
        let before = scenario.contenders.len();
        let hedged = scenario
            .contenders
            .iter()
            .filter(|c| c.hedge.is_some())
            .count();
        add_hedged_copies(&mut scenario);
        // One copy for each contender without hedging, except `prequal`, which the file also
        // runs with default hedging.
        assert_eq!(scenario.contenders.len(), 2 * before - hedged - 1);
        for (j, c) in scenario.contenders.iter().enumerate() {
            assert!(
                !scenario.contenders[..j].iter().any(|d| d.same_run(c)),
                "contender {j} repeated"
            );
        }
    }

    #[test]
    fn a_shortened_run_with_episodes_says_the_tracker_is_not_shortened() {
        let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let note = |file: &str, scale: f64| {
            let compiled = load(&scenarios.join(file), None, scale).unwrap();
            time_scale_note(&compiled, scale)
        };
        let text = note("heterogeneous-85-many.toml", 0.25).expect("a note");
        assert!(text.contains("--time-scale 0.25"), "{text}");
        assert!(text.contains("stale_half_life 10s"), "{text}");
        assert_eq!(note("heterogeneous-85-many.toml", 1.0), None);
        // No episode: nothing is shunned for a while, so nothing to say.
        assert_eq!(note("power-of-two-none.toml", 0.25), None);
    }

    #[test]
    fn a_time_scale_out_of_range_is_named() {
        let faults = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/faults.toml");
        assert!(load(&faults, None, 0.5).is_ok());
        for scale in [1e18, 1e-300, 0.0, f64::NAN] {
            let error = load(&faults, None, scale).unwrap_err().to_string();
            assert!(error.starts_with("--time-scale"), "{scale}: {error}");
        }
    }

    #[test]
    fn an_out_path_that_is_a_file_fails_before_any_run() {
        let file = std::env::temp_dir().join(format!("prequal-out-file-{}", std::process::id()));
        std::fs::write(&file, "x").unwrap();
        let error = report_dir(Some(&file), "x", "").unwrap_err().to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(error.contains("not a directory"), "{error}");
    }
}
