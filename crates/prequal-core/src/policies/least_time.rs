//! `least-time`: the lowest mean response time times (RIF + 1), over every replica (Traefik's
//! `leasttime` strategy).
//!
//! For each replica the client keeps the last `window` response times it measured (100 by
//! default) and their mean, and its own count of queries in flight there. A query goes to the
//! replica with the lowest
//!
//! `score = mean_response_time × (local_rif + 1)`,
//!
//! scanning every replica, not a random pair. Replicas whose scores are equal take turns: the
//! least recently picked goes first (Traefik breaks ties by weighted round robin; with equal
//! weights that is a turn each too). A replica with no sample yet has a mean of zero and so a
//! score of zero whatever its RIF: a new replica takes every query until its first response
//! arrives, as in Traefik.
//!
//! A sample is the query's time, successful or not (Traefik measures the time to the first
//! response byte, so a 5xx counts); a query that timed out or was abandoned gives none, since
//! no response came. A replica that fails fast therefore looks fast, as with `peak-ewma`: the
//! rule has no error aversion, and outlier ejection (on by default around every policy, see
//! docs/config.md) is what keeps traffic off it. A replica that leaves and comes back (an
//! ejection ending) keeps its samples, as a Traefik server keeps them across health changes.
//! Differences from Traefik: the driver's time is the whole query (in the proxy and the tower
//! balancer, to the end of the response body), not the first byte; a refused connection is an
//! error with its short time, where Traefik sees no byte and records nothing; times are kept
//! to the nanosecond rather than truncated to whole milliseconds; replicas carry no weights.
//!
//! The mean forgets by count, not by time: a replica that was shunned after a slow spell keeps
//! its slow mean until queries reach it again, which only its score's RIF factor allows (the
//! other replicas' scores rise with their load until it is the lowest).

use std::collections::VecDeque;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::policies::local::LocalLoad;
use crate::policy::{Completion, Outcome, Pick, Policy, Query, QueryId, Snapshot};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::{Time, duration_nanos};

/// `least-time` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// How many of a replica's latest response times the mean covers. Default 100; >= 1.
    pub window: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self { window: 100 }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "least-time",
        signal: "client-observed latency and client-local RIF",
        rule: "the lowest score over all replicas, score = mean of the last responses' times × \
               (RIF + 1); equal scores take turns",
        source: "Traefik v3 `leasttime`",
        params: &[ParamDoc {
            key: "window",
            default: "100",
            doc: "how many of a replica's latest response times the mean covers; >= 1",
        }],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        if self.window == 0 {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "window",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(LeastTime::new(self))
    }
}

/// The latest response times of one replica, in nanoseconds, and their exact running sum (so
/// equal histories give equal means, and ties are exact).
#[derive(Clone, Debug, Default)]
struct Window {
    samples: VecDeque<u64>,
    sum: u128,
    /// The mean in seconds, kept current so that a pick, which reads every replica's, does
    /// not divide.
    mean: f64,
}

impl Window {
    fn push(&mut self, nanos: u64, capacity: usize) {
        if self.samples.len() == capacity
            && let Some(old) = self.samples.pop_front()
        {
            self.sum -= u128::from(old);
        }
        self.samples.push_back(nanos);
        self.sum += u128::from(nanos);
        self.mean = self.sum as f64 / self.samples.len() as f64 / 1e9;
    }

    /// The mean in seconds; zero before the first sample.
    fn mean(&self) -> f64 {
        self.mean
    }
}

/// One replica: its response times, its client-local load and its place in the turn order
/// among ties (lower goes first).
#[derive(Clone, Debug)]
struct ReplicaState {
    times: Window,
    load: LocalLoad,
    deadline: u64,
}

/// Lowest mean response time × (RIF + 1). See the module docs.
#[derive(Debug)]
pub struct LeastTime {
    window: usize,
    replicas: Replicas<ReplicaState>,
    /// The samples of replicas that left, given back if they return, oldest departure first.
    /// At most as many as there are replicas: an ejected replica comes back under its id, but
    /// discovery may hand out a new id to a returning address, so old ones must not pile up.
    departed: VecDeque<(ReplicaId, Window)>,
    /// The latest turn handed out; a picked or new replica goes after it.
    last_deadline: u64,
}

impl LeastTime {
    /// A policy with the given (validated) parameters.
    pub fn new(config: &Config) -> Self {
        Self {
            window: config.window.max(1) as usize,
            replicas: Replicas::new(),
            departed: VecDeque::new(),
            last_deadline: 0,
        }
    }

