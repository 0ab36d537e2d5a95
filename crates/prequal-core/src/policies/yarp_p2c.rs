//! `yarp-p2c`: power of two choices on server-reported requests in flight, polled on a timer.
//!
//! The client polls every replica for its load once per `poll_interval` (default 500 ms) and
//! keeps each replica's last reported server-side RIF. Each query draws two distinct replicas at
//! random and goes to the one with the lower reported RIF (ties to the first drawn). Unlike
//! Prequal, the signal is refreshed on a fixed schedule rather than by the queries themselves, so
//! between polls every client sees the same, ageing picture; drawing two at random (instead of
//! taking the global minimum) keeps clients from all herding onto the one replica that looked
//! idle at the last poll. This is the polled-load variant of YARP's power-of-two-choices policy
//! named in the design table.
//!
//! Polling: on [`Policy::handle_timeout`] at the poll time, one probe per replica is queued and
//! handed out through [`Policy::poll_probe`]; the next round is one interval later. A replica
//! that joins is polled at once rather than waiting for the next round. A poll not answered
//! within one interval ([`Policy::probe_timeout`]) is reported failed by the driver.
//!
//! Unpolled replicas: a replica without a current report (it has not answered its first poll,
//! or its last poll failed) ranks behind every replica with one, so traffic never rushes to a
//! replica merely because nothing is known about it; it still serves when both draws land on
//! replicas without reports. Reports piggybacked on responses ([`Policy::on_load_report`]) count
//! like poll replies.

use std::time::Duration;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::policies::local::LocalLoad;
use crate::policies::local::{Poller, best_of_draws};
use crate::policy::{
    Completion, LoadReport, Pick, Policy, ProbeId, ProbeRequest, Query, QueryId, Snapshot,
};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::time::Time;

/// `yarp-p2c` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// How often every replica is polled for its RIF. Default "500ms"; at least 1 ms.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_millis(500),
        }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "yarp-p2c",
        signal: "server-reported RIF, polled",
        rule: "every replica polled each interval; the lower last-reported RIF of two random \
               replicas (replicas without a report rank last)",
        source: "YARP PowerOfTwoChoices, with polled server load",
        params: &[ParamDoc {
            key: "poll_interval",
            default: "\"500ms\"",
            doc: "how often each replica is polled for its RIF; also the poll timeout; >= 1ms",
        }],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        if self.poll_interval < Duration::from_millis(1) {
            return Err(ConfigError::invalid(
                Self::INFO.name,
                "poll_interval",
                "must be at least 1ms",
            ));
        }
        Ok(())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(YarpP2c::new(self.poll_interval))
    }
}

/// One replica: its last report and its client-local load.
#[derive(Clone, Debug, Default)]
struct ReplicaState {
    /// Server RIF from the last answered poll, and when it arrived.
    reported: Option<(u32, Time)>,
    /// The newest poll sent, so a late reply to an older one cannot overwrite a newer report.
    last_probe: Option<ProbeId>,
    load: LocalLoad,
}

/// Power of two choices on polled server RIF. See the module docs.
#[derive(Debug)]
pub struct YarpP2c {
    replicas: Replicas<ReplicaState>,
    poller: Poller,
}

impl YarpP2c {
    /// A policy polling every `poll_interval`.
    pub fn new(poll_interval: Duration) -> Self {
        Self {
            replicas: Replicas::new(),
            poller: Poller::new(poll_interval),
        }
    }

    fn queue_poll(&mut self, replica: ReplicaId) {
        let id = self.poller.queue(replica);
        if let Some(state) = self.replicas.get_mut(replica) {
            state.last_probe = Some(id);
        }
    }

    fn record(&mut self, replica: ReplicaId, probe: Option<ProbeId>, rif: u32, now: Time) {
        let Some(state) = self.replicas.get_mut(replica) else {
            return;
        };
        // A reply to a poll older than the newest one sent is stale.
        if probe.is_some_and(|p| state.last_probe.is_some_and(|last| p < last)) {
            return;
        }
        state.reported = Some((rif, now));
    }

    /// Rank key: replicas with a report first, by RIF; replicas without one after them.
    fn rank(state: &ReplicaState) -> (bool, u32) {
        match state.reported {
            Some((rif, _)) => (false, rif),
            None => (true, 0),
        }
    }
}

