//! Processor sharing of a replica's CPU among the jobs in flight.
//!
//! A replica has some number of cores available right now (its allocation, plus whatever its
//! machine's antagonists leave free, times a speed multiplier). Every job in flight gets an equal
//! share of them, but one job can use at most `per_job_cores` (a single-threaded query cannot
//! use two cores). So with `n` jobs each advances at
//! `rate = min(per_job_cores, cores / n)` nanoseconds of work per nanosecond. Latency therefore
//! grows with load and with the neighbours' appetite, as on the Prequal testbed.
//!
//! The state machine uses the classic virtual-time trick for processor sharing: a single
//! counter `attained` measures how much work every job in flight has received; a job that
//! arrives with work `w` finishes when `attained` reaches `attained_at_arrival + w`. Jobs are
//! kept ordered by that finish tag, so arrivals, completions and capacity changes are
//! O(log n). The model never reads a clock: the driver passes `now` (virtual time in the
//! simulator, elapsed real time in the live backend) and asks [`CpuModel::next_completion`]
//! when to come back.

use std::collections::BTreeSet;
use std::time::Duration;

use prequal_core::Time;

/// A job's identity inside one [`CpuModel`]: its arrival number, plus its finish tag so that
/// cancelling it finds it in the ordered set without a lookup table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobId {
    /// Finish tag ([`tag_key`] of the attained work at which it finishes).
    tag: u64,
    /// Arrival number, unique within its model.
    seq: u64,
}

impl std::hash::Hash for JobId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The arrival number alone is unique.
        state.write_u64(self.seq);
    }
}

/// Work below this many nanoseconds counts as done (absorbs floating-point rounding).
const EPSILON_WORK: f64 = 0.5;

/// Processor-sharing CPU. See the module docs.
#[derive(Clone, Debug)]
pub struct CpuModel {
    cores: f64,
    per_job_cores: f64,
    attained: f64,
    last: Time,
    /// Jobs in flight, ordered by finish tag, then arrival.
    jobs: BTreeSet<JobId>,
    next_id: u64,
    busy_core_nanos: f64,
}

/// Finish tags are non-negative finite floats; their bit patterns sort like the numbers.
fn tag_key(tag: f64) -> u64 {
    tag.max(0.0).to_bits()
}

impl CpuModel {
    /// A CPU with `cores` available and at most `per_job_cores` per job (both clamped to >= 0;
    /// `per_job_cores` of zero or less means "no per-job limit").
    pub fn new(cores: f64, per_job_cores: f64) -> Self {
        Self {
            cores: cores.max(0.0),
            per_job_cores: if per_job_cores > 0.0 {
                per_job_cores
            } else {
                f64::INFINITY
            },
            attained: 0.0,
            last: Time::ZERO,
            jobs: BTreeSet::new(),
            next_id: 0,
            busy_core_nanos: 0.0,
        }
    }

    /// Cores available right now.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// Jobs in flight.
    pub fn in_flight(&self) -> usize {
        self.jobs.len()
    }

    /// Work per nanosecond each job receives at the current occupancy.
    fn rate(&self) -> f64 {
        let n = self.jobs.len();
        if n == 0 {
            0.0
        } else {
            self.per_job_cores.min(self.cores / n as f64)
        }
    }

    /// Core-nanoseconds used since the start, up to the last `advance` (for utilisation).
    pub fn busy_core_nanos(&self) -> f64 {
        self.busy_core_nanos
    }

    /// Moves time forward without completing anything (caller guarantees no completion is
    /// due before `now`).
    fn run_until(&mut self, now: Time) {
        if now <= self.last {
            return;
        }
        let dt = now.saturating_since(self.last).as_nanos() as f64;
        let rate = self.rate();
        self.attained += rate * dt;
        self.busy_core_nanos += rate * dt * self.jobs.len() as f64;
        self.last = now;
    }

    /// When the next job finishes at the current capacity, if any job can finish.
    pub fn next_completion(&self) -> Option<Time> {
        let tag = self.jobs.first()?.tag;
        let rate = self.rate();
        if rate <= 0.0 {
            return None;
        }
        let remaining = (f64::from_bits(tag) - self.attained).max(0.0);
        let dt = (remaining / rate).ceil();
        Some(self.last + Duration::from_nanos(dt as u64))
    }

