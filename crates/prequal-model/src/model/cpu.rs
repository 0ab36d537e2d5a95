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
//! kept in a deque sorted by that finish tag: a completion takes the front, an arrival finds
//! its place by binary search (a replica has a handful of jobs in flight, so opening the place
//! costs little), and a capacity change touches no job at all. The model never reads a clock:
//! the driver passes `now` (virtual time in the simulator, elapsed real time in the live
//! backend) and asks [`CpuModel::next_completion`] when to come back.

use std::collections::VecDeque;
use std::time::Duration;

use prequal_core::Time;
use prequal_core::time::duration_nanos;

/// A job's identity inside one [`CpuModel`]: its arrival number, plus its finish tag so that
/// cancelling it finds it in the sorted deque without a lookup table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobId {
    /// Finish tag ([`tag_key`] of the attained work at which it finishes).
    tag: u64,
    /// Arrival number, unique within its model.
    seq: u64,
    /// Overhead (a probe's cost): it takes its share of the CPU, but nobody waits for it to
    /// finish. Never decides the order, since `seq` is unique.
    overhead: bool,
}

impl JobId {
    /// Whether the job is overhead (a probe's cost) that nobody waits for.
    pub fn is_overhead(&self) -> bool {
        self.overhead
    }

    /// A job known by its arrival number alone (models that need no finish tag).
    pub(super) fn plain(seq: u64) -> Self {
        JobId {
            tag: 0,
            seq,
            overhead: false,
        }
    }
}

impl std::hash::Hash for JobId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The arrival number alone is unique.
        state.write_u64(self.seq);
    }
}

/// Most completion steps [`CpuModel::next_awaited_completion`] takes before settling for an
/// early wake-up.
pub const LOOKAHEAD: usize = 8;

/// Work below this many nanoseconds counts as done (absorbs floating-point rounding).
const EPSILON_WORK: f64 = 0.5;

/// Processor-sharing CPU. See the module docs.
#[derive(Clone, Debug)]
pub struct CpuModel {
    cores: f64,
    per_job_cores: f64,
    attained: f64,
    last: Time,
    /// Jobs in flight, ordered by finish tag, then arrival. A sorted deque: a replica has a
    /// handful of jobs in flight, the next to finish leaves from the front, and a new job's
    /// place is found by binary search and opened by shifting the shorter side.
    jobs: VecDeque<JobId>,
    next_id: u64,
    busy_core_nanos: f64,
}

/// Finish tags are non-negative finite floats; their bit patterns sort like the numbers.
fn tag_key(tag: f64) -> u64 {
    tag.max(0.0).to_bits()
}

