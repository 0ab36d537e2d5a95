//! Reloading the configuration file: on demand (SIGHUP in `prequal proxy`) and when the file
//! changes.
//!
//! A reload reads and validates the whole file first and swaps the routing table only if that
//! worked, so a file with an error is logged and the running configuration stays in force.
//! Change detection is prequal-http's file watch (`prequal_http::watch`: modification time and
//! size, polled every `interval`), the same as for certificates and `upstreams_file`: a file
//! that fails to load is logged once and tried again at every poll until it loads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prequal_http::watch::{self, Reload};

use crate::config::ProxyConfig;
use crate::server::{ProxyError, ProxyHandle};

/// Reads `path` and applies it; on any error the running configuration stays.
pub fn reload_from_file(handle: &ProxyHandle, path: &Path) -> Result<(), ProxyError> {
    let config = ProxyConfig::from_file(path)?;
    handle.reload(&config)
}

/// Watches `path` every `interval` and reloads it when it changes, logging refused reloads.
/// Runs until the task is dropped.
pub async fn watch_file(handle: ProxyHandle, path: PathBuf, interval: Duration) {
    let file = Arc::new(ConfigFile { handle, path });
    // The future owns the file, so the watch runs as long as the future does.
    watch::watch(Arc::downgrade(&file), interval).await;
}

/// The proxy's config file, as the file watch sees it.
struct ConfigFile {
    handle: ProxyHandle,
    path: PathBuf,
}

impl Reload for ConfigFile {
    type Error = ProxyError;

    fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }

    fn reload(&self) -> Result<(), ProxyError> {
        reload_from_file(&self.handle, &self.path)
    }

    fn what(&self) -> &str {
        "config file"
    }
}
