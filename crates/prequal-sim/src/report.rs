//! Planning the runs of a scenario (contenders × sweep), running them in parallel, and the
//! report: a serialisable [`Report`] (JSON, byte-identical for the same seed) and a text table.
//!
//! Runs are independent (each builds its own world from the scenario seed), so they go to a
//! rayon pool, one run per task, and come back in plan order whatever the thread timing.

use std::fmt::Write as _;

use prequal_core::{HedgeConfig, PolicyConfig};
use rayon::prelude::*;
use serde::Deserialize;

use crate::engine::{self, HedgeSummary, SimError};
use crate::model::ModelError;
use crate::scenario::{BalancerKeys, Compiled};

pub(crate) mod results;

pub use results::{Prediction, Report, RunResult};

/// One run to do.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    /// Name for tables and plots (policy name plus non-default parameters).
    pub label: String,
    /// The policy config.
    pub contender: PolicyConfig,
    /// Hedging, when the run hedges (the contender's own `hedge`, else `[clients.hedge]`).
    pub hedge: Option<HedgeConfig>,
    /// The balancer keys set (the contender's own, else `[clients]`'s); unset ones take the
    /// proxy's defaults.
    pub balancer: BalancerKeys,
    /// Load multiplier.
    pub load: f64,
    /// The swept parameter and its value, if any.
    pub param: Option<(String, String)>,
}

