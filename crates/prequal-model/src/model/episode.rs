//! Episodes: something happens to some replicas between two times, and server selections.
//!
//! An episode names the replicas it touches (`servers = [3]`, `"all"`, `"even"`, `"odd"` or a
//! half-open range `"0..50"`), a `start` and an `end`, and one or more effects:
//!
//! | key | effect while active |
//! |---|---|
//! | `slow` | latency (latency model) or query work (capacity model) multiplied by this factor |
//! | `latency` | every query takes exactly this long, whatever the load ("pinned", as in Beyond Round Robin's 2 s replica) |
//! | `error_rate` | this share of queries fail (0..=1) |
//! | `error_latency` | failed queries answer after this long instead of after normal service (fast errors) |
//! | `capacity_loss` | this share of the replica's cores is gone (0..=1; capacity model) |
//! | `fault` | the replica fails as a whole: `"black-hole"`, `"stall-body"`, `"host-down"` or `"killed"` ([`Fault`]) |
//!
//! Overlapping episodes combine: factors multiply, error rates combine as independent events,
//! capacity losses compound, and of the active pins and faults the one listed last wins.
//!
//! A fast-5xx sinkhole needs no fault of its own: `error_rate = 1.0` with a short
//! `error_latency`. A slow replica is `slow` or `latency`.

use std::fmt;
use std::time::Duration;

use prequal_core::Time;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::error::ModelError;

/// A selection of replicas by index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerSet {
    /// Every replica.
    All,
    /// Replicas with an even index.
    Even,
    /// Replicas with an odd index.
    Odd,
    /// Replicas in `start..end`.
    Range(u32, u32),
    /// These replicas.
    List(Vec<u32>),
}

/// Written back as it is read: a list as a TOML array, the rest as their keyword or range.
impl Serialize for ServerSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ServerSet::List(list) => list.serialize(serializer),
            other => serializer.collect_str(other),
        }
    }
}

impl fmt::Display for ServerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerSet::All => f.write_str("all"),
            ServerSet::Even => f.write_str("even"),
            ServerSet::Odd => f.write_str("odd"),
            ServerSet::Range(a, b) => write!(f, "{a}..{b}"),
            ServerSet::List(l) => write!(f, "{l:?}"),
        }
    }
}

impl ServerSet {
    /// True when replica `index` is selected.
    pub fn contains(&self, index: u32) -> bool {
        match self {
            ServerSet::All => true,
            ServerSet::Even => index.is_multiple_of(2),
            ServerSet::Odd => !index.is_multiple_of(2),
            ServerSet::Range(a, b) => (*a..*b).contains(&index),
            ServerSet::List(l) => l.contains(&index),
        }
    }

    /// Checks that the set selects some replica and every named index exists among `count`
    /// replicas.
    pub fn validate(&self, key: &str, count: u32) -> Result<(), ModelError> {
        let problem = match self {
            ServerSet::Range(a, b) if a >= b => Some(format!(
                "the range {self} selects no replica (a..b runs from a up to, not including, b)"
            )),
            ServerSet::Range(_, b) if *b > count => {
                Some(format!("selects replicas outside 0..{count}: {self}"))
            }
            ServerSet::List(l) if l.is_empty() => Some("selects no replica".to_string()),
            ServerSet::List(l) if l.iter().any(|&i| i >= count) => {
                Some(format!("selects replicas outside 0..{count}: {self}"))
            }
            ServerSet::Odd if count < 2 => {
                Some(format!("\"odd\" selects no replica among {count}"))
            }
            _ => None,
        };
        match problem {
            Some(message) => Err(ModelError::invalid(key, message)),
            None => Ok(()),
        }
    }

    fn parse(text: &str) -> Option<ServerSet> {
        match text {
            "all" => Some(ServerSet::All),
            "even" => Some(ServerSet::Even),
            "odd" => Some(ServerSet::Odd),
            _ => {
                let (a, b) = text.split_once("..")?;
                Some(ServerSet::Range(
                    a.trim().parse().ok()?,
                    b.trim().parse().ok()?,
                ))
            }
        }
    }
}

impl<'de> Deserialize<'de> for ServerSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SetVisitor;
        impl<'de> Visitor<'de> for SetVisitor {
            type Value = ServerSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of replica indices, or \"all\", \"even\", \"odd\", \"A..B\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ServerSet, E> {
                ServerSet::parse(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ServerSet, A::Error> {
                let mut out = Vec::new();
                while let Some(i) = seq.next_element::<u32>()? {
                    out.push(i);
                }
                Ok(ServerSet::List(out))
            }
        }
        d.deserialize_any(SetVisitor)
    }
}

