//! The routing table: clusters by name and the ordered routes that choose one per request.
//!
//! A table is immutable once built. A reload builds a new one and swaps it in; requests already
//! running keep the `Arc`s of the clusters they picked, so nothing in flight is dropped.
//! Clusters whose configuration did not change are carried over as they are, keeping their
//! policy state, probe pool, ejections and connection pools.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Request;

use crate::background::Background;
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::config::{ProxyConfig, RouteConfig};
use crate::metrics::Metrics;
use crate::tls::{ClientTls, TlsError};

/// Clusters and routes for one configuration.
#[derive(Debug)]
pub struct Routing {
    config: ProxyConfig,
    clusters: BTreeMap<String, Arc<Cluster>>,
    routes: Vec<(RouteConfig, Arc<Cluster>)>,
}

/// Why a routing table could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The cluster's policy or resilience settings were refused by prequal-core.
    #[error("cluster {cluster:?}: {source}")]
    Cluster {
        /// The cluster's name.
        cluster: String,
        /// Why.
        source: prequal_core::ConfigError,
    },
    /// The cluster's TLS files could not be loaded (the message names the key and the file).
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl Routing {
    /// Builds the table for `config` (validated), reusing unchanged clusters from `previous`.
    /// Returns it with the background work of its new clusters (their timers, and the watches
    /// of their `upstreams_file`, DNS name and TLS files), for the caller to spawn.
    pub fn build(
        config: &ProxyConfig,
        previous: Option<&Routing>,
        clock: Clock,
        metrics: &Arc<Metrics>,
    ) -> Result<(Self, Background), BuildError> {
        let mut clusters = BTreeMap::new();
        let mut background = Background::none();
        for (name, cluster_config) in &config.clusters {
            let kept = previous
                .and_then(|p| p.clusters.get(name))
                .filter(|c| c.config() == cluster_config);
            let cluster = match kept {
                Some(cluster) => Arc::clone(cluster),
                None => {
                    let tls = match &cluster_config.tls {
                        None => None,
                        Some(tls) => {
                            let (tls, watch) = ClientTls::load(name, tls, cluster_config.protocol)?;
                            background.add(watch);
                            Some(tls)
                        }
                    };
                    let (cluster, timer) = Cluster::new(
                        name,
                        cluster_config,
                        tls,
                        clock,
                        metrics,
                        config.server.workers(),
                    )
                    .map_err(|source| BuildError::Cluster {
                        cluster: name.clone(),
                        source,
                    })?;
                    background.add(timer);
                    background.add(crate::discovery::start(&cluster));
                    cluster
                }
            };
            clusters.insert(name.clone(), cluster);
        }
        let routes = config
            .routes
            .iter()
            .filter_map(|r| clusters.get(&r.cluster).map(|c| (r.clone(), Arc::clone(c))))
            .collect();
        let routing = Routing {
            config: config.clone(),
            clusters,
            routes,
        };
        Ok((routing, background))
    }

    /// The configuration this table was built from.
    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// The clusters, by name.
    pub fn clusters(&self) -> &BTreeMap<String, Arc<Cluster>> {
        &self.clusters
    }

    /// The cluster for `request`: the first route whose host and path prefix match, or the only
    /// cluster when there are no routes.
    pub fn route<B>(&self, request: &Request<B>) -> Option<&Arc<Cluster>> {
        if self.routes.is_empty() {
            return self
                .clusters
                .values()
                .next()
                .filter(|_| self.clusters.len() == 1);
        }
        let host = request_host(request);
        let path = request.uri().path();
        self.routes
            .iter()
            .find(|(route, _)| {
                let host_ok = route
                    .host
                    .as_deref()
                    .is_none_or(|h| host.is_some_and(|got| got.eq_ignore_ascii_case(h)));
                host_ok && path.starts_with(route.path_prefix.as_str())
            })
            .map(|(_, cluster)| cluster)
    }
}

/// The request's host without port: from the URI (HTTP/2, absolute form) or the Host header.
fn request_host<B>(request: &Request<B>) -> Option<&str> {
    if let Some(host) = request.uri().host() {
        return Some(host);
    }
    let value = request.headers().get(http::header::HOST)?.to_str().ok()?;
    // Strip a port, minding bracketed IPv6 literals.
    match value.rfind(':') {
        Some(i) if !value[i..].contains(']') => Some(&value[..i]),
        _ => Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_comes_from_uri_or_header_without_port() {
        let req = Request::builder()
            .uri("/x")
            .header("host", "api.example:8080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req), Some("api.example"));
        let req = Request::builder()
            .uri("http://web.example/x")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req), Some("web.example"));
        let req = Request::builder()
            .uri("/x")
            .header("host", "[::1]")
            .body(())
            .unwrap();
        assert_eq!(request_host(&req), Some("[::1]"));
    }

    #[test]
    fn routes_by_host_then_prefix() {
        let text = r#"
            [clusters.api]
            upstreams = ["127.0.0.1:1"]
            policy = "round-robin"
            [clusters.web]
            upstreams = ["127.0.0.1:2"]
            policy = "round-robin"
            [[routes]]
            host = "api.example"
            cluster = "api"
            [[routes]]
            path_prefix = "/api/"
            cluster = "api"
            [[routes]]
            cluster = "web"
        "#;
        let config = ProxyConfig::from_toml(text, "t.toml").unwrap();
        let metrics = Arc::new(Metrics::new());
        let (routing, _) = Routing::build(&config, None, Clock::start(), &metrics).unwrap();
        let name = |host: &str, path: &str| {
            let req = Request::builder()
                .uri(path)
                .header("host", host)
                .body(())
                .unwrap();
            routing.route(&req).map(|c| c.name().to_string())
        };
        assert_eq!(name("API.example", "/").as_deref(), Some("api"));
        assert_eq!(name("other", "/api/v1").as_deref(), Some("api"));
        assert_eq!(name("other", "/index").as_deref(), Some("web"));
        let (again, kept) =
            Routing::build(&config, Some(&routing), Clock::start(), &metrics).unwrap();
        assert!(kept.is_empty(), "unchanged clusters start nothing again");
        assert!(Arc::ptr_eq(
            &again.clusters["api"],
            &routing.clusters["api"]
        ));
    }
}
