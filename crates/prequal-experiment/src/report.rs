//! An experiment's results ([`ExperimentReport`]): the simulator's report plus what only a live
//! run knows per contender ([`ContenderRecord`]), the contenders skipped, and the prequal
//! proxies' counters with their table ([`ProxyCounters`], [`ProxyRow`]).

use prequal_sim::engine::HedgeSummary;
use prequal_sim::report::Report;
use serde::Serialize;

/// A contender that will not run, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    /// Its label.
    pub label: String,
    /// Why (e.g. "haproxy is not installed").
    pub reason: String,
}

/// What only a live run knows about a contender.
#[derive(Clone, Debug, Serialize)]
pub struct ContenderRecord {
    /// Its label.
    pub label: String,
    /// `prequal proxy`, `haproxy`, `nginx`, `traefik` or `direct`.
    pub balancer: String,
    /// Balancer instances.
    pub instances: u32,
    /// Requests the load generator sent.
    pub sent: u64,
    /// Requests not sent because too many were in flight.
    pub not_sent: u64,
    /// Requests per target (balancer instance, or replica for `direct`).
    pub per_target: Vec<u64>,
    /// Process ids of the replicas' process and the balancers (all stopped when the run ended).
    pub pids: Vec<u32>,
    /// Its folder of configs and logs, relative to the report.
    pub dir: String,
    /// For prequal proxies: their counters at the end of the run, summed over the instances
    /// (scraped from each admin listener's `/metrics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyCounters>,
}

/// One prequal contender's row of the proxies' table.
#[derive(Clone, Debug, PartialEq)]
pub struct ProxyRow {
    /// The contender.
    pub label: String,
    /// Queries the load generator sent.
    pub queries: u64,
    /// The proxies' counters, summed.
    pub counters: ProxyCounters,
    /// Tries sent beyond one per query (retries and hedges), in percent of the queries.
    pub extra_pct: f64,
}

/// The columns of the prequal proxies' table, in the text, Markdown and HTML reports.
pub const PROXY_COLUMNS: [&str; 10] = [
    "prequal proxies",
    "queries",
    "extra",
    "retries",
    "hedges",
    "won",
    "refused",
    "tries",
    "probes/q",
    "probe fail",
];

/// The widths of the text table's columns after the label.
const PROXY_WIDTHS: [usize; 9] = [9, 8, 8, 8, 8, 8, 9, 8, 10];

impl ProxyRow {
    /// The row's cells, formatted, one per [`PROXY_COLUMNS`] entry.
    pub fn cells(&self) -> [String; 10] {
        let c = &self.counters;
        [
            self.label.clone(),
            self.queries.to_string(),
            format!("{:.2}%", self.extra_pct),
            c.retries.to_string(),
            c.hedges.to_string(),
            c.hedges_won.to_string(),
            c.hedges_refused.to_string(),
            c.upstream_tries.to_string(),
            format!("{:.2}", c.probes_per_query(self.queries)),
            format!("{:.2}%", c.probe_failure_pct()),
        ]
    }
}

/// A prequal proxy's counters at the end of a run (`/metrics`), summed over instances and
/// labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProxyCounters {
    /// `prequal_proxy_requests_total`: requests received.
    pub requests: u64,
    /// `prequal_proxy_upstream_tries_total`: tries to replicas by outcome, counted as they
    /// finish (first tries, retries and hedges).
    pub upstream_tries: u64,
    /// `prequal_proxy_retries_total`.
    pub retries: u64,
    /// `prequal_proxy_hedges_total`: hedged tries sent.
    pub hedges: u64,
    /// `prequal_proxy_hedges_won_total`: hedges that answered first.
    pub hedges_won: u64,
    /// `prequal_proxy_hedges_refused_total`: hedges the budget refused.
    pub hedges_refused: u64,
    /// `prequal_proxy_probes_total{result="ok"}`: probes answered in time.
    pub probes_ok: u64,
    /// `prequal_proxy_probes_total{result="failed"}`: probes sent that failed or timed out.
    pub probes_failed: u64,
    /// `prequal_proxy_probes_total{result="skipped"}` and `{result="dropped"}`: probes not
    /// sent, because too many were already outstanding to their replica or in their cluster.
    pub probes_skipped: u64,
}

