//! Child processes of an experiment: started with their output in log files, waited for until
//! they listen, and always stopped: [`Child`] sends SIGTERM, waits a bounded time, then
//! SIGKILLs and reaps, also when dropped on an error path or after Ctrl-C.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::ExperimentError;

/// How long a stopped child gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(20);

/// A running child process, stopped on [`Child::stop`] or drop.
#[derive(Debug)]
pub struct Child {
    name: String,
    inner: Option<std::process::Child>,
    log: PathBuf,
}

impl Child {
    /// Starts `command` with stdout and stderr going to `log` (`.out` beside it for stdout).
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Child, ExperimentError> {
        let io = |source| ExperimentError::Io {
            what: format!("log file {}", log.display()),
            source,
        };
        let stderr = File::create(log).map_err(io)?;
        let stdout = File::create(log.with_extension("out")).map_err(io)?;
        let inner = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| ExperimentError::Io {
                what: format!("starting {name} ({:?})", command.get_program()),
                source,
            })?;
        Ok(Child {
            name: name.to_string(),
            inner: Some(inner),
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.inner.as_ref().map_or(0, std::process::Child::id)
    }

    /// Its stdout, as written so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.log.with_extension("out")).unwrap_or_default()
    }

    /// The last lines of its stderr log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// An error if the process has exited.
    pub fn check_running(&mut self) -> Result<(), ExperimentError> {
        let Some(inner) = self.inner.as_mut() else {
            return Ok(());
        };
        match inner.try_wait() {
            Ok(Some(status)) => Err(ExperimentError::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                log: self.log.display().to_string(),
                tail: self.log_tail(),
            }),
            _ => Ok(()),
        }
    }

    /// Waits until `ready` holds, checking every 20 ms that the process still runs and that
    /// the experiment was not interrupted; gives up after `limit`.
    pub fn wait_until(
        &mut self,
        what: &str,
        limit: Duration,
        interrupted: &AtomicBool,
        mut ready: impl FnMut(&Child) -> bool,
    ) -> Result<(), ExperimentError> {
        let start = Instant::now();
        loop {
            if ready(self) {
                return Ok(());
            }
            self.check_running()?;
            if interrupted.load(Ordering::Relaxed) {
                return Err(ExperimentError::Interrupted);
            }
            if start.elapsed() > limit {
                return Err(ExperimentError::NotReady {
                    name: self.name.clone(),
                    what: what.to_string(),
                    limit,
                    log: self.log.display().to_string(),
                    tail: self.log_tail(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until something accepts TCP connections on `addr`.
    pub fn wait_listening(
        &mut self,
        addr: SocketAddr,
        interrupted: &AtomicBool,
    ) -> Result<(), ExperimentError> {
        self.wait_until(
            &format!("listening on {addr}"),
            Duration::from_secs(10),
            interrupted,
            |_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok(),
        )
    }

    /// SIGTERM, up to 3 s (`GRACE`) to exit, then SIGKILL; always reaps the process.
    pub fn stop(&mut self) {
        let Some(mut inner) = self.inner.take() else {
            return;
        };
        if let Ok(None) = inner.try_wait() {
            if let Ok(pid) = i32::try_from(inner.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            let start = Instant::now();
            while start.elapsed() < GRACE {
                if let Ok(Some(_)) = inner.try_wait() {
                    return;
                }
                std::thread::sleep(POLL);
            }
            tracing::warn!("{} ignored SIGTERM for {GRACE:?}; killing it", self.name);
            let _ = inner.kill();
        }
        let _ = inner.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port free right now (the OS picks it; a tiny race with other programs remains).
pub fn free_port() -> Result<u16, ExperimentError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| ExperimentError::Io {
            what: "finding a free loopback port".into(),
            source,
        })
}

/// A flag set once SIGINT or SIGTERM arrives, for loops that must stop early.
pub type Interrupted = Arc<AtomicBool>;

/// Whether `program` can be run (found on `PATH` or in the system sbin folders).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}
