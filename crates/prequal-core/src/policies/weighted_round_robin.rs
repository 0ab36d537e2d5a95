//! `weighted-round-robin`: traffic in proportion to server-reported capacity (the incumbent the
//! Prequal paper displaced).
//!
//! Each replica reports its recent query rate `qps`, CPU `utilization` (share of its allocation)
//! and `error_rate` (share of queries failed). Its weight is
//!
//! `w = qps / (utilization + error_penalty × error_rate)`,
//!
//! i.e. queries served per unit of CPU: a replica that gets more done with its CPU (a faster or
//! less contended machine) earns more traffic, which drives the cluster toward equal
//! utilisation. The paper (section 2) gives `w = q/u` without errors; the error term follows
//! gRPC's WRR (`qps / (utilization + penalty × eps/qps)`, where `eps/qps` is our error rate), so
//! a replica that fails fast does not look efficient. Each new weight is folded into a per-replica
//! EWMA (`smoothing`, default 0.5, the weight of the newest report), which is the "smoothed
//! historical statistics" of the paper.
//!
//! Effective weights are recomputed every `weight_update_period` (default 1 s) rather than on
//! every report, so a burst of reports cannot jolt the schedule. A replica whose last usable
//! report is older than `report_expiry` (default 10 s), or that has none yet, or whose report
//! lacks qps or utilisation (or has qps = 0), gets the mean weight of the replicas that have one;
//! if none has, all weigh the same and the policy is plain round robin.
//!
//! Reports come from polling: every `poll_interval` (default 1 s) the policy emits one probe
//! per replica through [`Policy::poll_probe`] (on [`Policy::handle_timeout`] at the time
//! [`Policy::poll_timeout`] names); replies ([`Policy::on_probe_reply`]) and piggybacked reports
//! ([`Policy::on_load_report`]) are treated alike. A poll unanswered within one interval is
//! given up.
//!
//! Picking is nginx's smooth weighted round robin: each replica's counter grows by its weight,
//! the largest counter wins (lowest id on ties) and drops by the total. Over any run of picks
//! each replica's share tracks its weight to within one pick, and picks of a heavy replica are
//! spread out rather than bunched. It is deterministic and uses no randomness.

use std::time::Duration;

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::policies::local::LocalLoad;
use crate::policies::local::{Poller, next_on_grid};
use crate::policy::{
    Completion, LoadReport, Pick, Policy, ProbeId, ProbeRequest, Query, QueryId, Snapshot,
};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// `weighted-round-robin` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// How often every replica is polled for a load report. Default "1s"; >= 1ms.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How often effective weights are recomputed from the reports. Default "1s"; >= 1ms.
    #[serde(with = "humantime_serde")]
    pub weight_update_period: Duration,
    /// Reports older than this no longer count. Default "10s"; >= 1ms.
    #[serde(with = "humantime_serde")]
    pub report_expiry: Duration,
    /// Multiplier of the error rate added to utilisation. Default 1.0; >= 0.
    pub error_penalty: f64,
    /// Weight of the newest report in each replica's weight EWMA. Default 0.5; in (0, 1].
    pub smoothing: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            weight_update_period: Duration::from_secs(1),
            report_expiry: Duration::from_secs(10),
            error_penalty: 1.0,
            smoothing: 0.5,
        }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "weighted-round-robin",
        signal: "server-reported qps, CPU utilisation and error rate, polled",
        rule: "smooth weighted round robin with weight = qps / (utilization + error_penalty × \
               error_rate), smoothed; replicas without a fresh report get the mean weight",
        source: "Prequal paper, section 2 (Google's WRR); gRPC weighted_round_robin",
        params: &[
            ParamDoc {
                key: "poll_interval",
                default: "\"1s\"",
                doc: "how often every replica is polled for a load report; >= 1ms",
            },
            ParamDoc {
                key: "weight_update_period",
                default: "\"1s\"",
                doc: "how often effective weights are recomputed from reports; >= 1ms",
            },
            ParamDoc {
                key: "report_expiry",
                default: "\"10s\"",
                doc: "a replica whose last report is older gets the mean weight; >= 1ms",
            },
            ParamDoc {
                key: "error_penalty",
                default: "1.0",
                doc: "multiplier of the reported error rate added to utilisation; >= 0",
            },
            ParamDoc {
                key: "smoothing",
                default: "0.5",
                doc: "weight of the newest report in each replica's weight EWMA; in (0, 1]",
            },
        ],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, msg| Err(ConfigError::invalid(Self::INFO.name, key, msg));
        let periods = [
            ("poll_interval", self.poll_interval),
            ("weight_update_period", self.weight_update_period),
            ("report_expiry", self.report_expiry),
        ];
        if let Some((key, _)) = periods.iter().find(|(_, d)| *d < Duration::from_millis(1)) {
            return invalid(key, "must be at least 1ms");
        }
        if !(self.error_penalty.is_finite() && self.error_penalty >= 0.0) {
            return invalid("error_penalty", "must be a finite number >= 0");
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return invalid("smoothing", "must be in (0, 1]");
        }
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(WeightedRoundRobin::new(self.clone()))
    }
}

