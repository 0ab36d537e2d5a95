//! A simulated replica: its model, its load tracker and the queries it is serving. The
//! engine's replica-side events (query arrival and service, CPU wake-ups, capacity changes,
//! probes, the once-a-second utilisation sample) live in the child `events`.

use prequal_core::{Arrival, LoadTracker, Time};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::model::{CancelledWork, JobId, ReplicaModel};
use crate::scenario::Compiled;
use rustc_hash::FxHashMap as IdMap;

mod events;

/// A query being served.
#[derive(Clone, Copy, Debug)]
struct Job {
    live: bool,
    client: u32,
    query: u64,
    arrival: Arrival,
    error: bool,
    cpu: Option<JobId>,
    /// Its client went away and the replica finishes the work anyway
    /// (`servers.cancelled_work = "finish"`): it answers no one when done.
    orphan: bool,
}

/// One replica: its model, its load tracker, the queries it is serving.
pub(super) struct Server {
    model: ReplicaModel,
    tracker: LoadTracker,
    rng: SmallRng,
    antagonist_rng: SmallRng,
    jobs: Vec<Job>,
    free: Vec<u32>,
    by_cpu: IdMap<JobId, u32>,
    /// (time, busy core-ns) at the last two one-second ticks, older first.
    marks: [(Time, f64); 2],
    /// Killed by a `fault = "killed"` episode and not restarted yet.
    killed: bool,
    /// Out of the clients' replica sets by a `fault = "redeployed"` episode.
    pub(super) redeployed: bool,
    /// When the replica last rejoined after a deploy: a try sent before then was to the old
    /// process, which the clients' balancers forgot when it left.
    pub(super) joined_at: Time,
    /// What the replica does with the work of a query whose client went away.
    cancelled_work: CancelledWork,
}

impl Server {
    pub(super) fn new(compiled: &Compiled, index: u32, seed: u64, antagonist_seed: u64) -> Self {
        let mut antagonist_rng = SmallRng::seed_from_u64(antagonist_seed);
        let spec = &compiled.scenario.servers;
        let model = ReplicaModel::new(spec, index, compiled.service.clone(), &mut antagonist_rng);
        Server {
            tracker: LoadTracker::new(compiled.scenario.estimator),
            rng: SmallRng::seed_from_u64(seed),
            antagonist_rng,
            jobs: Vec::new(),
            free: Vec::new(),
            by_cpu: IdMap::default(),
            marks: [(Time::ZERO, 0.0); 2],
            killed: false,
            redeployed: model.redeploying(Time::ZERO),
            joined_at: Time::ZERO,
            cancelled_work: spec.cancelled_work,
            model,
        }
    }

    fn insert(&mut self, job: Job) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.jobs[i as usize] = job;
                i
            }
            None => {
                self.jobs.push(job);
                (self.jobs.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, slot: u32) -> Option<Job> {
        let job = self.jobs.get_mut(slot as usize)?;
        if !job.live {
            return None;
        }
        job.live = false;
        self.free.push(slot);
        Some(*job)
    }

    /// Utilisation as the replica reports it: CPU used since the older of the last two
    /// one-second marks (a 1 to 2 s window, like the tracker's qps window), as a share of the
    /// allocation. A shorter window is noisy enough to make WRR weights swing wildly. None in
    /// the first 100 ms, before there is anything to measure.
    fn utilization(&self, now: Time) -> Option<f64> {
        let (cpu, alloc) = (self.model.cpu()?, self.model.allocation_cores()?);
        let (since, busy) = self.marks[0];
        let dt = now.saturating_since(since).as_nanos() as f64;
        if dt < 100e6 {
            return None;
        }
        Some((cpu.busy_core_nanos() - busy) / (dt * alloc))
    }

    /// Utilisation over the second that ends at `now` (a tick), for the recorder.
    fn last_second(&self, now: Time) -> Option<f64> {
        let (cpu, alloc) = (self.model.cpu()?, self.model.allocation_cores()?);
        let (since, busy) = self.marks[1];
        let dt = now.saturating_since(since).as_nanos() as f64;
        (dt > 0.0).then(|| (cpu.busy_core_nanos() - busy) / (dt * alloc))
    }
}
