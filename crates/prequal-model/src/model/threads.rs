//! A thread-pool replica: `k` workers and a FIFO queue behind them.
//!
//! Most application servers work this way (a servlet container, a gRPC server with a fixed
//! executor, a Python worker pool): a query holds one worker for its whole service time, and
//! when every worker is busy it waits in arrival order. Unlike processor sharing
//! ([`super::cpu`]), a query's service time does not stretch with load; its *waiting* time does,
//! and it jumps by one service time for every `k` queries ahead of it. That is why probing
//! for requests in flight (RIF) matters here: latency at RIF ≤ k is flat, beyond it grows
//! linearly.
//!
//! The service time is fixed when the query is admitted (the caller scales it by the replica's
//! speed and its `slow` episodes). A `capacity_loss` episode takes workers away
//! ([`ThreadPool::set_available`]): running queries finish, but no new one starts until fewer
//! than the available workers are busy. An optional `queue_limit` rejects arrivals that find
//! the queue full ([`ThreadPool::arrive`] returns `None`).
//!
//! Like the CPU model, it never reads a clock: the driver passes `now` and asks
//! [`ThreadPool::next_completion`] when to come back.

use std::collections::VecDeque;
use std::time::Duration;

use prequal_core::Time;
use prequal_core::time::duration_nanos;

use super::cpu::JobId;

/// A query holding a worker.
#[derive(Clone, Copy, Debug)]
struct Running {
    finish: Time,
    start: Time,
    id: JobId,
}

/// `k` workers and a FIFO queue. See the module docs.
#[derive(Clone, Debug)]
pub struct ThreadPool {
    workers: usize,
    available: usize,
    queue_limit: Option<usize>,
    running: Vec<Running>,
    queue: VecDeque<(JobId, Duration)>,
    next_id: u64,
    last: Time,
    /// Worker-nanoseconds of finished (or cancelled) service.
    busy_done: f64,
}

impl ThreadPool {
    /// A pool of `workers` (at least 1) with an optional bound on the waiting queue.
    pub fn new(workers: u32, queue_limit: Option<u32>) -> Self {
        let workers = workers.max(1) as usize;
        Self {
            workers,
            available: workers,
            queue_limit: queue_limit.map(|q| q as usize),
            running: Vec::with_capacity(workers),
            queue: VecDeque::new(),
            next_id: 0,
            last: Time::ZERO,
            busy_done: 0.0,
        }
    }

    /// Workers configured.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Queries in flight: in service plus waiting.
    pub fn in_flight(&self) -> usize {
        self.running.len() + self.queue.len()
    }

    /// Queries waiting for a worker.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Worker-nanoseconds of service given up to the last call that took `now`.
    pub fn busy_core_nanos(&self) -> f64 {
        self.busy_done
            + self
                .running
                .iter()
                .map(|r| duration_nanos(self.last.saturating_since(r.start)) as f64)
                .sum::<f64>()
    }

    /// When the next query in service finishes.
    pub fn next_completion(&self) -> Option<Time> {
        self.running.iter().map(|r| r.finish).min()
    }

    /// Index of the running query that finishes first (ties: the earlier arrival).
    fn first_running(&self) -> Option<usize> {
        (0..self.running.len()).min_by_key(|&i| (self.running[i].finish, self.running[i].id))
    }

    /// Starts waiting queries at `at` while workers are free.
    fn start_waiting(&mut self, at: Time) {
        while self.running.len() < self.available {
            let Some((id, service)) = self.queue.pop_front() else {
                return;
            };
            self.running.push(Running {
                finish: at + service,
                start: at,
                id,
            });
        }
    }

    /// Advances to `now`, appending every query that finished by then to `done` in finishing
    /// order; a worker freed at `t` takes the next waiting query at `t`.
    pub fn advance(&mut self, now: Time, done: &mut Vec<JobId>) {
        while let Some(i) = self.first_running() {
            let r = self.running[i];
            if r.finish > now {
                break;
            }
            self.running.swap_remove(i);
            self.busy_done += duration_nanos(r.finish.saturating_since(r.start)) as f64;
            done.push(r.id);
            self.start_waiting(r.finish);
        }
        self.last = self.last.max(now);
    }