/// One replica's reports and load.
#[derive(Clone, Debug, Default)]
struct ReplicaState {
    /// Smoothed weight from usable reports, and when the last one arrived.
    smoothed: Option<(f64, Time)>,
    last_probe: Option<ProbeId>,
    load: LocalLoad,
}

/// One replica's place in the schedule, apart from the rest of its state so that a pick,
/// which reads every replica's, walks one small contiguous array.
#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    /// The weight the scheduler uses until the next recompute.
    effective: f64,
    /// Smooth-WRR counter.
    current: f64,
}

/// Smooth weighted round robin on reported qps / utilisation. See the module docs.
#[derive(Debug)]
pub struct WeightedRoundRobin {
    config: Config,
    replicas: Replicas<ReplicaState>,
    /// The same replicas' schedule counters, in the same order.
    schedule: Replicas<Counter>,
    poller: Poller,
    next_update: Option<Time>,
    /// Whether the first pick has randomised the schedule's phase yet.
    phased: bool,
    /// The effective weights' sum, in replica order: every pick adds it back to the counters,
    /// and it changes only with the weights, so it is summed when they change, not per pick.
    total: f64,
}

impl WeightedRoundRobin {
    /// A policy with the given (validated) parameters.
    pub fn new(config: Config) -> Self {
        Self {
            replicas: Replicas::new(),
            schedule: Replicas::new(),
            poller: Poller::new(config.poll_interval),
            next_update: None,
            phased: false,
            total: 0.0,
            config,
        }
    }

    /// Gives this client its own phase: random smooth-WRR counters, summing to zero so the
    /// long-run shares are unchanged. Without it, many clients started together pick the same
    /// replica at the same moment.
    fn randomise_phase(&mut self, rng: &mut dyn RngCore) {
        self.phased = true;
        let n = self.schedule.len();
        if n == 0 {
            return;
        }
        let total = self.total;
        let draws: Vec<f64> = (0..n).map(|_| rng.random::<f64>()).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        for (i, draw) in draws.into_iter().enumerate() {
            self.schedule.at_mut(i).current = (draw - mean) * total;
        }
    }

    /// Sums the effective weights again (after any of them changed), in replica order as a
    /// pick used to, so the counters move exactly as before.
    fn sum_weights(&mut self) {
        self.total = self
            .schedule
            .iter()
            .fold(0.0, |total, (_, s)| total + s.effective);
    }

