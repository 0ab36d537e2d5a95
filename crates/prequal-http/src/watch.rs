//! Polling files for change: what prequal reloads while it runs (TLS certificates and keys,
//! the proxy's config file, a cluster's `upstreams_file`) is watched this one way.
//!
//! A version of a set of files is each one's modification time and size (nothing for a file
//! that cannot be read now); every `interval` the watcher compares the version on disk with
//! the one last loaded and, when they differ, asks the target to [`Reload`]. Polling needs no
//! platform file-notification dependency, and one `stat` per file and second costs nothing.
//!
//! The rule for a reload that fails (a file caught half-written or between two renames, a key
//! written before its certificate, a config with an error): what is in force stays, the error
//! is logged once for that version of the files, and the reload is tried again at every poll
//! until one succeeds. The TLS watcher always retried; the proxy's config watcher used to give
//! up on a version after one failure, and its replica-file watcher logged at every poll; all
//! three follow this rule now.
//!
//! A watch is a future ([`Watch`], or [`watch()`]), never a task this module spawns: what starts
//! one ([`from_now`] after its own load, [`load_and_watch`] loading first) returns it, and the
//! caller hands it to whoever owns the runtime (the proxy's server spawns it as background
//! work, `prequal sidecar` on its runtime). So nothing here needs a runtime, and no watch is
//! silently left out when there is none. The watcher holds a weak reference to its target and
//! ends once the target is dropped (a cluster replaced by a reload, a listener's TLS when the
//! listener goes).

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

/// Something loaded from files that can read them again.
pub trait Reload: Send + Sync + 'static {
    /// Why a reload failed; the message should name the file.
    type Error: fmt::Display;
    /// The files to watch.
    fn files(&self) -> Vec<PathBuf>;
    /// Reads every file again and swaps the result in; on error nothing changes.
    fn reload(&self) -> Result<(), Self::Error>;
    /// What is reloaded, for log lines (`server.tls`, `clusters.api`, `--tls-cert`).
    fn what(&self) -> &str;
}

/// A version of a set of files: each one's modification time and size, `None` for one that
/// cannot be read now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(Vec<Option<(SystemTime, u64)>>);

impl Version {
    /// The version of `files` on disk now.
    pub fn of(files: &[PathBuf]) -> Self {
        let stamp = |path: &PathBuf| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        };
        Version(files.iter().map(stamp).collect())
    }
}

/// A file watch to run: a future that polls its target's files every interval and reloads the
/// target when they change, until the target is dropped. Nothing here spawns it: the
/// constructor that starts a watch returns it, and whoever owns the runtime spawns it (with
/// `tokio::spawn`, say). It holds only a weak reference to its target, so it keeps nothing
/// alive; with a zero interval it ends at once.
#[must_use = "a file watch does nothing until it is spawned"]
pub struct Watch(Pin<Box<dyn Future<Output = ()> + Send + 'static>>);

impl Future for Watch {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch")
    }
}

/// The watch of `target`'s files every `interval` (none when it is zero), taking what is on
/// disk now, when this is called, as loaded: for a target that has just read its files.
pub fn from_now<T: Reload>(target: &Arc<T>, interval: Duration) -> Watch {
    let files = target.files();
    let watcher = Watcher {
        loaded: Some(Version::of(&files)),
        refused: None,
        files,
    };
    watcher.into_watch(target, interval)
}

/// Loads `target`'s files now, and returns how that went together with their watch, as
/// [`from_now`] would. If this first load fails, its error is logged (and returned), and the
/// watch tries again at its first poll.
pub fn load_and_watch<T: Reload>(
    target: &Arc<T>,
    interval: Duration,
) -> (Result<(), T::Error>, Watch) {
    let files = target.files();
    let version = Version::of(&files);
    let mut watcher = Watcher {
        files,
        loaded: None,
        refused: None,
    };
    let loaded = target.reload();
    match &loaded {
        Ok(()) => watcher.loaded = Some(version),
        Err(error) => {
            refused(&**target, error);
            watcher.refused = Some(version);
        }
    }
    (loaded, watcher.into_watch(target, interval))
}

