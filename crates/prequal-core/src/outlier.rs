//! Failure accrual and outlier ejection: stop sending to replicas that keep failing.
//!
//! Each replica's results are watched two ways, as in Finagle's failure accrual and Envoy's
//! outlier detection:
//!
//! - **consecutive failures**: `consecutive_failures` (default 5) failures in a row eject it;
//! - **success rate**: over the sliding `success_rate_window` (default 30 s), once it has seen at
//!   least `success_rate_min_requests` (default 20) results, a success rate below
//!   `min_success_rate` (default 0.8) ejects it. This catches a replica that fails often but not
//!   in long runs.
//!
//! An ejection lasts `base_ejection · 2^(k−1)` (default base 5 s), capped at `max_ejection`
//! (default 300 s), where `k` counts the replica's ejections since it last proved healthy. When
//! the time is up the replica is back on probation: its first result decides. A success clears
//! its record (`k` returns to 0); a failure ejects it again at once, for twice as long.
//!
//! No more than `max_ejected_share` (default 0.5) of the cluster is ejected at once, rounded
//! down, and never the last replica that is not ejected: when many replicas fail together, the
//! fault is more likely the client's or the network's than theirs, and ejecting them all would
//! turn a partial outage into a total one. A replica that crosses a threshold while the cap is
//! reached stays in service; its next failure is checked again.
//!
//! Sans-IO: results come in through [`OutlierDetector::on_result`] with `now`; whether a
//! replica is ejected is a pure read, [`OutlierDetector::is_ejected`], so an ejection ends by
//! itself when its time passes. [`OutlierDetector::next_unejection`] tells a driver when the
//! next one ends (for logs or metrics).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::policy::Outcome;
use crate::replica::{ReplicaId, Replicas};
use crate::retry_budget::BlockConfigError;
use crate::sliding_window::SlidingWindow;
use crate::time::Time;

/// Outlier ejection parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutlierConfig {
    /// Failures in a row that eject a replica. Default 5; >= 1.
    pub consecutive_failures: u32,
    /// A success rate below this ejects the replica. Default 0.8; in [0, 1] (0 disables).
    pub min_success_rate: f64,
    /// Results needed in the window before the success rate counts. Default 20; >= 1.
    pub success_rate_min_requests: u32,
    /// The success-rate window. Default "30s"; at least 10 ms.
    #[serde(with = "humantime_serde")]
    pub success_rate_window: Duration,
    /// The first ejection's length; each further one doubles. Default "5s"; > 0.
    #[serde(with = "humantime_serde")]
    pub base_ejection: Duration,
    /// The longest ejection. Default "300s"; >= base_ejection.
    #[serde(with = "humantime_serde")]
    pub max_ejection: Duration,
    /// The largest share of the cluster ejected at once. Default 0.5; in [0, 1].
    pub max_ejected_share: f64,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            min_success_rate: 0.8,
            success_rate_min_requests: 20,
            success_rate_window: Duration::from_secs(30),
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(300),
            max_ejected_share: 0.5,
        }
    }
}

impl OutlierConfig {
    /// Checks every parameter.
    pub fn validate(&self) -> Result<(), BlockConfigError> {
        let err = |key, msg| Err(BlockConfigError::new("outlier", key, msg));
        if self.consecutive_failures == 0 {
            return err("consecutive_failures", "must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.min_success_rate) {
            return err("min_success_rate", "must be between 0 and 1");
        }
        if self.success_rate_min_requests == 0 {
            return err("success_rate_min_requests", "must be at least 1");
        }
        if self.success_rate_window < Duration::from_millis(10) {
            return err("success_rate_window", "must be at least 10ms");
        }
        if self.base_ejection.is_zero() {
            return err("base_ejection", "must be greater than zero");
        }
        if self.max_ejection < self.base_ejection {
            return err("max_ejection", "must be at least base_ejection");
        }
        if !(0.0..=1.0).contains(&self.max_ejected_share) {
            return err("max_ejected_share", "must be between 0 and 1");
        }
        Ok(())
    }
}

/// What the detector knows about one replica.
#[derive(Clone, Debug, PartialEq)]
struct Record {
    consecutive: u32,
    /// Counts `(successes, failures)`.
    results: SlidingWindow,
    /// Ejections since the replica last proved healthy.
    ejections: u32,
    /// Set while ejected, and kept after the time passes until the probation result arrives.
    ejected_until: Option<Time>,
}

/// Why a replica was ejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EjectionReason {
    /// This many failures in a row.
    ConsecutiveFailures(u32),
    /// Too low a success rate over the window: `ok` successes against `failed` failures.
    LowSuccessRate {
        /// Successes in the window.
        ok: u64,
        /// Failures in the window.
        failed: u64,
    },
    /// Its first result after an ejection ended was a failure.
    FailedOnProbation,
}

