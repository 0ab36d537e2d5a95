//! `prequal-sync`: Prequal without a pool, probing on the query's own path.
//!
//! For each query the client sends `probes` probes (d, default 3, at least 2) to distinct random
//! replicas and answers [`Pick::Pending`]. As soon as `replies` of them have answered (default
//! d − 1 = 2), or once `probe_timeout` (default 3 ms) has passed, or once every probe has either
//! answered or failed, it chooses among the replies by the HCL rule (see [`super::hcl`], with
//! the same `q_rif` quantile over recent replies and the same error aversion as `prequal`) and
//! hands the decision out through [`Policy::poll_pick`]. With no reply at all it picks a
//! uniformly random replica. With a single replica there is nothing to compare: it is picked at
//! once, without probes. Prequal paper, section 4, "Synchronous mode".
//!
//! Each probe carries the query's hint (for example a cache key). What a replica does with it is
//! its own business: one that holds the data the query needs may scale down the load it reports
//! (the paper mentions dividing by ten) to attract the query.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use super::hcl::{RifHistory, hcl_rank, validate_q_rif};
use crate::config::build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};
use crate::policies::probing::aversion::{Aversion, ReplicaLoad, random_replica};
use crate::policies::probing::engine::{Rank, order_with_aversion};
use crate::policies::probing::params::{self, validate_aversion};
use crate::policy::{
    Completion, LoadReport, Pick, Policy, ProbeId, ProbeRequest, Query, QueryId, ReplicaView,
    Snapshot,
};
use crate::replica::{ReplicaChange, ReplicaId, Replicas};
use crate::sampling::for_each_distinct;
use crate::time::Time;

/// `prequal-sync` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Probes per query (d), default 3, at least 2.
    pub probes: u32,
    /// Replies to wait for, default 2 (d − 1), between 1 and `probes`.
    pub replies: u32,
    /// RIF quantile above which a reply is hot, default 2^−0.25.
    pub q_rif: f64,
    /// How long to wait for replies, default 3 ms.
    #[serde(with = "humantime_serde")]
    pub probe_timeout: Duration,
    /// Error share above which a replica is avoided, default 0.1.
    pub error_threshold: f64,
    /// Time constant of the error-share decay, default 5 s.
    #[serde(with = "humantime_serde")]
    pub error_decay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            probes: 3,
            replies: 2,
            q_rif: params::Q_RIF,
            probe_timeout: params::PROBE_TIMEOUT,
            error_threshold: params::ERROR_THRESHOLD,
            error_decay: params::ERROR_DECAY,
        }
    }
}

impl BuildPolicy for Config {
    const INFO: PolicyInfo = PolicyInfo {
        name: "prequal-sync",
        signal: "probed RIF and latency",
        rule: "d probes per query; wait for d−1 replies or the probe timeout; choose by HCL",
        source: "Prequal paper (NSDI 2024), section 4, synchronous mode",
        params: &[
            ParamDoc {
                key: "probes",
                default: "3",
                doc: "probes per query (d), >= 2",
            },
            ParamDoc {
                key: "replies",
                default: "2",
                doc: "replies to wait for, between 1 and `probes` (usually d − 1)",
            },
            params::Q_RIF_DOC,
            ParamDoc {
                doc: "longest wait for replies before choosing among those received, > 0",
                ..params::PROBE_TIMEOUT_DOC
            },
            params::ERROR_THRESHOLD_DOC,
            params::ERROR_DECAY_DOC,
        ],
    };

    fn validate(&self) -> Result<(), ConfigError> {
        let name = Self::INFO.name;
        if self.probes < 2 {
            return Err(ConfigError::invalid(name, "probes", "must be at least 2"));
        }
        if self.replies == 0 || self.replies > self.probes {
            return Err(ConfigError::invalid(
                name,
                "replies",
                format!("must be between 1 and probes ({})", self.probes),
            ));
        }
        if self.probe_timeout.is_zero() {
            return Err(ConfigError::invalid(
                name,
                "probe_timeout",
                "must be longer than zero",
            ));
        }
        validate_q_rif(name, self.q_rif)?;
        validate_aversion(name, &self.aversion())
    }

