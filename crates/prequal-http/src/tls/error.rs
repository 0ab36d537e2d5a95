//! Why certificates or keys could not be loaded ([`TlsError`]).

use std::path::PathBuf;

/// Why certificates or keys could not be loaded. The message names the setting (config key or
/// flag) and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{key}: cannot read {}: {source}", path.display())]
    Read {
        /// The setting that names the file, for example `server.tls.cert` or `--tls-cert`.
        key: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file was read but does not hold what the setting needs.
    #[error("{key}: {}: {message}", path.display())]
    Content {
        /// The setting that names the file.
        key: String,
        /// The file.
        path: PathBuf,
        /// What was wrong and what was expected.
        message: String,
    },
    /// Something other than one file's content: no trusted roots, an unusable name.
    #[error("{key}: {message}")]
    Invalid {
        /// The setting concerned.
        key: String,
        /// What was wrong.
        message: String,
    },
}