impl std::fmt::Display for EjectionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EjectionReason::ConsecutiveFailures(n) => write!(f, "{n} failures in a row"),
            EjectionReason::LowSuccessRate { ok, failed } => {
                let rate = 100.0 * *ok as f64 / (*ok + *failed).max(1) as f64;
                write!(f, "success rate {rate:.1}% ({ok} ok, {failed} failed)")
            }
            EjectionReason::FailedOnProbation => write!(f, "failed again after its ejection"),
        }
    }
}

/// An ejection that [`OutlierDetector::on_result`] just decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// Why.
    pub reason: EjectionReason,
    /// How long it lasts.
    pub duration: Duration,
    /// Its number since the replica last proved healthy (1 for the first).
    pub number: u32,
}

/// One replica's state, for admin pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OutlierView {
    /// The replica.
    pub replica: ReplicaId,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Ejections since it last proved healthy.
    pub ejections: u32,
    /// When the current ejection ends, if it is ejected now.
    pub ejected_until: Option<Time>,
}

/// Failure accrual and outlier ejection over a replica set. See the module docs.
#[derive(Clone, Debug)]
pub struct OutlierDetector {
    config: OutlierConfig,
    replicas: Replicas<Record>,
}

impl OutlierDetector {
    /// A detector with no replicas, with the given parameters, validated.
    pub fn new(config: &OutlierConfig) -> Result<Self, BlockConfigError> {
        config.validate()?;
        Ok(Self {
            config: config.clone(),
            replicas: Replicas::new(),
        })
    }

    /// Adds a replica (no-op if present).
    pub fn insert(&mut self, replica: ReplicaId) {
        let record = Record {
            consecutive: 0,
            results: SlidingWindow::new(self.config.success_rate_window),
            ejections: 0,
            ejected_until: None,
        };
        self.replicas.insert(replica, record);
    }

    /// Removes a replica. If the cluster shrank below what the cap allows, the ejections
    /// closest to their end are lifted early.
    pub fn remove(&mut self, replica: ReplicaId, now: Time) {
        self.replicas.remove(replica);
        while self.ejected_count(now) > self.cap() {
            let soonest = self
                .replicas
                .iter_mut()
                .filter_map(|(_, r)| r.ejected_until.filter(|t| *t > now).map(|t| (t, r)))
                .min_by_key(|(t, _)| *t);
            match soonest {
                Some((_, record)) => record.ejected_until = Some(now),
                None => break,
            }
        }
    }

    /// True while `replica` is ejected. Unknown replicas are not ejected. Pure.
    pub fn is_ejected(&self, replica: ReplicaId, now: Time) -> bool {
        self.replicas
            .get(replica)
            .is_some_and(|r| r.ejected_until.is_some_and(|t| now < t))
    }

    /// When `replica`'s latest ejection ends (or ended, while it waits for its probation
    /// result); None if it is not ejected. Pure.
    pub fn ejected_until(&self, replica: ReplicaId) -> Option<Time> {
        self.replicas.get(replica)?.ejected_until
    }

    /// How many replicas are ejected at `now`.
    pub fn ejected_count(&self, now: Time) -> usize {
        self.replicas
            .iter()
            .filter(|(_, r)| r.ejected_until.is_some_and(|t| now < t))
            .count()
    }

    /// The most replicas that may be ejected at once in the current cluster.
    pub fn cap(&self) -> usize {
        let n = self.replicas.len();
        // Truncation toward zero is the documented rounding.
        let share = (self.config.max_ejected_share * n as f64 + 1e-9).floor() as usize;
        share.min(n.saturating_sub(1))
    }

    /// When the next current ejection ends, if any replica is ejected at `now`.
    pub fn next_unejection(&self, now: Time) -> Option<Time> {
        self.replicas
            .iter()
            .filter_map(|(_, r)| r.ejected_until.filter(|t| *t > now))
            .min()
    }