    fn build(&self) -> Box<dyn Policy> {
        Box::new(PrequalSync::new(self.clone()))
    }
}

impl Config {
    fn aversion(&self) -> Aversion {
        Aversion {
            threshold: self.error_threshold,
            decay: self.error_decay,
        }
    }
}

/// A query waiting for its probe replies.
#[derive(Debug)]
struct Waiting {
    needed: usize,
    outstanding: usize,
    replies: Vec<(ReplicaId, LoadReport)>,
    deadline: Time,
    ready: bool,
}

/// Sync-mode Prequal.
#[derive(Debug)]
pub struct PrequalSync {
    config: Config,
    aversion: Aversion,
    replicas: Replicas<ReplicaLoad>,
    history: RifHistory,
    waiting: BTreeMap<QueryId, Waiting>,
    ready: VecDeque<QueryId>,
    probes: VecDeque<ProbeRequest>,
    next_probe_id: u64,
}

impl PrequalSync {
    /// A policy with no replicas yet (assumes `config` passed validation).
    pub fn new(config: Config) -> Self {
        Self {
            aversion: config.aversion(),
            config,
            replicas: Replicas::new(),
            history: RifHistory::default(),
            waiting: BTreeMap::new(),
            ready: VecDeque::new(),
            probes: VecDeque::new(),
            next_probe_id: 0,
        }
    }

    fn mark_ready(&mut self, query: QueryId) {
        if let Some(w) = self.waiting.get_mut(&query).filter(|w| !w.ready) {
            w.ready = true;
            self.ready.push_back(query);
        }
    }

    /// The HCL choice among `replies`, or `None` when none is from a current replica.
    fn choose(&self, replies: &[(ReplicaId, LoadReport)], now: Time) -> Option<ReplicaId> {
        let threshold = self.history.threshold(self.config.q_rif);
        let ranked: Vec<(ReplicaId, (bool, Rank))> = replies
            .iter()
            .filter_map(|(id, report)| {
                let load = self.replicas.get(*id)?;
                let avoided = load.avoided(now, &self.aversion);
                Some((
                    *id,
                    (
                        avoided,
                        hcl_rank(threshold, None, report.rif, report.latency),
                    ),
                ))
            })
            .collect();
        let (id, (avoided, rank)) = ranked
            .iter()
            .min_by(|a, b| order_with_aversion(&a.1, &b.1))?;
        tracing::trace!(
            policy = "prequal-sync",
            compared = ?ranked,
            chosen = %id,
            hot = rank.hot,
            avoided,
            key = rank.key,
            "selected from replies"
        );
        Some(*id)
    }
}

