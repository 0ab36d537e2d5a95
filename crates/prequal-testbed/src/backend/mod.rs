//! `prequal backend`: emulated replicas on loopback ports, for live experiments.
//!
//! Each replica is an HTTP/1.1 + h2c server on its own port whose behaviour comes from the
//! same sans-IO server model the simulator runs ([`prequal_model::model`]), so one scenario
//! file's `[servers]` section describes the replicas in both `prequal sim` and
//! `prequal backend`:
//!
//! - **latency model** (`latency = { kind = "normal", mean = "167ms", sd = "5ms" }`, or a
//!   replayed trace): each query waits a delay drawn from the distribution; concurrency is
//!   unlimited;
//! - **capacity model** (`[servers.capacity]`): each query is CPU work shared with the other
//!   queries in flight on a virtual CPU (processor sharing), so latency grows with load and with
//!   antagonists, without burning real CPU (see [`replica`]);
//! - per-replica **speed** multipliers, and **episodes** at given times after the backend
//!   started: slow by a factor, pinned latency, an error rate (answered `500`, optionally
//!   fast), capacity loss, and whole-replica faults (`black-hole`, `host-down`, `killed`:
//!   the replica holds queries, holds everything, or closes its port and restarts; see
//!   the `fault` module for how each is carried out on the network).
//!
//! Every replica answers Prequal probes (`docs/probe-protocol.md`) from its own
//! [`SharedTracker`], counts its requests in flight and latency like a real server would, and
//! reports utilisation (capacity model: busy virtual cores over the allocation, refreshed every
//! 100 ms). Responses name their replica in the `x-prequal-replica` header.

mod fault;
pub mod replica;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prequal_core::EstimatorConfig;
use prequal_model::model::{Distribution, ModelError, ReplicaModel, ServersSpec, parse_trace};
use prequal_model::scenario::Compiled;
use prequal_server::{Clock, SharedTracker};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use replica::{EmulatedReplica, REPLICA_HEADER};

/// What the backend emulates: the `[servers]` section, compiled, plus tracker settings.
#[derive(Clone, Debug)]
pub struct BackendSpec {
    /// The replicas, as in a scenario's `[servers]` section (validated).
    pub servers: ServersSpec,
    /// The compiled latency (latency model) or query-cost (capacity model) distribution.
    pub service: Distribution,
    /// The replicas' load tracker settings.
    pub estimator: EstimatorConfig,
    /// Seed of the replicas' random choices.
    pub seed: u64,
}

impl BackendSpec {
    /// The backend part of a loaded scenario.
    pub fn from_scenario(compiled: &Compiled) -> Self {
        Self {
            servers: compiled.scenario.servers.clone(),
            service: compiled.service.clone(),
            estimator: compiled.scenario.estimator,
            seed: compiled.scenario.seed,
        }
    }

    /// Validates `servers` and compiles its distribution; trace files (`kind = "trace"`)
    /// resolve against `base`.
    pub fn new(
        servers: ServersSpec,
        estimator: EstimatorConfig,
        seed: u64,
        base: &Path,
    ) -> Result<Self, BackendError> {
        servers.validate()?;
        estimator
            .validate()
            .map_err(|e| ModelError::invalid("estimator", e.to_string()))?;
        let mut load_trace = |file: &Path| -> Result<Arc<[u64]>, ModelError> {
            let full = base.join(file);
            let text = std::fs::read_to_string(&full).map_err(|e| {
                ModelError::invalid(
                    "trace",
                    format!("cannot read trace {}: {e}", full.display()),
                )
            })?;
            parse_trace(&text, &full.display().to_string())
        };
        let service = match servers.service_spec() {
            Some((key, dist)) => dist.compile(key, &mut load_trace)?,
            None => {
                return Err(ModelError::invalid(
                    "servers",
                    "needs a latency model or a capacity model",
                )
                .into());
            }
        };
        Ok(Self {
            servers,
            service,
            estimator,
            seed,
        })
    }
}

/// Where the backend's replicas listen.
#[derive(Clone, Copy, Debug)]
pub struct Bind {
    /// The address to listen on (default 127.0.0.1).
    pub host: IpAddr,
    /// The first replica listens on `base_port`, the next on `base_port + 1`, and so on; 0
    /// lets the OS choose every port.
    pub base_port: u16,
    /// The index of the first replica served (0 unless replicas are split across processes).
    pub first: u32,
    /// How many replicas to serve: indices `first..first + replicas` of the spec.
    pub replicas: u32,
    /// On shutdown, how long open connections get to finish.
    pub drain: Duration,
    /// Whether responses carry the `prequal-load` header.
    pub piggyback: bool,
}

