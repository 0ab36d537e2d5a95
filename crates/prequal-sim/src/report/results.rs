//! What a scenario run produced: the [`Report`] of all its runs, each a [`RunResult`] (with,
//! for a live run, the simulator's [`Prediction`]). The report's table, JSON and plots are
//! drawn from these.

use serde::Serialize;

use crate::engine::RunOutput;

/// One finished run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// Label (policy and non-default parameters).
    pub label: String,
    /// Policy name.
    pub policy: String,
    /// Load multiplier.
    pub load: f64,
    /// Swept parameter and value.
    pub param: Option<(String, String)>,
    /// The measurements.
    #[serde(flatten)]
    pub output: RunOutput,
    /// For a live run (`prequal experiment`): what the simulator predicted for the same
    /// scenario with the equivalent policy, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Box<Prediction>>,
}

/// The simulator's prediction for a live run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    /// The core policy simulated (e.g. `least-loaded` for HAProxy's `leastconn`).
    pub policy: String,
    /// What the simulation measured.
    pub measured: crate::metrics::Measured,
}

/// Everything a scenario run produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// True when these numbers come from the simulator, false for a live experiment.
    pub simulated: bool,
    /// Scenario name.
    pub scenario: String,
    /// Its description.
    pub description: String,
    /// Seed.
    pub seed: u64,
    /// Simulated seconds of offered load.
    pub duration_s: f64,
    /// The latency objective, milliseconds.
    pub latency_objective_ms: f64,
    /// The runs, in plan order.
    pub runs: Vec<RunResult>,
}