impl Policy for PrequalSync {
    fn name(&self) -> &'static str {
        Config::INFO.name
    }

    fn on_replica_change(&mut self, change: ReplicaChange, now: Time) {
        self.replicas.apply(change, ReplicaLoad::default);
        if let ReplicaChange::Remove(id) = change {
            // Probes not yet handed out to a departed replica will never be sent: count them
            // as failed so their queries need not wait for the timeout.
            let (dropped, kept): (Vec<_>, Vec<_>) =
                self.probes.drain(..).partition(|p| p.replica == id);
            self.probes = kept.into();
            for probe in dropped {
                self.on_probe_failure(&probe, now);
            }
        }
    }

    fn pick(&mut self, query: &Query, now: Time, rng: &mut dyn RngCore) -> Pick {
        let n = self.replicas.len();
        if n == 0 {
            return Pick::NoReplica;
        }
        if n == 1 {
            self.replicas.at_mut(0).picks += 1;
            return Pick::Replica(self.replicas.id_at(0));
        }
        let d = (self.config.probes as usize).min(n);
        for_each_distinct(rng, n, d, |index| {
            self.next_probe_id += 1;
            self.probes.push_back(ProbeRequest {
                id: ProbeId(self.next_probe_id),
                replica: self.replicas.id_at(index),
                query: Some(query.id),
                hint: query.hint,
            });
        });
        let waiting = Waiting {
            needed: (self.config.replies as usize).min(d),
            outstanding: d,
            replies: Vec::with_capacity(d),
            deadline: now + self.config.probe_timeout,
            ready: false,
        };
        self.waiting.insert(query.id, waiting);
        Pick::Pending
    }

    fn poll_pick(&mut self, now: Time, rng: &mut dyn RngCore) -> Option<(QueryId, Pick)> {
        let query = self.ready.pop_front()?;
        let waiting = self.waiting.remove(&query)?;
        let chosen = self
            .choose(&waiting.replies, now)
            .or_else(|| random_replica(&self.replicas, now, &self.aversion, rng));
        let pick = match chosen.and_then(|id| self.replicas.get_mut(id).map(|l| (id, l))) {
            Some((id, load)) => {
                load.picks += 1;
                Pick::Replica(id)
            }
            None => Pick::NoReplica,
        };
        Some((query, pick))
    }

    fn on_dispatch(&mut self, replica: ReplicaId, _query: QueryId, _now: Time) {
        if let Some(load) = self.replicas.get_mut(replica) {
            load.on_dispatch();
        }
    }

    fn on_complete(&mut self, replica: ReplicaId, completion: &Completion, now: Time) {
        if let Some(load) = self.replicas.get_mut(replica) {
            load.on_complete(completion.outcome, now, &self.aversion);
        }
    }

    fn poll_probe(&mut self, _now: Time, _rng: &mut dyn RngCore) -> Option<ProbeRequest> {
        self.probes.pop_front()
    }

    fn probe_timeout(&self) -> Option<Duration> {
        Some(self.config.probe_timeout)
    }

    fn on_probe_reply(
        &mut self,
        probe: &ProbeRequest,
        report: &LoadReport,
        _now: Time,
        _rng: &mut dyn RngCore,
    ) {
        self.history.push(report.rif);
        let Some(query) = probe.query else { return };
        let Some(w) = self.waiting.get_mut(&query).filter(|w| !w.ready) else {
            return;
        };
        w.replies.push((probe.replica, *report));
        w.outstanding = w.outstanding.saturating_sub(1);
        if w.replies.len() >= w.needed || w.outstanding == 0 {
            self.mark_ready(query);
        }
    }

    fn on_probe_failure(&mut self, probe: &ProbeRequest, now: Time) {
        // A failed probe only ends the wait for it: no reply is ranked, none counts against
        // its replica.
        self.on_probe_not_sent(probe, now);
    }

    fn on_probe_not_sent(&mut self, probe: &ProbeRequest, _now: Time) {
        let Some(query) = probe.query else { return };
        let Some(w) = self.waiting.get_mut(&query).filter(|w| !w.ready) else {
            return;
        };
        w.outstanding = w.outstanding.saturating_sub(1);
        if w.outstanding == 0 {
            self.mark_ready(query);
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.waiting
            .values()
            .filter(|w| !w.ready)
            .map(|w| w.deadline)
            .min()
    }

    fn handle_timeout(&mut self, now: Time, _rng: &mut dyn RngCore) {
        let due: Vec<QueryId> = self
            .waiting
            .iter()
            .filter(|(_, w)| !w.ready && w.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for query in due {
            tracing::trace!(policy = "prequal-sync", query = query.0, "probe timeout");
            self.mark_ready(query);
        }
    }

    fn snapshot(&self, now: Time) -> Snapshot {
        let threshold = self.history.threshold(self.config.q_rif);
        let replicas = self
            .replicas
            .iter()
            .map(|(id, load)| ReplicaView {
                id: Some(id),
                local_rif: load.local_rif,
                score: None,
                picks: load.picks,
                avoided: load.avoided(now, &self.aversion),
            })
            .collect();
        let mut values = vec![
            ("waiting_queries", self.waiting.len() as f64),
            ("q_rif", self.config.q_rif),
        ];
        if threshold != super::hcl::Threshold::AllCold {
            values.push(("hot_rif_threshold", threshold.as_f64()));
        }
        Snapshot {
            policy: Config::INFO.name,
            replicas,
            pool: Vec::new(),
            values,
        }
    }
}
