//! The proxy's configuration: a TOML file, or the same structure built from command-line flags.
//!
//! A config has a `[server]` table (the data-plane listener and its limits, and `[server.tls]`
//! to terminate TLS), an `[admin]` table (the admin listener), one `[clusters.NAME]` table per
//! upstream cluster (its replicas, its balancing policy from prequal-core, timeouts, retries,
//! outlier ejection, slow start, and `[clusters.NAME.tls]` to speak TLS to the replicas) and an
//! ordered list of `[[routes]]` that send requests to clusters by host and path prefix. Every key
//! and its default is listed in `docs/config.md`; unknown keys are rejected, and every error
//! names the file and the key.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//!
//! [clusters.api]
//! upstreams = ["127.0.0.1:9001", "127.0.0.1:9002"]
//! policy = { name = "prequal", probe_rate = 3.0 }
//!
//! [[routes]]
//! path_prefix = "/"
//! cluster = "api"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prequal_core::PolicyConfig;
use prequal_core::config::deserialize_policy;
use prequal_core::outlier::OutlierConfig;
use prequal_core::retry_budget::RetryBudgetConfig;
use prequal_core::slow_start::SlowStartConfig;
use prequal_core::{BalancerConfig, HedgeConfig};
use serde::{Deserialize, Serialize};

pub use crate::tls::config::{ServerTlsConfig, SniCertConfig, UpstreamTlsConfig};

/// Why a configuration was rejected. The message names the file (when there is one) and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid TOML for this schema (unknown key, wrong type, ...).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file (`<flags>` for the zero-config form).
        path: String,
        /// The parser's message, which names the key and its line.
        message: String,
    },
    /// A value parsed but is not usable.
    #[error("config {path}: `{key}` {message}")]
    Invalid {
        /// The file (`<flags>` for the zero-config form).
        path: String,
        /// The dotted key, for example `clusters.api.max_attempts`.
        key: String,
        /// What was wrong and what is expected.
        message: String,
    },
}

/// The whole proxy configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// The data-plane listener and its limits.
    pub server: ServerConfig,
    /// The admin listener.
    pub admin: AdminConfig,
    /// Upstream clusters by name.
    pub clusters: BTreeMap<String, ClusterConfig>,
    /// Routes, tried in order; the first match wins. With none, and one cluster, everything
    /// goes to that cluster.
    pub routes: Vec<RouteConfig>,
}

/// `[server]`: the data-plane listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to accept HTTP/1.1 and h2c on. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Largest request head (HTTP/1.1 buffer, HTTP/2 header list), in bytes. Default 65536.
    pub max_header_bytes: u32,
    /// Largest request body, in bytes; larger bodies get 413. Default 104857600 (100 MiB).
    pub max_body_bytes: u64,
    /// How long shutdown waits for in-flight requests. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// Data-plane threads, each a single-threaded runtime with its own upstream connection
    /// pools; accepted connections are dealt to them in turn. 0 means one per core; at most
    /// [`MAX_WORKER_THREADS`]. Default 0.
    pub worker_threads: usize,
    /// Where the access log goes: `"stdout"` or a file path (appended to). Default none (off).
    pub access_log: Option<PathBuf>,
    /// TLS termination (`[server.tls]`). Default none: plain HTTP/1.1 and h2c.
    pub tls: Option<ServerTlsConfig>,
}

/// The most data-plane threads `server.worker_threads` may ask for: far more than any
/// machine has cores, and few enough that a typo does not try to start thousands of threads.
pub const MAX_WORKER_THREADS: usize = 1024;

impl ServerConfig {
    /// The number of data-plane threads `worker_threads` stands for (at least 1).
    pub fn workers(&self) -> usize {
        match self.worker_threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_header_bytes: 65_536,
            max_body_bytes: 104_857_600,
            drain_timeout: Duration::from_secs(30),
            worker_threads: 0,
            access_log: None,
            tls: None,
        }
    }
}

/// `[admin]`: metrics, health and cluster views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Whether the admin listener runs. Default `true`.
    pub enabled: bool,
    /// Its address. Default `127.0.0.1:9901` (loopback only, on purpose).
    pub listen: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 9901)),
        }
    }
}

/// The protocol spoken to a cluster's replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (the default).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge (h2c); required for gRPC.
    Http2,
}

impl UpstreamProtocol {
    /// The HTTP version spoken to the replicas.
    pub fn version(self) -> http::Version {
        match self {
            UpstreamProtocol::Http1 => http::Version::HTTP_11,
            UpstreamProtocol::Http2 => http::Version::HTTP_2,
        }
    }
}