    /// Advances to `now`, appending every job that finished by then to `done` in finishing
    /// order. Call it before any other change at `now`.
    pub fn advance(&mut self, now: Time, done: &mut Vec<JobId>) {
        while let Some(at) = self.next_completion() {
            if at > now {
                break;
            }
            self.run_until(at);
            self.pop_finished(done);
        }
        self.run_until(now);
        self.pop_finished(done);
    }

    fn pop_finished(&mut self, done: &mut Vec<JobId>) {
        while let Some(&id) = self.jobs.first() {
            if f64::from_bits(id.tag) > self.attained + EPSILON_WORK {
                break;
            }
            self.jobs.pop_first();
            done.push(id);
        }
    }

    /// A job with `work` (CPU time at one full core) arrives at `now`. Finished jobs are
    /// appended to `done` first.
    pub fn arrive(&mut self, now: Time, work: Duration, done: &mut Vec<JobId>) -> JobId {
        self.advance(now, done);
        let id = JobId {
            tag: tag_key(self.attained + work.as_nanos() as f64),
            seq: self.next_id,
        };
        self.next_id += 1;
        self.jobs.insert(id);
        id
    }

    /// Removes a job before it finished (its query timed out). Returns false if unknown.
    pub fn cancel(&mut self, now: Time, job: JobId, done: &mut Vec<JobId>) -> bool {
        self.advance(now, done);
        self.jobs.remove(&job)
    }

    /// Changes the cores available from `now` on (antagonists came or went, an episode began).
    pub fn set_cores(&mut self, now: Time, cores: f64, done: &mut Vec<JobId>) {
        self.advance(now, done);
        self.cores = cores.max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn two_jobs_share_one_core() {
        let mut cpu = CpuModel::new(1.0, 1.0);
        let mut done = Vec::new();
        let a = cpu.arrive(Time::ZERO, ms(10), &mut done);
        let b = cpu.arrive(Time::ZERO, ms(20), &mut done);
        // Both run at half speed: a finishes at 20 ms, then b alone needs 10 ms more.
        assert_eq!(cpu.next_completion(), Some(Time::from_millis(20)));
        cpu.advance(Time::from_millis(20), &mut done);
        assert_eq!(done, vec![a]);
        assert_eq!(cpu.next_completion(), Some(Time::from_millis(30)));
        cpu.advance(Time::from_millis(40), &mut done);
        assert_eq!(done, vec![a, b]);
        assert!((cpu.busy_core_nanos() - 30e6).abs() < 1.0);
    }

    #[test]
    fn per_job_limit_caps_speed_on_many_cores() {
        let mut cpu = CpuModel::new(4.0, 1.0);
        let mut done = Vec::new();
        cpu.arrive(Time::ZERO, ms(10), &mut done);
        assert_eq!(cpu.next_completion(), Some(Time::from_millis(10)));
    }

    #[test]
    fn capacity_change_and_cancel() {
        let mut cpu = CpuModel::new(1.0, 1.0);
        let mut done = Vec::new();
        let a = cpu.arrive(Time::ZERO, ms(10), &mut done);
        cpu.set_cores(Time::from_millis(5), 0.5, &mut done);
        // 5 ms of work left at half speed.
        assert_eq!(cpu.next_completion(), Some(Time::from_millis(15)));
        let b = cpu.arrive(Time::from_millis(6), ms(100), &mut done);
        assert!(cpu.cancel(Time::from_millis(7), b, &mut done));
        assert!(!cpu.cancel(Time::from_millis(7), b, &mut done));
        cpu.set_cores(Time::from_millis(8), 0.0, &mut done);
        assert_eq!(cpu.next_completion(), None);
        cpu.set_cores(Time::from_millis(100), 1.0, &mut done);
        cpu.advance(Time::from_secs(1), &mut done);
        assert_eq!(done, vec![a]);
        assert_eq!(cpu.in_flight(), 0);
    }
}
