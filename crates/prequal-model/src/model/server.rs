//! The `[servers]` section of a scenario and the per-replica model it builds.
//!
//! Three server models:
//!
//! - **latency** (`latency = { kind = ... }`): each query takes a delay drawn from the
//!   distribution (or replayed from a trace); concurrency is unlimited, so load does not change
//!   latency. Beyond Round Robin's replicas work this way.
//! - **capacity** (`[servers.capacity]`): each query carries CPU work drawn from `cost`; the
//!   replica shares its cores among the queries in flight ([`super::cpu::CpuModel`]). The cores
//!   available are `speed × (1 − capacity_loss) × max(allocation_cores, machine_cores × (1 −
//!   antagonist))`: a replica is always guaranteed its allocation (the isolation promise), and
//!   may spill into whatever its machine's antagonists leave idle. The antagonist share of
//!   each machine is redrawn every `period` around a per-machine mean, so some replicas sit on
//!   busy machines and some on idle ones, and that changes over time.
//! - **thread pool** (`[servers.thread_pool]`): `workers` workers and a FIFO queue
//!   ([`super::threads::ThreadPool`]); each query holds one worker for a service time drawn from
//!   `service`, divided by the replica's speed and multiplied by its `slow` episodes; a
//!   `capacity_loss` episode takes that share of the workers away (rounded down).
//!
//! [`ReplicaModel`] is the sans-IO state machine of one replica: [`ReplicaModel::admit`] says
//! how a query will be served, [`ReplicaModel::next_change`] / [`ReplicaModel::on_change`]
//! move antagonists and episode edges along. The simulator drives it in virtual time; the live
//! backend can drive it in real time.

use std::time::Duration;

use prequal_core::Time;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use super::cpu::{CpuModel, JobId};
use super::dist::{DistSpec, Distribution};
use super::episode::{Effects, EpisodeSpec, Fault, ServerSet};
use super::error::ModelError;
use super::round::round_to_u64;
use super::threads::ThreadPool;
use super::work::Work;

/// `[servers]`: the replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServersSpec {
    /// Number of replicas (>= 1).
    pub count: u32,
    /// Latency model: per-query delay.
    #[serde(default)]
    pub latency: Option<DistSpec>,
    /// Capacity model.
    #[serde(default)]
    pub capacity: Option<CapacitySpec>,
    /// Thread-pool model.
    #[serde(default)]
    pub thread_pool: Option<ThreadPoolSpec>,
    /// CPU work a probe costs the replica (capacity model; default 0).
    #[serde(default, with = "humantime_serde")]
    pub probe_cost: Option<Duration>,
    /// Speed multipliers for some replicas (default 1).
    #[serde(default)]
    pub speed: Vec<SpeedSpec>,
    /// Episodes.
    #[serde(default)]
    pub episodes: Vec<EpisodeSpec>,
    /// What a replica does with the work of a query whose client went away (a hedge's loser,
    /// a try past its timeout): drop it (default) or finish it.
    #[serde(default)]
    pub cancelled_work: CancelledWork,
}

/// `servers.cancelled_work`: what a replica does with the work of a query whose client went
/// away. Either way the load tracker counts the query out when its client goes (a sidecar's
/// request ends then), and no response reaches anyone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CancelledWork {
    /// The work stops at once and frees its share of the replica (a server that notices the
    /// client left, as `prequal backend` and the simulator did before this setting).
    #[default]
    Drop,
    /// The work runs to its end, holding its worker or CPU share until then (most servers:
    /// Python's `http.server`, a thread pool that does not check the connection).
    Finish,
}

/// `[servers.capacity]`: processor sharing over a CPU allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacitySpec {
    /// CPU work per query at speed 1.
    pub cost: DistSpec,
    /// Guaranteed cores per replica (default 1).
    #[serde(default = "one")]
    pub allocation_cores: f64,
    /// Cores of the replica's machine (default = allocation: no spill-over).
    #[serde(default)]
    pub machine_cores: Option<f64>,
    /// Most cores one query can use (default 1: single-threaded queries).
    #[serde(default = "one")]
    pub per_query_cores: f64,
    /// Antagonists on each machine (default none).
    #[serde(default)]
    pub antagonist: Option<AntagonistSpec>,
}

