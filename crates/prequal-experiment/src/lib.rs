//! # prequal-experiment
//!
//! `prequal experiment`: a scenario run live on loopback, one contender after another.
//!
//! For each contender the runner starts fresh emulated replicas (`prequal backend`, as a child
//! process, from the scenario's `[servers]`), the contender's balancers (`prequal proxy` with a
//! core policy, HAProxy, nginx or Traefik with one of their algorithms, as many independent instances as
//! the scenario asks for, or none for `direct`), then drives the scenario's load schedule
//! through them with the open-loop load generator ([`prequal_testbed::loadgen`]), and stops every process
//! again: on success, on failure, and after SIGINT/SIGTERM ([`process::Child`]). Replicas and
//! load share one time zero, so episodes land where the scenario puts them.
//!
//! The result is a [`prequal_sim::report::Report`] with `simulated: false`, so tables and plots
//! are the simulator's, plus what only a live run knows ([`ContenderRecord`]). With
//! [`Options::predict`], each run also carries the simulator's prediction for the same scenario
//! with the contender's equivalent core policy (HAProxy's `leastconn` is `least-loaded`, ...).
//!
//! This is the one part of the testbed that needs the simulator (its planning, engine, report
//! and plots), so it is a crate of its own: `prequal-testbed`'s replicas and load generator
//! depend only on `prequal-model`.

pub mod contender;
mod error;
mod page;
pub mod process;
mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use prequal_model::scenario::{Arrivals, Compiled};
use prequal_sim::report::{Prediction, Report, RunResult};

pub use contender::{Balancer, Contender, Instance};
pub use error::ExperimentError;
use prequal_testbed::loadgen::{self, LoadReport, LoadSpec, Progress};
pub use process::{Child, Interrupted};
pub use report::{
    ContenderRecord, ExperimentReport, PROXY_COLUMNS, ProxyCounters, ProxyRow, Skipped,
};

/// How to run an experiment.
#[derive(Clone, Debug)]
pub struct Options {
    /// The report folder.
    pub out: PathBuf,
    /// The `prequal` executable that runs `backend` and `proxy`.
    pub prequal_exe: PathBuf,
    /// Run HAProxy, nginx and Traefik contenders when installed.
    pub external: bool,
    /// Run only the contenders whose label is listed (all when empty).
    pub only: Vec<String>,
    /// Simulate each contender's equivalent policy and show it beside the live result.
    pub predict: bool,
    /// Time from starting a contender's processes to its time zero.
    pub startup: Duration,
}

/// What an experiment will run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The contenders, in order.
    pub contenders: Vec<Contender>,
    /// Contenders left out.
    pub skipped: Vec<Skipped>,
    /// Balancer instances per contender.
    pub instances: u32,
    /// HTTP/2 from the load generator.
    pub http2: bool,
    /// Request timeout.
    pub timeout: Duration,
}

