//! What a load run is asked to do ([`LoadSpec`], checked by [`LoadSpec::validate`]) and the
//! ways it can be refused ([`LoadgenError`]).

use std::time::{Duration, SystemTime};

use prequal_model::scenario::Phase;

/// What to send, where, and how fast.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Base URIs (`http://127.0.0.1:8080/path`), queried as given; at least one.
    pub targets: Vec<http::Uri>,
    /// HTTP/2 over cleartext with prior knowledge (h2c) when true, else HTTP/1.1.
    pub http2: bool,
    /// The aggregate rate schedule from t=0 (phases back to back; linear ramps within a phase).
    pub phases: Vec<Phase>,
    /// Exponential inter-arrival gaps (Poisson arrivals); else constant gaps.
    pub poisson: bool,
    /// Per query, counted from its intended send time; past it the query is a timeout.
    pub timeout: Duration,
    /// Latency objective for the "within objective" share.
    pub objective: Duration,
    /// Replica count for per-replica shares (0: unknown, per-replica counts are not kept).
    pub replicas: usize,
    /// Seed of the Poisson gaps (the schedule is reproducible).
    pub seed: u64,
    /// Wait until this wall-clock instant before t=0 (to line up with the backends' episode
    /// clocks); `None` starts at once.
    pub start_at: Option<SystemTime>,
    /// Safety bound on queries in flight; a query that would exceed it is not sent and counts
    /// as an error.
    pub max_in_flight: usize,
}

/// A load could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// No targets were given.
    #[error("loadgen: no targets (give at least one base URI)")]
    NoTargets,
    /// A target URI cannot be queried.
    #[error("loadgen: target {index} ({uri}): {reason}")]
    BadTarget {
        /// Its position in `targets`.
        index: usize,
        /// The URI.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The schedule has no phases.
    #[error("loadgen: the load schedule has no phases")]
    NoPhases,
    /// A phase has an impossible span or rate.
    #[error("loadgen: load phase {index} ({label:?}): {reason}")]
    BadPhase {
        /// Its position in `phases`.
        index: usize,
        /// Its label.
        label: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting is out of range.
    #[error("loadgen: {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What was expected.
        reason: &'static str,
    },
    /// The latency histograms could not be created.
    #[error("loadgen: latency histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
}

impl LoadSpec {
    /// Checks the spec, naming the first field that is wrong.
    pub fn validate(&self) -> Result<(), LoadgenError> {
        if self.targets.is_empty() {
            return Err(LoadgenError::NoTargets);
        }
        for (index, uri) in self.targets.iter().enumerate() {
            let bad = |reason| LoadgenError::BadTarget {
                index,
                uri: uri.to_string(),
                reason,
            };
            match uri.scheme_str() {
                Some("http") => {}
                Some(_) => return Err(bad("only http:// is supported (h2c for HTTP/2)")),
                None => return Err(bad("expected an absolute URI, like http://127.0.0.1:8080/")),
            }
            if uri.authority().is_none() {
                return Err(bad("expected a host and port, like http://127.0.0.1:8080/"));
            }
        }
        self.validate_phases()?;
        if self.timeout.is_zero() {
            return Err(LoadgenError::Invalid {
                field: "timeout",
                reason: "expected a duration above 0",
            });
        }
        if self.max_in_flight == 0 {
            return Err(LoadgenError::Invalid {
                field: "max_in_flight",
                reason: "expected at least 1",
            });
        }
        if self.replicas > prequal_model::model::server::MAX_COUNT as usize {
            // Counted per replica for every second of the run.
            return Err(LoadgenError::Invalid {
                field: "replicas",
                reason: "expected at most 100000",
            });
        }
        Ok(())
    }

    fn validate_phases(&self) -> Result<(), LoadgenError> {
        if self.phases.is_empty() {
            return Err(LoadgenError::NoPhases);
        }
        let mut previous_end = prequal_core::Time::ZERO;
        for (index, p) in self.phases.iter().enumerate() {
            let bad = |reason: String| LoadgenError::BadPhase {
                index,
                label: p.label.clone(),
                reason,
            };
            if p.end < p.start {
                return Err(bad("ends before it starts".into()));
            }
            if p.start < previous_end {
                return Err(bad("starts before the previous phase ends".into()));
            }
            for (name, q) in [("qps_start", p.qps_start), ("qps_end", p.qps_end)] {
                if !(q.is_finite() && q >= 0.0) {
                    return Err(bad(format!("{name}: expected a rate >= 0, got {q}")));
                }
            }
            previous_end = p.end;
        }
        Ok(())
    }
}