/// Whole nanoseconds until `remaining` work (clamped at 0) is done at `rate`, rounded up: the
/// same value as `(remaining / rate).ceil() as u64` without a call into libm, which the
/// baseline x86-64 target makes for `ceil`.
fn ceil_nanos(remaining: f64, rate: f64) -> u64 {
    let x = remaining.max(0.0) / rate;
    debug_assert!(x >= 0.0 || x.is_nan(), "callers pass a positive rate");
    if x < 4e18 {
        // The common case, through the signed conversions the hardware has (x >= 0 here).
        let whole = x as i64;
        return whole as u64 + u64::from((whole as f64) < x);
    }
    let whole = x as u64;
    // `as` truncates (and saturates); below 2^64 a fraction left means one more nanosecond.
    if (whole as f64) < x {
        whole.saturating_add(1)
    } else {
        whole
    }
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
            jobs: VecDeque::new(),
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
        let dt = duration_nanos(now.saturating_since(self.last)) as f64;
        let rate = self.rate();
        self.attained += rate * dt;
        self.busy_core_nanos += rate * dt * self.jobs.len() as f64;
        self.last = now;
    }

    /// When the next job finishes at the current capacity, if any job can finish.
    pub fn next_completion(&self) -> Option<Time> {
        let tag = self.jobs.front()?.tag;
        let rate = self.rate();
        if rate <= 0.0 {
            return None;
        }
        Some(
            self.last + Duration::from_nanos(ceil_nanos(f64::from_bits(tag) - self.attained, rate)),
        )
    }

    /// When the next job that is not overhead finishes at the current capacity, if any can;
    /// or, when more than [`LOOKAHEAD`] overhead jobs finish before it, when the last of those
    /// looked at finishes (waking then is merely early, and keeps this call cheap when a burst
    /// of probes is queued).
    ///
    /// Overhead jobs that finish first are stepped over exactly as [`CpuModel::advance`] would
    /// step through them (same rounding, same order), so a driver that wakes only at the
    /// returned time sees the very state it would have seen waking at every completion. Nothing
    /// observable happens when an overhead job finishes, so a simulator need not schedule those
    /// wake-ups.
    pub fn next_awaited_completion(&self) -> Option<Time> {
        let first = self.jobs.front()?;
        if !first.overhead {
            return self.next_completion();
        }
        let (mut attained, mut last) = (self.attained, self.last);
        let mut last_at = self.last;
        let mut left = self.jobs.len();
        let mut jobs = self.jobs.iter().peekable();
        for _ in 0..LOOKAHEAD {
            let tag = f64::from_bits(jobs.peek()?.tag);
            let rate = self.per_job_cores.min(self.cores / left as f64);
            if rate <= 0.0 {
                return None;
            }
            let at = last + Duration::from_nanos(ceil_nanos(tag - attained, rate));
            // As `run_until(at)` then `pop_finished`.
            if at > last {
                let dt = duration_nanos(at.saturating_since(last)) as f64;
                attained += rate * dt;
                last = at;
            }
            while let Some(job) = jobs.next_if(|j| f64::from_bits(j.tag) <= attained + EPSILON_WORK)
            {
                if !job.overhead {
                    return Some(at);
                }
                left -= 1;
            }
            if left == 0 {
                return None;
            }
            last_at = at;
        }
        Some(last_at)
    }

    /// Advances to `now`, appending every job that finished by then to `done` in finishing
    /// order. Call it before any other change at `now`.
    pub fn advance(&mut self, now: Time, done: &mut Vec<JobId>) {
        if now <= self.last {
            // Time stands still (a second call at one instant): every completion due is
            // already popped, except jobs that arrived with no work left, which are due now.
            self.pop_finished(done);
            return;
        }
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
        while let Some(&id) = self.jobs.front() {
            if f64::from_bits(id.tag) > self.attained + EPSILON_WORK {
                break;
            }
            self.jobs.pop_front();
            done.push(id);
        }
    }

    /// A job with `work` (CPU time at one full core) arrives at `now`. Finished jobs are
    /// appended to `done` first.
    pub fn arrive(&mut self, now: Time, work: Duration, done: &mut Vec<JobId>) -> JobId {
        self.admit(now, work, false, done)
    }

    /// Like [`CpuModel::arrive`], for overhead work nobody waits for (a probe's CPU cost): it
    /// shares the CPU like any job, still shows up in `done` when it finishes, but
    /// [`CpuModel::next_awaited_completion`] looks past it.
    pub fn arrive_overhead(&mut self, now: Time, work: Duration, done: &mut Vec<JobId>) -> JobId {
        self.admit(now, work, true, done)
    }

    fn admit(&mut self, now: Time, work: Duration, overhead: bool, done: &mut Vec<JobId>) -> JobId {
        self.advance(now, done);
        let id = JobId {
            tag: tag_key(self.attained + duration_nanos(work) as f64),
            seq: self.next_id,
            overhead,
        };
        self.next_id += 1;
        let at = self.jobs.partition_point(|j| *j < id);
        self.jobs.insert(at, id);
        id
    }

    /// Removes a job before it finished (its query timed out). Returns false if unknown.
    pub fn cancel(&mut self, now: Time, job: JobId, done: &mut Vec<JobId>) -> bool {
        self.advance(now, done);
        match self.jobs.binary_search(&job) {
            Ok(at) => self.jobs.remove(at).is_some(),
            Err(_) => false,
        }
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

    /// Waking only at the awaited completion leaves the model exactly where waking at every
    /// completion would, and at the same instant.
    #[test]
    fn awaited_completion_steps_over_overhead_exactly() {
        let build = || {
            let mut cpu = CpuModel::new(1.3, 1.0);
            let mut done = Vec::new();
            let us = Duration::from_micros;
            let query = cpu.arrive(Time::ZERO, us(5_003), &mut done);
            for i in 0..5u64 {
                cpu.arrive_overhead(Time::from_micros(7 * i), us(20 + 3 * i), &mut done);
            }
            let late = cpu.arrive(Time::from_micros(40), us(9_000), &mut done);
            (cpu, query, late)
        };
        let (mut stepped, query, _) = build();
        assert_eq!(
            stepped
                .next_completion()
                .map(|t| t < Time::from_micros(200)),
            Some(true),
            "an overhead job finishes first"
        );
        let mut woken = Vec::new();
        let mut done = Vec::new();
        while let Some(at) = stepped.next_completion() {
            stepped.advance(at, &mut done);
            woken.push(at);
            if done.contains(&query) {
                break;
            }
        }
        let (mut direct, _, late) = build();
        let at = direct.next_awaited_completion();
        assert_eq!(at, woken.last().copied());
        assert!(woken.len() > 1);
        let mut direct_done = Vec::new();
        direct.advance(at.unwrap(), &mut direct_done);
        assert_eq!(direct_done, done);
        assert_eq!(direct.next_awaited_completion(), stepped.next_completion());
        assert_eq!(direct.attained.to_bits(), stepped.attained.to_bits());
        // Only overhead left: nothing to wait for.
        assert!(direct.cancel(at.unwrap(), late, &mut direct_done));
        direct.arrive_overhead(at.unwrap(), Duration::from_micros(20), &mut direct_done);
        assert!(direct.next_completion().is_some());
        assert_eq!(direct.next_awaited_completion(), None);
    }

    /// Behind a burst of overhead, the answer is an early wake-up at one of the overhead
    /// completions the stepping model would visit anyway.
    #[test]
    fn awaited_completion_stops_early_behind_a_burst_of_overhead() {
        let mut cpu = CpuModel::new(1.0, 1.0);
        let mut done = Vec::new();
        for i in 0..3 * LOOKAHEAD as u64 {
            cpu.arrive_overhead(Time::ZERO, Duration::from_micros(20 + i), &mut done);
        }
        let query = cpu.arrive(Time::ZERO, Duration::from_millis(5), &mut done);
        let early = cpu.next_awaited_completion().unwrap();
        let mut stepped = cpu.clone();
        let mut woken = Vec::new();
        while !done.contains(&query) {
            let at = stepped.next_completion().unwrap();
            stepped.advance(at, &mut done);
            woken.push(at);
        }
        assert!(woken.contains(&early), "{early:?} not in {woken:?}");
        assert!(early < *woken.last().unwrap());
    }

    #[test]
    fn ceil_nanos_matches_ceil() {
        for (remaining, rate) in [
            (0.0, 1.0),
            (-3.0, 1.0),
            (10.0, 3.0),
            (9.0, 3.0),
            (1e300, 1e-300),
            (5e15 + 0.5, 1.0),
            (7.25, 0.1),
        ] {
            let want = (f64::max(remaining, 0.0) / rate).ceil() as u64;
            assert_eq!(ceil_nanos(remaining, rate), want, "{remaining} / {rate}");
        }
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

    #[test]
    fn overhead_out_of_order_and_cancelled_still_finish_by_tag() {
        // All at once on one core, so each job finishes in order of its work, whatever order
        // and kind they came in.
        let mut cpu = CpuModel::new(1.0, 1.0);
        let mut done = Vec::new();
        let costs = [
            (4, true),
            (6, true),
            (3, true),
            (5, false),
            (8, true),
            (1, true),
        ];
        let ids: Vec<JobId> = costs
            .iter()
            .map(|&(work, overhead)| match overhead {
                true => cpu.arrive_overhead(Time::ZERO, ms(work), &mut done),
                false => cpu.arrive(Time::ZERO, ms(work), &mut done),
            })
            .collect();
        assert!(cpu.cancel(Time::ZERO, ids[1], &mut done));
        assert!(!cpu.cancel(Time::ZERO, ids[1], &mut done));
        assert_eq!(cpu.in_flight(), 5);
        // Five jobs share the core: the 1 ms one finishes after 5 ms.
        assert_eq!(cpu.next_completion(), Some(Time::from_millis(5)));
        // The first non-overhead job (5 ms of work) is the awaited one.
        let awaited = cpu.next_awaited_completion();
        cpu.advance(Time::from_secs(1), &mut done);
        let order: Vec<JobId> = [5, 2, 0, 3, 4].iter().map(|&i| ids[i]).collect();
        assert_eq!(done, order);
        // Shared by 5, 4, 3 then 2 jobs, the 5 ms job ends at 5 + 4*2 + 3*1 + 2*1 = 18 ms.
        assert_eq!(awaited, Some(Time::from_millis(18)));
        assert_eq!(cpu.in_flight(), 0);
    }
}