    /// The weight a report implies, or `None` when it lacks what the formula needs.
    pub fn report_weight(&self, report: &LoadReport) -> Option<f64> {
        let qps = report.qps.filter(|q| q.is_finite() && *q > 0.0)?;
        let utilization = report.utilization.filter(|u| u.is_finite() && *u >= 0.0)?;
        let errors = report.error_rate.filter(|e| e.is_finite()).unwrap_or(0.0);
        let denominator = utilization + self.config.error_penalty * errors.clamp(0.0, 1.0);
        (denominator > 0.0).then(|| qps / denominator)
    }

    fn on_report(
        &mut self,
        replica: ReplicaId,
        probe: Option<ProbeId>,
        report: &LoadReport,
        now: Time,
    ) {
        let Some(weight) = self.report_weight(report) else {
            return;
        };
        let alpha = self.config.smoothing;
        let Some(state) = self.replicas.get_mut(replica) else {
            return;
        };
        if probe.is_some_and(|p| state.last_probe.is_some_and(|last| p < last)) {
            return;
        }
        let smoothed = match state.smoothed {
            Some((old, _)) => alpha * weight + (1.0 - alpha) * old,
            None => weight,
        };
        state.smoothed = Some((smoothed, now));
    }

    /// Recomputes every effective weight from fresh reports; see the module docs.
    fn update_weights(&mut self, now: Time) {
        let expiry = self.config.report_expiry;
        let fresh = |s: &ReplicaState| {
            s.smoothed
                .filter(|(_, at)| now.saturating_since(*at) <= expiry)
                .map(|(w, _)| w)
        };
        let (sum, count) = self
            .replicas
            .iter()
            .filter_map(|(_, s)| fresh(s))
            .fold((0.0, 0u32), |(sum, n), w| (sum + w, n + 1));
        let mean = if count == 0 {
            1.0
        } else {
            sum / f64::from(count)
        };
        for ((_, state), (_, counter)) in self.replicas.iter().zip(self.schedule.iter_mut()) {
            counter.effective = fresh(state).unwrap_or(mean);
        }
        self.sum_weights();
        tracing::trace!(
            now_ns = now.as_nanos(),
            fresh = count,
            mean,
            "wrr weights updated"
        );
    }

    fn mean_effective(&self) -> f64 {
        let n = self.schedule.len();
        if n == 0 {
            return 1.0;
        }
        self.total / n as f64
    }

    fn queue_poll(&mut self, replica: ReplicaId) {
        let id = self.poller.queue(replica);
        if let Some(state) = self.replicas.get_mut(replica) {
            state.last_probe = Some(id);
        }
    }
}

