//! prequal-tower against tower's own balancers, in one process: the same replicas, the same
//! open-loop load, one balancer kind at a time.
//!
//! Contenders, each instantiated once per client (every client balances on its own, as in
//! the paper):
//!
//! - `prequal-tower prequal`: `prequal_tower::Balance` with the `prequal` policy at its
//!   defaults, probing each replica through its endpoint (prequal-server's `ProbeLayer`);
//! - `tower p2c PeakEwma`: `tower::balance::p2c::Balance` over `tower::load::PeakEwma` (default
//!   RTT 20 ms, decay 10 s, completion at the response);
//! - `tower p2c PendingRequests`: the same over `tower::load::PendingRequests`.
//!
//! Every replica (see `replica.rs`) sits behind `ProbeLayer` for every contender, so all pay
//! the same for it. Scenarios are in `scenario.rs`; the load and how latency is measured in
//! `load.rs`. The first second of each run is warm-up and not counted.
//!
//! ```sh
//! cargo run --release -p prequal-tower --example compare                 # both scenarios, 20 s each
//! cargo run --release -p prequal-tower --example compare -- --seconds 5 --scenario slow-replica
//! cargo run --release -p prequal-tower --example compare -- --policy prequal --policy peak-ewma
//! ```

mod load;
mod replica;
mod scenario;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use prequal_core::PolicyConfig;
use prequal_server::{ProbeLayer, ProbeService, SharedTracker};
use prequal_tower::{BoxError, Builder};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use tower::balance::p2c;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PeakEwma, PendingRequests};

use crate::load::{Tally, run_client};
use crate::replica::Replica;
use crate::scenario::Scenario;

const WARMUP: Duration = Duration::from_secs(1);
/// tower's PeakEwma: the RTT assumed before the first response, and the decay time constant.
const PEAK_EWMA_DEFAULT_RTT: Duration = Duration::from_millis(20);
const PEAK_EWMA_DECAY: Duration = Duration::from_secs(10);

type Endpoint = ProbeService<Replica>;
type Request = http::Request<Full<Bytes>>;

/// Who balances.
#[derive(Clone, Debug)]
enum Contender {
    PrequalTower(String),
    TowerPeakEwma,
    TowerPendingRequests,
}

impl Contender {
    fn label(&self) -> String {
        match self {
            Contender::PrequalTower(policy) => format!("prequal-tower {policy}"),
            Contender::TowerPeakEwma => "tower p2c PeakEwma".into(),
            Contender::TowerPendingRequests => "tower p2c PendingRequests".into(),
        }
    }
}

/// tower's balancer takes its own kind of random source; this one is seeded.
struct SeededRng(SmallRng);

impl tower::util::rng::Rng for SeededRng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}

struct Options {
    seconds: u64,
    scenarios: Vec<String>,
    policies: Vec<String>,
    seed: u64,
}

fn options() -> Result<Options, BoxError> {
    let mut options = Options {
        seconds: 20,
        scenarios: Vec::new(),
        policies: Vec::new(),
        seed: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => options.seconds = value()?.parse()?,
            "--scenario" => options.scenarios.push(value()?),
            "--policy" => options.policies.push(value()?),
            "--seed" => options.seed = value()?.parse()?,
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --seconds N, --scenario \
                     heterogeneous|slow-replica, --policy NAME, --seed N"
                )
                .into());
            }
        }
    }
    if options.seconds < 3 {
        return Err("--seconds must be at least 3 (the first second is warm-up)".into());
    }
    if options.policies.is_empty() {
        options.policies.push("prequal".into());
    }
    Ok(options)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let options = options()?;
    let duration = Duration::from_secs(options.seconds);
    let mut scenarios = vec![Scenario::heterogeneous(), Scenario::slow_replica(duration)];
    if !options.scenarios.is_empty() {
        scenarios.retain(|s| options.scenarios.iter().any(|n| n == s.name));
    }
    let mut contenders: Vec<Contender> = options
        .policies
        .iter()
        .map(|p| Contender::PrequalTower(p.clone()))
        .collect();
    contenders.push(Contender::TowerPeakEwma);
    contenders.push(Contender::TowerPendingRequests);
    for scenario in &scenarios {
        println!(
            "\n## {} ({} s, seed {})\n\n{}\n",
            scenario.name, options.seconds, options.seed, scenario.description
        );
        println!(
            "| balancer | queries | errors | timeouts | p50 ms | p99 ms | p99.9 ms | max ms | busiest / idlest replica share |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for contender in &contenders {
            let (tally, shares) = run(scenario, contender, duration, options.seed).await?;
            print_row(&contender.label(), &tally, &shares);
        }
    }
    Ok(())
}