    /// Records how a query sent to `replica` ended; returns the ejection it caused, if any.
    pub fn on_result(
        &mut self,
        replica: ReplicaId,
        outcome: Outcome,
        now: Time,
    ) -> Option<Ejection> {
        let config = &self.config;
        let record = self.replicas.get_mut(replica)?;
        let failed = outcome.is_failure();
        match record.ejected_until {
            // Results of queries sent before the ejection tell nothing new.
            Some(until) if now < until => return None,
            // On probation, one success proves the replica healthy again.
            Some(_) if !failed => {
                record.ejections = 0;
                record.ejected_until = None;
            }
            _ => {}
        }
        record
            .results
            .add(now, u64::from(!failed), u64::from(failed));
        record.consecutive = if failed { record.consecutive + 1 } else { 0 };
        if !failed {
            return None;
        }
        let on_probation = record.ejected_until.is_some();
        let (ok, bad) = record.results.sum_window(now);
        let volume = ok + bad;
        let rate_low = volume >= u64::from(config.success_rate_min_requests)
            && (ok as f64) < config.min_success_rate * volume as f64;
        let reason = match () {
            _ if on_probation => EjectionReason::FailedOnProbation,
            _ if record.consecutive >= config.consecutive_failures => {
                EjectionReason::ConsecutiveFailures(record.consecutive)
            }
            _ if rate_low => EjectionReason::LowSuccessRate { ok, failed: bad },
            _ => return None,
        };
        // Counted only now, when an ejection is due (it costs a pass over the replicas): what
        // happened to this replica's record above leaves the count as it was, since a replica
        // ejected at `now` returned early.
        if self.ejected_count(now) >= self.cap() {
            return None;
        }
        let config = &self.config;
        let record = self.replicas.get_mut(replica)?;
        let duration = Self::backoff(config, record.ejections);
        let until = now + duration;
        record.ejections = record.ejections.saturating_add(1);
        record.ejected_until = Some(until);
        record.consecutive = 0;
        record.results.clear();
        tracing::trace!(%replica, until_ns = until.as_nanos(), ejections = record.ejections,
            ok, bad, "outlier ejected");
        Some(Ejection {
            reason,
            duration,
            number: record.ejections,
        })
    }

    /// The length of ejection number `prior + 1`.
    fn backoff(config: &OutlierConfig, prior: u32) -> Duration {
        let factor = 2u32.saturating_pow(prior.min(31));
        config
            .base_ejection
            .checked_mul(factor)
            .unwrap_or(config.max_ejection)
            .min(config.max_ejection)
    }