/// The keys of `config` whose values differ from the policy's defaults, as `key=value`.
fn non_defaults(config: &PolicyConfig) -> Vec<String> {
    let table = toml::Table::try_from(config).unwrap_or_default();
    let defaults = PolicyConfig::from_name(config.name())
        .ok()
        .and_then(|d| toml::Table::try_from(&d).ok())
        .unwrap_or_default();
    table
        .iter()
        .filter(|(k, v)| *k != "name" && defaults.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// A run's label: the policy name, with its non-default parameters (and the swept one).
pub fn label_of(config: &PolicyConfig, param: Option<&(String, String)>) -> String {
    let mut extra = non_defaults(config);
    // A swept value equal to the default still belongs in the label.
    if let Some((k, v)) = param
        && !extra.iter().any(|e| e.starts_with(&format!("{k}=")))
    {
        extra.insert(0, format!("{k}={v}"));
    }
    if extra.is_empty() {
        config.name().to_string()
    } else {
        format!("{} ({})", config.name(), extra.join(", "))
    }
}

/// ` +hedge`, with the hedging keys that differ from prequal-core's defaults.
fn hedge_label(config: &HedgeConfig) -> String {
    let table = toml::Table::try_from(config).unwrap_or_default();
    let defaults = toml::Table::try_from(HedgeConfig::default()).unwrap_or_default();
    let extra: Vec<String> = table
        .iter()
        .filter(|(k, v)| defaults.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if extra.is_empty() {
        " +hedge".into()
    } else {
        format!(" +hedge ({})", extra.join(", "))
    }
}

/// `config` with `key` set to `value`, or None when the policy has no such key.
fn with_param(
    config: &PolicyConfig,
    key: &str,
    value: &toml::Value,
) -> Result<Option<PolicyConfig>, ModelError> {
    let mut table = toml::Table::try_from(config)
        .map_err(|e| ModelError::invalid("sweep.param", e.to_string()))?;
    if !table.contains_key(key) {
        return Ok(None);
    }
    table.insert(key.to_string(), value.clone());
    let updated = PolicyConfig::deserialize(table)
        .map_err(|e| ModelError::invalid("sweep.values", format!("{key} = {value}: {e}")))?;
    updated
        .validate()
        .map_err(|e| ModelError::invalid("sweep.values", e.to_string()))?;
    Ok(Some(updated))
}

/// Every run of the scenario: contenders × sweep loads × sweep values.
pub fn plan(compiled: &Compiled) -> Result<Vec<RunPlan>, ModelError> {
    let sc = &compiled.scenario;
    let sweep = sc.sweep.clone().unwrap_or_default();
    let loads = if sweep.load.is_empty() {
        vec![1.0]
    } else {
        sweep.load.clone()
    };
    let mut out = Vec::new();
    let mut any_param = false;
    for &load in &loads {
        for entry in &sc.contenders {
            let contender = &entry.policy;
            let hedge = entry
                .hedge
                .as_ref()
                .or(sc.clients.hedge.as_ref())
                .filter(|h| h.enabled)
                .cloned();
            let balancer = entry.balancer.over(&sc.clients.balancer_keys());
            let variants = match &sweep.param {
                Some(key) => {
                    let mut v = Vec::new();
                    for value in &sweep.values {
                        if let Some(c) = with_param(contender, key, value)? {
                            v.push((c, Some((key.clone(), value.to_string()))));
                        }
                    }
                    any_param |= !v.is_empty();
                    if v.is_empty() {
                        vec![(contender.clone(), None)]
                    } else {
                        v
                    }
                }
                None => vec![(contender.clone(), None)],
            };
            for (config, param) in variants {
                let mut label = label_of(&config, param.as_ref());
                if let Some(h) = &hedge {
                    label.push_str(&hedge_label(h));
                }
                // Only the contender's own keys: `[clients]`'s apply to every run alike.
                label.push_str(&entry.balancer.label());
                out.push(RunPlan {
                    label,
                    contender: config,
                    hedge: hedge.clone(),
                    balancer: balancer.clone(),
                    load,
                    param,
                });
            }
        }
    }
    if let Some(key) = &sweep.param
        && !any_param
    {
        return Err(ModelError::invalid(
            "sweep.param",
            format!("no contender has a parameter named `{key}`"),
        ));
    }
    Ok(out)
}

/// Runs every plan on the rayon pool; `progress` is called once per finished run.
pub fn run_all(
    compiled: &Compiled,
    plans: &[RunPlan],
    progress: &(dyn Fn(&RunPlan) + Sync),
) -> Result<Report, SimError> {
    let runs: Vec<Result<RunResult, SimError>> = plans
        .par_iter()
        .map(|p| {
            let config = p.balancer.config(p.hedge.as_ref());
            let output = engine::run_with(compiled, &p.contender, &config, p.load)?;
            progress(p);
            Ok(RunResult {
                label: p.label.clone(),
                policy: p.contender.name().to_string(),
                load: p.load,
                param: p.param.clone(),
                output,
                predicted: None,
            })
        })
        .collect();
    let sc = &compiled.scenario;
    Ok(Report {
        simulated: true,
        scenario: sc.name.clone(),
        description: sc.description.clone(),
        seed: sc.seed,
        duration_s: compiled.end().as_secs_f64(),
        latency_objective_ms: sc.latency_objective.as_secs_f64() * 1e3,
        runs: runs.into_iter().collect::<Result<_, _>>()?,
    })
}

/// Reads one quantile out of a summary's latencies.
type QuantileOf = fn(&crate::metrics::Quantiles) -> f64;

impl Report {
    /// Pretty JSON (same seed, same bytes).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The summary table, and a per-phase table when the load schedule has several phases.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let obj = self.latency_objective_ms;
        let with_prediction = self.runs.iter().any(|r| r.predicted.is_some());
        let _ = write!(
            out,
            "{:<34} {:>5} {}",
            "contender",
            "load",
            summary_header(obj)
        );
        if with_prediction {
            let _ = write!(out, " {:>10}", format!("sim<={obj:.0}ms"));
        }
        out.push('\n');
        for r in &self.runs {
            let s = &r.output.measured.summary;
            let _ = write!(
                out,
                "{:<34} {:>5.2} {}",
                label_with_param(r),
                r.load,
                summary_cells(s)
            );
            if with_prediction {
                match &r.predicted {
                    Some(p) => {
                        let within = p.measured.summary.within_objective * 100.0;
                        let _ = write!(out, " {within:>9.3}%");
                    }
                    None => {
                        let _ = write!(out, " {:>10}", "-");
                    }
                }
            }
            out.push('\n');
        }
        for line in self.best_lines() {
            let _ = writeln!(out, "{line}");
        }
        // Only when some run sent a hedge or an extra try: live, every prequal proxy reports
        // its counters, and a table of zeros says nothing.
        let hedged = |h: &HedgeSummary| h.sent > 0 || h.refused > 0 || h.tries > h.queries;
        if self
            .runs
            .iter()
            .any(|r| r.output.hedging.as_ref().is_some_and(hedged))
        {
            out.push('\n');
            out.push_str(&self.hedge_table());
        }
        if self.runs.iter().any(|r| r.output.balancer.is_some()) {
            out.push('\n');
            out.push_str(&self.balancer_table());
        }
        if self
            .runs
            .first()
            .is_some_and(|r| r.output.measured.phases.len() > 1)
        {
            out.push('\n');
            out.push_str(&self.phase_table());
        }
        out
    }

    /// Hedging's cost per run that hedged: hedges sent, won, refused, and the extra tries.
    fn hedge_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<34} {:>5} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}",
            "hedging", "load", "queries", "sent", "won", "refused", "tries/q", "extra"
        );
        for r in &self.runs {
            if let Some(h) = &r.output.hedging {
                let _ = writeln!(
                    out,
                    "{:<34} {:>5.2} {:>9} {:>9} {:>9} {:>9} {:>10.4} {:>8.2}%",
                    label_with_param(r),
                    r.load,
                    h.queries,
                    h.sent,
                    h.won,
                    h.refused,
                    h.tries_per_query,
                    h.extra_pct
                );
            }
        }
        out
    }

    /// What the balancer did beyond picking, per run that retried or ejected: retries sent
    /// and refused by the budget, and ejections.
    fn balancer_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<34} {:>5} {:>9} {:>9} {:>9} {:>10}",
            "retries and ejections", "load", "queries", "retries", "refused", "ejections"
        );
        for r in &self.runs {
            if let Some(b) = &r.output.balancer {
                let _ = writeln!(
                    out,
                    "{:<34} {:>5.2} {:>9} {:>9} {:>9} {:>10}",
                    label_with_param(r),
                    r.load,
                    r.output.measured.summary.queries,
                    b.retries,
                    b.retries_refused,
                    b.ejections
                );
            }
        }
        out
    }

    /// "best at" lines: per load level, which contender has the lowest p50, p99 and p99.9
    /// (ties list every contender within 0.05 ms of the best), among the contenders that fail
    /// the fewest queries (within 0.01% of all queries): a fast error is not a fast answer.
    /// Timeouts count in the quantiles at the timeout; runs with no successful query are left
    /// out.
    pub fn best_lines(&self) -> Vec<String> {
        let mut loads: Vec<f64> = Vec::new();
        for r in &self.runs {
            if !loads.contains(&r.load) {
                loads.push(r.load);
            }
        }
        let quantiles: [(&str, QuantileOf); 3] = [
            ("p50", |q| q.p50),
            ("p99", |q| q.p99),
            ("p99.9", |q| q.p999),
        ];
        let mut lines = Vec::new();
        for load in &loads {
            let runs: Vec<&RunResult> = self
                .runs
                .iter()
                .filter(|r| r.load == *load && r.output.measured.summary.successes > 0)
                .collect();
            if runs.len() < 2 {
                continue;
            }
            // A fast error is no answer: only the contenders that fail the fewest queries
            // (within 0.01% of all queries) compete on latency.
            let failed = |r: &RunResult| {
                let s = &r.output.measured.summary;
                (s.queries - s.successes) as f64 / s.queries.max(1) as f64
            };
            let fewest = runs.iter().map(|r| failed(r)).fold(f64::INFINITY, f64::min);
            let runs: Vec<&RunResult> = runs
                .into_iter()
                .filter(|r| failed(r) <= fewest + 1e-4)
                .collect();
            let cells: Vec<String> = quantiles
                .iter()
                .map(|(name, get)| {
                    let value = |r: &RunResult| get(&r.output.measured.summary.latency_ms);
                    let best = runs.iter().map(|r| value(r)).fold(f64::INFINITY, f64::min);
                    let names: Vec<String> = runs
                        .iter()
                        .filter(|r| value(r) <= best + 0.05)
                        .map(|r| label_with_param(r))
                        .collect();
                    format!("{name} {} ({best:.1})", names.join(" = "))
                })
                .collect();
            let at = if loads.len() > 1 {
                format!(" at load {load:.2}")
            } else {
                String::new()
            };
            lines.push(format!("best{at}: {}", cells.join(", ")));
        }
        lines
    }

    /// The summary table in Markdown (for docs and the experiment's HTML page).
    pub fn markdown_table(&self) -> String {
        let mut out = String::new();
        let obj = self.latency_objective_ms;
        let with_prediction = self.runs.iter().any(|r| r.predicted.is_some());
        let _ = write!(
            out,
            "| contender | queries | p50 ms | p99 ms | p99.9 ms | max ms | within {obj:.0} ms | errors | timeouts |"
        );
        if with_prediction {
            let _ = write!(out, " simulated within {obj:.0} ms |");
        }
        out.push_str("\n|---|--:|--:|--:|--:|--:|--:|--:|--:|");
        if with_prediction {
            out.push_str("--:|");
        }
        out.push('\n');
        for r in &self.runs {
            let s = &r.output.measured.summary;
            let l = &s.latency_ms;
            let _ = write!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.3}% | {} | {} |",
                label_with_param(r),
                s.queries,
                l.p50,
                l.p99,
                l.p999,
                l.max,
                s.within_objective * 100.0,
                s.errors,
                s.timeouts
            );
            if with_prediction {
                match &r.predicted {
                    Some(p) => {
                        let within = p.measured.summary.within_objective * 100.0;
                        let _ = write!(out, " {within:.3}% ({}) |", p.policy);
                    }
                    None => out.push_str(" - |"),
                }
            }
            out.push('\n');
        }
        for line in self.best_lines() {
            let _ = writeln!(out, "\n{line}");
        }
        out
    }

    fn phase_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<34} {:<16} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
            "contender",
            "phase",
            "qps",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "errors",
            "timeouts"
        );
        for r in &self.runs {
            for p in &r.output.measured.phases {
                let (s, l) = (&p.summary, &p.summary.latency_ms);
                let _ = writeln!(
                    out,
                    "{:<34} {:<16} {:>8.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>8}",
                    label_with_param(r),
                    p.label,
                    p.qps * r.load,
                    l.p50,
                    l.p90,
                    l.p99,
                    l.p999,
                    s.errors,
                    s.timeouts
                );
            }
        }
        out
    }
}

