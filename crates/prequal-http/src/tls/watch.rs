//! Polling certificate files for change: a change of modification time or size of any of a
//! set of files (the proxy checks its config file and `upstreams_file` the same way) reloads
//! everything built from the set. A reload that fails leaves what is in force, is logged with
//! the error (which names the file), and is tried again at the next poll: the files may be
//! caught between two renames.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use super::TlsError;

/// Something whose certificates come from files and can be read again.
pub trait Reload: Send + Sync + 'static {
    /// The files to watch.
    fn files(&self) -> Vec<PathBuf>;
    /// Reads every file again and swaps the result in; on error nothing changes.
    fn reload(&self) -> Result<(), TlsError>;
    /// What is reloaded, for log lines (`server.tls`, `clusters.api.tls`, `--tls-cert`).
    fn what(&self) -> &str;
}

/// What identifies a version of each file (`None` for one that cannot be read now).
type Stamps = Vec<Option<(SystemTime, u64)>>;

fn stamps(files: &[PathBuf]) -> Stamps {
    files
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

/// Watches `target`'s files every `interval` (not at all when it is zero) on the current
/// runtime. The task holds a weak reference and ends once `target` is dropped.
pub fn spawn<T: Reload>(target: &Arc<T>, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let files = target.files();
    let last = stamps(&files);
    runtime.spawn(watch(Arc::downgrade(target), files, last, interval));
}

async fn watch<T: Reload>(target: Weak<T>, files: Vec<PathBuf>, mut last: Stamps, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(target) = target.upgrade() else {
            return;
        };
        let now = stamps(&files);
        if now == last {
            continue;
        }
        match target.reload() {
            Ok(()) => {
                tracing::info!(what = target.what(), "TLS certificates reloaded");
                last = now;
            }
            // `last` stays, so the next poll tries again: the files may be mid-replacement.
            Err(error) => tracing::error!(
                what = target.what(),
                %error,
                "TLS certificates not reloaded; the ones in use stay"
            ),
        }
    }
}