/// `[servers.thread_pool]`: workers and a FIFO queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadPoolSpec {
    /// Workers per replica (>= 1).
    pub workers: u32,
    /// Service time of one query at speed 1.
    pub service: DistSpec,
    /// Most queries waiting for a worker; an arrival beyond it fails at once (default:
    /// unbounded).
    #[serde(default)]
    pub queue_limit: Option<u32>,
}

fn one() -> f64 {
    1.0
}

/// `[servers.capacity.antagonist]`: time-varying neighbour load per machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AntagonistSpec {
    /// How often each machine's antagonist share is redrawn (default 1 s).
    #[serde(default = "one_second", with = "humantime_serde")]
    pub period: Duration,
    /// Lowest per-machine mean share of the machine used by antagonists (0..=1).
    pub mean_low: f64,
    /// Highest per-machine mean share (0..=1, >= mean_low).
    pub mean_high: f64,
    /// Each period's share is the machine's mean plus uniform noise in ±jitter (default 0.1).
    #[serde(default = "default_jitter")]
    pub jitter: f64,
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

fn default_jitter() -> f64 {
    0.1
}

/// `[[servers.speed]]`: a speed multiplier for some replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeedSpec {
    /// The replicas.
    pub servers: ServerSet,
    /// Their speed (0.5 = twice as slow).
    pub factor: f64,
}

fn positive(key: &str, v: f64) -> Result<(), ModelError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ModelError::invalid(
            key,
            format!("expected a number above 0, got {v}"),
        ))
    }
}

/// The most replicas, clients or workers per replica a scenario may ask for: each costs
/// memory up front, and a count past this is a typo that would abort the process allocating
/// it rather than a cluster anyone simulates.
pub const MAX_COUNT: u32 = 100_000;

impl ServersSpec {
    /// Checks the whole section; keys in errors start with `servers.`.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.count == 0 {
            return Err(ModelError::invalid(
                "servers.count",
                "expected at least 1 replica",
            ));
        }
        if self.count > MAX_COUNT {
            return Err(ModelError::invalid(
                "servers.count",
                format!("expected at most {MAX_COUNT} replicas, got {}", self.count),
            ));
        }
        match (&self.latency, &self.capacity, &self.thread_pool) {
            (Some(d), None, None) => d.validate("servers.latency")?,
            (None, Some(c), None) => c.validate()?,
            (None, None, Some(t)) => t.validate()?,
            _ => {
                return Err(ModelError::invalid(
                    "servers",
                    "set exactly one of `latency = { kind = ... }` (latency model), \
                     `[servers.capacity]` (capacity model) or `[servers.thread_pool]` \
                     (thread-pool model)",
                ));
            }
        }
        for (i, s) in self.speed.iter().enumerate() {
            s.servers
                .validate(&format!("servers.speed[{i}].servers"), self.count)?;
            positive(&format!("servers.speed[{i}].factor"), s.factor)?;
        }
        for (i, e) in self.episodes.iter().enumerate() {
            let key = format!("servers.episodes[{i}]");
            e.validate(&key, self.count)?;
            if e.capacity_loss.is_some() && self.latency.is_some() {
                // The latency model has no cores or workers to take away.
                return Err(ModelError::invalid(
                    format!("{key}.capacity_loss"),
                    "has no effect under the latency model; use `slow` or `latency`, or a \
                     capacity or thread-pool model",
                ));
            }
        }
        Ok(())
    }

    /// The key and distribution of the model's per-query draw: latency, CPU cost or service
    /// time (None when no model is set; `validate` rejects that).
    pub fn service_spec(&self) -> Option<(&'static str, &DistSpec)> {
        match (&self.latency, &self.capacity, &self.thread_pool) {
            (Some(d), _, _) => Some(("servers.latency", d)),
            (None, Some(c), _) => Some(("servers.capacity.cost", &c.cost)),
            (None, None, Some(t)) => Some(("servers.thread_pool.service", &t.service)),
            (None, None, None) => None,
        }
    }

    /// Cores (capacity model) or workers (thread pool) per replica; None for the latency
    /// model, which has no capacity.
    pub fn allocation(&self) -> Option<f64> {
        match (&self.capacity, &self.thread_pool) {
            (Some(c), _) => Some(c.allocation_cores),
            (None, Some(t)) => Some(f64::from(t.workers)),
            (None, None) => None,
        }
    }

    /// The speed multiplier of replica `index`.
    pub fn speed_of(&self, index: u32) -> f64 {
        self.speed
            .iter()
            .filter(|s| s.servers.contains(index))
            .map(|s| s.factor)
            .product()
    }
}