/// The column heads of [`summary_cells`], for a latency objective in milliseconds.
pub fn summary_header(objective_ms: f64) -> String {
    format!(
        "{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
        "queries",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        format!("<={objective_ms:.0}ms"),
        "errors",
        "timeouts"
    )
}

/// One summary in the text tables' columns: queries, p50, p90, p99, p99.9 and max latency, the
/// share within the objective, errors and timeouts.
pub fn summary_cells(s: &crate::metrics::Summary) -> String {
    let l = &s.latency_ms;
    format!(
        "{:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.3}% {:>7} {:>8}",
        s.queries,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        s.within_objective * 100.0,
        s.errors,
        s.timeouts
    )
}

fn label_with_param(r: &RunResult) -> String {
    match &r.param {
        Some((k, v)) if !r.label.contains(&format!("{k}=")) => format!("{} [{k}={v}]", r.label),
        _ => r.label.clone(),
    }
}

/// The report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file or directory could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// JSON serialisation failed.
    #[error("report.json: {0}")]
    Json(#[from] serde_json::Error),
    /// A plot failed.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
}

impl Report {
    /// Writes `report.json`, `summary.txt` and (unless `plots` is false) the plots into
    /// `dir`, creating it; returns the files written.
    pub fn write_to(
        &self,
        dir: &std::path::Path,
        plots: bool,
    ) -> Result<Vec<std::path::PathBuf>, WriteError> {
        let io = |path: &std::path::Path| {
            let path = path.display().to_string();
            move |source| WriteError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let json = dir.join("report.json");
        std::fs::write(&json, self.to_json()? + "\n").map_err(io(&json))?;
        let summary = dir.join("summary.txt");
        std::fs::write(&summary, self.table()).map_err(io(&summary))?;
        let mut written = vec![json, summary];
        if plots {
            written.extend(crate::plot::write_plots(self, dir)?);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::Scenario;

    const BASE: &str = r#"
contenders = ["round-robin", { name = "prequal", q_rif = 0.5 }]
[servers]
count = 3
latency = { kind = "constant", value = "10ms" }
[clients]
count = 1
[load]
steps = [{ duration = "2s", level = 100.0 }]
"#;

    fn compiled(extra: &str) -> Result<Compiled, String> {
        Scenario::parse(&format!("{BASE}{extra}"), Path::new("s.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn sweep_applies_param_only_where_it_exists() {
        let c = compiled("[sweep]\nload = [0.5, 1.0]\nparam = \"q_rif\"\nvalues = [0.0, 1.0]\n")
            .unwrap();
        let plans = plan(&c).unwrap();
        let labels: Vec<(String, f64)> = plans.iter().map(|p| (p.label.clone(), p.load)).collect();
        assert_eq!(
            labels,
            vec![
                ("round-robin".to_string(), 0.5),
                ("prequal (q_rif=0.0)".to_string(), 0.5),
                ("prequal (q_rif=1.0)".to_string(), 0.5),
                ("round-robin".to_string(), 1.0),
                ("prequal (q_rif=0.0)".to_string(), 1.0),
                ("prequal (q_rif=1.0)".to_string(), 1.0),
            ]
        );
    }

    #[test]
    fn sweep_errors_name_their_key() {
        let c = compiled("[sweep]\nparam = \"bogus\"\nvalues = [1]\n").unwrap();
        assert!(plan(&c).unwrap_err().to_string().contains("sweep.param"));
        let c = compiled("[sweep]\nparam = \"q_rif\"\nvalues = [7.0]\n").unwrap();
        assert!(plan(&c).unwrap_err().to_string().contains("sweep.values"));
    }

    #[test]
    fn runs_come_back_in_plan_order_with_a_table() {
        let c = compiled("").unwrap();
        let plans = plan(&c).unwrap();
        let report = run_all(&c, &plans, &|_| {}).unwrap();
        let labels: Vec<&str> = report.runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["round-robin", "prequal (q_rif=0.5)"]);
        // 100 qps for 2 s against 10 ms replicas: every query succeeds in about 10 ms.
        let s = &report.runs[0].output.measured.summary;
        assert!((150..=250).contains(&s.queries), "{}", s.queries);
        assert_eq!(s.successes, s.queries);
        assert!(
            (s.latency_ms.p50 - 10.0).abs() < 0.1,
            "{}",
            s.latency_ms.p50
        );
        assert!(report.table().contains("prequal (q_rif=0.5)"));
        // Constant 10 ms replicas: both contenders tie at every quantile, and the line says so.
        let best = report.best_lines();
        assert_eq!(best.len(), 1, "{best:?}");
        assert!(
            best[0].starts_with("best: p50 round-robin = prequal (q_rif=0.5) ("),
            "{best:?}"
        );
        assert!(best[0].contains(", p99 ") && best[0].contains(", p99.9 "));
        assert!(report.table().contains(&best[0]));
        assert!(report.markdown_table().contains(&best[0]));
        let shares: f64 = report.runs[0]
            .output
            .measured
            .servers
            .iter()
            .map(|s| s.share)
            .sum();
        assert!((shares - 1.0).abs() < 1e-9);
    }
}
