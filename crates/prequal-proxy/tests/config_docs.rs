//! docs/config.md must list every key with the default the code really has.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use prequal_proxy::config::{
    AdminConfig, ClusterConfig, ServerConfig, ServerTlsConfig, UpstreamTlsConfig,
};

#[test]
fn docs_list_every_key_with_its_real_default() {
    let doc = include_str!("../../../docs/config.md");
    let cluster = toml::Table::try_from(ClusterConfig::default()).unwrap();
    let table = |v: &toml::Value| v.as_table().cloned().unwrap();
    let sections = [
        (
            "## `[server]`",
            toml::Table::try_from(ServerConfig::default()).unwrap(),
        ),
        (
            "## `[admin]`",
            toml::Table::try_from(AdminConfig::default()).unwrap(),
        ),
        ("## `[clusters.NAME]`", cluster.clone()),
        ("### `retry_budget`", table(&cluster["retry_budget"])),
        ("### `hedge`", table(&cluster["hedge"])),
        ("### `outlier`", table(&cluster["outlier"])),
        ("### `slow_start`", table(&cluster["slow_start"])),
        (
            "### `[server.tls]`",
            toml::Table::try_from(ServerTlsConfig::new("cert.pem", "key.pem")).unwrap(),
        ),
        (
            "### `tls` (table inside a cluster)",
            toml::Table::try_from(UpstreamTlsConfig::default()).unwrap(),
        ),
    ];
    for (heading, defaults) in sections {
        let start = doc
            .find(heading)
            .unwrap_or_else(|| panic!("no section {heading}"));
        let rest = &doc[start + heading.len()..];
        let section = &rest[..rest.find("\n#").unwrap_or(rest.len())];
        let rows: BTreeMap<String, String> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| {
                let (key, rest) = l.split_once("` | ")?;
                Some((key.to_string(), rest.split(" | ").next()?.to_string()))
            })
            .collect();
        for (key, value) in &defaults {
            if value.is_table() && key != "policy" {
                continue;
            }
            let doc_default = rows
                .get(key)
                .unwrap_or_else(|| panic!("{heading}: key `{key}` is not documented"));
            let literal = doc_default.trim_matches('`');
            if literal == "required" {
                // A required key has no default to compare: the test config gives it a value only
                // so that the table parses.
                continue;
            }
            let expected = match key.as_str() {
                "policy" => toml::Value::String(value["name"].as_str().unwrap().into()),
                _ => value.clone(),
            };
            let parsed: toml::Table = toml::from_str(&format!("v = {literal}"))
                .unwrap_or_else(|e| panic!("{heading} `{key}`: {literal}: {e}"));
            let duration = |v: &toml::Value| {
                v.as_str()
                    .and_then(|t| humantime_serde::re::humantime::parse_duration(t).ok())
            };
            match (duration(&parsed["v"]), duration(&expected)) {
                (Some(a), Some(b)) => assert_eq!(a, b, "{heading} `{key}`"),
                _ => assert_eq!(parsed["v"], expected, "{heading} `{key}`"),
            }
        }
    }
}
