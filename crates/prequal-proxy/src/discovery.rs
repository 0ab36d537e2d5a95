//! Discovery: where a cluster's replica list comes from, delivered as insert/remove changes.
//!
//! - **static** (`upstreams`): the list in the config, set once (a reload may change it);
//! - **file** (`upstreams_file`): one `host:port` per line, blank lines and `#` comments
//!   ignored, re-read when its modification time or size changed, checked every
//!   `discovery_interval` by prequal-http's file watch (`prequal_http::watch`), the one that
//!   watches certificates and the config file too;
//! - **DNS** (`upstreams_dns`): the name re-resolved every `discovery_interval`; each address
//!   it resolves to is a replica.
//!
//! A file that cannot be read or lists no replica, or a name that does not resolve, keeps the
//! last good list (and logs why: a file once per version of it, and it is read again at every
//! poll until it loads): losing every replica because of one failed lookup would be worse than
//! serving from a list a few seconds old. The watcher tasks hold a weak reference and end when
//! the cluster is dropped after a reload. Kubernetes endpoints are not implemented.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use prequal_http::watch::{self, Reload};

use crate::background::Background;
use crate::cluster::Cluster;

/// The non-empty lines of a replica list, comments removed, with their line numbers (from 1).
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split('#').next().unwrap_or("").trim()))
        .filter(|(_, line)| !line.is_empty())
}

/// The replicas a list file names, each line that is not a `host:port` logged with the file
/// and line, and left out.
fn read_list(path: &std::path::Path, text: &str, cluster: &str) -> Vec<String> {
    numbered_lines(text)
        .filter(|&(line, addr)| {
            // The same test as a static `upstreams` entry's.
            let ok = crate::config::check_authority(addr).is_ok();
            if !ok {
                tracing::warn!(
                    cluster,
                    file = %path.display(),
                    line,
                    addr,
                    "ignoring a line that is not host:port"
                );
            }
            ok
        })
        .map(|(_, addr)| addr.to_string())
        .collect()
}

/// Starts discovery for `cluster` as its config says: sets the static list, or reads the
/// replica file now (so the cluster starts with its replicas) and returns its watch
/// (prequal-http's file watch), or returns the DNS watch; a watch is for the caller to spawn.
pub fn start(cluster: &Arc<Cluster>) -> Background {
    let config = cluster.config();
    let interval = config.discovery_interval;
    if config.upstreams_file.is_some() {
        // A failure is logged, and the watch tries again.
        let (_, watch) = watch::load_and_watch(cluster, interval);
        Background::one(watch)
    } else if let Some(name) = config.upstreams_dns.clone() {
        Background::one(watch_dns(Arc::downgrade(cluster), name, interval))
    } else {
        cluster.set_members(&config.upstreams);
        Background::none()
    }
}

/// Why a replica file was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaFileError {
    /// The file could not be read.
    #[error("cannot read replica file {}: {source}; keeping the last list", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file lists no replica: most likely caught half-written, and an empty cluster is
    /// never useful.
    #[error("replica file {} lists no replica; keeping the last list", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// A cluster whose replicas come from `upstreams_file` reloads from it.
impl Reload for Cluster {
    type Error = ReplicaFileError;

    fn files(&self) -> Vec<PathBuf> {
        self.config().upstreams_file.iter().cloned().collect()
    }

    fn reload(&self) -> Result<(), ReplicaFileError> {
        let Some(path) = &self.config().upstreams_file else {
            return Ok(());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ReplicaFileError::Read {
            path: path.clone(),
            source,
        })?;
        let list = read_list(path, &text, self.name());
        if list.is_empty() {
            return Err(ReplicaFileError::Empty { path: path.clone() });
        }
        self.set_members(&list);
        Ok(())
    }

    fn what(&self) -> &str {
        self.name()
    }
}

async fn watch_dns(weak: Weak<Cluster>, name: String, interval: Duration) {
    loop {
        let resolved = tokio::net::lookup_host(name.as_str()).await;
        let Some(cluster) = weak.upgrade() else {
            return;
        };
        match resolved {
            Ok(addrs) => {
                let mut list: Vec<String> = addrs.map(|a| a.to_string()).collect();
                list.sort();
                list.dedup();
                if list.is_empty() {
                    tracing::warn!(cluster = cluster.name(), %name, "name resolved to no address; keeping the last list");
                } else {
                    cluster.set_members(&list);
                }
            }
            Err(error) => {
                tracing::warn!(cluster = cluster.name(), %name, %error, "cannot resolve; keeping the last list");
            }
        }
        drop(cluster);
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_files_skip_comments_and_blanks() {
        let text = "# replicas\n127.0.0.1:1\n\n  127.0.0.1:2  # second\n#127.0.0.1:3\n";
        let lines: Vec<&str> = numbered_lines(text).map(|(_, line)| line).collect();
        assert_eq!(lines, vec!["127.0.0.1:1", "127.0.0.1:2"]);
    }

    /// Collects what a tracing subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    // One test for every list with a line left out: the warning's call site remembers whether
    // anything listens the first time it runs, so a second test reaching it first on another
    // thread, with no subscriber, could leave this one's capture empty.
    #[test]
    fn list_file_lines_that_are_not_host_port_are_left_out_and_logged_with_file_and_line() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let text = "127.0.0.1:1\nnot an address\n[::1]:2\nreplica-without-port\nhost:3 # ok\nhost:0\nuser@host:4\n";
        let path = std::path::Path::new("/etc/prequal/replicas.txt");
        let kept = tracing::subscriber::with_default(subscriber, || read_list(path, text, "api"));
        assert_eq!(kept, vec!["127.0.0.1:1", "[::1]:2", "host:3"]);
        let lines: Vec<usize> = numbered_lines(text).map(|(line, _)| line).collect();
        assert_eq!(lines, vec![1, 2, 3, 4, 5, 6, 7]);
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let warned: Vec<&str> = log.lines().collect();
        assert_eq!(warned.len(), 4, "{log}");
        for (warning, (line, addr)) in warned.iter().zip([
            (2, "not an address"),
            (4, "replica-without-port"),
            (6, "host:0"),
            (7, "user@host:4"),
        ]) {
            for part in [
                "WARN".to_string(),
                "not host:port".to_string(),
                "file=/etc/prequal/replicas.txt".to_string(),
                format!("line={line}"),
                format!("addr=\"{addr}\""),
                "cluster=\"api\"".to_string(),
            ] {
                assert!(warning.contains(&part), "{part} missing: {log}");
            }
        }
    }
}
