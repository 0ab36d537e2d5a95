//! Reloading the configuration file: on demand (SIGHUP in `prequal proxy`) and when the file
//! changes.
//!
//! A reload reads and validates the whole file first and swaps the routing table only if that
//! worked, so a file with an error is logged and the running configuration stays in force.
//! Change detection polls the file's modification time and size every `interval` (no
//! platform file-notification dependency; one `stat` per second costs nothing).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::ProxyConfig;
use crate::server::{ProxyError, ProxyHandle};

/// Reads `path` and applies it; on any error the running configuration stays.
pub fn reload_from_file(handle: &ProxyHandle, path: &Path) -> Result<(), ProxyError> {
    let config = ProxyConfig::from_file(path)?;
    handle.reload(&config)
}

/// What identifies a version of the file.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Watches `path` every `interval` and reloads it when it changes, logging refused reloads.
/// Runs until the task is dropped.
pub async fn watch_file(handle: ProxyHandle, path: PathBuf, interval: Duration) {
    let mut last = stamp(&path);
    loop {
        tokio::time::sleep(interval).await;
        let now = stamp(&path);
        if now == last {
            continue;
        }
        last = now;
        match reload_from_file(&handle, &path) {
            Ok(()) => {}
            Err(error) => {
                tracing::error!(%error, "reload refused; the running configuration stays")
            }
        }
    }
}