    fn score_of(state: &ReplicaState) -> f64 {
        state.times.mean() * (f64::from(state.load.rif) + 1.0)
    }

    /// The score of `replica`, in seconds; `None` for an unknown replica.
    pub fn score(&self, replica: ReplicaId) -> Option<f64> {
        self.replicas.get(replica).map(Self::score_of)
    }
}

impl Policy for LeastTime {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, _now: Time) {
        match change {
            ReplicaChange::Insert(id) => {
                let deadline = self.last_deadline + 1;
                let times = match self.departed.iter().position(|(d, _)| *d == id) {
                    Some(i) => self.departed.remove(i).map(|(_, w)| w).unwrap_or_default(),
                    None => Window::default(),
                };
                let state = ReplicaState {
                    times,
                    load: LocalLoad::default(),
                    deadline,
                };
                if self.replicas.insert(id, state) {
                    self.last_deadline = deadline;
                }
            }
            ReplicaChange::Remove(id) => {
                if let Some(state) = self.replicas.remove(id) {
                    self.departed.push_back((id, state.times));
                    while self.departed.len() > self.replicas.len().max(1) {
                        self.departed.pop_front();
                    }
                }
            }
        }
    }

    fn pick(&mut self, _query: &Query, _now: Time, _rng: &mut dyn RngCore) -> Pick {
        // The lowest score; among equal scores, the earliest deadline.
        let mut best: Option<(usize, f64, u64)> = None;
        for (i, (_, state)) in self.replicas.iter().enumerate() {
            let score = Self::score_of(state);
            let better = match best {
                None => true,
                Some((_, s, d)) => score < s || (score == s && state.deadline < d),
            };
            if better {
                best = Some((i, score, state.deadline));
            }
        }
        let Some((index, score, _)) = best else {
            return Pick::NoReplica;
        };
        // To the back of the turn order: among tied replicas the least recently picked goes.
        self.last_deadline += 1;
        self.replicas.at_mut(index).deadline = self.last_deadline;
        let id = self.replicas.id_at(index);
        tracing::trace!(replica = %id, score_s = score, "least-time pick");
        Pick::Replica(id)
    }

    fn on_dispatch(&mut self, replica: ReplicaId, _query: QueryId, _now: Time) {
        if let Some(state) = self.replicas.get_mut(replica) {
            state.load.dispatched();
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, completion: &Completion, _now: Time) {
        let window = self.window;
        if let Some(state) = self.replicas.get_mut(replica) {
            state.load.completed();
            if matches!(completion.outcome, Outcome::Success | Outcome::Error) {
                state.times.push(duration_nanos(completion.latency), window);
            }
        }
    }

    fn snapshot(&self, _now: Time) -> Snapshot {
        Snapshot {
            policy: self.name(),
            replicas: self
                .replicas
                .iter()
                .map(|(id, s)| s.load.view(id, Some(Self::score_of(s))))
                .collect(),
            values: vec![("window", self.window as f64)],
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;
    use std::time::Duration;

    fn mean_of(samples: &[Duration], window: usize) -> f64 {
        let mut w = Window::default();
        samples
            .iter()
            .for_each(|s| w.push(duration_nanos(*s), window));
        w.mean()
    }

    fn policy(n: u32) -> LeastTime {
        let mut p = LeastTime::new(&Config::default());
        (0..n).for_each(|i| p.on_replica_change(ReplicaChange::Insert(ReplicaId(i)), Time::ZERO));
        p
    }

    fn finish(p: &mut LeastTime, id: u32, latency_ms: u64, outcome: Outcome) {
        p.on_dispatch(ReplicaId(id), QueryId(0), Time::ZERO);
        let done = Completion {
            query: QueryId(0),
            latency: Duration::from_millis(latency_ms),
            outcome,
        };
        p.on_complete(ReplicaId(id), &done, Time::ZERO);
    }

    fn pick(p: &mut LeastTime) -> u32 {
        match p.pick(&Query::default(), Time::ZERO, &mut rng(1)) {
            Pick::Replica(id) => id.0,
            other => panic!("expected a replica, got {other:?}"),
        }
    }

    #[test]
    fn score_is_mean_time_times_rif_plus_one() {
        let mut p = policy(2);
        finish(&mut p, 0, 10, Outcome::Success);
        finish(&mut p, 0, 30, Outcome::Error);
        p.on_dispatch(ReplicaId(0), QueryId(1), Time::ZERO);
        let score = p.score(ReplicaId(0)).unwrap();
        assert!((score - 0.020 * 2.0).abs() < 1e-12, "{score}");
        // Neither a timeout nor an abandoned query leaves a sample.
        finish(&mut p, 1, 10, Outcome::Success);
        finish(&mut p, 1, 5_000, Outcome::Timeout);
        finish(&mut p, 1, 5_000, Outcome::Cancelled);
        assert!((p.score(ReplicaId(1)).unwrap() - 0.010).abs() < 1e-12);
    }

    #[test]
    fn the_mean_covers_only_the_last_window_of_samples() {
        let ms = Duration::from_millis;
        assert!((mean_of(&[ms(100), ms(10), ms(20)], 2) - 0.015).abs() < 1e-12);
        assert_eq!(mean_of(&[], 100), 0.0);
    }

    #[test]
    fn a_replica_without_samples_is_tried_first() {
        let mut p = policy(3);
        finish(&mut p, 0, 10, Outcome::Success);
        finish(&mut p, 1, 10, Outcome::Success);
        assert_eq!(pick(&mut p), 2);
    }

    #[test]
    fn the_lowest_score_wins_over_every_replica_and_load_moves_it() {
        let mut p = policy(3);
        finish(&mut p, 0, 10, Outcome::Success);
        finish(&mut p, 1, 20, Outcome::Success);
        finish(&mut p, 2, 40, Outcome::Success);
        assert_eq!(pick(&mut p), 0);
        // Two in flight at the fast replica: 10 × 3 = 30 > 20 × 1.
        p.on_dispatch(ReplicaId(0), QueryId(1), Time::ZERO);
        p.on_dispatch(ReplicaId(0), QueryId(2), Time::ZERO);
        assert_eq!(pick(&mut p), 1);
    }

    #[test]
    fn equal_scores_take_turns() {
        let mut p = policy(3);
        let picks: Vec<u32> = (0..6).map(|_| pick(&mut p)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn the_policy_forgets_samples_beyond_its_window() {
        let mut p = LeastTime::new(&Config { window: 2 });
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(0)), Time::ZERO);
        for ms in [100, 10, 20] {
            finish(&mut p, 0, ms, Outcome::Success);
        }
        assert!((p.score(ReplicaId(0)).unwrap() - 0.015).abs() < 1e-12);
    }

    #[test]
    fn a_replica_that_returns_keeps_its_samples() {
        let mut p = policy(2);
        finish(&mut p, 0, 10, Outcome::Success);
        finish(&mut p, 1, 50, Outcome::Success);
        p.on_replica_change(ReplicaChange::Remove(ReplicaId(1)), Time::ZERO);
        assert_eq!(p.score(ReplicaId(1)), None);
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(1)), Time::ZERO);
        // Not a fresh replica with a score of zero: its slow mean is still there.
        assert!((p.score(ReplicaId(1)).unwrap() - 0.050).abs() < 1e-12);
        assert_eq!(pick(&mut p), 0);
    }

    #[test]
    fn departed_samples_are_kept_for_at_most_as_many_replicas_as_remain() {
        let mut p = policy(3);
        for id in 0..3 {
            finish(&mut p, id, 10, Outcome::Success);
        }
        // Two leave; one replica remains, so only the latest departure is remembered.
        p.on_replica_change(ReplicaChange::Remove(ReplicaId(0)), Time::ZERO);
        p.on_replica_change(ReplicaChange::Remove(ReplicaId(1)), Time::ZERO);
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(0)), Time::ZERO);
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(1)), Time::ZERO);
        assert_eq!(
            p.score(ReplicaId(0)),
            Some(0.0),
            "forgotten: a fresh replica"
        );
        assert!((p.score(ReplicaId(1)).unwrap() - 0.010).abs() < 1e-12);
    }

    #[test]
    fn equal_nonzero_scores_take_turns_and_a_newcomer_goes_first() {
        let mut p = policy(2);
        finish(&mut p, 0, 10, Outcome::Success);
        finish(&mut p, 1, 10, Outcome::Success);
        let picks: Vec<u32> = (0..4).map(|_| pick(&mut p)).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        // A replica with no samples scores zero: it takes the next query.
        p.on_replica_change(ReplicaChange::Insert(ReplicaId(5)), Time::ZERO);
        assert_eq!(pick(&mut p), 5);
    }

    #[test]
    fn a_window_of_zero_is_rejected_by_key() {
        let err = Config { window: 0 }.validate().unwrap_err().to_string();
        assert!(err.contains("`window`"), "{err}");
    }
}
