//! The replicas' CPU wake-ups, one per replica, in an indexed binary heap.
//!
//! A replica's next completion moves with every arrival (processor sharing slows every job in
//! flight), so a wake-up put in the event queue is often stale by the time it comes due: it
//! finds nothing finished and re-arms. Keeping exactly one wake-up time per replica here,
//! updated in place, leaves no stale wake-ups at all. The heap orders by (time, replica), so
//! equal times come out in replica order and runs stay reproducible.

use prequal_core::Time;

const ABSENT: u32 = u32::MAX;

/// At most one pending wake-up per replica, earliest first.
#[derive(Debug, Default)]
pub(super) struct Wakes {
    /// (time in nanoseconds, replica) in heap order.
    heap: Vec<(u64, u32)>,
    /// Each replica's place in `heap`, or [`ABSENT`].
    place: Vec<u32>,
}

impl Wakes {
    /// Room for `replicas` replicas, none armed.
    pub(super) fn new(replicas: usize) -> Self {
        Wakes {
            heap: Vec::with_capacity(replicas),
            place: vec![ABSENT; replicas],
        }
    }

    /// The earliest wake-up and its replica.
    pub(super) fn peek(&self) -> Option<(Time, u32)> {
        self.heap
            .first()
            .map(|&(at, replica)| (Time::from_nanos(at), replica))
    }

    /// Arms `replica`'s wake-up at `at` (replacing any it had), or disarms it with `None`.
    pub(super) fn set(&mut self, replica: u32, at: Option<Time>) {
        let i = self.place[replica as usize];
        match (at, i) {
            (None, ABSENT) => {}
            (None, i) => self.remove_at(i as usize),
            (Some(at), ABSENT) => {
                self.heap.push((at.as_nanos(), replica));
                let last = self.heap.len() - 1;
                self.place[replica as usize] = last as u32;
                self.sift_up(last);
            }
            (Some(at), i) => {
                let (i, at) = (i as usize, at.as_nanos());
                let old = self.heap[i].0;
                self.heap[i].0 = at;
                if at < old {
                    self.sift_up(i);
                } else if at > old {
                    self.sift_down(i);
                }
            }
        }
    }

    fn remove_at(&mut self, i: usize) {
        let gone = self.heap.swap_remove(i);
        self.place[gone.1 as usize] = ABSENT;
        if i < self.heap.len() {
            self.place[self.heap[i].1 as usize] = i as u32;
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    /// Moves the entry at `i` up to its place, shifting parents down (one write per level).
    fn sift_up(&mut self, mut i: usize) {
        let entry = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if entry >= self.heap[parent] {
                break;
            }
            self.heap[i] = self.heap[parent];
            self.place[self.heap[i].1 as usize] = i as u32;
            i = parent;
        }
        self.heap[i] = entry;
        self.place[entry.1 as usize] = i as u32;
    }

    /// Moves the entry at `i` down to its place, shifting children up.
    fn sift_down(&mut self, mut i: usize) {
        let entry = self.heap[i];
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right] < self.heap[left] {
                right
            } else {
                left
            };
            if entry <= self.heap[child] {
                break;
            }
            self.heap[i] = self.heap[child];
            self.place[self.heap[i].1 as usize] = i as u32;
            i = child;
        }
        self.heap[i] = entry;
        self.place[entry.1 as usize] = i as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Against a plain scan over the same arm/disarm sequence.
    #[test]
    fn matches_a_scan_under_random_updates() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 37;
        let mut wakes = Wakes::new(n);
        let mut model: Vec<Option<Time>> = vec![None; n];
        for _ in 0..20_000 {
            let r = rng.random_range(0..n as u32);
            let at = rng
                .random_bool(0.8)
                .then(|| Time::from_nanos(rng.random_range(0..50)));
            wakes.set(r, at);
            model[r as usize] = at;
            let want = model
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (t, i as u32)))
                .min();
            assert_eq!(wakes.peek(), want);
        }
    }
}