impl ThreadPoolSpec {
    fn validate(&self) -> Result<(), ModelError> {
        if self.workers == 0 {
            return Err(ModelError::invalid(
                "servers.thread_pool.workers",
                "expected at least 1 worker",
            ));
        }
        if self.workers > MAX_COUNT {
            return Err(ModelError::invalid(
                "servers.thread_pool.workers",
                format!("expected at most {MAX_COUNT} workers, got {}", self.workers),
            ));
        }
        self.service.validate("servers.thread_pool.service")
    }
}

impl CapacitySpec {
    fn validate(&self) -> Result<(), ModelError> {
        self.cost.validate("servers.capacity.cost")?;
        positive("servers.capacity.allocation_cores", self.allocation_cores)?;
        positive("servers.capacity.per_query_cores", self.per_query_cores)?;
        if let Some(m) = self.machine_cores {
            positive("servers.capacity.machine_cores", m)?;
            if m < self.allocation_cores {
                return Err(ModelError::invalid(
                    "servers.capacity.machine_cores",
                    format!(
                        "must be at least allocation_cores ({})",
                        self.allocation_cores
                    ),
                ));
            }
        }
        if let Some(a) = &self.antagonist {
            let k = "servers.capacity.antagonist";
            for (name, v) in [
                ("mean_low", a.mean_low),
                ("mean_high", a.mean_high),
                ("jitter", a.jitter),
            ] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(ModelError::invalid(
                        format!("{k}.{name}"),
                        format!("expected a share between 0 and 1, got {v}"),
                    ));
                }
            }
            if a.mean_low > a.mean_high {
                return Err(ModelError::invalid(
                    format!("{k}.mean_high"),
                    "must be >= mean_low",
                ));
            }
            if a.period.is_zero() {
                return Err(ModelError::invalid(
                    format!("{k}.period"),
                    "must be above 0",
                ));
            }
        }
        Ok(())
    }

    /// Cores of the machine (allocation when unset).
    pub fn machine(&self) -> f64 {
        self.machine_cores.unwrap_or(self.allocation_cores)
    }
}

/// How the replica will serve an admitted query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// The response is ready after this delay (latency model, pinned or fast-failing).
    After(Duration),
    /// The query is a CPU job; it is done when the CPU model says so.
    Job(JobId),
}

#[derive(Clone, Debug)]
enum Kind {
    Latency(Distribution),
    Capacity {
        cost: Distribution,
        cpu: Work,
        allocation: f64,
        machine: f64,
    },
    ThreadPool {
        service: Distribution,
        pool: Work,
        workers: f64,
    },
}

#[derive(Clone, Debug)]
struct Antagonist {
    spec: AntagonistSpec,
    mean: f64,
    share: f64,
    next: Time,
}

/// One replica's server model. See the module docs.
#[derive(Clone, Debug)]
pub struct ReplicaModel {
    kind: Kind,
    speed: f64,
    episodes: Vec<EpisodeSpec>,
    antagonist: Option<Antagonist>,
    edges: Vec<Time>,
    probe_cost: Duration,
}

