//! The experiment's `index.html`: one self-contained page (no external assets) with the
//! scenario, the comparison table, the plots inline as SVG, and what was skipped.

use std::fmt::Write as _;

use crate::report::{ExperimentReport, PROXY_COLUMNS};

/// Escapes text for HTML.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;\
color:#222}table{border-collapse:collapse;margin:1em 0}th,td{padding:4px 10px;\
border-bottom:1px solid #ddd;text-align:right}th:first-child,td:first-child{text-align:left}\
th{background:#f4f4f4}.best{font-weight:bold}figure{margin:2em 0}figure svg{max-width:100%;\
height:auto}.note{color:#666}";

/// The page for `report`, with `svgs` (plot name, SVG text) inline.
pub fn render(report: &ExperimentReport, svgs: &[(&str, String)]) -> String {
    let r = &report.report;
    let obj = r.latency_objective_ms;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>prequal experiment: {name}</title><style>{STYLE}</style></head><body>\n\
         <h1>prequal experiment: {name}</h1>\n<p>{desc}</p>\n\
         <p class=\"note\">Live on loopback: every contender ran against fresh emulated replicas \
         with the same load schedule ({dur:.0} s, seed {seed}) on a machine with {cpus} logical \
         CPUs; latency is measured from each request's intended send time. Dashed lines and the \
         last column are the simulator's prediction for the same scenario.</p>\n",
        name = esc(&r.scenario),
        desc = esc(&r.description),
        dur = r.duration_s,
        seed = r.seed,
        cpus = report.cpus,
    );
    let best = r
        .runs
        .iter()
        .map(|run| run.output.measured.summary.within_objective)
        .fold(0.0f64, f64::max);
    let _ = writeln!(
        out,
        "<table><tr><th>contender</th><th>balancer</th><th>queries</th><th>p50 ms</th>\
         <th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>within {obj:.0} ms</th>\
         <th>errors</th><th>timeouts</th><th>simulated within {obj:.0} ms</th></tr>"
    );
    for (run, record) in r.runs.iter().zip(&report.contenders) {
        let s = &run.output.measured.summary;
        let l = &s.latency_ms;
        let class = if s.within_objective >= best {
            " class=\"best\""
        } else {
            ""
        };
        let predicted = run.predicted.as_ref().map_or_else(
            || "-".to_string(),
            |p| {
                format!(
                    "{:.3}% ({})",
                    p.measured.summary.within_objective * 100.0,
                    esc(&p.policy)
                )
            },
        );
        let balancer = if record.instances > 1 {
            format!("{} ×{}", record.balancer, record.instances)
        } else {
            record.balancer.clone()
        };
        let _ = writeln!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td>\
             <td>{:.1}</td><td>{:.1}</td><td>{:.3}%</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&run.label),
            esc(&balancer),
            s.queries,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            s.within_objective * 100.0,
            s.errors,
            s.timeouts,
            predicted
        );
    }
    out.push_str("</table>\n");
    let rows = report.proxy_rows();
    if !rows.is_empty() {
        out.push_str(
            "<p class=\"note\">The prequal proxies' own counters (admin <code>/metrics</code>), \
             summed over instances: the tries sent beyond one per query (retries and hedges), \
             retries, hedges sent, won and refused by the hedge budget, the tries counted \
             by outcome (<code>prequal_proxy_upstream_tries_total</code>), probes sent per \
             query, and the share of the probes sent that failed, timed out or whose reply was \
             dropped (<code>prequal_proxy_probes_total</code>).</p>\n<table><tr>",
        );
        for column in PROXY_COLUMNS {
            let _ = write!(out, "<th>{column}</th>");
        }
        out.push_str("</tr>\n");
        for r in rows {
            out.push_str("<tr>");
            for cell in r.cells() {
                let _ = write!(out, "<td>{}</td>", esc(&cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
    }
    if !report.skipped.is_empty() {
        out.push_str("<p>Not run:</p><ul>\n");
        for s in &report.skipped {
            let _ = writeln!(out, "<li>{}: {}</li>", esc(&s.label), esc(&s.reason));
        }
        out.push_str("</ul>\n");
    }
    for (name, svg) in svgs {
        let _ = writeln!(
            out,
            "<figure>{}<figcaption>{}</figcaption></figure>",
            strip_prolog(svg),
            esc(name)
        );
    }
    out.push_str(
        "<p class=\"note\">Files beside this page: report.json (every number), summary.txt, \
         summary.md, the plots as SVG and PNG, and runs/ with each contender's configs and \
         logs.</p>\n</body></html>\n",
    );
    out
}

/// The SVG element without an XML declaration, for inlining.
fn strip_prolog(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }

    #[test]
    fn inlines_svg_without_its_prolog() {
        assert_eq!(
            strip_prolog("<?xml version=\"1.0\"?>\n<svg a>x</svg>"),
            "<svg a>x</svg>"
        );
    }
}
