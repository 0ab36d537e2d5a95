//! Building policies from configuration.
//!
//! A policy is named and parameterised in TOML, either by name alone (`policy = "prequal"`, all
//! defaults) or as a table whose `name` key picks the policy and whose other keys set its
//! parameters:
//!
//! ```toml
//! [policy]
//! name = "prequal"
//! probe_rate = 2.0
//! q_rif = 0.75
//! ```
//!
//! Unknown keys are rejected, and every parameter is range-checked by [`PolicyConfig::validate`]
//! with an error that names the policy, the key and what was expected. [`catalog`] lists every
//! policy with its parameters and defaults (the source of `prequal policies`).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::policies;
use crate::policy::Policy;

pub(crate) mod build_policy;

pub use build_policy::{BuildPolicy, ConfigError, ParamDoc, PolicyInfo};

/// Generates [`PolicyConfig`] and its per-variant dispatch from one list, so adding a policy is
/// one line here plus its own module.
macro_rules! policy_configs {
    ($($variant:ident => $module:ident, $name:literal;)+) => {
        /// Any policy's configuration, tagged by its `name`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "name", rename_all = "kebab-case")]
        pub enum PolicyConfig {
            $(
                #[doc = concat!("`", $name, "`")]
                #[serde(rename = $name)]
                $variant(policies::$module::Config),
            )+
        }

        /// Every policy, in the order of the design table.
        pub fn catalog() -> &'static [PolicyInfo] {
            const ALL: &[PolicyInfo] = &[$(<policies::$module::Config as BuildPolicy>::INFO,)+];
            ALL
        }

        impl PolicyConfig {
            /// The policy's config name.
            pub fn name(&self) -> &'static str {
                match self {
                    $(PolicyConfig::$variant(_) => $name,)+
                }
            }

            /// The policy `name` with all its defaults.
            pub fn from_name(name: &str) -> Result<Self, ConfigError> {
                match name {
                    $($name => Ok(PolicyConfig::$variant(Default::default())),)+
                    _ => Err(ConfigError::UnknownPolicy {
                        name: name.to_string(),
                        known: catalog().iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
                    }),
                }
            }

            /// Checks every parameter.
            pub fn validate(&self) -> Result<(), ConfigError> {
                match self {
                    $(PolicyConfig::$variant(c) => c.validate(),)+
                }
            }

            /// Validates, then builds a fresh policy instance.
            pub fn build(&self) -> Result<Box<dyn Policy>, ConfigError> {
                self.validate()?;
                Ok(match self {
                    $(PolicyConfig::$variant(c) => c.build(),)+
                })
            }
        }
    };
}

policy_configs! {
    Random => random, "random";
    RoundRobin => round_robin, "round-robin";
    WeightedRoundRobin => weighted_round_robin, "weighted-round-robin";
    LeastLoaded => least_loaded, "least-loaded";
    LeastLoadedP2c => least_loaded_p2c, "least-loaded-p2c";
    PeakEwma => peak_ewma, "peak-ewma";
    LeastTime => least_time, "least-time";
    YarpP2c => yarp_p2c, "yarp-p2c";
    Linear => linear, "linear";
    C3 => c3, "c3";
    Prequal => prequal, "prequal";
    PrequalSync => prequal_sync, "prequal-sync";
    // (more policies are listed here as they land)
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig::RoundRobin(Default::default())
    }
}

/// Accepts either a bare name (`"prequal"`) or a table with a `name` key.
pub fn deserialize_policy<'de, D: Deserializer<'de>>(d: D) -> Result<PolicyConfig, D::Error> {
    struct NameOrTable;
    impl<'de> Visitor<'de> for NameOrTable {
        type Value = PolicyConfig;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a policy name such as \"prequal\", or a table with a `name` key")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<PolicyConfig, E> {
            PolicyConfig::from_name(v).map_err(E::custom)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PolicyConfig, A::Error> {
            PolicyConfig::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(NameOrTable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "deserialize_policy")]
        policy: PolicyConfig,
    }

    fn parse(text: &str) -> Result<PolicyConfig, String> {
        toml::from_str::<Holder>(text)
            .map(|h| h.policy)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_policy_parses_by_name_and_builds() {
        for info in catalog() {
            let config = parse(&format!("policy = {:?}", info.name)).expect(info.name);
            assert_eq!(config.name(), info.name);
            let policy = config.build().expect(info.name);
            assert_eq!(policy.name(), info.name);
        }
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = parse("policy = \"fastest\"").unwrap_err();
        assert!(err.contains("unknown policy \"fastest\""), "{err}");
        assert!(err.contains("round-robin"), "{err}");
    }

    #[test]
    fn unknown_key_is_rejected_with_its_name() {
        let err = parse("policy = { name = \"round-robin\", bogus = 1 }").unwrap_err();
        assert!(err.contains("bogus"), "{err}");
    }

    /// The documented defaults in each policy's INFO table must be the values its `Default`
    /// really has, so `prequal policies` and docs/policies.md cannot drift from the code.
    #[test]
    fn documented_defaults_match_code() {
        for info in catalog() {
            let config = PolicyConfig::from_name(info.name).expect(info.name);
            let table = toml::Table::try_from(&config).expect("serialises");
            let keys: Vec<&String> = table.keys().filter(|k| *k != "name").collect();
            assert_eq!(
                keys.len(),
                info.params.len(),
                "{}: serialised keys {keys:?} vs documented {:?}",
                info.name,
                info.params.iter().map(|p| p.key).collect::<Vec<_>>()
            );
            for param in info.params {
                let value = table
                    .get(param.key)
                    .unwrap_or_else(|| panic!("{}: no key {}", info.name, param.key));
                let documented: toml::Value =
                    toml::from_str::<toml::Table>(&format!("v = {}", param.default))
                        .unwrap_or_else(|e| panic!("{}.{}: {e}", info.name, param.key))
                        .remove("v")
                        .expect("v");
                assert_eq!(value, &documented, "{}.{}", info.name, param.key);
            }
        }
    }
}