impl ReplicaModel {
    /// Builds replica `index` from a validated spec. `latency` / `cost` are the compiled
    /// distributions of the spec's model. Randomness (antagonist means and phases) comes from
    /// `rng`.
    pub fn new(
        spec: &ServersSpec,
        index: u32,
        compiled: Distribution,
        rng: &mut dyn RngCore,
    ) -> Self {
        let speed = spec.speed_of(index);
        let episodes: Vec<EpisodeSpec> = spec
            .episodes
            .iter()
            .filter(|e| e.servers.contains(index))
            .cloned()
            .collect();
        let mut edges: Vec<Time> = episodes
            .iter()
            .flat_map(|e| [Time::ZERO + e.start, Time::ZERO + e.end])
            .collect();
        edges.sort();
        edges.dedup();
        let (kind, antagonist) = match (&spec.capacity, &spec.thread_pool) {
            (None, Some(t)) => {
                let kind = Kind::ThreadPool {
                    service: compiled,
                    pool: Work::Pool(ThreadPool::new(t.workers, t.queue_limit)),
                    workers: f64::from(t.workers),
                };
                (kind, None)
            }
            (Some(c), _) => {
                let antagonist = c.antagonist.as_ref().map(|a| {
                    let mean = a.mean_low + (a.mean_high - a.mean_low) * rng.random::<f64>();
                    let phase = rng.random_range(0..=a.period.as_nanos() as u64);
                    let share =
                        (mean + a.jitter * (2.0 * rng.random::<f64>() - 1.0)).clamp(0.0, 1.0);
                    Antagonist {
                        spec: a.clone(),
                        mean,
                        share,
                        next: Time::from_nanos(phase),
                    }
                });
                let kind = Kind::Capacity {
                    cost: compiled,
                    cpu: Work::Shared(CpuModel::new(0.0, c.per_query_cores)),
                    allocation: c.allocation_cores,
                    machine: c.machine(),
                };
                (kind, antagonist)
            }
            (None, None) => (Kind::Latency(compiled), None),
        };
        let mut model = ReplicaModel {
            kind,
            speed,
            episodes,
            antagonist,
            edges,
            probe_cost: spec.probe_cost.unwrap_or_default(),
        };
        model.on_change(Time::ZERO, rng, &mut Vec::new());
        model
    }

    /// The episode effects active at `now`.
    pub fn effects(&self, now: Time) -> Effects {
        Effects::at(&self.episodes, now)
    }

    /// True while a `redeployed` episode is active at `now`, whatever other fault overlaps it
    /// (overlapping or adjacent ones make one deploy).
    pub fn redeploying(&self, now: Time) -> bool {
        self.episodes
            .iter()
            .any(|e| e.fault == Some(Fault::Redeployed) && e.active(now))
    }

    /// Admits a query at `now`: returns how it will be served and whether it will fail.
    /// CPU jobs that finished by `now` are appended to `done`.
    pub fn admit<R: RngCore + ?Sized>(
        &mut self,
        now: Time,
        rng: &mut R,
        done: &mut Vec<JobId>,
    ) -> (Admission, bool) {
        let fx = self.effects(now);
        let error = fx.error_rate > 0.0 && rng.random_bool(fx.error_rate.min(1.0));
        if error && let Some(d) = fx.error_latency {
            return (Admission::After(d), true);
        }
        if let Some(d) = fx.latency {
            return (Admission::After(d), error);
        }
        let admission = match &mut self.kind {
            Kind::Latency(dist) => {
                let nanos = dist.sample_nanos(rng) as f64 * fx.slow / self.speed;
                Admission::After(Duration::from_nanos(round_to_u64(nanos)))
            }
            Kind::Capacity { cost, cpu, .. } => {
                let work = cost.sample_nanos(rng) as f64 * fx.slow;
                let work = Duration::from_nanos(round_to_u64(work));
                match cpu.arrive(now, work, done) {
                    Some(id) => Admission::Job(id),
                    None => return (Admission::After(Duration::ZERO), true),
                }
            }
            Kind::ThreadPool { service, pool, .. } => {
                let nanos = service.sample_nanos(rng) as f64 * fx.slow / self.speed;
                let service = Duration::from_nanos(round_to_u64(nanos));
                match pool.arrive(now, service, done) {
                    Some(id) => Admission::Job(id),
                    // The queue is full: the replica refuses at once.
                    None => return (Admission::After(Duration::ZERO), true),
                }
            }
        };
        (admission, error)
    }