/// `[clusters.NAME]`: one set of replicas and how to balance over them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Static replica addresses, `host:port`. Default empty.
    pub upstreams: Vec<String>,
    /// A file listing one `host:port` per line (`#` comments), re-read when it changes.
    pub upstreams_file: Option<PathBuf>,
    /// A `host:port` whose DNS records are re-resolved every `discovery_interval`.
    pub upstreams_dns: Option<String>,
    /// How often the file or DNS name is checked. Default `5s`.
    #[serde(with = "humantime_serde")]
    pub discovery_interval: Duration,
    /// The balancing policy, by name or as a table. Default `"prequal"`.
    #[serde(deserialize_with = "deserialize_policy")]
    pub policy: PolicyConfig,
    /// HTTP version to the replicas. Default `"http1"`.
    pub protocol: UpstreamProtocol,
    /// TCP connect timeout. Default `1s`.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Time allowed for one try, until response headers. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub try_timeout: Duration,
    /// Time allowed for the whole request over all tries, until response headers. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Tries per request, the first included. Default 3; 1 disables retries.
    pub max_attempts: u32,
    /// Retry 5xx responses and timeouts for non-idempotent methods too. Default `false`.
    pub retry_non_idempotent: bool,
    /// The retry budget shared by all requests to the cluster.
    pub retry_budget: RetryBudgetConfig,
    /// Hedging: a second try for a request whose first has not answered in time
    /// (prequal-core's `hedge`).
    pub hedge: HedgeConfig,
    /// Request bodies up to this many bytes (by `Content-Length`) are read before the first
    /// try, so that they can be retried and hedged. Default 65536; 0 streams every body.
    pub replay_body_limit: u64,
    /// Responses up to this many bytes (by `Content-Length`) are read whole within their try
    /// before the proxy answers, so that a replica that stalls mid-response is timed out,
    /// hedged and retried like one that never answers. Default 65536; 0 streams every response.
    pub response_buffer_limit: u64,
    /// A streamed response body (one not read whole) whose replica sends nothing for this long
    /// is cut off, and the try ends as cancelled. Default `60s`; 0 never cuts one off.
    #[serde(with = "humantime_serde")]
    pub response_idle_timeout: Duration,
    /// Whether outlier ejection is on. Default `true`.
    pub outlier_ejection: bool,
    /// Outlier ejection parameters.
    pub outlier: OutlierConfig,
    /// Slow start for replicas that join after the cluster started.
    pub slow_start: SlowStartConfig,
    /// Idle upstream connections kept per replica. Default 64.
    pub pool_max_idle_per_host: usize,
    /// How long an idle upstream connection is kept. Default `90s`.
    #[serde(with = "humantime_serde")]
    pub pool_idle_timeout: Duration,
    /// Probes in flight at once for this cluster; more are not sent. Default 256.
    pub max_probes_in_flight: usize,
    /// Probes in flight at once to one replica; more to it are not sent. Default 2.
    pub max_probes_per_replica: usize,
    /// TLS to the replicas, for requests and probes (`[clusters.NAME.tls]`). Default none.
    pub tls: Option<UpstreamTlsConfig>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            upstreams: Vec::new(),
            upstreams_file: None,
            upstreams_dns: None,
            discovery_interval: Duration::from_secs(5),
            policy: PolicyConfig::from_name("prequal").unwrap_or_else(|_| PolicyConfig::default()),
            protocol: UpstreamProtocol::Http1,
            connect_timeout: Duration::from_secs(1),
            try_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_attempts: 3,
            retry_non_idempotent: false,
            retry_budget: RetryBudgetConfig::default(),
            hedge: HedgeConfig::default(),
            replay_body_limit: 65_536,
            response_buffer_limit: 65_536,
            response_idle_timeout: Duration::from_secs(60),
            outlier_ejection: true,
            outlier: OutlierConfig::default(),
            slow_start: SlowStartConfig::default(),
            pool_max_idle_per_host: 64,
            pool_idle_timeout: Duration::from_secs(90),
            max_probes_in_flight: 256,
            max_probes_per_replica: 2,
            tls: None,
        }
    }
}

/// `[[routes]]`: which cluster serves a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Host to match, without port, case-insensitive. Default: any host.
    #[serde(default)]
    pub host: Option<String>,
    /// Path prefix to match. Default `/`.
    #[serde(default = "default_prefix")]
    pub path_prefix: String,
    /// The cluster to send matching requests to. Required.
    pub cluster: String,
}

