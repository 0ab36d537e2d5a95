//! `prequal backend`: the testbed's emulated replicas, from a scenario file or from flags.
//!
//! `prequal backend --scenario scenarios/beyond-round-robin.toml --base-port 9000` serves every
//! replica of the scenario's `[servers]` section on ports 9000, 9001, ...; without a scenario,
//! flags describe the replicas (`--replicas 3 --latency 10ms`). Distributions, speed entries and
//! episodes given as flags use the scenario file's TOML syntax, inline. The process prints one
//! line per replica (`replica 0 127.0.0.1:9000`) once all listen, and exits on SIGINT/SIGTERM
//! or after `--duration`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use prequal_core::EstimatorConfig;
use prequal_server::shutdown_signal;
use prequal_sim::model::{
    CancelledWork, CapacitySpec, DistSpec, EpisodeSpec, ServersSpec, SpeedSpec,
};
use prequal_sim::scenario::Scenario;
use prequal_testbed::backend::{Backend, BackendSpec, Bind};
use serde::de::DeserializeOwned;

/// Arguments of `prequal backend`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenario file whose `[servers]` (and `[estimator]`, `seed`) section describes the replicas.
    #[arg(long, conflicts_with_all = ["latency", "cost"])]
    scenario: Option<PathBuf>,
    /// Multiply the scenario's episode times by this factor (as `prequal sim` does).
    #[arg(long, default_value_t = 1.0, requires = "scenario")]
    time_scale: f64,
    /// Replicas to serve (default: all of the scenario's from --first-replica on, or 1 with
    /// flags).
    #[arg(long)]
    replicas: Option<u32>,
    /// Index of the first replica to serve, to split a scenario's replicas across processes.
    #[arg(long, default_value_t = 0)]
    first_replica: u32,
    /// The first replica listens on BASE_PORT, the next on BASE_PORT + 1, ...; 0 lets the OS
    /// choose each port.
    #[arg(long, default_value_t = 0)]
    base_port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Latency model: a duration (`10ms`, constant) or an inline distribution,
    /// e.g. '{ kind = "normal", mean = "167ms", sd = "5ms" }'.
    #[arg(long, conflicts_with = "cost")]
    latency: Option<String>,
    /// Capacity model: CPU work per query, a duration or an inline distribution.
    #[arg(long)]
    cost: Option<String>,
    /// Capacity model: guaranteed cores per replica.
    #[arg(long, default_value_t = 1.0, requires = "cost")]
    cores: f64,
    /// Speed multiplier, inline: `'{ servers = [2], factor = 0.5 }'`. Repeatable.
    #[arg(long)]
    speed: Vec<String>,
    /// Episode, inline: `'{ servers = [0], start = "10s", end = "20s", slow = 4.0 }'`. Repeatable.
    #[arg(long)]
    episode: Vec<String>,
    /// Seed of the replicas' random choices (flags mode; a scenario has its own).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this long (default: run until SIGINT/SIGTERM).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// On shutdown, how long open connections get to finish.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// Add the `prequal-load` header to every response.
    #[arg(long)]
    piggyback: bool,
    /// Wall-clock time zero of the episodes, in milliseconds since the Unix epoch (default:
    /// when the replicas start). Lets backends and load generators in separate processes share
    /// one schedule.
    #[arg(long)]
    start_at_unix_ms: Option<u64>,
}

/// How long from now until `unix_ms` (zero if it has passed).
fn until_unix_ms(unix_ms: u64) -> Result<Duration> {
    // Further ahead than this is a mistake (seconds for milliseconds, a stray digit), not a
    // schedule anyone waits for.
    const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
    let wait = std::time::UNIX_EPOCH
        .checked_add(Duration::from_millis(unix_ms))
        .map(|at| {
            at.duration_since(std::time::SystemTime::now())
                .unwrap_or(Duration::ZERO)
        });
    match wait {
        Some(wait) if wait <= MAX_WAIT => Ok(wait),
        _ => bail!(
            "--start-at-unix-ms {unix_ms}: more than a day from now; expected milliseconds \
             since the Unix epoch, such as the load generator's start time"
        ),
    }
}