/// Runs one contender on fresh replicas; returns its tally and each replica's share of the
/// queries.
async fn run(
    scenario: &Scenario,
    contender: &Contender,
    duration: Duration,
    seed: u64,
) -> Result<(Tally, Vec<f64>), BoxError> {
    let replicas = scenario.replicas(seed);
    let endpoints: Vec<Endpoint> = replicas
        .iter()
        .map(|replica| {
            let tracker = Arc::new(SharedTracker::new(Default::default()));
            tower::Layer::layer(&ProbeLayer::new(tracker), replica.clone())
        })
        .collect();
    let tally = Arc::new(Mutex::new(Tally::new()?));
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    scenario.spawn_episode(&replicas, start);
    let mut clients = tokio::task::JoinSet::new();
    for (client, arrivals) in scenario.arrivals(duration, seed).into_iter().enumerate() {
        let client_seed = seed.wrapping_mul(31).wrapping_add(client as u64);
        let tally = Arc::clone(&tally);
        match contender {
            Contender::PrequalTower(policy) => {
                let discover = ServiceList::new::<Request>(endpoints.clone());
                let balance = Builder::new(PolicyConfig::from_name(policy)?)
                    .seed(client_seed)
                    .build::<_, Full<Bytes>>(discover)?;
                clients.spawn(run_client(balance, arrivals, start, WARMUP, tally));
            }
            Contender::TowerPeakEwma => {
                let decay_ns = PEAK_EWMA_DECAY.as_nanos() as f64;
                let endpoints: Vec<_> = endpoints
                    .iter()
                    .map(|e| {
                        let completion = CompleteOnResponse::default();
                        PeakEwma::new(e.clone(), PEAK_EWMA_DEFAULT_RTT, decay_ns, completion)
                    })
                    .collect();
                let discover = ServiceList::new::<Request>(endpoints);
                let rng = SeededRng(SmallRng::seed_from_u64(client_seed));
                let balance = p2c::Balance::from_rng(discover, rng);
                clients.spawn(run_client(balance, arrivals, start, WARMUP, tally));
            }
            Contender::TowerPendingRequests => {
                let endpoints: Vec<_> = endpoints
                    .iter()
                    .map(|e| PendingRequests::new(e.clone(), CompleteOnResponse::default()))
                    .collect();
                let discover = ServiceList::new::<Request>(endpoints);
                let rng = SeededRng(SmallRng::seed_from_u64(client_seed));
                let balance = p2c::Balance::from_rng(discover, rng);
                clients.spawn(run_client(balance, arrivals, start, WARMUP, tally));
            }
        }
    }
    while let Some(joined) = clients.join_next().await {
        joined?;
    }
    let served: Vec<u64> = replicas.iter().map(Replica::served).collect();
    let total = served.iter().sum::<u64>().max(1) as f64;
    let shares = served.iter().map(|&s| s as f64 / total).collect();
    let tally = Arc::try_unwrap(tally)
        .map_err(|_| "a client still holds the tally")?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    Ok((tally, shares))
}

fn print_row(label: &str, tally: &Tally, shares: &[f64]) {
    let h = &tally.latency_us;
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let busiest = shares.iter().copied().fold(0.0, f64::max);
    let idlest = shares.iter().copied().fold(1.0, f64::min);
    println!(
        "| {label} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1}% / {:.1}% |",
        h.len(),
        tally.errors,
        tally.timeouts,
        ms(0.5),
        ms(0.99),
        ms(0.999),
        h.max() as f64 / 1000.0,
        busiest * 100.0,
        idlest * 100.0,
    );
}