fn default_prefix() -> String {
    "/".to_string()
}

impl ProxyConfig {
    /// Reads and checks a config file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and checks config text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let config: ProxyConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    /// The zero-config form: one cluster named `default` over `upstreams`, everything routed to
    /// it, every other setting at its default.
    pub fn zero_config(
        listen: SocketAddr,
        upstreams: Vec<String>,
        policy: &str,
    ) -> Result<Self, ConfigError> {
        let policy = PolicyConfig::from_name(policy).map_err(|e| ConfigError::Invalid {
            path: "<flags>".into(),
            key: "policy".into(),
            message: e.to_string(),
        })?;
        let cluster = ClusterConfig {
            upstreams,
            policy,
            ..ClusterConfig::default()
        };
        let config = ProxyConfig {
            server: ServerConfig {
                listen,
                ..ServerConfig::default()
            },
            clusters: BTreeMap::from([("default".to_string(), cluster)]),
            ..ProxyConfig::default()
        };
        config.validate("<flags>")?;
        Ok(config)
    }

    /// Settings that are valid but probably not what was meant, as `(key, message)`: the
    /// proxy logs them when it starts and on every reload.
    pub fn warnings(&self) -> Vec<(String, String)> {
        let mut warnings = Vec::new();
        for (name, cluster) in &self.clusters {
            if cluster.try_timeout >= cluster.request_timeout {
                warnings.push((
                    format!("clusters.{name}.try_timeout"),
                    format!(
                        "try_timeout ({}) is not shorter than request_timeout ({}): a try never \
                         times out on its own, so no try is retried after a timeout",
                        humantime::format_duration(cluster.try_timeout),
                        humantime::format_duration(cluster.request_timeout),
                    ),
                ));
            }
            let hedge = &cluster.hedge;
            let due = hedge.earliest_delay();
            let set_by = match hedge.delay {
                Some(delay) if delay >= hedge.min_delay => "hedge.delay",
                _ => "hedge.min_delay",
            };
            // Past the request's deadline no hedge can go; past the first try's, one can go only
            // beside its retry, as a third try.
            let never = if due >= cluster.request_timeout {
                Some(format!(
                    "not before request_timeout ({})",
                    humantime::format_duration(cluster.request_timeout)
                ))
            } else if due >= cluster.try_timeout && cluster.max_attempts <= 2 {
                Some(format!(
                    "not before try_timeout ({}), and max_attempts = {} leaves no room for a \
                     hedge beside the first try's retry",
                    humantime::format_duration(cluster.try_timeout),
                    cluster.max_attempts
                ))
            } else {
                None
            };
            if let Some(never) = never
                && hedge.enabled
            {
                warnings.push((
                    format!("clusters.{name}.{set_by}"),
                    format!(
                        "{set_by} makes a hedge due {} after the first try, {never}: no request \
                         is ever hedged",
                        humantime::format_duration(due),
                    ),
                ));
            }
        }
        warnings
    }

    /// Logs [`ProxyConfig::warnings`], each with the key it is about.
    pub fn log_warnings(&self) {
        for (key, message) in self.warnings() {
            tracing::warn!(%key, "{message}");
        }
    }

    /// Checks what the schema alone cannot: ranges, references, and consistency.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: String, message: String| ConfigError::Invalid {
            path: origin.to_string(),
            key,
            message,
        };
        if self.clusters.is_empty() {
            return Err(invalid(
                "clusters".into(),
                "needs at least one cluster".into(),
            ));
        }
        if self.server.worker_threads > MAX_WORKER_THREADS {
            return Err(invalid(
                "server.worker_threads".into(),
                format!(
                    "must be at most {MAX_WORKER_THREADS} (0 means one per core), got {}",
                    self.server.worker_threads
                ),
            ));
        }
        for (name, cluster) in &self.clusters {
            cluster
                .validate()
                .map_err(|(key, message)| invalid(format!("clusters.{name}.{key}"), message))?;
        }
        if self.routes.is_empty() && self.clusters.len() > 1 {
            return Err(invalid(
                "routes".into(),
                "is required when there is more than one cluster".into(),
            ));
        }
        for (i, route) in self.routes.iter().enumerate() {
            if !self.clusters.contains_key(&route.cluster) {
                return Err(invalid(
                    format!("routes[{i}].cluster"),
                    format!("names cluster {:?}, which is not defined", route.cluster),
                ));
            }
            if !route.path_prefix.starts_with('/') {
                return Err(invalid(
                    format!("routes[{i}].path_prefix"),
                    "must start with `/`".into(),
                ));
            }
        }
        if let Some(tls) = &self.server.tls {
            tls.validate()
                .map_err(|(key, message)| invalid(format!("server.tls.{key}"), message))?;
        }
        if self.server.max_header_bytes < 8192 {
            return Err(invalid(
                "server.max_header_bytes".into(),
                "must be at least 8192".into(),
            ));
        }
        Ok(())
    }
}

