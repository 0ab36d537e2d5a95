//! `prequal experiment` end to end on loopback, without HAProxy, nginx or Traefik: a tiny scenario runs
//! and reports, every process it started is gone afterwards (also after SIGINT mid-run), and
//! scenario mistakes get errors naming the key. Every wait is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(60);

fn scenario(dir: &Path, load: &str, extra: &str) -> PathBuf {
    // No HAProxy, nginx or Traefik contenders unless `extra` names them.
    let mut extra = extra.to_string();
    for key in ["haproxy", "nginx", "traefik"] {
        if !extra.contains(key) {
            extra.push_str(&format!("\n{key} = []"));
        }
    }
    let text = format!(
        r#"name = "tiny"
seed = 3
latency_objective = "100ms"
contenders = ["round-robin", "prequal"]

[servers]
count = 3
latency = {{ kind = "constant", value = "5ms" }}

[clients]
count = 1
arrivals = "constant"

[load]
steps = [{{ duration = "{load}", level = 100.0 }}]

[experiment]
{extra}
"#
    );
    let path = dir.join("tiny.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("prequal-exp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// True while `pid` is a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn pids_in(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.split("(pid ").nth(1))
        .filter_map(|rest| rest.trim_end_matches(')').parse().ok())
        .collect()
}

#[test]
fn tiny_experiment_reports_and_leaves_no_process() {
    let dir = temp_dir("run");
    let file = scenario(&dir, "1s", "direct = true");
    let out = dir.join("report");
    let output = Command::new(env!("CARGO_BIN_EXE_prequal"))
        .args(["experiment", file.to_str().unwrap(), "--out"])
        .arg(&out)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["simulated"], false);
    let runs = report["runs"].as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        ["round-robin", "prequal", "direct (client round robin)"]
    );
    for run in runs {
        // 100 qps for 1 s with constant gaps: exactly 100 queries, all answered.
        assert_eq!(run["summary"]["queries"], 100, "{run}");
        assert_eq!(run["summary"]["successes"], 100, "{run}");
        let served: u64 = run["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["queries"].as_u64().unwrap())
            .sum();
        assert_eq!(served, 100, "every response named its replica");
        assert!(run["predicted"]["measured"]["summary"]["queries"].as_u64() > Some(0));
    }
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("prequal"));
    assert!(
        !html.contains("src=\"http"),
        "the page loads nothing from elsewhere"
    );
    let pids: Vec<u32> = report["contenders"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["pids"].as_array().unwrap().clone())
        .map(|p| p.as_u64().unwrap() as u32)
        .collect();
    // The backends of 3 contenders and the proxies of 2.
    assert_eq!(pids.len(), 5, "{pids:?}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived the experiment");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `prequal experiment` on `file`, sends SIGINT once its stderr has shown every marker
