//! Prometheus metrics, in the text exposition format with its naming conventions (a
//! `prequal_proxy_` prefix, base units in the name such as `_seconds`, `_total` on counters).
//!
//! The families live as long as the proxy, across reloads, so a counter never goes back to zero
//! because a config changed. Hot paths never look a label set up: each cluster and replica keeps
//! clones of its own counters (cheap `Arc` handles), taken once when it is created.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use prequal_core::Outcome;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    cluster: String,
    code_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TryLabels {
    cluster: String,
    replica: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabels {
    cluster: String,
    replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    cluster: String,
    purpose: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    cluster: String,
    result: &'static str,
}

fn duration_histogram() -> Histogram {
    // 100 µs to about 52 s, doubling.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

/// Every metric family the proxy exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<ClusterLabels, Counter>,
    responses: Family<ClassLabels, Counter>,
    duration: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    tries: Family<TryLabels, Counter>,
    retries: Family<ClusterLabels, Counter>,
    retries_refused: Family<ClusterLabels, Counter>,
    hedges: Family<ClusterLabels, Counter>,
    hedges_won: Family<ClusterLabels, Counter>,
    hedges_refused: Family<ClusterLabels, Counter>,
    probes: Family<ProbeLabels, Counter>,
    connections: Family<ConnectionLabels, Counter>,
    ejections: Family<ReplicaLabels, Counter>,
    replicas: Family<ClusterLabels, Gauge>,
    ejected: Family<ClusterLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("prequal_proxy");
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            responses: Family::default(),
            duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            tries: Family::default(),
            retries: Family::default(),
            retries_refused: Family::default(),
            hedges: Family::default(),
            hedges_won: Family::default(),
            hedges_refused: Family::default(),
            probes: Family::default(),
            connections: Family::default(),
            ejections: Family::default(),
            replicas: Family::default(),
            ejected: Family::default(),
        };
        let r = &mut registry;
        r.register("requests", "Requests received", m.requests.clone());
        r.register(
            "responses",
            "Responses sent, by status class",
            m.responses.clone(),
        );
        r.register_with_unit(
            "request_duration",
            "Time from request to the response head sent (a response read whole: once its body came), all tries included",
            Unit::Seconds,
            m.duration.clone(),
        );
        r.register(
            "upstream_tries",
            "Tries sent to replicas, by outcome",
            m.tries.clone(),
        );
        r.register("retries", "Retries sent", m.retries.clone());
        r.register("hedges", "Hedged tries sent", m.hedges.clone());
        r.register(
            "hedges_won",
            "Hedged tries that answered before the try they backed up",
            m.hedges_won.clone(),
        );
        r.register(
            "hedges_refused",
            "Hedges not sent because the hedge budget was spent",
            m.hedges_refused.clone(),
        );
        r.register(
            "retries_refused",
            "Retries not sent because the retry budget was spent",
            m.retries_refused.clone(),
        );
        r.register("probes", "Probes, by result", m.probes.clone());
        r.register(
            "upstream_connections",
            "Connections opened to replicas, for requests or for probes",
            m.connections.clone(),
        );
        r.register("ejections", "Outlier ejections", m.ejections.clone());
        r.register("replicas", "Replicas known", m.replicas.clone());
        r.register(
            "ejected_replicas",
            "Replicas ejected now",
            m.ejected.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The exposition text (OpenMetrics text format, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The handles one cluster uses.
    pub fn cluster(&self, name: &str) -> ClusterMetrics {
        let labels = ClusterLabels {
            cluster: name.to_string(),
        };
        let class = |code_class| {
            self.responses.get_or_create_owned(&ClassLabels {
                cluster: name.to_string(),
                code_class,
            })
        };
        let probe = |result| {
            self.probes.get_or_create_owned(&ProbeLabels {
                cluster: name.to_string(),
                result,
            })
        };
        let connections = |purpose| {
            self.connections.get_or_create_owned(&ConnectionLabels {
                cluster: name.to_string(),
                purpose,
            })
        };
        ClusterMetrics {
            name: name.to_string(),
            requests: self.requests.get_or_create_owned(&labels),
            responses: [
                class("1xx"),
                class("2xx"),
                class("3xx"),
                class("4xx"),
                class("5xx"),
            ],
            duration: self.duration.get_or_create_owned(&labels),
            retries: self.retries.get_or_create_owned(&labels),
            retries_refused: self.retries_refused.get_or_create_owned(&labels),
            hedges: self.hedges.get_or_create_owned(&labels),
            hedges_won: self.hedges_won.get_or_create_owned(&labels),
            hedges_refused: self.hedges_refused.get_or_create_owned(&labels),
            probes_ok: probe("ok"),
            probes_failed: probe("failed"),
            probes_dropped: probe("dropped"),
            probes_skipped: probe("skipped"),
            connections_for_requests: connections("request"),
            connections_for_probes: connections("probe"),
            replicas: self.replicas.get_or_create_owned(&labels),
            ejected: self.ejected.get_or_create_owned(&labels),
        }
    }

    /// The handles one replica uses.
    pub fn replica(&self, cluster: &str, replica: &str) -> ReplicaMetrics {
        let tries = |outcome| {
            self.tries.get_or_create_owned(&TryLabels {
                cluster: cluster.to_string(),
                replica: replica.to_string(),
                outcome,
            })
        };
        ReplicaMetrics {
            success: tries("success"),
            error: tries("error"),
            timeout: tries("timeout"),
            cancelled: tries("cancelled"),
            ejections: self.ejections.get_or_create_owned(&ReplicaLabels {
                cluster: cluster.to_string(),
                replica: replica.to_string(),
            }),
        }
    }
}

/// One cluster's metric handles.
#[derive(Clone, Debug)]
pub struct ClusterMetrics {
    /// The cluster's name.
    pub name: String,
    /// Requests received.
    pub requests: Counter,
    /// Responses by class, index 0 for 1xx through 4 for 5xx.
    pub responses: [Counter; 5],
    /// Time to response headers.
    pub duration: Histogram,
    /// Retries sent.
    pub retries: Counter,
    /// Retries refused by the budget.
    pub retries_refused: Counter,
    /// Hedged tries sent.
    pub hedges: Counter,
    /// Hedged tries whose answer was used.
    pub hedges_won: Counter,
    /// Hedges the budget refused.
    pub hedges_refused: Counter,
    /// Probes answered.
    pub probes_ok: Counter,
    /// Probes failed or timed out.
    pub probes_failed: Counter,
    /// Probes not sent because too many were in flight in the cluster.
    pub probes_dropped: Counter,
    /// Probes not sent because their replica already had `max_probes_per_replica` outstanding.
    pub probes_skipped: Counter,
    /// Connections opened to replicas for requests.
    pub connections_for_requests: Counter,
    /// Connections opened to replicas for probes.
    pub connections_for_probes: Counter,
    /// Replicas known.
    pub replicas: Gauge,
    /// Replicas ejected.
    pub ejected: Gauge,
}

impl ClusterMetrics {
    /// Counts a response with `status`.
    pub fn response(&self, status: u16) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[class].inc();
    }
}

/// One replica's metric handles.
#[derive(Clone, Debug)]
pub struct ReplicaMetrics {
    success: Counter,
    error: Counter,
    timeout: Counter,
    cancelled: Counter,
    /// Times this replica was ejected.
    pub ejections: Counter,
}

impl ReplicaMetrics {
    /// Tries so far by outcome, for the admin view.
    pub fn counts(&self) -> serde_json::Value {
        serde_json::json!({
            "success": self.success.get(),
            "error": self.error.get(),
            "timeout": self.timeout.get(),
            "cancelled": self.cancelled.get(),
        })
    }

    /// Counts one try's outcome.
    pub fn tried(&self, outcome: Outcome) {
        match outcome {
            Outcome::Success => self.success.inc(),
            Outcome::Error => self.error.inc(),
            Outcome::Timeout => self.timeout.inc(),
            Outcome::Cancelled => self.cancelled.inc(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let metrics = Metrics::new();
        let cluster = metrics.cluster("api");
        cluster.requests.inc();
        cluster.response(503);
        cluster.duration.observe(0.002);
        metrics.replica("api", "127.0.0.1:1").tried(Outcome::Error);
        let text = metrics.encode();
        assert!(
            text.contains("prequal_proxy_requests_total{cluster=\"api\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("prequal_proxy_responses_total{cluster=\"api\",code_class=\"5xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("prequal_proxy_request_duration_seconds_count"),
            "{text}"
        );
        assert!(text.contains("outcome=\"error\"} 1"), "{text}");
    }
}
