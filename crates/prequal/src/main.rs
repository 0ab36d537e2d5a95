//! `prequal`: the command-line entry point.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod backend;
mod demo;
mod experiment;
mod loadgen;
mod logging;
mod policies;
mod proxy;
mod sidecar;
mod sim;

/// prequal: a latency-aware load balancer, its simulator, and its testbed.
#[derive(Parser, Debug)]
#[command(name = "prequal", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List every balancing policy with its signal, rule, parameters and defaults.
    Policies(policies::Args),
    /// Run the load-balancing proxy (HTTP/1.1 and HTTP/2) from a config file or flags.
    Proxy(proxy::Args),
    /// Run a scenario in the discrete-event simulator (virtual time) and write a report.
    Sim(sim::Args),
    /// The Beyond Round Robin comparison, live on loopback, in about a minute (`--sim`: simulated).
    Demo(demo::Args),
    /// Run a scenario live: each contender (prequal proxies, HAProxy, nginx, Traefik) against fresh
    /// emulated replicas, with an HTML report.
    Experiment(experiment::Args),
    /// Track one replica's load and answer probes in front of it (HTTP/1.1 and HTTP/2).
    Sidecar(sidecar::Args),
    /// Emulated replicas on loopback ports, from a scenario's `[servers]` section or flags.
    Backend(backend::Args),
    /// Open-loop load against HTTP targets, timed from each query's intended send time.
    Loadgen(loadgen::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Policies(args) => policies::run(&args),
        Command::Proxy(args) => proxy::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Experiment(args) => experiment::run(&args),
        Command::Sidecar(args) => sidecar::run(&args),
        Command::Backend(args) => backend::run(&args),
        Command::Loadgen(args) => loadgen::run(&args),
    }
}