    /// Charges a probe's CPU cost (capacity model), as overhead work (see
    /// [`CpuModel::arrive_overhead`]). The returned job's completion means nothing to the
    /// caller and should be ignored.
    pub fn charge_probe(&mut self, now: Time, done: &mut Vec<JobId>) -> Option<JobId> {
        match &mut self.kind {
            Kind::Capacity { cpu, .. } if !self.probe_cost.is_zero() => {
                cpu.arrive_overhead(now, self.probe_cost, done)
            }
            _ => None,
        }
    }

    /// The queries' work: a CPU (capacity model) or a thread pool; None for the latency model.
    pub fn cpu(&self) -> Option<&Work> {
        match &self.kind {
            Kind::Capacity { cpu, .. } => Some(cpu),
            Kind::ThreadPool { pool, .. } => Some(pool),
            Kind::Latency(_) => None,
        }
    }

    /// The queries' work, mutably (see [`ReplicaModel::cpu`]).
    pub fn cpu_mut(&mut self) -> Option<&mut Work> {
        match &mut self.kind {
            Kind::Capacity { cpu, .. } => Some(cpu),
            Kind::ThreadPool { pool, .. } => Some(pool),
            Kind::Latency(_) => None,
        }
    }

    /// Guaranteed cores (capacity model) or workers (thread pool), the denominator of
    /// utilisation.
    pub fn allocation_cores(&self) -> Option<f64> {
        match &self.kind {
            Kind::Capacity { allocation, .. } => Some(*allocation),
            Kind::ThreadPool { workers, .. } => Some(*workers),
            Kind::Latency(_) => None,
        }
    }

    /// Current antagonist share of the machine (0 when there are none).
    pub fn antagonist_share(&self) -> f64 {
        self.antagonist.as_ref().map_or(0.0, |a| a.share)
    }