impl ClusterConfig {
    /// The keys prequal-core's [`BalancerConfig`] takes (retries, outlier ejection, slow start,
    /// hedging): the same keys, with the same defaults, as a simulator scenario's `[clients]`.
    pub fn balancer(&self) -> BalancerConfig {
        BalancerConfig {
            max_attempts: self.max_attempts,
            retry_budget: self.retry_budget.clone(),
            outlier_ejection: self.outlier_ejection,
            outlier: self.outlier.clone(),
            slow_start: self.slow_start.clone(),
            hedge: self.hedge.clone(),
        }
    }

    /// Checks this cluster; the error is `(key, message)`.
    fn validate(&self) -> Result<(), (String, String)> {
        let sources = usize::from(!self.upstreams.is_empty())
            + usize::from(self.upstreams_file.is_some())
            + usize::from(self.upstreams_dns.is_some());
        if sources != 1 {
            return Err((
                "upstreams".into(),
                "needs exactly one of `upstreams`, `upstreams_file`, `upstreams_dns`".into(),
            ));
        }
        for (i, addr) in self.upstreams.iter().enumerate() {
            check_authority(addr).map_err(|m| (format!("upstreams[{i}]"), m))?;
        }
        if let Some(name) = &self.upstreams_dns {
            check_authority(name).map_err(|m| ("upstreams_dns".to_string(), m))?;
        }
        self.policy
            .validate()
            .map_err(|e| ("policy".to_string(), e.to_string()))?;
        if self.max_attempts == 0 {
            return Err(("max_attempts".into(), "must be at least 1".into()));
        }
        let positive = [
            ("connect_timeout", self.connect_timeout),
            ("try_timeout", self.try_timeout),
            ("request_timeout", self.request_timeout),
            ("discovery_interval", self.discovery_interval),
        ];
        for (key, value) in positive {
            if value.is_zero() {
                return Err((key.into(), "must be greater than zero".into()));
            }
        }
        if self.max_probes_in_flight == 0 {
            return Err(("max_probes_in_flight".into(), "must be at least 1".into()));
        }
        if self.max_probes_per_replica == 0 {
            return Err(("max_probes_per_replica".into(), "must be at least 1".into()));
        }
        let block = |e: prequal_core::retry_budget::BlockConfigError| {
            (format!("{}.{}", e.component, e.key), e.message)
        };
        self.retry_budget.validate().map_err(block)?;
        self.hedge.validate().map_err(block)?;
        self.outlier.validate().map_err(block)?;
        self.slow_start.validate().map_err(block)?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        Ok(())
    }
}