/// A whole-replica fault, as seen from the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The application accepts queries and never answers them (a deadlock, a stopped
    /// worker pool): its load tracker sees them arrive and stay, so its RIF grows; probes are
    /// still answered. Queries end only when their client gives up or cancels them.
    BlackHole,
    /// The application answers every query's head at once (200, with its `Content-Length`)
    /// and then never sends the body, as a host stopped between the two, or a service that
    /// flushes its headers and then hangs. Like a black hole to anything that waits for the
    /// whole answer: its tracker counts the query in flight until the client gives up; probes
    /// are still answered. The simulator, which has no heads, runs it as `black-hole`.
    StallBody,
    /// The host is unreachable: queries and probes vanish without an answer (the client's
    /// deadline or probe timeout ends them). The replica's tracker sees nothing.
    HostDown,
    /// The process is killed at the start and restarted at the end: queries in flight at the
    /// start fail (connection reset), queries and probes meanwhile fail fast (connection
    /// refused, after one network round trip), and the restarted replica's tracker starts
    /// empty.
    Killed,
    /// A rolling deploy: the replica leaves service discovery at the start, so clients send
    /// it no new query while the ones it holds finish (queries and probes already on their way
    /// are still served); at the end the old process stops (any query it still holds fails, as
    /// when killed) and the new one, its load tracker empty, rejoins every client's replica
    /// set, where slow start ramps its share back up. The simulator runs it; the live testbed
    /// does not change the balancers' replica lists, so `prequal experiment` rejects it.
    Redeployed,
}

/// One episode as written in a scenario (`[[servers.episodes]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeSpec {
    /// The replicas affected.
    pub servers: ServerSet,
    /// When it starts.
    #[serde(with = "humantime_serde")]
    pub start: Duration,
    /// When it ends.
    #[serde(with = "humantime_serde")]
    pub end: Duration,
    /// Latency or work multiplier.
    #[serde(default)]
    pub slow: Option<f64>,
    /// Pinned latency.
    #[serde(default, with = "humantime_serde")]
    pub latency: Option<Duration>,
    /// Share of queries that fail.
    #[serde(default)]
    pub error_rate: Option<f64>,
    /// How fast failures answer (default: after normal service).
    #[serde(default, with = "humantime_serde")]
    pub error_latency: Option<Duration>,
    /// Share of cores lost.
    #[serde(default)]
    pub capacity_loss: Option<f64>,
    /// A whole-replica fault.
    #[serde(default)]
    pub fault: Option<Fault>,
}

fn check_share(key: String, v: Option<f64>) -> Result<(), ModelError> {
    match v {
        Some(x) if !(0.0..=1.0).contains(&x) => Err(ModelError::invalid(
            key,
            format!("expected a share between 0 and 1, got {x}"),
        )),
        _ => Ok(()),
    }
}

impl EpisodeSpec {
    /// Checks times, shares and the selection; `key` is e.g. `servers.episodes[0]`.
    pub fn validate(&self, key: &str, count: u32) -> Result<(), ModelError> {
        self.servers.validate(&format!("{key}.servers"), count)?;
        if self.end <= self.start {
            return Err(ModelError::invalid(
                format!("{key}.end"),
                format!("must be after start ({:?}), got {:?}", self.start, self.end),
            ));
        }
        if let Some(f) = self.slow
            && !(f.is_finite() && f > 0.0)
        {
            return Err(ModelError::invalid(
                format!("{key}.slow"),
                format!("expected a factor above 0, got {f}"),
            ));
        }
        check_share(format!("{key}.error_rate"), self.error_rate)?;
        check_share(format!("{key}.capacity_loss"), self.capacity_loss)?;
        if self.slow.is_none()
            && self.latency.is_none()
            && self.error_rate.is_none()
            && self.capacity_loss.is_none()
            && self.fault.is_none()
        {
            return Err(ModelError::invalid(
                key,
                "has no effect; set one of slow, latency, error_rate, capacity_loss, fault",
            ));
        }
        Ok(())
    }

    /// True when active at `now` (start inclusive, end exclusive).
    pub fn active(&self, now: Time) -> bool {
        now >= Time::ZERO + self.start && now < Time::ZERO + self.end
    }
}

/// The combined effect of the episodes active at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effects {
    /// Latency/work multiplier (1 = none).
    pub slow: f64,
    /// Pinned latency, if any.
    pub latency: Option<Duration>,
    /// Probability that a query fails.
    pub error_rate: f64,
    /// Latency of failures, if fast.
    pub error_latency: Option<Duration>,
    /// Share of cores lost.
    pub capacity_loss: f64,
    /// A whole-replica fault, if any.
    pub fault: Option<Fault>,
}

