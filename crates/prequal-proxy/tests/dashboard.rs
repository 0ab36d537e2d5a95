//! The admin dashboard in a real browser: headless Chromium loads the page from a running
//! proxy, runs its script, and the test reads the values it rendered. Skipped, with a message,
//! where Chromium is not installed (`apt-get install -y chromium`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use common::*;

/// The first Chromium-like browser on the PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// The DOM of `url` after its scripts ran, from headless Chromium (at most 60 s).
fn rendered(browser: &PathBuf, url: &str) -> String {
    let profile = std::env::temp_dir().join(format!("prequal-dashboard-{}", std::process::id()));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=4000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The text of every cell of every table row that mentions `needle`.
fn rows_with(dom: &str, needle: &str) -> Vec<Vec<String>> {
    dom.split("<tr")
        .filter(|row| row.contains(needle))
        .map(|row| {
            row.split("<td")
                .skip(1)
                .filter_map(|cell| {
                    let text = cell.split_once('>')?.1;
                    Some(text.split("</td>").next()?.to_string())
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_renders_replicas_pool_and_counts_in_a_browser() {
    let Some(browser) = chromium() else {
        eprintln!("skipped: no Chromium on the PATH (apt-get install -y chromium)");
        return;
    };
    let backends = futures_join(3).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    let proxy = start_proxy(&config_text(&refs, Proto::H1, PREQUAL, NO_HEDGING)).await;
    let client = client(Proto::H1);
    assert_eq!(load(&client, proxy.addr, 60, 3).await, 60);
    let url = format!("http://{}/dashboard", proxy.admin);
    let dom = tokio::task::spawn_blocking(move || rendered(&browser, &url))
        .await
        .unwrap();
    assert!(dom.contains("cluster test (prequal)"), "{dom}");
    assert!(dom.contains("requests = 60"), "{dom}");
    assert!(dom.contains("hedges sent/won/refused = 0/0/0"), "{dom}");
    // One row per replica, by address, whose "ok" cells add up to every request.
    let mut ok = 0;
    for backend in &backends {
        let address = backend.addr.to_string();
        let rows = rows_with(&dom, &format!(">{address}<"));
        let replica_row = rows
            .iter()
            .find(|cells| cells.len() >= 10)
            .unwrap_or_else(|| panic!("no replica row for {address}\n{dom}"));
        ok += replica_row[7].parse::<u64>().unwrap();
        assert!(replica_row[6].ends_with('%'), "share: {replica_row:?}");
    }
    assert_eq!(ok, 60);
    // The probe pool, with each reply's hot or cold flag.
    assert!(dom.contains("probe pool: "), "{dom}");
    assert!(dom.contains(">cold<") || dom.contains(">hot<"), "{dom}");
}