/// Checks that `text` is a `host:port` a replica can be reached at: a numeric port other than
/// 0, no user info (the reason if not).
pub(crate) fn check_authority(text: &str) -> Result<(), String> {
    let parsed: Result<http::uri::Authority, _> = text.parse();
    match parsed {
        Ok(auth) if auth.port_u16() == Some(0) => Err(format!(
            "is {text:?}; port 0 cannot be connected to, expected `host:port`"
        )),
        Ok(auth) if auth.port_u16().is_some() && !text.contains('@') => Ok(()),
        _ => Err(format!("is {text:?}; expected `host:port`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_file_gets_documented_defaults() {
        let config = ProxyConfig::from_toml(
            "[clusters.api]\nupstreams = [\"127.0.0.1:1\"]\n",
            "test.toml",
        )
        .unwrap();
        let cluster = &config.clusters["api"];
        assert_eq!(cluster.policy.name(), "prequal");
        assert_eq!(cluster.max_attempts, 3);
        assert_eq!(cluster.try_timeout, Duration::from_secs(10));
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.admin.listen.to_string(), "127.0.0.1:9901");
        // The balancer's defaults are the proxy's: a scenario that sets no balancer key
        // simulates this cluster.
        assert_eq!(cluster.balancer(), BalancerConfig::default());
    }

    #[test]
    fn settings_that_cancel_a_feature_are_warned_about_with_their_key() {
        let warnings = |extra: &str| {
            ProxyConfig::from_toml(
                &format!("[clusters.api]\nupstreams = [\"127.0.0.1:1\"]\n{extra}"),
                "test.toml",
            )
            .unwrap()
            .warnings()
        };
        let keys = |extra: &str| -> Vec<String> {
            warnings(extra).into_iter().map(|(key, _)| key).collect()
        };
        assert_eq!(warnings(""), vec![]);
        let found = warnings("try_timeout = \"20s\"\nrequest_timeout = \"5s\"");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "clusters.api.try_timeout");
        assert!(found[0].1.contains("request_timeout (5s)"), "{found:?}");
        assert_eq!(
            keys("try_timeout = \"5s\"\nrequest_timeout = \"5s\""),
            ["clusters.api.try_timeout"]
        );
        // A hedge due after the request's deadline never goes.
        assert_eq!(
            keys("hedge = { delay = \"40s\" }"),
            ["clusters.api.hedge.delay"]
        );
        // Due after the first try's deadline it can still go beside the retry, as a third try,
        // unless max_attempts leaves no room for one.
        assert_eq!(
            keys("try_timeout = \"1s\"\nhedge = { delay = \"2s\" }"),
            Vec::<String>::new()
        );
        let found = warnings("try_timeout = \"1s\"\nmax_attempts = 2\nhedge = { delay = \"2s\" }");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "clusters.api.hedge.delay");
        assert!(found[0].1.contains("max_attempts = 2"), "{found:?}");
        // `min_delay` sets the delay when it is the larger, fixed or learned: it is named.
        assert_eq!(
            keys("hedge = { delay = \"50ms\", min_delay = \"40s\" }"),
            ["clusters.api.hedge.min_delay"]
        );
        assert_eq!(
            keys("hedge = { min_delay = \"40s\" }"),
            ["clusters.api.hedge.min_delay"]
        );
        // A hedge delay that a try can outlast, or hedging turned off: nothing to say.
        assert_eq!(warnings("hedge = { delay = \"50ms\" }"), vec![]);
        assert_eq!(
            warnings("hedge = { enabled = false, delay = \"40s\" }"),
            vec![]
        );
    }

    #[test]
    fn unknown_key_is_named_with_the_file() {
        let err = ProxyConfig::from_toml(
            "[clusters.api]\nupstreams = [\"127.0.0.1:1\"]\nbogus_key = 1\n",
            "prequal.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("prequal.toml"), "{err}");
        assert!(err.contains("bogus_key"), "{err}");
    }

    #[test]
    fn invalid_values_name_their_key() {
        let cases = [
            ("upstreams = [\"nope\"]", "clusters.api.upstreams[0]"),
            ("upstreams = [\"127.0.0.1:0\"]", "port 0"),
            (
                "upstreams = [\"127.0.0.1:1\"]\nmax_attempts = 0",
                "clusters.api.max_attempts",
            ),
            (
                "upstreams = [\"127.0.0.1:1\"]\nretry_budget = { ratio = -1.0 }",
                "clusters.api.retry_budget.ratio",
            ),
            ("upstreams = []", "clusters.api.upstreams"),
        ];
        for (body, key) in cases {
            let text = format!("[clusters.api]\n{body}\n");
            let err = ProxyConfig::from_toml(&text, "x.toml")
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{body}: {err}");
        }
        let err = ProxyConfig::from_toml(
            "[clusters.api]\nupstreams = [\"127.0.0.1:1\"]\n[[routes]]\ncluster = \"web\"\n",
            "x.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("routes[0].cluster"), "{err}");
        let err = ProxyConfig::from_toml(
            "[server]\nworker_threads = 5000\n[clusters.api]\nupstreams = [\"127.0.0.1:1\"]\n",
            "x.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("server.worker_threads"), "{err}");
    }

    #[test]
    fn policy_by_table_and_zero_config() {
        let config = ProxyConfig::from_toml(
            "[clusters.api]\nupstreams = [\"a:1\"]\npolicy = { name = \"round-robin\" }\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(config.clusters["api"].policy.name(), "round-robin");
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let zero = ProxyConfig::zero_config(listen, vec!["a:1".into()], "random").unwrap();
        assert_eq!(zero.clusters["default"].policy.name(), "random");
        assert!(ProxyConfig::zero_config(listen, vec!["a:1".into()], "nah").is_err());
        assert!(ProxyConfig::zero_config(listen, vec![], "random").is_err());
    }
}