impl Policy for YarpP2c {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, now: Time) {
        if !self.replicas.apply(change, ReplicaState::default) {
            return;
        }
        match change {
            ReplicaChange::Insert(id) => {
                self.poller.start(now);
                self.queue_poll(id);
            }
            ReplicaChange::Remove(id) => {
                self.poller.cancel(id);
                if self.replicas.is_empty() {
                    self.poller.stop();
                }
            }
        }
    }

    fn pick(&mut self, _query: &Query, _now: Time, rng: &mut dyn RngCore) -> Pick {
        let replicas = &self.replicas;
        let rank = |i| Self::rank(replicas.at(i));
        let Some(best) = best_of_draws(replicas.len(), 2, rng, rank) else {
            return Pick::NoReplica;
        };
        let id = replicas.id_at(best);
        tracing::trace!(replica = %id, rank = ?rank(best), "yarp-p2c pick");
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
        Some(self.poller.interval())
    }

    fn on_probe_reply(
        &mut self,
        probe: &ProbeRequest,
        report: &LoadReport,
        now: Time,
        _rng: &mut dyn RngCore,
    ) {
        self.record(probe.replica, Some(probe.id), report.rif, now);
    }

    fn on_probe_failure(&mut self, probe: &ProbeRequest, _now: Time) {
        if let Some(state) = self.replicas.get_mut(probe.replica)
            && state.last_probe == Some(probe.id)
        {
            state.reported = None;
        }
    }

    fn on_load_report(&mut self, replica: ReplicaId, report: &LoadReport, now: Time) {
        self.record(replica, None, report.rif, now);
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.poller.next_round()
    }

    fn handle_timeout(&mut self, now: Time, _rng: &mut dyn RngCore) {
        if !self.poller.take_due_round(now) {
            return;
        }
        let ids = self.replicas.ids().to_vec();
        ids.into_iter().for_each(|id| self.queue_poll(id));
        let polls = self.poller.queued();
        tracing::trace!(now_ns = now.as_nanos(), polls, "yarp-p2c round");
    }

    fn snapshot(&self, now: Time) -> Snapshot {
        let replicas = self.replicas.iter().map(|(id, s)| {
            let mut view = s.load.view(id, s.reported.map(|(rif, _)| f64::from(rif)));
            view.avoided = s.reported.is_none();
            view
        });
        let oldest = self
            .replicas
            .iter()
            .filter_map(|(_, s)| s.reported)
            .min_by_key(|r| r.1);
        let age = oldest.map_or(0.0, |(_, t)| now.saturating_since(t).as_secs_f64());
        Snapshot {
            policy: self.name(),
            replicas: replicas.collect(),
            values: vec![("oldest_report_age_s", age)],
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;
    use std::collections::BTreeMap;

    fn policy(n: u32) -> YarpP2c {
        let mut p = YarpP2c::new(Duration::from_millis(500));
        (0..n).for_each(|i| p.on_replica_change(ReplicaChange::Insert(ReplicaId(i)), Time::ZERO));
        p
    }

    fn drain(p: &mut YarpP2c, now: Time) -> Vec<ProbeRequest> {
        let mut r = rng(0);
        std::iter::from_fn(|| p.poll_probe(now, &mut r)).collect()
    }

    fn answer(p: &mut YarpP2c, probe: &ProbeRequest, rif: u32, now: Time) {
        let report = LoadReport {
            rif,
            ..LoadReport::default()
        };
        p.on_probe_reply(probe, &report, now, &mut rng(0));
    }

    #[test]
    fn polls_every_replica_once_per_interval() {
        let mut p = policy(4);
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        let mut count = |probes: Vec<ProbeRequest>| {
            probes
                .iter()
                .for_each(|pr| *counts.entry(pr.replica.0).or_default() += 1);
        };
        count(drain(&mut p, Time::ZERO)); // the join-time polls
        let mut now = Time::ZERO;
        // Step in 100 ms ticks for 5 s, waking the policy whenever it asked to be woken.
        for _ in 0..50 {
            now = now + Duration::from_millis(100);
            if p.poll_timeout().is_some_and(|t| t <= now) {
                p.handle_timeout(now, &mut rng(0));
            }
            count(drain(&mut p, now));
        }
        // One poll at join, then one per 500 ms: 1 + 10 each.
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![11; 4]);
        assert_eq!(p.poll_timeout(), Some(Time::from_millis(5_500)));
    }

    #[test]
    fn picks_the_lower_report_and_ranks_unreported_last() {
        let mut p = policy(2);
        let probes = drain(&mut p, Time::ZERO);
        answer(&mut p, &probes[0], 7, Time::ZERO);
        let mut r = rng(1);
        // Replica 1 has no report yet: replica 0 wins despite its RIF of 7.
        for _ in 0..10 {
            assert_eq!(
                p.pick(&Query::default(), Time::ZERO, &mut r),
                Pick::Replica(ReplicaId(0))
            );
        }
        answer(&mut p, &probes[1], 2, Time::ZERO);
        for _ in 0..10 {
            assert_eq!(
                p.pick(&Query::default(), Time::ZERO, &mut r),
                Pick::Replica(ReplicaId(1))
            );
        }
        // A failed poll drops the report again.
        p.on_probe_failure(&probes[1], Time::ZERO);
        assert_eq!(
            p.pick(&Query::default(), Time::ZERO, &mut r),
            Pick::Replica(ReplicaId(0))
        );
        assert!(p.snapshot(Time::ZERO).replicas[1].avoided);
    }

    #[test]
    fn stale_replies_do_not_overwrite_newer_reports() {
        let mut p = policy(1);
        let first = drain(&mut p, Time::ZERO);
        p.handle_timeout(Time::from_millis(500), &mut rng(0));
        let second = drain(&mut p, Time::from_millis(500));
        answer(&mut p, &second[0], 1, Time::from_millis(501));
        answer(&mut p, &first[0], 9, Time::from_millis(502));
        assert_eq!(
            p.snapshot(Time::from_millis(502)).replicas[0].score,
            Some(1.0)
        );
    }

    #[test]
    fn a_late_wake_up_runs_one_round_and_keeps_the_phase() {
        let ms = Time::from_millis;
        let mut p = policy(2);
        drain(&mut p, Time::ZERO);
        p.handle_timeout(ms(1_700), &mut rng(0));
        assert_eq!(drain(&mut p, ms(1_700)).len(), 2);
        assert_eq!(p.poll_timeout(), Some(ms(2_000)));
    }

    #[test]
    fn removal_cancels_queued_polls() {
        let mut p = policy(3);
        p.on_replica_change(ReplicaChange::Remove(ReplicaId(1)), Time::ZERO);
        let replicas: Vec<u32> = drain(&mut p, Time::ZERO)
            .iter()
            .map(|r| r.replica.0)
            .collect();
        assert_eq!(replicas, vec![0, 2]);
        assert!(
            Config {
                poll_interval: Duration::ZERO
            }
            .validate()
            .is_err()
        );
    }
}