/// in `markers` in turn, and waits (bounded) for it to exit. Returns whether it succeeded, the
/// stderr up to the signal, and the rest.
fn interrupt_after(file: &Path, out: &Path, markers: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_prequal"))
        .args([
            "experiment",
            file.to_str().unwrap(),
            "--no-prediction",
            "--out",
        ])
        .arg(out)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut seen = String::new();
    for marker in markers {
        // Each marker must come after the previous one.
        let from = seen.len();
        while !seen[from..].contains(marker) {
            let line = rx
                .recv_timeout(BOUND.saturating_sub(start.elapsed()))
                .unwrap_or_else(|_| panic!("no {marker:?} line; stderr so far:\n{seen}"));
            seen.push_str(&line);
            seen.push('\n');
        }
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(start.elapsed() < BOUND, "experiment did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    let rest: Vec<String> = rx.try_iter().collect();
    (exit.success(), seen, rest.join("\n"))
}

#[test]
fn sigint_mid_run_stops_every_process() {
    let dir = temp_dir("sigint");
    let file = scenario(&dir, "60s", "");
    // Wait until the load runs through the first contender's proxy.
    let (success, seen, rest) = interrupt_after(&file, &dir.join("report"), &["t=  1s"]);
    let pids = pids_in(&seen);
    assert_eq!(pids.len(), 2, "backend and proxy started: {seen}");
    assert!(!success, "an interrupted experiment reports failure");
    assert!(rest.contains("interrupted"), "{rest}");
    assert!(
        !dir.join("report/report.json").exists(),
        "no report without a finished contender"
    );
    for pid in pids {
        assert!(
            !alive(pid),
            "process {pid} outlived the interrupted experiment"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_in_a_later_contender_keeps_the_finished_ones() {
    let dir = temp_dir("partial");
    let file = scenario(&dir, "2s", "");
    let out = dir.join("report");
    // The first contender (round robin) finishes; interrupt the second (prequal) mid-load.
    let (success, seen, rest) = interrupt_after(&file, &out, &["[2/2]", "t=  1s"]);
    assert!(!success, "an interrupted experiment reports failure");
    assert!(rest.contains("interrupted"), "{rest}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["interrupted"], true);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{report}");
    assert_eq!(runs[0]["label"], "round-robin");
    assert_eq!(runs[0]["summary"]["queries"], 200);
    let skipped = report["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s["label"] == "prequal"
                && s["reason"].as_str().unwrap().contains("interrupted")),
        "{skipped:?}"
    );
    assert!(out.join("index.html").exists());
    let pids = pids_in(&seen);
    assert_eq!(pids.len(), 4, "two backends and two proxies: {seen}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived the experiment");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scenario_mistakes_name_the_key() {
    let dir = temp_dir("bad");
    for (extra, key, hint) in [
        (
            "haproxy = [\"roundrobin\", \"fastest\"]",
            "experiment.haproxy[1]",
            "leastconn",
        ),
        ("nginx = [\"ip_hash\"]", "experiment.nginx[0]", "least_conn"),
        (
            "traefik = [\"leasttime\", \"drr\"]",
            "experiment.traefik[1]",
            "leasttime",
        ),
        ("proxies = 0", "experiment.proxies", "1 to 64"),
        ("retries = 2", "retries", "unknown field"),
    ] {
        let file = scenario(&dir, "1s", extra);
        let output = Command::new(env!("CARGO_BIN_EXE_prequal"))
            .args(["experiment", file.to_str().unwrap(), "--dry-run"])
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra}: accepted");
        assert!(
            stderr.contains(key) && stderr.contains(hint),
            "{extra}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mistake_found_while_planning_names_the_scenario_file() {
    // The file parses; the mistake is in a flag checked against it, once the plan is made.
    let dir = temp_dir("plan");
    let file = scenario(&dir, "1s", "");
    let output = Command::new(env!("CARGO_BIN_EXE_prequal"))
        .args(["experiment", file.to_str().unwrap(), "--dry-run"])
        .args(["--only", "no-such-contender"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "accepted: {stderr}");
    assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
    assert!(
        stderr.contains("--only") && stderr.contains("no-such-contender"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hedged contender runs live as a hedging prequal proxy, beside an unhedged one, against a
/// replica black-holed for the whole run; the report carries each proxy's hedges and tries.
#[test]
fn hedged_contender_and_fault_episode_run_live() {
    let dir = temp_dir("hedge");
    let text = r#"name = "tiny-faults"
seed = 3
latency_objective = "100ms"
contenders = ["prequal", { name = "prequal", hedge = { delay = "20ms" } }]

[servers]
count = 3
latency = { kind = "constant", value = "5ms" }

[[servers.episodes]]
servers = [0]
start = "0s"
end = "10s"
fault = "black-hole"

[clients]
count = 1
arrivals = "constant"

[load]
steps = [{ duration = "1s", level = 100.0 }]

[experiment]
haproxy = []
nginx = []
traefik = []
timeout = "1s"
"#;
    let file = dir.join("tiny-faults.toml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("report");
    let output = Command::new(env!("CARGO_BIN_EXE_prequal"))
        .args(["experiment", file.to_str().unwrap(), "--out"])
        .arg(&out)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["prequal", "prequal +hedge (delay=\"20ms\")"]);
    for run in runs {
        let s = &run["summary"];
        assert_eq!(s["queries"], 100, "{run}");
        let hedging = &run["hedging"];
        assert_eq!(hedging["queries"], 100, "{run}");
        assert!(hedging["tries"].as_u64().unwrap() >= 100, "{run}");
    }
    // Off for the plain contender, on (and predicted hedged) for the other.
    assert_eq!(runs[0]["hedging"]["sent"], 0);
    assert!(runs[1]["predicted"]["measured"]["summary"]["queries"].as_u64() > Some(0));
    let config = std::fs::read_to_string(
        out.join("runs/prequal-hedge-delay-20ms/prequal-proxy-0/prequal.toml"),
    )
    .unwrap();
    assert!(config.contains("delay = \"20ms\""), "{config}");
    for record in report["contenders"].as_array().unwrap() {
        assert!(
            record["proxy"]["upstream_tries"].as_u64() >= Some(100),
            "{record}"
        );
    }
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(summary.contains("hedging"), "{summary}");
    assert!(summary.contains("prequal proxies"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