/// Runs the backend until a signal or `--duration`.
pub fn run(args: &Args) -> Result<()> {
    crate::sidecar::init_logging();
    let spec = spec_from_args(args)?;
    if spec.servers.cancelled_work == CancelledWork::Finish {
        tracing::warn!(
            "the scenario's servers.cancelled_work = \"finish\" is for the simulator: the \
             emulated replicas drop the work of a request whose client went away"
        );
    }
    let bind = Bind {
        host: args.host,
        base_port: args.base_port,
        first: args.first_replica,
        replicas: args
            .replicas
            .unwrap_or(spec.servers.count.saturating_sub(args.first_replica)),
        drain: args.drain,
        piggyback: args.piggyback,
    };
    let runtime = tokio::runtime::Runtime::new().context("prequal backend: starting tokio")?;
    runtime.block_on(async {
        let time_zero_in = match args.start_at_unix_ms {
            Some(unix_ms) => until_unix_ms(unix_ms)?,
            None => Duration::ZERO,
        };
        let backend = Backend::start_with_origin(&spec, bind, time_zero_in)
            .await
            .context("prequal backend")?;
        for (replica, addr) in backend.replicas().zip(backend.addrs()) {
            println!("replica {} {addr}", replica.index());
        }
        let stop_after = async {
            match args.duration {
                Some(duration) => tokio::time::sleep(duration).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown_signal() => {}
            () = stop_after => {}
        }
        backend.shutdown().await;
        Ok(())
    })
}

fn spec_from_args(args: &Args) -> Result<BackendSpec> {
    if let Some(path) = &args.scenario {
        if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
            bail!(
                "--time-scale must be a number above 0, got {}",
                args.time_scale
            );
        }
        let mut compiled = Scenario::load(path)?;
        if args.time_scale != 1.0 {
            let mut scenario = compiled.scenario.clone();
            scenario.scale_time(args.time_scale);
            let base = path.parent().unwrap_or(Path::new("."));
            compiled = scenario
                .compile(base)
                .with_context(|| format!("{}", path.display()))?;
        }
        return Ok(BackendSpec::from_scenario(&compiled));
    }
    let count = args
        .first_replica
        .saturating_add(args.replicas.unwrap_or(1));
    let (latency, capacity) = match (&args.latency, &args.cost) {
        (Some(latency), None) => (Some(parse_dist("--latency", latency)?), None),
        (None, Some(cost)) => {
            let capacity = CapacitySpec {
                cost: parse_dist("--cost", cost)?,
                allocation_cores: args.cores,
                machine_cores: None,
                per_query_cores: 1.0,
                antagonist: None,
            };
            (None, Some(capacity))
        }
        _ => bail!("prequal backend needs --scenario FILE, or --latency or --cost"),
    };
    let speed = args
        .speed
        .iter()
        .map(|s| parse_inline::<SpeedSpec>("--speed", s))
        .collect::<Result<_>>()?;
    let episodes = args
        .episode
        .iter()
        .map(|e| parse_inline::<EpisodeSpec>("--episode", e))
        .collect::<Result<Vec<_>>>()?;
    let servers = ServersSpec {
        count,
        latency,
        capacity,
        thread_pool: None,
        probe_cost: None,
        speed,
        episodes,
        cancelled_work: Default::default(),
    };
    // Trace files named in flags resolve against the working directory.
    BackendSpec::new(
        servers,
        EstimatorConfig::default(),
        args.seed,
        Path::new("."),
    )
    .context("prequal backend")
}

/// A duration (`10ms`, a constant) or an inline distribution table.
fn parse_dist(flag: &str, text: &str) -> Result<DistSpec> {
    if let Ok(value) = humantime::parse_duration(text.trim()) {
        return Ok(DistSpec::Constant { value });
    }
    parse_inline(flag, text)
}

/// An inline TOML table, e.g. `{ servers = [1], factor = 0.5 }`.
fn parse_inline<T: DeserializeOwned>(flag: &str, text: &str) -> Result<T> {
    #[derive(serde::Deserialize)]
    struct Holder<T> {
        value: T,
    }
    let holder: Holder<T> = toml::from_str(&format!("value = {text}"))
        .with_context(|| format!("{flag} {text:?}: expected an inline TOML table"))?;
    Ok(holder.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_time_past_a_day_ahead_is_refused_not_a_panic() {
        assert_eq!(
            until_unix_ms(0).unwrap(),
            Duration::ZERO,
            "in the past: at once"
        );
        for unix_ms in [99_999_999_999_999_999, u64::MAX] {
            let error = until_unix_ms(unix_ms).unwrap_err().to_string();
            assert!(error.contains("--start-at-unix-ms"), "{error}");
        }
    }

    #[test]
    fn inline_flags_parse() {
        assert_eq!(
            parse_dist("--latency", "10ms").unwrap(),
            DistSpec::Constant {
                value: Duration::from_millis(10)
            }
        );
        let normal = parse_dist(
            "--latency",
            r#"{ kind = "normal", mean = "1ms", sd = "0s" }"#,
        );
        assert!(matches!(normal, Ok(DistSpec::Normal { .. })));
        let episode: EpisodeSpec = parse_inline(
            "--episode",
            r#"{ servers = [0], start = "1s", end = "2s", slow = 3.0 }"#,
        )
        .unwrap();
        assert_eq!(episode.slow, Some(3.0));
        let err = parse_inline::<SpeedSpec>("--speed", "{ servers = [0], factr = 2 }");
        assert!(format!("{:#}", err.unwrap_err()).contains("factr"));
    }
}
