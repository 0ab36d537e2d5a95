//! `prequal loadgen`: open-loop load against one or more HTTP targets.
//!
//! `prequal loadgen --target http://127.0.0.1:8080/ --rate 1000 --duration 30s` sends 1000
//! queries per second for 30 s; `--scenario FILE.toml` takes the rate schedule from the
//! scenario's `[load]` section instead. Latency is timed from each query's intended send time
//! (no coordinated omission). One progress line per second goes to stderr, a summary table to
//! stdout at the end, and `--json FILE` writes the whole report. Ctrl-C (or SIGTERM) stops
//! sending; queries in flight get at most `--timeout` to finish, and the results are still
//! written.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use prequal_core::Time;
use prequal_server::shutdown_signal;
use prequal_sim::report;
use prequal_sim::scenario::{Arrivals, Phase};
use prequal_testbed::loadgen::{self, LoadReport, LoadSpec, Progress, Uri};

/// Arguments of `prequal loadgen`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Base URI to query, e.g. http://127.0.0.1:8080/ (repeatable: queries go round robin over
    /// the targets, an equal share each).
    #[arg(long = "target", required = true, value_name = "URL")]
    targets: Vec<String>,
    /// Aggregate queries per second (with --duration).
    #[arg(
        long,
        value_name = "QPS",
        conflicts_with = "scenario",
        requires = "duration"
    )]
    rate: Option<f64>,
    /// How long to send at --rate, e.g. 30s.
    #[arg(long, value_parser = humantime::parse_duration, requires = "rate")]
    duration: Option<Duration>,
    /// Take the rate schedule from this scenario's `[load]` section (and its seed, latency
    /// objective, deadline, arrivals and replica count as defaults).
    #[arg(long, value_name = "FILE.toml", required_unless_present = "rate")]
    scenario: Option<PathBuf>,
    /// Multiply every time in the scenario's load schedule (0.1 = ten times shorter).
    #[arg(long, default_value_t = 1.0, requires = "scenario")]
    time_scale: f64,
    /// Poisson arrivals (exponential gaps). Default: constant gaps, or the scenario's
    /// `[clients]` arrivals.
    #[arg(long)]
    poisson: bool,
    /// Per query, from its intended send time; later is a timeout (default: the scenario's
    /// deadline, else 10s).
    #[arg(long, value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// Latency objective for the "within objective" share (default: the scenario's, else 1s).
    #[arg(long, value_parser = humantime::parse_duration)]
    objective: Option<Duration>,
    /// HTTP/2 over cleartext with prior knowledge (h2c); default HTTP/1.1.
    #[arg(long)]
    http2: bool,
    /// Replica count, for per-replica shares read from the x-prequal-replica header (default:
    /// the scenario's server count, else 0 = none).
    #[arg(long)]
    replicas: Option<usize>,
    /// Seed of the Poisson gaps (default: the scenario's, else 1).
    #[arg(long)]
    seed: Option<u64>,
    /// A query due while this many are in flight is not sent and counts as an error.
    #[arg(long, default_value_t = 100_000)]
    max_in_flight: usize,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Runs `prequal loadgen`.