/// Which contenders `compiled` asks for, which of them can run here, and how.
pub fn plan(compiled: &Compiled, options: &Options) -> Result<Plan, ExperimentError> {
    let sc = &compiled.scenario;
    let ex = &sc.experiment;
    let mut all = Vec::new();
    // Labels and hedging as the simulator plans them (` +hedge` for a contender that hedges,
    // by its own `hedge` table or the scenario's `[clients.hedge]`); sweeps are not run live.
    let mut unswept = compiled.clone();
    unswept.scenario.sweep = None;
    let runs = prequal_sim::report::plan(&unswept).map_err(|e| ExperimentError::Scenario {
        key: "contenders".into(),
        message: e.to_string(),
    })?;
    for run in runs {
        all.push(Contender::prequal(
            run.label,
            run.contender,
            run.hedge,
            run.balancer,
        ));
    }
    let haproxy = ex
        .haproxy
        .clone()
        .unwrap_or_else(|| contender::DEFAULT_HAPROXY.map(String::from).to_vec());
    for (i, algorithm) in haproxy.iter().enumerate() {
        all.push(Contender::haproxy(
            algorithm,
            &format!("experiment.haproxy[{i}]"),
        )?);
    }
    let nginx = ex
        .nginx
        .clone()
        .unwrap_or_else(|| contender::DEFAULT_NGINX.map(String::from).to_vec());
    for (i, method) in nginx.iter().enumerate() {
        all.push(Contender::nginx(method, &format!("experiment.nginx[{i}]"))?);
    }
    let traefik = ex
        .traefik
        .clone()
        .unwrap_or_else(|| contender::DEFAULT_TRAEFIK.map(String::from).to_vec());
    for (i, strategy) in traefik.iter().enumerate() {
        all.push(Contender::traefik(
            strategy,
            &format!("experiment.traefik[{i}]"),
        )?);
    }
    if ex.direct {
        all.push(Contender::direct());
    }
    for name in &options.only {
        if !all.iter().any(|c| &c.label == name) {
            return Err(ExperimentError::Scenario {
                key: "--only".into(),
                message: format!(
                    "no contender is labelled {name:?}; the scenario has {}",
                    all.iter()
                        .map(|c| format!("{:?}", c.label))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    if let Some(i) = sc
        .servers
        .episodes
        .iter()
        .position(|e| e.fault == Some(prequal_model::model::Fault::Redeployed))
    {
        return Err(ExperimentError::Scenario {
            key: format!("servers.episodes[{i}].fault"),
            message: "`redeployed` runs in the simulator only (`prequal sim`): the live \
                      testbed does not change the balancers' replica lists"
                .into(),
        });
    }
    let instances = ex.proxies.unwrap_or(sc.clients.count);
    if instances == 0 || instances > 64 {
        return Err(ExperimentError::Scenario {
            key: "experiment.proxies".into(),
            message: format!(
                "{instances} balancer instances per contender; expected 1 to 64 (without \
                 `experiment.proxies`, it is `clients.count`)"
            ),
        });
    }
    let mut contenders = Vec::new();
    let mut skipped = Vec::new();
    for c in all {
        if !options.only.is_empty() && !options.only.contains(&c.label) {
            continue;
        }
        match c.program() {
            Some(_) if !options.external => skipped.push(Skipped {
                label: c.label.clone(),
                reason: "external balancers turned off (--no-external)".into(),
            }),
            Some(program) if process::find_program(program).is_none() => skipped.push(Skipped {
                label: c.label.clone(),
                reason: format!(
                    "{program} is not installed ({})",
                    c.install_hint().unwrap_or("install it")
                ),
            }),
            _ => contenders.push(c),
        }
    }
    let timeout = ex
        .timeout
        .or(sc.clients.deadline)
        .unwrap_or(Duration::from_secs(30));
    Ok(Plan {
        contenders,
        skipped,
        instances,
        http2: ex.http2,
        timeout,
    })
}

/// What the runner reports while it works.
#[derive(Debug)]
pub enum Event<'a> {
    /// Contender `index` (of `total`) starts.
    Starting {
        /// Its label.
        label: &'a str,
        /// 0-based.
        index: usize,
        /// How many run.
        total: usize,
    },
    /// A process started.
    Started {
        /// What it is.
        what: &'a str,
        /// Its pid.
        pid: u32,
    },
    /// One second of load.
    Second(&'a Progress),
    /// The contender finished.
    Finished(&'a RunResult),
    /// The contender could not run; the experiment goes on with the next.
    Failed {
        /// Its label.
        label: &'a str,
        /// What went wrong.
        reason: &'a str,
    },
}

/// Runs every contender of `plan` in turn; `interrupted` (set on SIGINT/SIGTERM) stops early.
/// An interrupted experiment still reports the contenders that finished (with
/// [`ExperimentReport::interrupted`] set); with none finished it is
/// [`ExperimentError::Interrupted`].
pub fn run(
    compiled: &Compiled,
    plan: &Plan,
    options: &Options,
    runtime: &tokio::runtime::Runtime,
    interrupted: &Interrupted,
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<ExperimentReport, ExperimentError> {
    let io = |what: String| move |source| ExperimentError::Io { what, source };
    std::fs::create_dir_all(&options.out)
        .map_err(io(format!("creating {}", options.out.display())))?;
    // The replicas read the scenario as run (after any time scaling) from the report folder.
    let scenario_path = options.out.join("scenario.toml");
    let text = toml::to_string(&compiled.scenario).map_err(|e| ExperimentError::Scenario {
        key: "scenario".into(),
        message: format!("cannot write it back as TOML: {e}"),
    })?;
    std::fs::write(&scenario_path, text)
        .map_err(io(format!("writing {}", scenario_path.display())))?;
    let mut runs = Vec::new();
    let mut records = Vec::new();
    let mut skipped = plan.skipped.clone();
    // The first contender not run, when SIGINT or SIGTERM cut the experiment short.
    let mut cut_at = None;
    for (index, contender) in plan.contenders.iter().enumerate() {
        on_event(Event::Starting {
            label: &contender.label,
            index,
            total: plan.contenders.len(),
        });
        let outcome = run_one(
            compiled,
            plan,
            options,
            contender,
            &scenario_path,
            runtime,
            interrupted,
            on_event,
        );
        // One contender failing to start (a balancer rejecting its config, say) is reported
        // and the others still run; an interruption ends the experiment, keeping what finished.
        // A run that the signal cut short (the load generator stops and reports what it has)
        // is not comparable with the others: it is left out.
        if interrupted.load(Ordering::Relaxed)
            || matches!(outcome, Err(ExperimentError::Interrupted))
        {
            cut_at = Some(index);
            break;
        }
        let (mut result, record) = match outcome {
            Ok(done) => done,
            Err(e) => {
                let reason = format!("failed: {e}");
                on_event(Event::Failed {
                    label: &contender.label,
                    reason: &reason,
                });
                skipped.push(Skipped {
                    label: contender.label.clone(),
                    reason,
                });
                continue;
            }
        };
        if options.predict
            && let Some(model) = &contender.model
        {
            let mut scenario = compiled.scenario.clone();
            scenario.clients.count = plan.instances;
            let adjusted = Compiled {
                scenario,
                ..compiled.clone()
            };
            // The model hedges exactly when the contender does (never for HAProxy, nginx or Traefik),
            // and retries and ejects as it does.
            let config = contender.balancer_keys.config(contender.hedge.as_ref());
            let output = prequal_sim::engine::run_with(&adjusted, model, &config, 1.0)?;
            result.predicted = Some(Box::new(Prediction {
                policy: model.name().to_string(),
                measured: output.measured,
            }));
        }
        on_event(Event::Finished(&result));
        runs.push(result);
        records.push(record);
    }
    if let Some(first_not_run) = cut_at {
        if runs.is_empty() {
            return Err(ExperimentError::Interrupted);
        }
        for contender in &plan.contenders[first_not_run..] {
            skipped.push(Skipped {
                label: contender.label.clone(),
                reason: "not run: the experiment was interrupted".into(),
            });
        }
    }
    let sc = &compiled.scenario;
    Ok(ExperimentReport {
        report: Report {
            simulated: false,
            scenario: sc.name.clone(),
            description: sc.description.clone(),
            seed: sc.seed,
            duration_s: compiled.end().as_secs_f64(),
            latency_objective_ms: sc.latency_objective.as_secs_f64() * 1e3,
            runs,
        },
        contenders: records,
        skipped,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        interrupted: cut_at.is_some(),
    })
}

/// A folder name for a label.
fn slug(label: &str) -> String {
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    compiled: &Compiled,
    plan: &Plan,
    options: &Options,
    contender: &Contender,
    scenario_path: &Path,
    runtime: &tokio::runtime::Runtime,
    interrupted: &Interrupted,
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<(RunResult, ContenderRecord), ExperimentError> {
    let io = |what: String| move |source| ExperimentError::Io { what, source };
    let rel = format!("runs/{}", slug(&contender.label));
    let dir = options.out.join(&rel);
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let replicas = compiled.scenario.servers.count as usize;
    let time_zero = SystemTime::now() + options.startup;
    let unix_ms = time_zero
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // The replicas stop by themselves well after the load, even if this process dies.
    let lifetime = options.startup
        + Duration::from_nanos(compiled.end().as_nanos())
        + plan.timeout
        + Duration::from_secs(30);
    let mut cmd = std::process::Command::new(&options.prequal_exe);
    cmd.arg("backend")
        .arg("--scenario")
        .arg(scenario_path)
        .arg("--start-at-unix-ms")
        .arg(unix_ms.to_string())
        .arg("--duration")
        .arg(format!("{}ms", lifetime.as_millis()))
        .env("RUST_LOG", "warn");
    if compiled.scenario.clients.piggyback_reports {
        // Every response carries its replica's load, as in the simulator.
        cmd.arg("--piggyback");
    }
    let mut backend = Child::spawn("prequal backend", cmd, &dir.join("backend.log"))?;
    on_event(Event::Started {
        what: "replicas (prequal backend)",
        pid: backend.pid(),
    });
    let mut pids = vec![backend.pid()];
    backend.wait_until(
        &format!("serving {replicas} replicas"),
        Duration::from_secs(10),
        interrupted,
        |c| {
            c.stdout()
                .lines()
                .filter(|l| l.starts_with("replica "))
                .count()
                >= replicas
        },
    )?;
    let addrs = parse_replicas(&backend.stdout(), replicas)?;
    let (balancer, instances) = match contender.balancer {
        Balancer::Prequal(..) => ("prequal proxy", plan.instances),
        Balancer::Haproxy(_) => ("haproxy", plan.instances),
        Balancer::Nginx(_) => ("nginx", plan.instances),
        Balancer::Traefik(_) => ("traefik", plan.instances),
        Balancer::Direct => ("direct", 0),
    };
    let program = contender.program().and_then(process::find_program);
    let mut proxies = Vec::new();
    let mut admins = Vec::new();
    let mut targets = Vec::new();
    for i in 0..instances {
        let idir = dir.join(format!("{balancer}-{i}").replace(' ', "-"));
        std::fs::create_dir_all(&idir).map_err(io(format!("creating {}", idir.display())))?;
        let admin = match contender.balancer {
            Balancer::Prequal(..) => {
                Some(SocketAddr::from(([127, 0, 0, 1], process::free_port()?)))
            }
            _ => None,
        };
        let instance = Instance {
            listen: SocketAddr::from(([127, 0, 0, 1], process::free_port()?)),
            admin,
            dir: idir.clone(),
            http2: plan.http2,
        };
        let Some(cmd) = contender::command(
            &contender.balancer,
            &instance,
            &addrs,
            (&options.prequal_exe, program.as_deref()),
            compiled.scenario.clients.try_timeout,
        )?
        else {
            continue;
        };
        let name = format!("{balancer} {i}");
        let child = Child::spawn(&name, cmd, &idir.join("stderr.log"))?;
        on_event(Event::Started {
            what: &name,
            pid: child.pid(),
        });
        pids.push(child.pid());
        proxies.push((child, instance.listen));
        admins.extend(instance.admin);
    }
    for (child, listen) in &mut proxies {
        child.wait_listening(*listen, interrupted)?;
        targets.push(uri(*listen));
    }
    if targets.is_empty() {
        targets = addrs.iter().map(|a| uri(*a)).collect();
    }
    if SystemTime::now() > time_zero {
        tracing::warn!(
            "{}: the balancers took longer than {:?} to start; the load begins late against the \
             replicas' episode clock",
            contender.label,
            options.startup
        );
    }
    let sc = &compiled.scenario;
    let spec = LoadSpec {
        targets,
        http2: plan.http2,
        phases: compiled.phases.clone(),
        poisson: sc.clients.arrivals == Arrivals::Poisson,
        timeout: plan.timeout,
        objective: sc.latency_objective,
        replicas,
        seed: sc.seed,
        start_at: Some(time_zero),
        max_in_flight: 200_000,
    };
    let load: LoadReport = runtime.block_on(loadgen::run(
        &spec,
        &mut |p: &Progress| on_event(Event::Second(p)),
        stopped(interrupted.clone()),
    ))?;
    for (child, _) in &mut proxies {
        child.check_running()?;
    }
    // Hedges, retries and tries, from each prequal proxy before it stops.
    let proxy = if admins.is_empty() {
        None
    } else {
        let mut counters = ProxyCounters::default();
        for admin in &admins {
            let text = runtime
                .block_on(scrape_metrics(*admin))
                .map_err(io(format!("reading http://{admin}/metrics")))?;
            counters.add_exposition(&text);
        }
        Some(counters)
    };
    drop(proxies);
    backend.stop();
    let record = ContenderRecord {
        label: contender.label.clone(),
        balancer: balancer.into(),
        instances,
        sent: load.sent,
        not_sent: load.not_sent,
        per_target: load.per_target.clone(),
        pids,
        dir: rel,
        proxy: proxy.clone(),
    };
    let policy = match &contender.balancer {
        Balancer::Prequal(p, ..) => p.name().to_string(),
        Balancer::Haproxy(a) => format!("haproxy {a}"),
        Balancer::Nginx(m) => format!("nginx {m}"),
        Balancer::Traefik(s) => format!("traefik {s}"),
        Balancer::Direct => "direct".into(),
    };
    let result = RunResult {
        label: contender.label.clone(),
        policy,
        load: 1.0,
        param: None,
        output: prequal_sim::engine::RunOutput {
            events: 0,
            measured: load.measured,
            hedging: proxy.map(|p| p.hedge_summary(load.sent)),
            // Retries are in the hedging line's extra tries; ejections are not scraped.
            balancer: None,
        },
        predicted: None,
    };
    Ok((result, record))
}

/// The admin listener's `/metrics` text (HTTP/1.1, one connection, bounded in time).
async fn scrape_metrics(admin: SocketAddr) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(admin).await?;
        stream
            .write_all(
                format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 10 s"))??;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!(
            "unexpected answer: {}",
            head.lines().next().unwrap_or("")
        )));
    }
    Ok(body.to_string())
}

/// Resolves once `interrupted` is set (checked every 50 ms).
async fn stopped(interrupted: Interrupted) {
    while !interrupted.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn uri(addr: SocketAddr) -> http::Uri {
    // A socket address always makes a valid authority.
    http::Uri::builder()
        .scheme("http")
        .authority(addr.to_string())
        .path_and_query("/")
        .build()
        .unwrap_or_default()
}

/// The replica addresses from `prequal backend`'s `replica INDEX ADDR` lines.
fn parse_replicas(stdout: &str, count: usize) -> Result<Vec<SocketAddr>, ExperimentError> {
    let mut addrs = vec![None; count];
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("replica") {
            continue;
        }
        let index = words.next().and_then(|w| w.parse::<usize>().ok());
        let addr = words.next().and_then(|w| w.parse::<SocketAddr>().ok());
        if let (Some(i), Some(a)) = (index, addr)
            && let Some(slot) = addrs.get_mut(i)
        {
            *slot = Some(a);
        }
    }
    addrs
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            a.ok_or_else(|| ExperimentError::Scenario {
                key: "servers".into(),
                message: format!("prequal backend did not report replica {i}'s address"),
            })
        })
        .collect()
}

impl ExperimentReport {
    /// Writes `report.json`, `summary.txt`, `summary.md`, the plots and `index.html` (a
    /// self-contained page with the table and the plots inline) into `dir`.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>, ExperimentError> {
        let io = |path: &Path| {
            let what = format!("writing {}", path.display());
            move |source| ExperimentError::Io { what, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut written = Vec::new();
        let json = dir.join("report.json");
        let text =
            serde_json::to_string_pretty(self).map_err(|e| ExperimentError::Write(e.into()))?;
        std::fs::write(&json, text + "\n").map_err(io(&json))?;
        written.push(json);
        let txt = dir.join("summary.txt");
        std::fs::write(&txt, self.summary()).map_err(io(&txt))?;
        written.push(txt);
        let md = dir.join("summary.md");
        let mut markdown = self.report.markdown_table();
        let proxies = self.proxy_markdown();
        if !proxies.is_empty() {
            markdown.push('\n');
            markdown.push_str(&proxies);
        }
        std::fs::write(&md, markdown).map_err(io(&md))?;
        written.push(md);
        let plots = prequal_sim::plot::write_plots(&self.report, dir)
            .map_err(|e| ExperimentError::Write(e.into()))?;
        let mut svgs = Vec::new();
        for name in prequal_sim::plot::plot_names(&self.report) {
            let path = dir.join(format!("{name}.svg"));
            svgs.push((name, std::fs::read_to_string(&path).unwrap_or_default()));
        }
        written.extend(plots);
        let html = dir.join("index.html");
        std::fs::write(&html, page::render(self, &svgs)).map_err(io(&html))?;
        written.push(html);
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_folder_names() {
        assert_eq!(slug("haproxy random(2)"), "haproxy-random-2");
        assert_eq!(slug("prequal (q_rif=0.5)"), "prequal-q-rif-0.5");
    }

    #[test]
    fn proxy_counters_sum_over_labels_and_give_the_extra_tries() {
        let text = "# HELP prequal_proxy_hedges Hedged tries sent.\n\
            # TYPE prequal_proxy_hedges counter\n\
            prequal_proxy_hedges_total{cluster=\"default\"} 40\n\
            prequal_proxy_hedges_won_total{cluster=\"default\"} 12\n\
            prequal_proxy_hedges_refused_total{cluster=\"default\"} 3\n\
            prequal_proxy_upstream_tries_total{cluster=\"default\",outcome=\"success\"} 1030\n\
            prequal_proxy_upstream_tries_total{cluster=\"default\",outcome=\"error\"} 20\n\
            prequal_proxy_retries_total{cluster=\"default\"} 10\n\
            prequal_proxy_requests_total 1000\n\
            prequal_proxy_probes_total{cluster=\"default\",result=\"ok\"} 2900\n\
            prequal_proxy_probes_total{cluster=\"default\",result=\"failed\"} 60\n\
            prequal_proxy_probes_total{cluster=\"default\",result=\"skipped\"} 40\n\
            prequal_proxy_probes_total{cluster=\"default\",result=\"dropped\"} 5\n";
        let mut counters = ProxyCounters::default();
        counters.add_exposition(text);
        counters.add_exposition(text);
        assert_eq!(counters.hedges, 80);
        assert_eq!(counters.hedges_won, 24);
        assert_eq!(counters.hedges_refused, 6);
        assert_eq!(counters.upstream_tries, 2100);
        assert_eq!(counters.retries, 20);
        assert_eq!(counters.requests, 2000);
        assert_eq!((counters.probes_ok, counters.probes_failed), (5800, 120));
        assert_eq!(counters.probes_skipped, 90);
        assert!((counters.probes_per_query(2000) - 2.96).abs() < 1e-9);
        assert!((counters.probe_failure_pct() - 12000.0 / 5920.0).abs() < 1e-9);
        let summary = counters.hedge_summary(2000);
        // 20 retries and 80 hedges over 2000 queries.
        assert!((summary.extra_pct - 5.0).abs() < 1e-9, "{summary:?}");
        assert_eq!(summary.tries, 2100);
        assert_eq!(summary.sent, 80);
    }

    #[test]
    fn replica_lines_parse_in_index_order() {
        let out = "replica 1 127.0.0.1:9001\nreplica 0 127.0.0.1:9000\n";
        let addrs = parse_replicas(out, 2).unwrap();
        assert_eq!(addrs[0].port(), 9000);
        assert_eq!(addrs[1].port(), 9001);
        let err = parse_replicas(out, 3).unwrap_err();
        assert!(err.to_string().contains("replica 2"), "{err}");
    }

    #[test]
    fn a_redeploy_is_refused_live_by_its_key() {
        let text = "contenders = [\"prequal\"]\n[servers]\ncount = 3\n\
            latency = { kind = \"constant\", value = \"10ms\" }\n\
            [[servers.episodes]]\nservers = [1]\nstart = \"1s\"\nend = \"2s\"\nslow = 2.0\n\
            [[servers.episodes]]\nservers = [0]\nstart = \"1s\"\nend = \"2s\"\n\
            fault = \"redeployed\"\n\
            [clients]\ncount = 1\n[load]\nsteps = [{ duration = \"3s\", level = 100.0 }]\n";
        let compiled = prequal_model::scenario::Scenario::parse(text, Path::new("t.toml")).unwrap();
        let options = Options {
            out: PathBuf::from("unused"),
            prequal_exe: PathBuf::from("prequal"),
            external: false,
            only: Vec::new(),
            predict: false,
            startup: Duration::from_secs(1),
        };
        let err = plan(&compiled, &options).unwrap_err().to_string();
        assert!(err.starts_with("servers.episodes[1].fault: "), "{err}");
        assert!(err.contains("simulator only"), "{err}");
    }
}
