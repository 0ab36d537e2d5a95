//! Plots of a [`Report`], as SVG and PNG, drawn with plotters.
//!
//! - `latency-percentile`: latency against percentile, the x axis on a log scale of
//!   1/(1 − p) so that p90, p99, p99.9 and p99.99 are evenly spaced (as in the "Beyond Round
//!   Robin" figure), one line per run;
//! - `latency-over-time`: p50, p99 and p99.9 of each second, log latency axis, with the load
//!   phases marked (as in the Prequal load-ramp figure);
//! - `rif-over-time`: p50 and p99 of server RIF at arrival, per second (simulations only:
//!   a live experiment does not see the replicas' RIF);
//! - `traffic-share`: each replica's share of the queries of every second, one panel per run
//!   (when there are at most 12 runs).
//!
//! Titles say whether the numbers are simulated or live; a live run's simulated prediction, when
//! it has one, is drawn dashed in the run's colour on the latency-percentile plot, once per
//! distinct prediction (runs that simulate alike, such as HAProxy's `leastconn` and prequal's
//! least-loaded, share the colour of the first of them).
//!
//! Text is rendered with a font embedded in the binary (Ubuntu Light from the
//! `epaint_default_fonts` crate) registered with plotters' ab_glyph backend, so plots build on
//! a machine with no system fonts.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::results::{Report, RunResult};

/// A plot could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {message}")]
pub struct PlotError {
    /// The file being written.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // The bytes are a valid TrueType font shipped by the crate; if plotters ever rejected
        // them, text would be missing from the plots but nothing else would break.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

const SIZE: (u32, u32) = (960, 600);

const PLOTS: [&str; 4] = [
    "latency-percentile",
    "latency-over-time",
    "rif-over-time",
    "traffic-share",
];

/// Runs beyond this many get no traffic-share plot (one panel each would be unreadable).
const MAX_SHARE_PANELS: usize = 12;

/// The plots that apply to `report`.
pub fn plot_names(report: &Report) -> Vec<&'static str> {
    PLOTS
        .into_iter()
        .filter(|name| match *name {
            "rif-over-time" => report.simulated,
            "traffic-share" => !report.runs.is_empty() && report.runs.len() <= MAX_SHARE_PANELS,
            _ => true,
        })
        .collect()
}

fn draw<DB: DrawingBackend>(
    name: &str,
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    match name {
        "latency-percentile" => latency_percentile(report, root),
        "latency-over-time" => latency_over_time(report, root),
        "traffic-share" => traffic_share(report, root),
        _ => rif_over_time(report, root),
    }
}

fn kind(report: &Report) -> &'static str {
    if report.simulated {
        "simulated"
    } else {
        "live"
    }
}

/// Writes every plot of `report` into `dir` as SVG and PNG; returns the files written.
pub fn write_plots(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    register_font();
    let mut written = Vec::new();
    for name in plot_names(report) {
        let path = dir.join(format!("{name}.svg"));
        let err = |message: String| PlotError {
            path: path.display().to_string(),
            message,
        };
        {
            let root = SVGBackend::new(&path, SIZE).into_drawing_area();
            draw(name, report, &root).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))?;
        }
        written.push(path.clone());
        let path = dir.join(format!("{name}.png"));
        let err = |message: String| PlotError {
            path: path.display().to_string(),
            message,
        };
        {
            let root = BitMapBackend::new(&path, SIZE).into_drawing_area();
            draw(name, report, &root).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))?;
        }
        written.push(path);
    }
    Ok(written)
}

/// Twenty distinguishable colours, enough for every contender of a full live experiment (up
/// to seven prequal policies, three HAProxy, three nginx and three Traefik algorithms, direct)
/// before any repeats: the first twelve strong, then lighter tints of the first eight.
fn color(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 20] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(0, 0, 0),
        RGBColor(0, 95, 95),
        RGBColor(174, 199, 232),
        RGBColor(255, 152, 150),
        RGBColor(152, 223, 138),
        RGBColor(255, 187, 120),
        RGBColor(197, 176, 213),
        RGBColor(196, 156, 148),
        RGBColor(247, 182, 210),
        RGBColor(158, 218, 229),
    ];
    PALETTE[i % PALETTE.len()]
}

fn run_name(r: &RunResult) -> String {
    let mut name = r.label.clone();
    if (r.load - 1.0).abs() > 1e-9 {
        name.push_str(&format!(" @{:.2}x", r.load));
    }
    if let Some((k, v)) = &r.param
        && !name.contains(&format!("{k}="))
    {
        name.push_str(&format!(" {k}={v}"));
    }
    name
}

fn latency_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return (0.1, 10.0);
    }
    (lo * 0.8, hi * 1.25)
}

fn percentile_label(x: &f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x);
    format!("p{}", (p * 100.0).round() / 100.0)
}

