//! `prequal loadgen`: the testbed's open-loop load generator.
//!
//! Queries go out on a schedule fixed in advance ([`schedule`]): a constant or scheduled
//! aggregate rate (the scenario's load phases, ramps included), with constant or Poisson gaps
//! from a seed. One sender task paces itself against that schedule with tokio timers and never
//! waits for a response (open loop); each query runs in its own task on hyper-util's pooled
//! client (HTTP/1.1 keep-alive, or HTTP/2 over cleartext with prior knowledge) and reports to
//! one collector.
//!
//! **Latency is measured from each query's intended send time**, not from when it actually went
//! out. A generator that waits for responses, or one that falls behind and measures from the
//! late send, stops issuing queries exactly while the server is slow and so hides the stall
//! from its own statistics (Gil Tene's "coordinated omission"). Here a query due during a stall
//! is charged the whole wait from the moment it was due; if the sender itself falls behind it
//! sends the overdue queries at once, still timed from their intended instants.
//!
//! Each query has a deadline of `timeout` after its intended time; one not answered (body fully
//! read) by then is a timeout and counts with latency `timeout`. Statuses below 400 are
//! successes; 4xx, 5xx and transport failures are errors. A query that would exceed
//! `max_in_flight` is not sent and counts as an error. Results go into the simulator's
//! [`Recorder`](prequal_model::metrics::Recorder) (from `prequal-model`, which both share),
//! attributed to the second and phase of the intended send time, so a run yields the same
//! [`Measured`](prequal_model::metrics::Measured) as `prequal sim`; the replica that served a query is read from the
//! `x-prequal-replica` response header.
//!
//! With several targets (one per balancer), queries go round robin over them: each receives an
//! equal share of the aggregate schedule, like independent groups of clients behind separate
//! balancers.

mod client;
mod report;
mod run;
pub mod schedule;
mod spec;

pub use http::Uri;
pub use report::{LoadReport, Progress};
pub use run::run;
pub use schedule::Schedule;
pub use spec::{LoadSpec, LoadgenError};