/// The backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The servers spec is invalid.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The replicas asked for are not all in the spec, or none were asked for.
    #[error(
        "asked to serve {asked} replicas from index {first}, but `servers.count` is {count} \
         (indices 0..{count})"
    )]
    ReplicaCount {
        /// The first index asked for.
        first: u32,
        /// Replicas asked for.
        asked: u32,
        /// Replicas in the spec.
        count: u32,
    },
    /// The ports would run past 65535.
    #[error("base port {base} + {replicas} replicas runs past port 65535")]
    PortRange {
        /// The base port.
        base: u16,
        /// Replicas asked for.
        replicas: u32,
    },
    /// A listener could not be opened.
    #[error("replica {index}: cannot listen on {addr}: {source}")]
    Bind {
        /// The replica.
        index: u32,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Running emulated replicas. Dropping it without [`Backend::shutdown`] stops them too.
#[derive(Debug)]
pub struct Backend {
    replicas: Vec<(Arc<EmulatedReplica>, SocketAddr)>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Backend {
    /// Opens every listener, then starts the replicas; their time zero is now.
    pub async fn start(spec: &BackendSpec, bind: Bind) -> Result<Backend, BackendError> {
        Self::start_with_origin(spec, bind, Duration::ZERO).await
    }

    /// As [`Backend::start`], with the replicas' time zero (the origin of episode times)
    /// `time_zero_in` from now, so separate processes can share one schedule.
    pub async fn start_with_origin(
        spec: &BackendSpec,
        bind: Bind,
        time_zero_in: Duration,
    ) -> Result<Backend, BackendError> {
        let count = spec.servers.count;
        let end = u64::from(bind.first) + u64::from(bind.replicas);
        if bind.replicas == 0 || end > u64::from(count) {
            return Err(BackendError::ReplicaCount {
                first: bind.first,
                asked: bind.replicas,
                count,
            });
        }
        let listeners = open_listeners(bind).await?;
        let clock = Clock::starting_in(time_zero_in);
        let (stop, stopped) = watch::channel(false);
        let mut replicas = Vec::new();
        let mut tasks = Vec::new();
        for (index, listener, addr) in listeners {
            let replica = Arc::new(build_replica(spec, index, clock.clone()));
            tasks.push(tokio::spawn(Arc::clone(&replica).drive(stopped.clone())));
            let serving = fault::ServeReplica {
                replica: Arc::clone(&replica),
                listener,
                addr,
                edges: fault::fault_edges(&spec.servers.episodes, index),
                estimator: spec.estimator,
                piggyback: bind.piggyback,
                drain: bind.drain,
            };
            tasks.push(tokio::spawn(serving.run(stopped.clone())));
            replicas.push((replica, addr));
        }
        Ok(Backend {
            replicas,
            stop,
            tasks,
        })
    }

    /// The address of each served replica, in index order (the first is [`Bind::first`]).
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.replicas.iter().map(|(_, addr)| *addr).collect()
    }

    /// The served replicas, in index order.
    pub fn replicas(&self) -> impl Iterator<Item = &Arc<EmulatedReplica>> {
        self.replicas.iter().map(|(replica, _)| replica)
    }

    /// Stops accepting, lets open connections drain (up to [`Bind::drain`]), and waits for
    /// every task.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

async fn open_listeners(bind: Bind) -> Result<Vec<(u32, TcpListener, SocketAddr)>, BackendError> {
    let mut out = Vec::new();
    for offset in 0..bind.replicas {
        let index = bind.first + offset;
        let port = if bind.base_port == 0 {
            0
        } else {
            u16::try_from(u32::from(bind.base_port) + offset).map_err(|_| {
                BackendError::PortRange {
                    base: bind.base_port,
                    replicas: bind.replicas,
                }
            })?
        };
        let addr = SocketAddr::new(bind.host, port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BackendError::Bind {
                index,
                addr,
                source,
            })?;
        let local = listener.local_addr().unwrap_or(addr);
        out.push((index, listener, local));
    }
    Ok(out)
}

/// Replica `index` of `spec`, with its own deterministic random stream.
fn build_replica(spec: &BackendSpec, index: u32, clock: Clock) -> EmulatedReplica {
    // Distinct, reproducible seeds per replica (the constant is 2^64 / golden ratio).
    let seed = spec
        .seed
        .wrapping_add(u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut rng = SmallRng::seed_from_u64(seed);
    let model = ReplicaModel::new(&spec.servers, index, spec.service.clone(), &mut rng);
    let tracker = Arc::new(SharedTracker::with_clock(spec.estimator, clock.clone()));
    EmulatedReplica::new(index, model, seed ^ 1, clock, tracker)
}