fn latency_percentile<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let all = report.runs.iter().flat_map(|r| {
        let predicted = r.predicted.iter().flat_map(|p| &p.measured.latency_curve);
        r.output
            .measured
            .latency_curve
            .iter()
            .chain(predicted)
            .map(|p| p.1)
    });
    let (lo, hi) = latency_range(all);
    let title = format!(
        "{}: latency by percentile ({})",
        report.scenario,
        kind(report)
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0f64..10_000.0).log_scale(), (lo..hi).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("percentile (log scale of 1/(1-p))")
        .y_desc("latency, ms")
        .x_label_formatter(&percentile_label)
        .y_labels(12)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| e.to_string())?;
    let curve_points = |curve: &[(f64, f64)]| -> Vec<(f64, f64)> {
        curve
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|&(p, ms)| (1.0 / (1.0 - p / 100.0).max(1e-4), ms))
            .collect()
    };
    // Contenders simulated alike (a prequal proxy's least-loaded and HAProxy's leastconn, say)
    // have identical predictions: draw and label each distinct prediction once.
    let mut predicted: Vec<&[(f64, f64)]> = Vec::new();
    for (i, r) in report.runs.iter().enumerate() {
        let c = color(i);
        let points = curve_points(&r.output.measured.latency_curve);
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(run_name(r))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        if let Some(p) = &r.predicted
            && !predicted.contains(&p.measured.latency_curve.as_slice())
        {
            predicted.push(&p.measured.latency_curve);
            let points = curve_points(&p.measured.latency_curve);
            chart
                .draw_series(DashedLineSeries::new(points, 6, 4, c.stroke_width(1)))
                .map_err(|e| e.to_string())?
                .label(format!("{} (simulated)", p.policy))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(1))
                });
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        // High percentiles have high latencies, so the lower right corner is where no curve goes.
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| e.to_string())
}

type Pick = fn(&crate::metrics::Second) -> f64;

fn latency_over_time<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let panels: [(&str, Pick); 3] = [
        ("p50", |s| s.latency_ms.p50),
        ("p99", |s| s.latency_ms.p99),
        ("p99.9", |s| s.latency_ms.p999),
    ];
    time_panels(report, root, "latency over time", "ms", &panels, true)
}

fn rif_over_time<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let panels: [(&str, Pick); 2] = [("p50", |s| s.rif.p50), ("p99", |s| s.rif.p99)];
    time_panels(report, root, "server RIF at arrival", "RIF", &panels, false)
}

fn time_panels<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
    what: &str,
    unit: &str,
    panels: &[(&str, Pick)],
    log: bool,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!("{}: {what} ({})", report.scenario, kind(report));
    let (top, rest) = root.split_vertically(40);
    top.titled(&title, ("sans-serif", 24))
        .map_err(|e| e.to_string())?;
    let areas = rest.split_evenly((panels.len(), 1));
    for ((name, pick), area) in panels.iter().zip(&areas) {
        let values = report.runs.iter().flat_map(|r| {
            r.output
                .measured
                .per_second
                .iter()
                .filter(|s| s.queries > 0)
                .map(pick)
        });
        let (lo, hi) = latency_range(values);
        let label = format!("{name}, {unit}");
        // A log axis only pays off across a wide range; plotters labels few values on it.
        if log && hi / lo > 30.0 {
            time_panel(report, area, &label, (lo..hi).log_scale(), *pick)?;
        } else if log {
            time_panel(report, area, &label, lo..hi, *pick)?;
        } else {
            time_panel(report, area, &label, 0.0..hi.max(1.0), *pick)?;
        }
    }
    Ok(())
}

fn time_panel<DB: DrawingBackend, Y>(
    report: &Report,
    area: &DrawingArea<DB, Shift>,
    label: &str,
    y: Y,
    pick: Pick,
) -> Result<(), String>
where
    Y: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    Y::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let end = report.duration_s.max(1.0);
    let mut chart = ChartBuilder::on(area)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .y_desc(label)
        .x_desc("seconds")
        .y_labels(8)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| e.to_string())?;
    if let Some(first) = report.runs.first() {
        for p in first.output.measured.phases.iter().skip(1) {
            let (lo, hi) = (chart.y_range().start, chart.y_range().end);
            let line = vec![(p.start_s, lo), (p.start_s, hi)];
            chart
                .draw_series(std::iter::once(PathElement::new(line, BLACK.mix(0.3))))
                .map_err(|e| e.to_string())?;
        }
    }
    for (i, r) in report.runs.iter().enumerate() {
        let points = r
            .output
            .measured
            .per_second
            .iter()
            .filter(|s| s.queries > 0)
            .map(|s| (s.t as f64 + 0.5, pick(s)));
        let c = color(i);
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(run_name(r))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())
}

/// One panel per run: each replica's share of the queries of every second, so a replica that
/// a policy steers away from (or floods) stands out.
fn traffic_share<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!(
        "{}: each replica's share of the queries, per second ({})",
        report.scenario,
        kind(report)
    );
    let (top, rest) = root.split_vertically(40);
    top.titled(&title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    let n = report.runs.len().max(1);
    let cols = if n <= 3 { 1 } else { 2 };
    let rows = n.div_ceil(cols);
    let areas = rest.split_evenly((rows, cols));
    let end = report.duration_s.max(1.0);
    for (r, area) in report.runs.iter().zip(&areas) {
        let seconds = &r.output.measured.per_second;
        let share = |s: &crate::metrics::Second, i: usize| {
            let total: u64 = s.replicas.iter().sum();
            if total == 0 {
                0.0
            } else {
                s.replicas.get(i).copied().unwrap_or(0) as f64 / total as f64
            }
        };
        let replicas = seconds.iter().map(|s| s.replicas.len()).max().unwrap_or(0);
        let top_share = seconds
            .iter()
            .flat_map(|s| (0..replicas).map(move |i| share(s, i)))
            .fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(run_name(r), ("sans-serif", 14))
            .margin(6)
            .x_label_area_size(24)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..end, 0.0..(top_share * 1.1).max(0.01))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(5)
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .draw()
            .map_err(|e| e.to_string())?;
        for i in 0..replicas {
            let points = seconds
                .iter()
                .filter(|s| s.replicas.iter().any(|&q| q > 0))
                .map(|s| (s.t as f64 + 0.5, share(s, i)));
            chart
                .draw_series(LineSeries::new(points, color(i).stroke_width(1)))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
