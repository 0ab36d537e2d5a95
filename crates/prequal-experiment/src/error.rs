//! Why an experiment could not run ([`ExperimentError`]).

use std::time::Duration;

use prequal_testbed::loadgen;

/// An experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The scenario's `[experiment]` section (or the contender list) is wrong.
    #[error("{key}: {message}")]
    Scenario {
        /// The key, e.g. `experiment.haproxy[0]`.
        key: String,
        /// What was wrong and what was expected.
        message: String,
    },
    /// A file or process could not be handled.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A child process exited before the experiment was done with it.
    #[error("{name} exited ({status}); its log {log} ends with:\n{tail}")]
    Exited {
        /// Which process.
        name: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: String,
        /// The last lines of the log.
        tail: String,
    },
    /// A child process did not get ready in time.
    #[error("{name} was not {what} after {limit:?}; its log {log} ends with:\n{tail}")]
    NotReady {
        /// Which process.
        name: String,
        /// What was awaited.
        what: String,
        /// How long we waited.
        limit: Duration,
        /// Its log file.
        log: String,
        /// The last lines of the log.
        tail: String,
    },
    /// The load generator failed.
    #[error("load generator: {0}")]
    Loadgen(#[from] loadgen::LoadgenError),
    /// The simulator's prediction failed.
    #[error("simulated prediction: {0}")]
    Sim(#[from] prequal_sim::engine::SimError),
    /// The report could not be written.
    #[error(transparent)]
    Write(#[from] prequal_sim::report::WriteError),
    /// SIGINT or SIGTERM arrived; everything started has been stopped.
    #[error("interrupted; every process the experiment started has been stopped")]
    Interrupted,
}
