//! Asynchronous probing, shared by `prequal`, `linear` and `c3`: the engine, its probe pool,
//! error aversion and the probing parameters.
//!
//! The three policies probe, keep their pool and remove replies in exactly the same way and
//! differ only in how a reply is ranked, so everything but the ranking lives here and the
//! ranking is a [`Rule`] (Prequal's hot-cold rule is `policies::prequal::hcl`). The parts:
//!
//! - [`engine`]: [`AsyncProbing`], which sends `probe_rate` probes per query (and one per
//!   `max_idle` when idle), keeps the replies in the pool, picks the best by the rule, and
//!   removes `remove_rate` replies per query (Wydrowski et al., "Load is not what you should
//!   balance: Introducing Prequal", NSDI 2024, section 4).
//! - [`pool`]: the bounded pool of recent replies (capacity, age limit, reuse budget).
//! - [`aversion`]: the error share and probe-failure streak that keep a fast-failing or
//!   unreachable replica from sinkholing traffic (also used by `prequal-sync`).
//! - [`params`]: the shared parameters' defaults, their [`ParamDoc`](crate::config::ParamDoc)s
//!   and validation ([`ProbingParams`]), and the reuse budget b_reuse they imply.
//!
//! The policies' own `Config` structs (`prequal`, `prequal-sync`, `linear`, `c3`) still list the
//! probing keys one by one instead of embedding one `ProbingConfig` with `#[serde(flatten)]`:
//! serde ignores `deny_unknown_fields` on a struct that flattens another, and these configs rely
//! on it to reject a misspelt key with a clear error. What is shared is written once here: the
//! defaults and docs are constants in [`params`], and the async policies validate through
//! [`ProbingParams::validate`] (`prequal-sync`, which has no pool, through
//! [`validate_aversion`]).

pub mod aversion;
pub mod engine;
pub mod params;
pub mod pool;

#[cfg(test)]
mod proptests;

pub use engine::{AsyncProbing, Rank, RankKey, Rule, order_with_aversion};
pub use params::{ProbingParams, b_reuse, pool_capacity, validate_aversion};
pub use pool::{Entry, Pool};
