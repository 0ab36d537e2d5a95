//! Error aversion: keeping a fast-failing replica from sinkholing traffic.
//!
//! A replica that answers many queries with quick errors reports a low RIF and a low latency,
//! so a latency- or RIF-driven rule would send it ever more traffic (the Prequal paper, section
//! 4, calls this sinkholing; it omits its own heuristics, so this rule is ours).
//!
//! For each replica the client keeps a time-decayed count of finished queries and of failed ones
//! (errors and timeouts). Both decay by `exp(−Δt/τ)` with the time constant τ (`error_decay`,
//! default 5 s). The error share is
//!
//! ```text
//! share = errors / (queries + 20)
//! ```
//!
//! where the 20 is a prior of successful queries: two or three stray errors on a quiet replica
//! do not condemn it, while a replica failing half its queries crosses the threshold after a few
//! dozen. A replica is *avoided* while its share exceeds `error_threshold` (default 0.1). The
//! selection rules rank its probe replies after every reply from a replica that is not avoided,
//! and the random fallback skips it when any other replica is available, so it receives almost no
//! traffic. Because avoided replicas get no new outcomes, both counts simply decay, the prior
//! comes to dominate, and the share falls below the threshold: after a few τ the replica is
//! tried again, and avoided again at once if it still fails.
//!
//! A replica whose host is down answers neither queries nor probes, and a client whose probes
//! to it all fail would otherwise know nothing against it: its pool simply holds no reply from
//! it, and the random fallback (an empty or one-reply pool) still sends it queries. So probe
//! failures count too, as a streak: after [`PROBE_FAILURES_TO_AVOID`] probes to the replica
//! have failed in a row, with no reply and no successful query since, it is avoided until a
//! probe reply or a successful query says it is back. Probes keep going to it at the usual
//! random rate, which is how it is found again. A streak, not a share: an occasional late probe
//! to a busy but healthy replica never adds up to avoidance.

use std::time::Duration;

use rand::{Rng, RngCore};

use crate::policy::Outcome;
use crate::replica::{ReplicaId, Replicas};
use crate::time::Time;

/// Pseudo-count of successful queries added to the denominator of the error share.
pub const PRIOR_QUERIES: f64 = 20.0;

/// Probes failed in a row, with no reply or successful query between, that make a replica
/// avoided.
pub const PROBE_FAILURES_TO_AVOID: u32 = 3;

/// The error-aversion rule's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Aversion {
    /// A replica whose error share exceeds this is avoided (1.0 disables aversion).
    pub threshold: f64,
    /// Time constant of the exponential decay of the counts.
    pub decay: Duration,
}

/// What a probing client knows about one replica from its own traffic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaLoad {
    /// Queries this client has in flight at the replica.
    pub local_rif: u32,
    /// Queries this client sent to the replica.
    pub picks: u64,
    /// Decayed count of finished queries.
    queries: f64,
    /// Decayed count of failed queries.
    errors: f64,
    /// When the counts were last decayed.
    updated: Time,
    /// Probes to the replica that failed since its last probe reply or successful query.
    probe_failures: u32,
}

impl ReplicaLoad {
    /// A query was dispatched to the replica.
    pub fn on_dispatch(&mut self) {
        self.local_rif = self.local_rif.saturating_add(1);
    }

    /// A query sent to the replica finished with `outcome`.
    pub fn on_complete(&mut self, outcome: Outcome, now: Time, aversion: &Aversion) {
        self.local_rif = self.local_rif.saturating_sub(1);
        if outcome == Outcome::Cancelled {
            // Neither a success nor a failure: it must not dilute the error share.
            return;
        }
        let keep = self.decay_factor(now, aversion);
        self.queries = self.queries * keep + 1.0;
        self.errors = self.errors * keep + if outcome.is_failure() { 1.0 } else { 0.0 };
        self.updated = now.max(self.updated);
        if outcome == Outcome::Success {
            self.probe_failures = 0;
        }
    }

    /// A probe to the replica failed (no reply in time, a transport error, a bad reply).
    pub fn on_probe_failure(&mut self) {
        self.probe_failures = self.probe_failures.saturating_add(1);
    }

    /// The replica answered a probe.
    pub fn on_probe_reply(&mut self) {
        self.probe_failures = 0;
    }

    /// The decayed error share at `now`.
    pub fn error_share(&self, now: Time, aversion: &Aversion) -> f64 {
        if self.errors == 0.0 {
            // The common case, and no exponential to compute.
            return 0.0;
        }
        let keep = self.decay_factor(now, aversion);
        self.errors * keep / (self.queries * keep + PRIOR_QUERIES)
    }

