//! [`Work`]: how a replica with limited capacity serves the queries it admitted, either by
//! processor sharing ([`CpuModel`]) or by a thread pool ([`ThreadPool`]). Drivers (the
//! simulator, the live backend) only advance it, ask when it next completes and cancel
//! abandoned queries, so they drive both the same way.

use prequal_core::Time;

use super::cpu::{CpuModel, JobId};
use super::threads::ThreadPool;

/// The queueing discipline of a capacity-limited replica.
#[derive(Clone, Debug)]
pub enum Work {
    /// Processor sharing of cores (`[servers.capacity]`).
    Shared(CpuModel),
    /// Workers and a FIFO queue (`[servers.thread_pool]`).
    Pool(ThreadPool),
}

impl Work {
    /// Cores (processor sharing) or workers (thread pool) available right now.
    pub fn cores(&self) -> f64 {
        match self {
            Work::Shared(cpu) => cpu.cores(),
            Work::Pool(pool) => pool.workers() as f64,
        }
    }

    /// Queries in flight (with a thread pool, the waiting ones too).
    pub fn in_flight(&self) -> usize {
        match self {
            Work::Shared(cpu) => cpu.in_flight(),
            Work::Pool(pool) => pool.in_flight(),
        }
    }

    /// Core- (or worker-) nanoseconds used so far, for utilisation.
    pub fn busy_core_nanos(&self) -> f64 {
        match self {
            Work::Shared(cpu) => cpu.busy_core_nanos(),
            Work::Pool(pool) => pool.busy_core_nanos(),
        }
    }

    /// When the next job finishes, if any can.
    pub fn next_completion(&self) -> Option<Time> {
        match self {
            Work::Shared(cpu) => cpu.next_completion(),
            Work::Pool(pool) => pool.next_completion(),
        }
    }

    /// When the next job someone waits for finishes (see
    /// [`CpuModel::next_awaited_completion`]; a thread pool runs no overhead jobs).
    pub fn next_awaited_completion(&self) -> Option<Time> {
        match self {
            Work::Shared(cpu) => cpu.next_awaited_completion(),
            Work::Pool(pool) => pool.next_completion(),
        }
    }

    /// Advances to `now`, appending finished jobs to `done`.
    pub fn advance(&mut self, now: Time, done: &mut Vec<JobId>) {
        match self {
            Work::Shared(cpu) => cpu.advance(now, done),
            Work::Pool(pool) => pool.advance(now, done),
        }
    }

    /// Drops a job whose query was abandoned. Returns false if unknown.
    pub fn cancel(&mut self, now: Time, job: JobId, done: &mut Vec<JobId>) -> bool {
        match self {
            Work::Shared(cpu) => cpu.cancel(now, job, done),
            Work::Pool(pool) => pool.cancel(now, job, done),
        }
    }
}

impl Work {
    /// A query needing `work` arrives at `now`; `None` if a thread pool's queue is full.
    pub fn arrive(
        &mut self,
        now: Time,
        work: std::time::Duration,
        done: &mut Vec<JobId>,
    ) -> Option<JobId> {
        match self {
            Work::Shared(cpu) => Some(cpu.arrive(now, work, done)),
            Work::Pool(pool) => pool.arrive(now, work, done),
        }
    }

    /// Overhead work nobody waits for (a probe's CPU cost); a thread pool charges none.
    pub fn arrive_overhead(
        &mut self,
        now: Time,
        work: std::time::Duration,
        done: &mut Vec<JobId>,
    ) -> Option<JobId> {
        match self {
            Work::Shared(cpu) => Some(cpu.arrive_overhead(now, work, done)),
            Work::Pool(_) => None,
        }
    }

    /// Sets the capacity from `now` on: cores (processor sharing) or workers, rounded down
    /// (thread pool).
    pub fn set_capacity(&mut self, now: Time, capacity: f64, done: &mut Vec<JobId>) {
        match self {
            Work::Shared(cpu) => cpu.set_cores(now, capacity, done),
            Work::Pool(pool) => pool.set_available(now, capacity.max(0.0) as usize, done),
        }
    }
}