impl ProxyCounters {
    /// Adds the counters of one Prometheus text exposition.
    pub fn add_exposition(&mut self, text: &str) {
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
                continue;
            };
            let slot = match &line[..name_end] {
                "prequal_proxy_probes_total" if line.contains("result=\"ok\"") => {
                    &mut self.probes_ok
                }
                "prequal_proxy_probes_total" if line.contains("result=\"failed\"") => {
                    &mut self.probes_failed
                }
                "prequal_proxy_probes_total" => &mut self.probes_skipped,
                "prequal_proxy_requests_total" => &mut self.requests,
                "prequal_proxy_upstream_tries_total" => &mut self.upstream_tries,
                "prequal_proxy_retries_total" => &mut self.retries,
                "prequal_proxy_hedges_total" => &mut self.hedges,
                "prequal_proxy_hedges_won_total" => &mut self.hedges_won,
                "prequal_proxy_hedges_refused_total" => &mut self.hedges_refused,
                _ => continue,
            };
            *slot += value.max(0.0) as u64;
        }
    }

    /// Probes sent (answered or not; skipped and dropped ones were never sent) per query the
    /// load generator sent.
    pub fn probes_per_query(&self, queries: u64) -> f64 {
        (self.probes_ok + self.probes_failed) as f64 / queries.max(1) as f64
    }

    /// The share of the probes sent that failed or timed out, in percent.
    pub fn probe_failure_pct(&self) -> f64 {
        100.0 * self.probes_failed as f64 / (self.probes_ok + self.probes_failed).max(1) as f64
    }

    /// The report's hedging line for `queries` queries: hedges sent, won and refused, and
    /// the tries the proxies sent beyond one per query (hedges and retries alike; the
    /// simulator reports its retries apart). Tries are counted as sent, `queries +
    /// retries + hedges`, not from `upstream_tries`, which counts tries by outcome when they
    /// finish and has come out lower (docs/reliability.md).
    pub fn hedge_summary(&self, queries: u64) -> HedgeSummary {
        let tries = queries + self.retries + self.hedges;
        let tries_per_query = if queries == 0 {
            0.0
        } else {
            tries as f64 / queries as f64
        };
        HedgeSummary {
            queries,
            tries,
            sent: self.hedges,
            won: self.hedges_won,
            refused: self.hedges_refused,
            tries_per_query,
            extra_pct: (tries_per_query - 1.0).max(0.0) * 100.0,
        }
    }
}

/// An experiment's results.
#[derive(Clone, Debug, Serialize)]
pub struct ExperimentReport {
    /// The measurements in the simulator's format (`simulated` is false).
    #[serde(flatten)]
    pub report: Report,
    /// Per contender, what only a live run knows.
    pub contenders: Vec<ContenderRecord>,
    /// Contenders that did not run, and why.
    pub skipped: Vec<Skipped>,
    /// Logical CPUs of the machine the experiment ran on.
    pub cpus: usize,
    /// SIGINT or SIGTERM cut the experiment short: the report holds the contenders that
    /// finished before it, and the rest are listed in `skipped`.
    pub interrupted: bool,
}

impl ExperimentReport {
    /// The prequal proxies' counters, one row per prequal contender: queries sent, tries the
    /// proxies sent, the extra tries in percent of the queries, retries, and hedges sent, won
    /// and refused. Empty when no prequal contender ran.
    pub fn proxy_rows(&self) -> Vec<ProxyRow> {
        self.contenders
            .iter()
            .filter_map(|c| {
                let p = c.proxy.as_ref()?;
                let extra = p.hedge_summary(c.sent).extra_pct;
                Some(ProxyRow {
                    label: c.label.clone(),
                    queries: c.sent,
                    counters: p.clone(),
                    extra_pct: extra,
                })
            })
            .collect()
    }

    /// [`ExperimentReport::proxy_rows`] as a text table (empty without prequal contenders).
    pub fn proxy_table(&self) -> String {
        let rows = self.proxy_rows();
        if rows.is_empty() {
            return String::new();
        }
        let line = |cells: &[String]| {
            let mut out = format!("{:<34}", cells[0]);
            for (cell, width) in cells[1..].iter().zip(PROXY_WIDTHS) {
                out.push_str(&format!(" {cell:>width$}"));
            }
            out.push('\n');
            out
        };
        let mut out = line(&PROXY_COLUMNS.map(String::from));
        for r in rows {
            out.push_str(&line(&r.cells()));
        }
        out
    }

    /// [`ExperimentReport::proxy_rows`] as a Markdown table (empty without prequal contenders).
    pub fn proxy_markdown(&self) -> String {
        let rows = self.proxy_rows();
        if rows.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "| {} |\n|---{}|\n",
            PROXY_COLUMNS.join(" | "),
            "|--:".repeat(PROXY_COLUMNS.len() - 1)
        );
        for r in rows {
            out.push_str(&format!("| {} |\n", r.cells().join(" | ")));
        }
        out
    }

    /// The summary printed at the end and written to `summary.txt`: the simulator's table,
    /// then the prequal proxies' tries, retries and hedges.
    pub fn summary(&self) -> String {
        let proxies = self.proxy_table();
        if proxies.is_empty() {
            self.report.table()
        } else {
            format!("{}\n{proxies}", self.report.table())
        }
    }
}