    /// Whether the replica is avoided at `now`: its error share is over the threshold, or its
    /// last [`PROBE_FAILURES_TO_AVOID`] probes failed (both only while aversion is enabled).
    pub fn avoided(&self, now: Time, aversion: &Aversion) -> bool {
        (aversion.threshold < 1.0 && self.probe_failures >= PROBE_FAILURES_TO_AVOID)
            || self.avoided_for_errors(now, aversion)
    }

    /// Whether the replica is avoided at `now` for its queries' error share alone, leaving out
    /// its failed probes: when no replica answers probes, failed probes say nothing about any
    /// one of them.
    pub fn avoided_for_errors(&self, now: Time, aversion: &Aversion) -> bool {
        aversion.threshold < 1.0 && self.error_share(now, aversion) > aversion.threshold
    }

    fn decay_factor(&self, now: Time, aversion: &Aversion) -> f64 {
        let tau = aversion.decay.as_secs_f64();
        if tau <= 0.0 {
            return 0.0;
        }
        (-now.saturating_since(self.updated).as_secs_f64() / tau).exp()
    }
}

/// A uniformly random replica, preferring those that are not avoided; `None` when the set is
/// empty.
pub fn random_replica(
    replicas: &Replicas<ReplicaLoad>,
    now: Time,
    aversion: &Aversion,
    rng: &mut dyn RngCore,
) -> Option<ReplicaId> {
    let healthy: Vec<ReplicaId> = replicas
        .iter()
        .filter(|(_, load)| !load.avoided(now, aversion))
        .map(|(id, _)| id)
        .collect();
    if !healthy.is_empty() {
        return Some(healthy[rng.random_range(0..healthy.len())]);
    }
    if replicas.is_empty() {
        return None;
    }
    Some(replicas.id_at(rng.random_range(0..replicas.len())))
}

