//! Discovery: where a cluster's replica list comes from, delivered as insert/remove changes.
//!
//! - **static** (`upstreams`): the list in the config, set once (a reload may change it);
//! - **file** (`upstreams_file`): one `host:port` per line, blank lines and `#` comments
//!   ignored, re-read every `discovery_interval` when its modification time or size changed;
//! - **DNS** (`upstreams_dns`): the name re-resolved every `discovery_interval`; each address
//!   it resolves to is a replica.
//!
//! A file that cannot be read or lists no replica, or a name that does not resolve, keeps the
//! last good list (and logs why): losing every replica because of one failed lookup would be worse than serving
//! from a list a few seconds old. The watcher tasks hold a weak reference and end when the
//! cluster is dropped after a reload. Kubernetes endpoints are not implemented.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use crate::cluster::Cluster;

/// Parses a replica list file: one `host:port` per line, `#` starts a comment.
pub fn parse_list(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

/// Starts discovery for `cluster` as its config says.
pub fn start(cluster: &Arc<Cluster>) {
    let config = cluster.config();
    let interval = config.discovery_interval;
    if let Some(path) = config.upstreams_file.clone() {
        let weak = Arc::downgrade(cluster);
        // Read once now so the cluster starts with its replicas.
        let mut last = None;
        poll_file(cluster, &path, &mut last);
        tokio::spawn(watch_file(weak, path, interval, last));
    } else if let Some(name) = config.upstreams_dns.clone() {
        let weak = Arc::downgrade(cluster);
        tokio::spawn(watch_dns(weak, name, interval));
    } else {
        cluster.set_members(&config.upstreams);
    }
}

type Stamp = (SystemTime, u64);

fn poll_file(cluster: &Cluster, path: &Path, last: &mut Option<Stamp>) {
    let stamp = std::fs::metadata(path).and_then(|m| Ok((m.modified()?, m.len())));
    let stamp = match stamp {
        Ok(stamp) => stamp,
        Err(error) => {
            tracing::warn!(cluster = cluster.name(), path = %path.display(), %error, "cannot read replica file; keeping the last list");
            return;
        }
    };
    if *last == Some(stamp) {
        return;
    }
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let list = parse_list(&text);
            if list.is_empty() {
                // Most likely a file caught half-written; an empty cluster is never useful.
                tracing::warn!(cluster = cluster.name(), path = %path.display(), "replica file lists no replica; keeping the last list");
                return;
            }
            cluster.set_members(&list);
            *last = Some(stamp);
        }
        Err(error) => {
            tracing::warn!(cluster = cluster.name(), path = %path.display(), %error, "cannot read replica file; keeping the last list");
        }
    }
}

async fn watch_file(weak: Weak<Cluster>, path: PathBuf, interval: Duration, last: Option<Stamp>) {
    let mut last = last;
    loop {
        tokio::time::sleep(interval).await;
        let Some(cluster) = weak.upgrade() else {
            return;
        };
        poll_file(&cluster, &path, &mut last);
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
        assert_eq!(parse_list(text), vec!["127.0.0.1:1", "127.0.0.1:2"]);
    }
}