/// Runs the watch of `target`'s files as this future, taking what is on disk when it is first
/// polled as loaded, until the target is dropped (or the future is). For a caller that owns
/// the target only through this future, such as `prequal proxy`'s config watcher.
pub async fn watch<T: Reload>(target: Weak<T>, interval: Duration) {
    let Some(files) = target.upgrade().map(|t| t.files()) else {
        return;
    };
    let watcher = Watcher {
        loaded: Some(Version::of(&files)),
        refused: None,
        files,
    };
    watcher.run(target, interval).await;
}

/// The files of one target, the version last loaded, and the last version refused.
struct Watcher {
    files: Vec<PathBuf>,
    loaded: Option<Version>,
    refused: Option<Version>,
}

impl Watcher {
    fn into_watch<T: Reload>(self, target: &Arc<T>, interval: Duration) -> Watch {
        Watch(Box::pin(self.run(Arc::downgrade(target), interval)))
    }

    async fn run<T: Reload>(mut self, target: Weak<T>, interval: Duration) {
        if interval.is_zero() {
            return;
        }
        loop {
            tokio::time::sleep(interval).await;
            let Some(target) = target.upgrade() else {
                return;
            };
            self.poll(&*target);
        }
    }

    fn poll<T: Reload>(&mut self, target: &T) {
        let now = Version::of(&self.files);
        if self.loaded.as_ref() == Some(&now) {
            return;
        }
        match target.reload() {
            Ok(()) => {
                tracing::debug!(what = target.what(), "reloaded after a file change");
                self.loaded = Some(now);
                self.refused = None;
            }
            // `loaded` stays, so the next poll tries again; the error is logged once per version.
            Err(error) => {
                if self.refused.as_ref() != Some(&now) {
                    refused(target, &error);
                    self.refused = Some(now);
                }
            }
        }
    }
}

fn refused<T: Reload>(target: &T, error: &T::Error) {
    tracing::error!(
        what = target.what(),
        %error,
        "reload failed; what is in force stays, and it is tried again at every poll"
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    /// A target whose reloads are counted and fail while `broken` is set.
    struct Counted {
        file: PathBuf,
        reloads: AtomicUsize,
        broken: AtomicBool,
    }

    impl Reload for Counted {
        type Error = String;
        fn files(&self) -> Vec<PathBuf> {
            vec![self.file.clone()]
        }
        fn reload(&self) -> Result<(), String> {
            self.reloads.fetch_add(1, Ordering::SeqCst);
            match self.broken.load(Ordering::SeqCst) {
                true => Err("broken".into()),
                false => Ok(()),
            }
        }
        fn what(&self) -> &str {
            "test"
        }
    }

    #[test]
    fn a_change_reloads_once_and_a_failure_is_retried_until_it_loads() {
        let dir = std::env::temp_dir().join(format!("prequal-http-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("watched.txt");
        std::fs::write(&file, "one").unwrap();
        let target = Counted {
            file: file.clone(),
            reloads: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
        };
        let reloads = || target.reloads.load(Ordering::SeqCst);
        let mut watcher = Watcher {
            loaded: Some(Version::of(&target.files())),
            refused: None,
            files: target.files(),
        };
        watcher.poll(&target);
        assert_eq!(reloads(), 0, "unchanged: nothing to do");

        // A different size is a different version, whatever the file clock's resolution.
        std::fs::write(&file, "two!").unwrap();
        watcher.poll(&target);
        watcher.poll(&target);
        assert_eq!(reloads(), 1, "one change, one reload");

        target.broken.store(true, Ordering::SeqCst);
        std::fs::write(&file, "three").unwrap();
        watcher.poll(&target);
        watcher.poll(&target);
        assert_eq!(reloads(), 3, "a failed reload is tried again at every poll");
        assert_eq!(watcher.refused, Some(Version::of(&target.files())));

        target.broken.store(false, Ordering::SeqCst);
        watcher.poll(&target);
        watcher.poll(&target);
        assert_eq!(
            reloads(),
            4,
            "loaded at last; then nothing until the next change"
        );
        assert_eq!(watcher.refused, None);

        // A file that disappears is a change too (and cannot be loaded by a real target).
        std::fs::remove_file(&file).unwrap();
        assert_eq!(Version::of(&target.files()), Version(vec![None]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