/// The less loaded of two distinct random replicas, by this client's queries in flight there
/// (ties to the first drawn, so a first one with none in flight is taken with no second draw),
/// preferring those not avoided for their queries' errors; `None` when the set is empty. With
/// one candidate, that one. For a blind prober: failed probes are left out of the avoidance,
/// since then every replica has them, and counting them would leave only the few replicas with
/// a recent success.
pub fn less_loaded_of_two(
    replicas: &Replicas<ReplicaLoad>,
    now: Time,
    aversion: &Aversion,
    rng: &mut dyn RngCore,
) -> Option<ReplicaId> {
    let healthy: Vec<(ReplicaId, u32)> = replicas
        .iter()
        .filter(|(_, load)| !load.avoided_for_errors(now, aversion))
        .map(|(id, load)| (id, load.local_rif))
        .collect();
    let candidates = if healthy.is_empty() {
        replicas
            .iter()
            .map(|(id, load)| (id, load.local_rif))
            .collect()
    } else {
        healthy
    };
    match candidates.len() {
        0 => None,
        1 => Some(candidates[0].0),
        n => {
            let first = rng.random_range(0..n);
            if candidates[first].1 == 0 {
                // Nothing is less loaded, and the tie goes to it: no second draw.
                return Some(candidates[first].0);
            }
            let mut second = rng.random_range(0..n - 1);
            if second >= first {
                second += 1;
            }
            let (a, b) = (candidates[first], candidates[second]);
            Some(if b.1 < a.1 { b.0 } else { a.0 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVERSION: Aversion = Aversion {
        threshold: 0.1,
        decay: Duration::from_secs(5),
    };

    #[test]
    fn a_few_errors_are_tolerated_many_are_avoided_then_forgiven() {
        let mut load = ReplicaLoad::default();
        let t = Time::from_secs(1);
        for _ in 0..2 {
            load.on_dispatch();
            load.on_complete(Outcome::Error, t, &AVERSION);
        }
        assert!(!load.avoided(t, &AVERSION), "two stray errors");
        for i in 0..40 {
            let outcome = if i % 2 == 0 {
                Outcome::Error
            } else {
                Outcome::Success
            };
            load.on_complete(outcome, t, &AVERSION);
        }
        assert!(load.avoided(t, &AVERSION));
        assert!(load.avoided(Time::from_secs(3), &AVERSION));
        assert!(!load.avoided(Time::from_secs(30), &AVERSION), "decays back");
        assert_eq!(load.local_rif, 0);
    }

    #[test]
    fn a_streak_of_failed_probes_is_avoided_until_the_replica_answers() {
        let mut load = ReplicaLoad::default();
        let t = Time::from_secs(1);
        for _ in 1..PROBE_FAILURES_TO_AVOID {
            load.on_probe_failure();
        }
        assert!(
            !load.avoided(t, &AVERSION),
            "a few late probes are tolerated"
        );
        load.on_probe_reply();
        for _ in 1..PROBE_FAILURES_TO_AVOID {
            load.on_probe_failure();
        }
        assert!(!load.avoided(t, &AVERSION), "the reply broke the streak");
        load.on_probe_failure();
        assert!(load.avoided(t, &AVERSION));
        assert!(
            load.avoided(Time::from_secs(100), &AVERSION),
            "time alone does not forgive"
        );
        load.on_dispatch();
        load.on_complete(Outcome::Cancelled, t, &AVERSION);
        assert!(
            load.avoided(t, &AVERSION),
            "a cancelled query proves nothing"
        );
        load.on_dispatch();
        load.on_complete(Outcome::Success, t, &AVERSION);
        assert!(!load.avoided(t, &AVERSION), "a successful query does");
        let off = Aversion {
            threshold: 1.0,
            ..AVERSION
        };
        for _ in 0..10 {
            load.on_probe_failure();
        }
        assert!(!load.avoided(t, &off), "aversion disabled");
    }

    #[test]
    fn less_loaded_of_two_takes_the_lower_local_rif_and_skips_replicas_avoided_for_errors() {
        let mut replicas = Replicas::new();
        for (id, rif) in [(0, 5), (1, 0), (2, 5)] {
            let mut load = ReplicaLoad::default();
            for _ in 0..rif {
                load.on_dispatch();
            }
            replicas.insert(ReplicaId(id), load);
        }
        let mut rng = crate::testing::rng(1);
        let mut picked = [0u32; 3];
        for _ in 0..300 {
            let id = less_loaded_of_two(&replicas, Time::ZERO, &AVERSION, &mut rng).unwrap();
            picked[id.0 as usize] += 1;
        }
        // Replica 1 wins whenever it is drawn, which is two draws in three.
        assert!(picked[1] > 150 && picked[0] + picked[2] > 50, "{picked:?}");
        // Failed probes do not count against it: a blind prober has them from every replica.
        if let Some(load) = replicas.get_mut(ReplicaId(1)) {
            for _ in 0..PROBE_FAILURES_TO_AVOID {
                load.on_probe_failure();
            }
        }
        let mut chosen = false;
        for _ in 0..50 {
            let id = less_loaded_of_two(&replicas, Time::ZERO, &AVERSION, &mut rng);
            chosen |= id == Some(ReplicaId(1));
        }
        assert!(chosen, "the idle replica is still chosen");
        // Its queries' errors do: avoided, it is left out while others remain.
        if let Some(load) = replicas.get_mut(ReplicaId(1)) {
            for _ in 0..50 {
                load.on_complete(Outcome::Error, Time::ZERO, &AVERSION);
            }
        }
        for _ in 0..50 {
            let id = less_loaded_of_two(&replicas, Time::ZERO, &AVERSION, &mut rng);
            assert_ne!(id, Some(ReplicaId(1)));
        }
        let mut single = Replicas::new();
        single.insert(ReplicaId(7), ReplicaLoad::default());
        assert_eq!(
            less_loaded_of_two(&single, Time::ZERO, &AVERSION, &mut rng),
            Some(ReplicaId(7))
        );
        let empty = Replicas::<ReplicaLoad>::new();
        assert_eq!(
            less_loaded_of_two(&empty, Time::ZERO, &AVERSION, &mut rng),
            None
        );
    }

    #[test]
    fn random_fallback_skips_avoided_replicas() {
        let mut replicas = Replicas::new();
        let mut bad = ReplicaLoad::default();
        for _ in 0..50 {
            bad.on_complete(Outcome::Timeout, Time::ZERO, &AVERSION);
        }
        replicas.insert(ReplicaId(0), bad);
        replicas.insert(ReplicaId(1), ReplicaLoad::default());
        let mut rng = crate::testing::rng(1);
        for _ in 0..20 {
            let id = random_replica(&replicas, Time::ZERO, &AVERSION, &mut rng);
            assert_eq!(id, Some(ReplicaId(1)));
        }
    }
}