    /// A query needing `service` of one worker arrives at `now`; `None` if the queue is full
    /// (the replica rejects it). Finished queries are appended to `done` first.
    pub fn arrive(&mut self, now: Time, service: Duration, done: &mut Vec<JobId>) -> Option<JobId> {
        self.advance(now, done);
        let busy = self.running.len() >= self.available;
        if busy && self.queue_limit.is_some_and(|q| self.queue.len() >= q) {
            return None;
        }
        let id = JobId::plain(self.next_id);
        self.next_id += 1;
        self.queue.push_back((id, service));
        self.start_waiting(now);
        Some(id)
    }

    /// Removes a query before it finished (its client gave up); a worker it held takes the
    /// next waiting query. Returns false if unknown.
    pub fn cancel(&mut self, now: Time, job: JobId, done: &mut Vec<JobId>) -> bool {
        self.advance(now, done);
        if let Some(at) = self.queue.iter().position(|(id, _)| *id == job) {
            self.queue.remove(at);
            return true;
        }
        let Some(i) = self.running.iter().position(|r| r.id == job) else {
            return false;
        };
        let r = self.running.swap_remove(i);
        self.busy_done += duration_nanos(now.saturating_since(r.start)) as f64;
        self.start_waiting(now);
        true
    }

    /// Sets how many workers may serve from `now` on (a capacity-loss episode); queries in
    /// service keep their worker.
    pub fn set_available(&mut self, now: Time, workers: usize, done: &mut Vec<JobId>) {
        self.advance(now, done);
        self.available = workers.min(self.workers);
        self.start_waiting(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn at(v: u64) -> Time {
        Time::from_millis(v)
    }

    /// Runs the pool to the end, returning (id, finish time) in finishing order.
    fn drain(pool: &mut ThreadPool) -> Vec<(JobId, Time)> {
        let mut out = Vec::new();
        while let Some(t) = pool.next_completion() {
            let mut done = Vec::new();
            pool.advance(t, &mut done);
            out.extend(done.into_iter().map(|id| (id, t)));
        }
        out
    }

    #[test]
    fn k_workers_serve_k_at_once_and_queue_the_rest_in_order() {
        let mut pool = ThreadPool::new(2, None);
        let mut done = Vec::new();
        let ids: Vec<JobId> = (0..5)
            .map(|_| pool.arrive(at(0), ms(10), &mut done).unwrap())
            .collect();
        assert_eq!(pool.in_flight(), 5);
        assert_eq!(pool.queued(), 3);
        let finished = drain(&mut pool);
        let times: Vec<Time> = finished.iter().map(|f| f.1).collect();
        assert_eq!(times, [at(10), at(10), at(20), at(20), at(30)]);
        let order: Vec<JobId> = finished.iter().map(|f| f.0).collect();
        assert_eq!(order, ids, "first in, first out");
        assert_eq!(pool.busy_core_nanos(), 50e6);
    }

    #[test]
    fn a_long_query_does_not_hold_up_the_other_worker() {
        let mut pool = ThreadPool::new(2, None);
        let mut done = Vec::new();
        pool.arrive(at(0), ms(100), &mut done);
        for _ in 0..3 {
            pool.arrive(at(0), ms(10), &mut done);
        }
        let times: Vec<Time> = drain(&mut pool).iter().map(|f| f.1).collect();
        assert_eq!(times, [at(10), at(20), at(30), at(100)]);
    }

    #[test]
    fn queue_limit_rejects_and_cancel_frees_a_worker() {
        let mut pool = ThreadPool::new(1, Some(1));
        let mut done = Vec::new();
        let a = pool.arrive(at(0), ms(50), &mut done).unwrap();
        let b = pool.arrive(at(0), ms(10), &mut done).unwrap();
        assert!(
            pool.arrive(at(1), ms(10), &mut done).is_none(),
            "queue full"
        );
        assert!(pool.cancel(at(5), a, &mut done));
        assert!(!pool.cancel(at(5), a, &mut done), "already gone");
        assert_eq!(drain(&mut pool), vec![(b, at(15))]);
        assert_eq!(pool.busy_core_nanos(), 15e6);
    }

    #[test]
    fn losing_workers_delays_new_starts_only() {
        let mut pool = ThreadPool::new(2, None);
        let mut done = Vec::new();
        pool.arrive(at(0), ms(10), &mut done);
        pool.arrive(at(0), ms(10), &mut done);
        pool.set_available(at(1), 1, &mut done);
        pool.arrive(at(2), ms(10), &mut done);
        pool.arrive(at(2), ms(10), &mut done);
        let times: Vec<Time> = drain(&mut pool).iter().map(|f| f.1).collect();
        assert_eq!(times, [at(10), at(10), at(20), at(30)]);
    }
}