    /// Every replica's state, in id order.
    pub fn views(&self, now: Time) -> Vec<OutlierView> {
        self.replicas
            .iter()
            .map(|(replica, r)| OutlierView {
                replica,
                consecutive_failures: r.consecutive,
                ejections: r.ejections,
                ejected_until: r.ejected_until.filter(|t| now < *t),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn detector(n: u32) -> OutlierDetector {
        let mut d = OutlierDetector::new(&OutlierConfig::default()).unwrap();
        (0..n).for_each(|i| d.insert(ReplicaId(i)));
        d
    }

    fn fail(d: &mut OutlierDetector, id: u32, times: u32, now: Time) {
        (0..times).for_each(|_| {
            d.on_result(ReplicaId(id), Outcome::Error, now);
        });
    }

    #[test]
    fn consecutive_failures_eject_and_a_success_resets_the_run() {
        let mut d = detector(4);
        fail(&mut d, 1, 4, Time::ZERO);
        d.on_result(ReplicaId(1), Outcome::Success, Time::ZERO);
        fail(&mut d, 1, 4, Time::ZERO);
        assert!(!d.is_ejected(ReplicaId(1), Time::ZERO));
        let ejection = d.on_result(ReplicaId(1), Outcome::Timeout, Time::ZERO);
        assert_eq!(
            ejection,
            Some(Ejection {
                reason: EjectionReason::ConsecutiveFailures(5),
                duration: Duration::from_secs(5),
                number: 1,
            })
        );
        assert_eq!(ejection.unwrap().reason.to_string(), "5 failures in a row");
        assert!(d.is_ejected(ReplicaId(1), Time::ZERO));
        assert_eq!(d.next_unejection(Time::ZERO), Some(Time::from_secs(5)));
        assert!(!d.is_ejected(ReplicaId(1), Time::from_secs(5)));
        // On probation, one failure ejects again, for twice as long.
        let again = d.on_result(ReplicaId(1), Outcome::Error, Time::from_secs(5));
        assert_eq!(
            again.map(|e| (e.reason, e.duration, e.number)),
            Some((
                EjectionReason::FailedOnProbation,
                Duration::from_secs(10),
                2
            ))
        );
    }

    #[test]
    fn backs_off_exponentially_until_a_success() {
        let mut d = detector(4);
        let mut now = Time::ZERO;
        for expected_s in [5, 10, 20, 40, 80, 160, 300, 300] {
            let threshold = if now == Time::ZERO { 5 } else { 1 };
            fail(&mut d, 0, threshold, now);
            let until = d.next_unejection(now).unwrap();
            assert_eq!(until.saturating_since(now), Duration::from_secs(expected_s));
            now = until;
        }
        // A success on probation clears the record: the next ejection is short again.
        d.on_result(ReplicaId(0), Outcome::Success, now);
        fail(&mut d, 0, 5, now);
        assert_eq!(d.next_unejection(now), Some(now + Duration::from_secs(5)));
    }

    #[test]
    fn low_success_rate_ejects_without_a_failure_run() {
        let mut d = detector(4);
        let mut now = Time::ZERO;
        // One failure in three, never two in a row: 67% success, below 80%.
        for i in 0..30 {
            now = now + Duration::from_millis(100);
            let outcome = if i % 3 == 0 {
                Outcome::Error
            } else {
                Outcome::Success
            };
            d.on_result(ReplicaId(2), outcome, now);
        }
        assert!(d.is_ejected(ReplicaId(2), now));
    }

    #[test]
    fn never_ejects_the_last_replica() {
        let mut d = detector(1);
        fail(&mut d, 0, 50, Time::ZERO);
        assert!(!d.is_ejected(ReplicaId(0), Time::ZERO));
        assert_eq!(d.cap(), 0);
    }

    #[test]
    fn removal_lifts_ejections_beyond_the_cap() {
        let mut d = detector(4);
        fail(&mut d, 0, 5, Time::ZERO);
        fail(&mut d, 1, 5, Time::from_secs(1));
        assert_eq!(d.ejected_count(Time::from_secs(1)), 2);
        d.remove(ReplicaId(3), Time::from_secs(2));
        d.remove(ReplicaId(2), Time::from_secs(2));
        assert_eq!(d.ejected_count(Time::from_secs(2)), 1);
        // The one that would have come back first was released.
        assert!(!d.is_ejected(ReplicaId(0), Time::from_secs(2)));
        assert!(d.is_ejected(ReplicaId(1), Time::from_secs(2)));
    }

    #[test]
    fn bad_config_names_its_key() {
        let bad = OutlierConfig {
            max_ejection: Duration::from_secs(1),
            ..OutlierConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "max_ejection");
        let text = "base_ejection = \"1s\"\nmax_ejected_share = 0.2";
        let parsed: OutlierConfig = toml::from_str(text).unwrap();
        assert_eq!(parsed.base_ejection, Duration::from_secs(1));
        assert!(toml::from_str::<OutlierConfig>("eject = 1").is_err());
    }

    proptest! {
        /// Whatever the results, the ejected count never exceeds the cap.
        #[test]
        fn ejection_never_exceeds_its_cap(
            n in 1u32..12,
            share in 0.0f64..1.0,
            events in prop::collection::vec((0u32..12, any::<bool>(), 0u64..3_000), 1..400),
        ) {
            let config = OutlierConfig { max_ejected_share: share, ..OutlierConfig::default() };
            let mut d = OutlierDetector::new(&config).unwrap();
            (0..n).for_each(|i| d.insert(ReplicaId(i)));
            let mut now = Time::ZERO;
            for (id, ok, gap_ms) in events {
                now = now + Duration::from_millis(gap_ms);
                let outcome = if ok { Outcome::Success } else { Outcome::Error };
                d.on_result(ReplicaId(id % n), outcome, now);
                let cap = ((share * f64::from(n)) + 1e-9).floor() as usize;
                prop_assert!(d.ejected_count(now) <= cap.min(n as usize - 1));
            }
        }
    }
}
