//! The event queue: a radix heap over (time, sequence) keys.
//!
//! A discrete-event simulation only ever pops the earliest event and only ever schedules events
//! at or after the current time, so its priority queue is *monotone*. A radix heap (Ahuja,
//! Mehlhorn, Orlin and Tarjan, 1990) exploits that: items sit in buckets by the highest bit in
//! which their key differs from the last key popped, so a push is a `Vec::push` and each item
//! is moved between buckets at most once per key bit, with no comparisons against the bulk of
//! the queue. Unlike a binary heap, whose sift-downs touch log n cache lines spread over a large
//! array, it keeps working in cache-friendly vectors when a million events are pending.
//!
//! Equal times come out in the order they were pushed (FIFO), which makes runs reproducible:
//! every item with the current minimum time sits in bucket 0, a FIFO, and every other bucket is
//! appended to and redistributed in order, so two items with the same time always share a
//! bucket and keep their relative order.

use std::collections::VecDeque;

use prequal_core::Time;

const BUCKETS: usize = 65;

/// A monotone priority queue of `T` keyed by time, FIFO among equal times.
#[derive(Debug)]
pub struct EventQueue<T> {
    now: VecDeque<T>,
    buckets: Vec<Vec<(u64, T)>>,
    /// Bit `i - 1` is set when bucket `i` is non-empty, so finding the next bucket is one
    /// instruction instead of a scan.
    occupied: u64,
    last: u64,
    len: usize,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

fn bucket_of(key: u64, last: u64) -> usize {
    (64 - (key ^ last).leading_zeros()) as usize
}

impl<T> EventQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            now: VecDeque::new(),
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            occupied: 0,
            last: 0,
            len: 0,
        }
    }

    /// Events pending.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `item` at `at`. A time before the last popped event is treated as that time
    /// (the queue is monotone; a driver never schedules into the past).
    pub fn push(&mut self, at: Time, item: T) {
        let key = at.as_nanos().max(self.last);
        self.len += 1;
        if key == self.last {
            self.now.push_back(item);
        } else {
            let b = bucket_of(key, self.last);
            self.buckets[b].push((key, item));
            self.occupied |= 1 << (b - 1);
        }
    }

    /// Removes and returns the earliest event with its time.
    pub fn pop(&mut self) -> Option<(Time, T)> {
        if self.now.is_empty() {
            self.refill()?;
        }
        let item = self.now.pop_front()?;
        self.len -= 1;
        Some((Time::from_nanos(self.last), item))
    }

    /// Moves the smallest non-empty bucket down around its minimum key.
    fn refill(&mut self) -> Option<()> {
        if self.occupied == 0 {
            return None;
        }
        let i = self.occupied.trailing_zeros() as usize + 1;
        self.occupied &= !(1 << (i - 1));
        let mut items = std::mem::take(&mut self.buckets[i]);
        let min = items.iter().map(|(k, _)| *k).min()?;
        self.last = min;
        for (key, item) in items.drain(..) {
            if key == min {
                self.now.push_back(item);
            } else {
                let b = bucket_of(key, min);
                self.buckets[b].push((key, item));
                self.occupied |= 1 << (b - 1);
            }
        }
        // Give the emptied vector's allocation back for reuse.
        if self.buckets[i].is_empty() {
            self.buckets[i] = items;
        }
        Some(())
    }

    /// The time of the earliest event, if any (reorganises buckets, hence `&mut`).
    pub fn peek_time(&mut self) -> Option<Time> {
        if self.now.is_empty() {
            self.refill()?;
        }
        Some(Time::from_nanos(self.last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::BinaryHeap;

    #[test]
    fn pops_in_time_then_fifo_order() {
        let mut q = EventQueue::new();
        q.push(Time::from_nanos(5), 'a');
        q.push(Time::from_nanos(1), 'b');
        q.push(Time::from_nanos(5), 'c');
        q.push(Time::from_nanos(1), 'd');
        let out: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, c)| c)).collect();
        assert_eq!(out, vec!['b', 'd', 'a', 'c']);
        assert!(q.is_empty());
    }

    /// Against a binary heap on (time, seq), under a simulation-like interleaving of pops and
    /// pushes at or after the current time.
    #[test]
    fn matches_a_binary_heap_on_random_monotone_workload() {
        matches_a_binary_heap(|rng, now| {
            now + rng.random_range(0..1_000u64) * rng.random_range(0..3u64)
        });
    }

    /// The same with distances from zero to about 2^40 ns, spread over every bucket, and with
    /// many equal times.
    #[test]
    fn matches_a_binary_heap_across_all_buckets() {
        matches_a_binary_heap(|rng, now| match rng.random_range(0..4u32) {
            0 => now,
            1 => now + rng.random_range(0..4u64) * 300_000,
            _ => now + (rng.random_range(0..1u64 << 40) >> rng.random_range(0..40u32)),
        });
    }

    fn matches_a_binary_heap(mut next: impl FnMut(&mut rand::rngs::SmallRng, u64) -> u64) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let mut q = EventQueue::new();
        let mut heap = BinaryHeap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for _ in 0..20_000 {
            for _ in 0..rng.random_range(0..3) {
                let at = next(&mut rng, now);
                q.push(Time::from_nanos(at), seq);
                heap.push(std::cmp::Reverse((at, seq)));
                seq += 1;
            }
            let (got, want) = (q.pop(), heap.pop());
            assert_eq!(got.map(|(t, s)| (t.as_nanos(), s)), want.map(|r| r.0));
            if let Some((t, _)) = got {
                now = t.as_nanos();
            }
            assert_eq!(q.len(), heap.len());
        }
    }
}