    /// When the capacity next changes (antagonist redraw or episode edge), if ever.
    pub fn next_change(&self, now: Time) -> Option<Time> {
        let edge = self.edges.iter().copied().find(|&t| t > now);
        let ant = self.antagonist.as_ref().map(|a| a.next);
        match (edge, ant) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Applies changes due at `now` (redraws the antagonist share when due) and recomputes the
    /// cores available. CPU jobs finished by `now` are appended to `done`.
    pub fn on_change(&mut self, now: Time, rng: &mut dyn RngCore, done: &mut Vec<JobId>) {
        if let Some(a) = &mut self.antagonist
            && a.next <= now
        {
            let noise = a.spec.jitter * (2.0 * rng.random::<f64>() - 1.0);
            a.share = (a.mean + noise).clamp(0.0, 1.0);
            a.next = now + a.spec.period;
        }
        let share = self.antagonist_share();
        let loss = self.effects(now).capacity_loss;
        let speed = self.speed;
        match &mut self.kind {
            Kind::Capacity {
                cpu,
                allocation,
                machine,
                ..
            } => {
                let cores = speed * (1.0 - loss) * allocation.max(*machine * (1.0 - share));
                cpu.set_capacity(now, cores, done);
            }
            Kind::ThreadPool { pool, workers, .. } => {
                pool.set_capacity(now, *workers * (1.0 - loss), done);
            }
            Kind::Latency(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn spec(text: &str) -> ServersSpec {
        let s: ServersSpec = toml::from_str(text).unwrap();
        s.validate().unwrap();
        s
    }

    #[test]
    fn cancelled_work_is_dropped_unless_finish_is_asked_for() {
        let base = "count = 2\nlatency = { kind = \"constant\", value = \"1ms\" }\n";
        assert_eq!(spec(base).cancelled_work, CancelledWork::Drop);
        let finish = format!("{base}cancelled_work = \"finish\"\n");
        assert_eq!(spec(&finish).cancelled_work, CancelledWork::Finish);
        let keep = format!("{base}cancelled_work = \"keep\"\n");
        let err = toml::from_str::<ServersSpec>(&keep)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`drop` or `finish`"), "{err}");
    }

    #[test]
    fn latency_model_with_pinned_episode() {
        let s = spec(
            "count = 3\nlatency = { kind = \"constant\", value = \"10ms\" }\n\
             [[episodes]]\nservers = [1]\nstart = \"1s\"\nend = \"2s\"\nlatency = \"2s\"",
        );
        let mut rng = SmallRng::seed_from_u64(1);
        let d = s
            .latency
            .as_ref()
            .unwrap()
            .compile_pure("servers.latency")
            .unwrap();
        let mut r1 = ReplicaModel::new(&s, 1, d, &mut rng);
        let mut done = Vec::new();
        let at = |t| Time::from_millis(t);
        assert_eq!(
            r1.admit(at(500), &mut rng, &mut done).0,
            Admission::After(Duration::from_millis(10))
        );
        assert_eq!(
            r1.admit(at(1500), &mut rng, &mut done).0,
            Admission::After(Duration::from_secs(2))
        );
        assert_eq!(r1.next_change(at(0)), Some(at(1000)));
    }

    #[test]
    fn capacity_model_guarantees_allocation_and_spills() {
        let s = spec(
            "count = 2\n[capacity]\ncost = { kind = \"constant\", value = \"10ms\" }\n\
             allocation_cores = 1.0\nmachine_cores = 10.0\n\
             [capacity.antagonist]\nmean_low = 0.95\nmean_high = 0.95\njitter = 0.0",
        );
        let mut rng = SmallRng::seed_from_u64(1);
        let d = s.capacity.as_ref().unwrap().cost.compile_pure("c").unwrap();
        let r = ReplicaModel::new(&s, 0, d, &mut rng);
        // Antagonists take 95% of 10 cores, leaving 0.5, but the allocation of 1 is guaranteed.
        assert_eq!(r.cpu().unwrap().cores(), 1.0);
        assert_eq!(r.antagonist_share(), 0.95);
    }

    #[test]
    fn both_or_neither_model_is_an_error() {
        let s: ServersSpec = toml::from_str("count = 2").unwrap();
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        let err = toml::from_str::<ServersSpec>("count = 2\nlatncy = 3").unwrap_err();
        assert!(err.to_string().contains("latncy"), "{err}");
    }
}

#[cfg(test)]
mod thread_pool_tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn speed_and_slow_episodes_scale_the_service_time() {
        let s: ServersSpec = toml::from_str(
            "count = 2\n[thread_pool]\nworkers = 1\nservice = { kind = \"constant\", value = \"30ms\" }\n\
             [[speed]]\nservers = [1]\nfactor = 3.0\n\
             [[episodes]]\nservers = [1]\nstart = \"1s\"\nend = \"2s\"\nslow = 10.0",
        )
        .unwrap();
        s.validate().unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let d = s.service_spec().unwrap().1.compile_pure("k").unwrap();
        let mut fast = ReplicaModel::new(&s, 1, d, &mut rng);
        let mut done = Vec::new();
        let at = Time::from_millis;
        assert!(matches!(
            fast.admit(at(0), &mut rng, &mut done).0,
            Admission::Job(_)
        ));
        // One worker: the second query waits for the first (10 ms at speed 3).
        fast.admit(at(0), &mut rng, &mut done);
        let work = fast.cpu().unwrap();
        assert_eq!(work.next_completion(), Some(at(10)));
        assert_eq!(work.in_flight(), 2);
        fast.cpu_mut().unwrap().advance(at(20), &mut done);
        assert_eq!(done.len(), 2);
        // In the slow episode: 30 ms × 10 / 3.
        fast.admit(at(1000), &mut rng, &mut done);
        assert_eq!(fast.cpu().unwrap().next_completion(), Some(at(1100)));
        assert_eq!(fast.allocation_cores(), Some(1.0));
    }
}