pub fn run(args: &Args) -> Result<()> {
    crate::sidecar::init_logging();
    let spec = spec_from_args(args)?;
    let runtime = tokio::runtime::Runtime::new().context("prequal loadgen: starting tokio")?;
    let mut print = |p: &Progress| eprintln!("{}", progress_line(p));
    let report = runtime.block_on(loadgen::run(&spec, &mut print, shutdown_signal()))?;
    if let Some(path) = &args.json {
        let json = report
            .to_json()
            .context("prequal loadgen: encoding the report")?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("--json {}: cannot write", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    write!(out, "{}", summary(&report))?;
    if let Some(path) = &args.json {
        writeln!(out, "report: {}", path.display())?;
    }
    Ok(())
}

fn spec_from_args(args: &Args) -> Result<LoadSpec> {
    let targets = args
        .targets
        .iter()
        .map(|t| {
            t.parse::<Uri>()
                .with_context(|| format!("--target {t:?}: expected a URI like http://host:port/"))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut spec = LoadSpec {
        targets,
        http2: args.http2,
        phases: Vec::new(),
        poisson: args.poisson,
        timeout: Duration::from_secs(10),
        objective: Duration::from_secs(1),
        replicas: 0,
        seed: 1,
        start_at: None,
        max_in_flight: args.max_in_flight,
    };
    if let Some(path) = &args.scenario {
        let compiled = crate::sim::load(path, None, args.time_scale)?;
        let sc = &compiled.scenario;
        spec.phases = compiled.phases.clone();
        spec.poisson |= sc.clients.arrivals == Arrivals::Poisson;
        spec.timeout = sc.clients.deadline.unwrap_or(spec.timeout);
        spec.objective = sc.latency_objective;
        spec.replicas = sc.servers.count as usize;
        spec.seed = sc.seed;
    } else if let (Some(rate), Some(duration)) = (args.rate, args.duration) {
        spec.phases = constant(rate, duration)?;
    }
    spec.timeout = args.timeout.unwrap_or(spec.timeout);
    spec.objective = args.objective.unwrap_or(spec.objective);
    spec.replicas = args.replicas.unwrap_or(spec.replicas);
    spec.seed = args.seed.unwrap_or(spec.seed);
    spec.validate()?;
    Ok(spec)
}

fn constant(rate: f64, duration: Duration) -> Result<Vec<Phase>> {
    if !(rate.is_finite() && rate > 0.0) {
        bail!("--rate: expected queries per second above 0, got {rate}");
    }
    if duration.is_zero() {
        bail!("--duration: expected a duration above 0");
    }
    let end = u64::try_from(duration.as_nanos()).context("--duration: too long")?;
    Ok(vec![Phase {
        label: format!("{rate} qps"),
        start: Time::ZERO,
        end: Time::from_nanos(end),
        qps_start: rate,
        qps_end: rate,
    }])
}

fn progress_line(p: &Progress) -> String {
    format!(
        "t={}s sent={} done={} inflight={} err={} timeout={} p50={:.1}ms p99={:.1}ms",
        p.t, p.sent, p.completed, p.in_flight, p.errors, p.timeouts, p.p50_ms, p.p99_ms
    )
}

/// The summary table: all queries, then each phase when there are several.
fn summary(r: &LoadReport) -> String {
    let mut out = String::new();
    let m = &r.measured;
    let _ = writeln!(
        out,
        "LOADGEN {} ({}, {} gaps, seed {}) for {:.1} s: sent {}, not sent {}, max send lag {:.1} ms{}",
        r.targets.join(" "),
        if r.http2 { "h2c" } else { "HTTP/1.1" },
        if r.poisson { "Poisson" } else { "constant" },
        r.seed,
        r.duration_s,
        r.sent,
        r.not_sent,
        r.max_send_lag_ms,
        if r.fell_behind {
            " (stopped early: queries were still unsent a timeout after the schedule's end; \
             lower the rate)"
        } else if r.stopped_early {
            " (stopped early)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "{:<20} {}",
        "phase",
        report::summary_header(r.objective_ms)
    );
    let mut row = |label: &str, s: &prequal_sim::metrics::Summary| {
        let _ = writeln!(out, "{label:<20} {}", report::summary_cells(s));
    };
    row("all", &m.summary);
    if m.phases.len() > 1 {
        for p in &m.phases {
            row(&p.label, &p.summary);
        }
    }
    if r.targets.len() > 1 {
        let counts: Vec<String> = r.per_target.iter().map(u64::to_string).collect();
        let _ = writeln!(out, "per target: {}", counts.join(" "));
    }
    if m.servers.iter().any(|s| s.queries > 0) {
        let shares: Vec<String> = m
            .servers
            .iter()
            .map(|s| format!("{}:{:.1}%", s.index, s.share * 100.0))
            .collect();
        let _ = writeln!(out, "per replica: {}", shares.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn spec(argv: &[&str]) -> Result<LoadSpec> {
        let cli = Cli::try_parse_from(std::iter::once("loadgen").chain(argv.iter().copied()))?;
        spec_from_args(&cli.args)
    }

    #[test]
    fn rate_and_duration_make_one_constant_phase() {
        let s = spec(&[
            "--target",
            "http://127.0.0.1:1/a",
            "--target",
            "http://127.0.0.1:2/",
            "--rate",
            "250",
            "--duration",
            "2s",
            "--http2",
        ])
        .unwrap();
        assert_eq!(s.targets.len(), 2);
        assert!(s.http2 && !s.poisson);
        assert_eq!(s.phases.len(), 1);
        assert_eq!(s.phases[0].end, Time::from_secs(2));
        assert_eq!(s.phases[0].qps_start, 250.0);
        assert_eq!(s.timeout, Duration::from_secs(10));
    }

    #[test]
    fn a_scenario_gives_the_schedule_and_defaults() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let path = dir.join("beyond-round-robin.toml");
        let path = path.to_str().unwrap();
        let s = spec(&["--target", "http://127.0.0.1:1/", "--scenario", path]).unwrap();
        assert_eq!(s.replicas, 11);
        assert!(!s.phases.is_empty());
        let scaled = spec(&[
            "--target",
            "http://127.0.0.1:1/",
            "--scenario",
            path,
            "--time-scale",
            "0.1",
            "--seed",
            "9",
        ])
        .unwrap();
        assert_eq!(scaled.seed, 9);
        let end = |s: &LoadSpec| s.phases.last().unwrap().end.as_secs_f64();
        assert!((end(&scaled) * 10.0 - end(&s)).abs() < 1e-6);
    }

    #[test]
    fn bad_flags_say_which() {
        let err = |argv: &[&str]| format!("{:#}", spec(argv).unwrap_err());
        let base = ["--target", "http://127.0.0.1:1/", "--duration", "1s"];
        assert!(err(&[&base[..], &["--rate=-3"]].concat()).contains("--rate"));
        assert!(
            err(&["--target", "http://[::1", "--rate", "1", "--duration", "1s"])
                .contains("--target")
        );
        assert!(
            err(&["--target", "ftp://h:1/", "--rate", "1", "--duration", "1s"])
                .contains("target 0")
        );
        // Neither a rate nor a scenario.
        assert!(spec(&["--target", "http://127.0.0.1:1/"]).is_err());
    }
}