impl Default for Effects {
    fn default() -> Self {
        Effects {
            slow: 1.0,
            latency: None,
            error_rate: 0.0,
            error_latency: None,
            capacity_loss: 0.0,
            fault: None,
        }
    }
}

impl Effects {
    /// Combines the episodes in `episodes` that are active at `now`.
    pub fn at<'a>(episodes: impl IntoIterator<Item = &'a EpisodeSpec>, now: Time) -> Effects {
        let mut fx = Effects::default();
        let mut ok = 1.0;
        let mut keep = 1.0;
        for ep in episodes.into_iter().filter(|e| e.active(now)) {
            fx.slow *= ep.slow.unwrap_or(1.0);
            fx.latency = ep.latency.or(fx.latency);
            ok *= 1.0 - ep.error_rate.unwrap_or(0.0);
            fx.error_latency = ep.error_latency.or(fx.error_latency);
            keep *= 1.0 - ep.capacity_loss.unwrap_or(0.0);
            fx.fault = ep.fault.or(fx.fault);
        }
        fx.error_rate = 1.0 - ok;
        fx.capacity_loss = 1.0 - keep;
        fx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        s: ServerSet,
    }

    #[test]
    fn server_sets_parse_and_select() {
        let parse = |t: &str| toml::from_str::<Holder>(t).map(|h| h.s);
        assert_eq!(parse("s = \"even\"").unwrap(), ServerSet::Even);
        assert_eq!(parse("s = [1, 3]").unwrap(), ServerSet::List(vec![1, 3]));
        assert_eq!(parse("s = \"2..4\"").unwrap(), ServerSet::Range(2, 4));
        assert!(parse("s = \"some\"").is_err());
        assert!(ServerSet::Odd.contains(3) && !ServerSet::Odd.contains(4));
        let err = ServerSet::List(vec![11])
            .validate("e.servers", 11)
            .unwrap_err();
        assert!(err.to_string().contains("e.servers"), "{err}");
        // Sets that select nothing say so, rather than that they reach outside the cluster.
        for (set, count, says) in [
            (ServerSet::Range(1, 1), 11, "selects no replica"),
            (ServerSet::Range(2, 0), 11, "selects no replica"),
            (ServerSet::List(vec![]), 11, "selects no replica"),
            (ServerSet::Odd, 1, "selects no replica"),
            (ServerSet::Range(0, 12), 11, "outside 0..11"),
        ] {
            let err = set.validate("e.servers", count).unwrap_err().to_string();
            assert!(err.contains(says), "{set}: {err}");
        }
        assert!(ServerSet::Odd.validate("e.servers", 2).is_ok());
    }

    #[test]
    fn effects_combine_only_while_active() {
        let ep: EpisodeSpec = toml::from_str(
            "servers = [0]\nstart = \"15s\"\nend = \"45s\"\nlatency = \"2s\"\nerror_rate = 0.5",
        )
        .unwrap();
        ep.validate("servers.episodes[0]", 11).unwrap();
        assert_eq!(Effects::at([&ep], Time::from_secs(10)), Effects::default());
        let fx = Effects::at([&ep, &ep], Time::from_secs(15));
        assert_eq!(fx.latency, Some(Duration::from_secs(2)));
        assert!((fx.error_rate - 0.75).abs() < 1e-12);
        assert_eq!(Effects::at([&ep], Time::from_secs(45)), Effects::default());
    }

    #[test]
    fn faults_parse_and_are_active_only_in_their_span() {
        let ep: EpisodeSpec =
            toml::from_str("servers = [2]\nstart = \"1s\"\nend = \"3s\"\nfault = \"host-down\"")
                .unwrap();
        ep.validate("e", 3).unwrap();
        assert_eq!(
            Effects::at([&ep], Time::from_secs(2)).fault,
            Some(Fault::HostDown)
        );
        assert_eq!(Effects::at([&ep], Time::from_secs(3)).fault, None);
        let bad = toml::from_str::<EpisodeSpec>(
            "servers = [2]\nstart = \"1s\"\nend = \"3s\"\nfault = \"sigstop\"",
        );
        assert!(bad.unwrap_err().to_string().contains("sigstop"));
    }

    #[test]
    fn episode_without_effect_or_backwards_is_rejected() {
        let ep: EpisodeSpec =
            toml::from_str("servers = \"all\"\nstart = \"5s\"\nend = \"6s\"").unwrap();
        assert!(
            ep.validate("e", 3)
                .unwrap_err()
                .to_string()
                .contains("no effect")
        );
        let ep: EpisodeSpec =
            toml::from_str("servers = \"all\"\nstart = \"5s\"\nend = \"1s\"\nslow = 2.0").unwrap();
        assert!(
            ep.validate("e", 3)
                .unwrap_err()
                .to_string()
                .contains("e.end")
        );
    }
}