impl Policy for WeightedRoundRobin {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, now: Time) {
        // A newcomer starts at the mean weight: the best guess until its reports come in.
        let effective = self.mean_effective();
        let changed = self.replicas.apply(change, ReplicaState::default);
        if !changed {
            return;
        }
        self.schedule.apply(change, || Counter {
            effective,
            current: 0.0,
        });
        self.sum_weights();
        match change {
            // A newcomer is polled at once rather than at the next round.
            ReplicaChange::Insert(id) => self.queue_poll(id),
            ReplicaChange::Remove(id) => self.poller.cancel(id),
        }
        if self.replicas.is_empty() {
            self.poller.stop();
            self.next_update = None;
        } else {
            self.poller.start(now);
            let period = self.config.weight_update_period;
            self.next_update.get_or_insert(now + period);
        }
    }

    fn pick(&mut self, _query: &Query, _now: Time, rng: &mut dyn RngCore) -> Pick {
        if !self.phased {
            self.randomise_phase(rng);
        }
        let total = self.total;
        let mut best: Option<(usize, f64)> = None;
        for (i, (_, counter)) in self.schedule.iter_mut().enumerate() {
            counter.current += counter.effective;
            // Strictly greater, so ties go to the lowest id.
            if best.is_none_or(|(_, top)| counter.current > top) {
                best = Some((i, counter.current));
            }
        }
        let Some((best, _)) = best else {
            return Pick::NoReplica;
        };
        let counter = self.schedule.at_mut(best);
        counter.current -= total;
        let id = self.schedule.id_at(best);
        tracing::trace!(replica = %id, weight = self.schedule.at(best).effective, total, "wrr pick");
        Pick::Replica(id)
    }

    fn on_dispatch(&mut self, replica: ReplicaId, _query: QueryId, _now: Time) {
        if let Some(state) = self.replicas.get_mut(replica) {
            state.load.dispatched();
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, _completion: &Completion, _now: Time) {
        if let Some(state) = self.replicas.get_mut(replica) {
            state.load.completed();
        }
    }

    fn poll_probe(&mut self, _now: Time, _rng: &mut dyn RngCore) -> Option<ProbeRequest> {
        self.poller.pop()
    }

    fn probe_timeout(&self) -> Option<Duration> {
        Some(self.config.poll_interval)
    }

    fn on_probe_reply(
        &mut self,
        probe: &ProbeRequest,
        report: &LoadReport,
        now: Time,
        _rng: &mut dyn RngCore,
    ) {
        self.on_report(probe.replica, Some(probe.id), report, now);
    }

    fn on_load_report(&mut self, replica: ReplicaId, report: &LoadReport, now: Time) {
        self.on_report(replica, None, report, now);
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.poller
            .next_round()
            .into_iter()
            .chain(self.next_update)
            .min()
    }

    fn handle_timeout(&mut self, now: Time, _rng: &mut dyn RngCore) {
        if self.poller.take_due_round(now) {
            let ids = self.replicas.ids().to_vec();
            ids.into_iter().for_each(|id| self.queue_poll(id));
        }
        if let Some(due) = self.next_update.filter(|t| *t <= now) {
            self.update_weights(now);
            let period = self.config.weight_update_period;
            self.next_update = Some(next_on_grid(due, period, now));
        }
    }

    fn snapshot(&self, _now: Time) -> Snapshot {
        Snapshot {
            policy: self.name(),
            replicas: self
                .replicas
                .iter()
                .zip(self.schedule.iter())
                .map(|((id, s), (_, counter))| s.load.view(id, Some(counter.effective)))
                .collect(),
            values: vec![("mean_weight", self.mean_effective())],
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pick_n, rng};

    fn policy(n: u32) -> WeightedRoundRobin {
        let mut p = WeightedRoundRobin::new(Config::default());
        (0..n).for_each(|i| p.on_replica_change(ReplicaChange::Insert(ReplicaId(i)), Time::ZERO));
        p
    }

    fn report(qps: f64, utilization: f64, error_rate: f64) -> LoadReport {
        LoadReport {
            qps: Some(qps),
            utilization: Some(utilization),
            error_rate: Some(error_rate),
            ..LoadReport::default()
        }
    }

    /// Runs one poll round at `now`, answering replica i with `reports[i]`.
    fn poll_round(p: &mut WeightedRoundRobin, now: Time, reports: &[LoadReport]) {
        let mut r = rng(0);
        if p.poll_timeout().is_some_and(|t| t <= now) {
            p.handle_timeout(now, &mut r);
        }
        while let Some(probe) = p.poll_probe(now, &mut r) {
            p.on_probe_reply(&probe, &reports[probe.replica.0 as usize], now, &mut r);
        }
    }

    fn weights(p: &WeightedRoundRobin) -> Vec<f64> {
        let snap = p.snapshot(Time::ZERO);
        snap.replicas
            .iter()
            .map(|r| r.score.unwrap_or(0.0))
            .collect()
    }

    fn shares(p: &mut WeightedRoundRobin, n: usize) -> Vec<usize> {
        let picks = pick_n(p, n);
        let mut counts = vec![0; 1 + *picks.iter().max().unwrap_or(&0) as usize];
        picks.iter().for_each(|&i| counts[i as usize] += 1);
        counts
    }

    #[test]
    fn clients_start_at_different_replicas() {
        let starts: std::collections::BTreeSet<u32> = (0..20)
            .map(|seed| {
                let mut p = policy(8);
                let mut rng = crate::testing::rng(seed);
                match p.pick(&Query::default(), Time::ZERO, &mut rng) {
                    Pick::Replica(id) => id.0,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        assert!(starts.len() > 3, "starts {starts:?}");
    }

    #[test]
    fn shares_converge_to_reported_weights() {
        let mut p = policy(3);
        // Equal until the first recompute: plain round robin.
        assert_eq!(shares(&mut p, 6), vec![2, 2, 2]);
        // qps/utilisation: 600, 200, 200 => 3:1:1.
        let reports = [
            report(300.0, 0.5, 0.0),
            report(100.0, 0.5, 0.0),
            report(50.0, 0.25, 0.0),
        ];
        poll_round(&mut p, Time::ZERO, &reports);
        poll_round(&mut p, Time::from_secs(1), &reports);
        assert_eq!(shares(&mut p, 500), vec![300, 100, 100]);
        // Smooth: the heavy replica's picks are spread out, never more than 3 in a row.
        let picks = pick_n(&mut p, 50);
        assert!(
            picks.windows(4).all(|w| w.iter().any(|&i| i != 0)),
            "{picks:?}"
        );
    }

    #[test]
    fn an_erroring_replica_loses_weight() {
        let mut p = policy(2);
        let reports = [report(100.0, 0.5, 0.0), report(100.0, 0.5, 0.5)];
        for s in 0..5 {
            poll_round(&mut p, Time::from_secs(s), &reports);
        }
        assert_eq!(weights(&p), vec![200.0, 100.0]);
        assert_eq!(shares(&mut p, 300), vec![200, 100]);
    }

    #[test]
    fn unreported_and_stale_replicas_get_the_mean_weight() {
        let mut p = policy(3);
        let reports = [
            report(300.0, 1.0, 0.0),
            report(100.0, 1.0, 0.0),
            LoadReport::default(),
        ];
        poll_round(&mut p, Time::ZERO, &reports);
        poll_round(&mut p, Time::from_secs(1), &reports);
        assert_eq!(weights(&p), vec![300.0, 100.0, 200.0]);
        // Replica 0 stops answering; 11 s later its report has expired.
        let silent = [
            LoadReport::default(),
            report(100.0, 1.0, 0.0),
            LoadReport::default(),
        ];
        for s in 2..=12 {
            poll_round(&mut p, Time::from_secs(s), &silent);
        }
        assert_eq!(weights(&p), vec![100.0, 100.0, 100.0]);
    }

    #[test]
    fn polls_every_replica_once_per_interval() {
        let mut p = policy(3);
        let mut r = rng(0);
        let mut polled = vec![0; 3];
        for tick in 0..=40 {
            let now = Time::from_millis(tick * 250);
            if p.poll_timeout().is_some_and(|t| t <= now) {
                p.handle_timeout(now, &mut r);
            }
            while let Some(probe) = p.poll_probe(now, &mut r) {
                polled[probe.replica.0 as usize] += 1;
            }
        }
        // Rounds at 0, 1, ..., 10 s.
        assert_eq!(polled, vec![11, 11, 11]);
    }

    #[test]
    fn bad_params_name_their_key() {
        let message = |c: Config| c.validate().map_err(|e| e.to_string()).unwrap_err();
        let smoothing = Config {
            smoothing: 0.0,
            ..Config::default()
        };
        assert!(message(smoothing).contains("`smoothing`"));
        let penalty = Config {
            error_penalty: f64::NAN,
            ..Config::default()
        };
        assert!(message(penalty).contains("`error_penalty`"));
        let period = Config {
            weight_update_period: Duration::ZERO,
            ..Config::default()
        };
        assert!(message(period).contains("`weight_update_period`"));
    }
}
