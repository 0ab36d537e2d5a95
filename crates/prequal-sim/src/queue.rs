//! The event queue: a radix heap over time keys, with 64-way digits.
//!
//! A discrete-event simulation only ever pops the earliest event and only ever schedules events
//! at or after the current time, so its priority queue is *monotone*. A radix heap (Ahuja,
//! Mehlhorn, Orlin and Tarjan, 1990) exploits that: items sit in buckets by where their key
//! first differs from the last key popped, so a push is a `Vec::push` and an item only ever
//! moves to a lower bucket, with no comparisons against the bulk of the queue. Unlike a binary
//! heap, whose sift-downs touch log n cache lines spread over a large array, it keeps working in
//! cache-friendly vectors when a million events are pending.
//!
//! Keys are read in 6-bit digits, as in a hierarchical timing wheel: an item lives at the level
//! of the highest digit in which it differs from the last key popped, in the slot named by its
//! own digit there. The smallest item is in the lowest occupied slot of the lowest occupied
//! level (one bitmap per level, one for the levels, so finding it is two instructions). Taking
//! that slot spreads its items over lower levels around their minimum; an item moves at most
//! once per digit (11 for a 64-bit key), and an event a few hundred microseconds ahead moves
//! about three times.
//!
//! Equal times come out in the order they were pushed (FIFO), which makes runs reproducible:
//! items with the current minimum time sit in a FIFO, and two items with the same time always
//! share a slot, to which they are appended in order and from which they are spread in order.

use std::collections::VecDeque;

use prequal_core::Time;

/// Bits per digit.
const DIGIT: u32 = 6;
/// Slots per level: one per digit value.
const SLOTS: usize = 1 << DIGIT;
/// Levels: digits in a 64-bit key.
const LEVELS: usize = 64_usize.div_ceil(DIGIT as usize);

/// The (level, slot) of `key` relative to the last key popped; `key` must differ from it.
fn place(key: u64, last: u64) -> (usize, usize) {
    let highest = 63 - (key ^ last).leading_zeros();
    let level = highest / DIGIT;
    let slot = (key >> (level * DIGIT)) as usize & (SLOTS - 1);
    (level as usize, slot)
}

/// A monotone priority queue of `T` keyed by time, FIFO among equal times.
#[derive(Debug)]
pub struct EventQueue<T> {
    now: VecDeque<T>,
    /// `LEVELS * SLOTS` buckets, level-major.
    buckets: Vec<Vec<(u64, T)>>,
    /// Per level, bit `s` is set when slot `s` is non-empty.
    slots: [u64; LEVELS],
    /// Bit `l` is set when level `l` has a non-empty slot.
    levels: u16,
    /// An empty vector to swap with a slot being spread.
    spare: Vec<(u64, T)>,
    /// The key of the last item taken out of the buckets: every pending key is at or after it.
    last: u64,
    /// The earliest pending key while the FIFO is empty, once [`EventQueue::peek_time`] found
    /// it (None: not looked for since the buckets last changed shape).
    peeked: Option<u64>,
    len: usize,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> EventQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            now: VecDeque::new(),
            buckets: (0..LEVELS * SLOTS).map(|_| Vec::new()).collect(),
            slots: [0; LEVELS],
            levels: 0,
            spare: Vec::new(),
            last: 0,
            peeked: None,
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
            self.file(key, item);
        }
    }

    /// Schedules `item` at `at` ahead of every event already queued at that same time (FIFO
    /// for the rest): for a driver that held an event back and now queues it where it would
    /// have been, had no event at its time been queued before it.
    pub fn push_first(&mut self, at: Time, item: T) {
        let key = at.as_nanos().max(self.last);
        self.len += 1;
        if key == self.last {
            self.now.push_front(item);
            return;
        }
        // Items with one key share a slot and keep their order in it, so the front of the slot
        // is ahead of every other item at that time.
        if let Some(peeked) = &mut self.peeked {
            *peeked = (*peeked).min(key);
        }
        let (level, slot) = place(key, self.last);
        self.buckets[level * SLOTS + slot].insert(0, (key, item));
        self.slots[level] |= 1 << slot;
        self.levels |= 1 << level;
    }

    /// Whether an event is queued at exactly `at`.
    pub fn holds(&self, at: Time) -> bool {
        let key = at.as_nanos();
        if key < self.last {
            return false;
        }
        if key == self.last {
            return !self.now.is_empty();
        }
        let (level, slot) = place(key, self.last);
        self.slots[level] & (1 << slot) != 0
            && self.buckets[level * SLOTS + slot]
                .iter()
                .any(|&(k, _)| k == key)
    }

    /// Puts an item whose key differs from `last` into its slot.
    #[inline]
    fn file(&mut self, key: u64, item: T) {
        if let Some(peeked) = &mut self.peeked {
            *peeked = (*peeked).min(key);
        }
        let (level, slot) = place(key, self.last);
        self.buckets[level * SLOTS + slot].push((key, item));
        self.slots[level] |= 1 << slot;
        self.levels |= 1 << level;
    }

    /// Removes and returns the earliest event with its time.
    pub fn pop(&mut self) -> Option<(Time, T)> {
        let item = match self.now.pop_front() {
            Some(item) => item,
            None => self.refill()?,
        };
        self.len -= 1;
        Some((Time::from_nanos(self.last), item))
    }

    /// Removes and returns the earliest event if it is due before `limit`; otherwise leaves the
    /// queue as it is, its floor included (as [`EventQueue::peek_time`] does).
    ///
    /// One call in place of a peek and a pop: the simulator pops a queued event only when it
    /// comes before the next CPU wake-up, and this finds the lowest occupied slot once.
    pub fn pop_before(&mut self, limit: Time) -> Option<(Time, T)> {
        let limit = limit.as_nanos();
        if !self.now.is_empty() {
            if self.last >= limit {
                return None;
            }
            let item = self.now.pop_front()?;
            self.len -= 1;
            return Some((Time::from_nanos(self.last), item));
        }
        if self.levels == 0 {
            return None;
        }
        let (level, slot) = self.lowest_slot();
        let key = match self.peeked {
            Some(key) => key,
            None => {
                let key = Self::min_key(&self.buckets[level * SLOTS + slot])?;
                self.peeked = Some(key);
                key
            }
        };
        if key >= limit {
            return None;
        }
        let item = self.take_slot(level, slot)?;
        self.len -= 1;
        Some((Time::from_nanos(self.last), item))
    }

    /// The lowest occupied (level, slot): it holds the minimum, since every key in it is below
    /// every key in a higher slot or level. The queue must not be empty.
    #[inline]
    fn lowest_slot(&self) -> (usize, usize) {
        let level = self.levels.trailing_zeros() as usize;
        let slot = self.slots[level].trailing_zeros() as usize;
        (level, slot)
    }

    /// The smallest key in `bucket` (nearly always its only item).
    #[inline]
    fn min_key(bucket: &[(u64, T)]) -> Option<u64> {
        match bucket {
            [(key, _)] => Some(*key),
            _ => bucket.iter().map(|&(key, _)| key).min(),
        }
    }

    /// Empties the lowest occupied slot: its minimum becomes the last key, and the first item
    /// with that key is returned; the others with that key go to the FIFO, the rest to lower
    /// levels.
    fn refill(&mut self) -> Option<T> {
        if self.levels == 0 {
            return None;
        }
        let (level, slot) = self.lowest_slot();
        self.take_slot(level, slot)
    }

    /// [`EventQueue::refill`] from the lowest occupied slot, `(level, slot)`.
    fn take_slot(&mut self, level: usize, slot: usize) -> Option<T> {
        // A peek since the buckets last changed shape found the minimum already.
        let peeked = self.peeked.take();
        self.slots[level] &= !(1 << slot);
        if self.slots[level] == 0 {
            self.levels &= !(1 << level);
        }
        let bucket = &mut self.buckets[level * SLOTS + slot];
        if bucket.len() == 1 {
            // The common case: nothing to spread, and no other item at that time (it would
            // share the slot), so the item skips the FIFO.
            let (key, item) = bucket.pop()?;
            self.last = key;
            return Some(item);
        }
        // The items only ever go to lower levels, so the slot's vector can be swapped with an
        // empty spare and spread from there (both keep their allocations).
        std::mem::swap(&mut self.spare, bucket);
        let mut items = std::mem::take(&mut self.spare);
        let min = match peeked {
            Some(min) => min,
            None => Self::min_key(&items)?,
        };
        self.last = min;
        for (key, item) in items.drain(..) {
            if key == min {
                self.now.push_back(item);
            } else {
                self.file(key, item);
            }
        }
        self.spare = items;
        self.now.pop_front()
    }

    /// The time of the earliest event, if any.
    ///
    /// Unlike [`EventQueue::pop`] this leaves the queue's floor where it is: a driver that
    /// peeks, then handles something due earlier (the simulator's CPU wake-ups, which live
    /// outside this queue) may still schedule events between now and the peeked time, and they
    /// come out at their own times. (Spreading a slot here would move the floor up to the
    /// peeked time, and [`EventQueue::push`] would then hold every such event back to it.)
    /// Takes `&mut self` to remember the answer until the queue changes.
    pub fn peek_time(&mut self) -> Option<Time> {
        if !self.now.is_empty() {
            return Some(Time::from_nanos(self.last));
        }
        if self.levels == 0 {
            return None;
        }
        if let Some(key) = self.peeked {
            return Some(Time::from_nanos(key));
        }
        let (level, slot) = self.lowest_slot();
        let key = Self::min_key(&self.buckets[level * SLOTS + slot])?;
        self.peeked = Some(key);
        Some(Time::from_nanos(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::cmp::Reverse;
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
            // A peek first, as the simulator makes before each event: it must not hold back
            // the pushes after it, which may come before the peeked time.
            let peeked = q.peek_time().map(Time::as_nanos);
            assert_eq!(peeked, heap.peek().map(|r: &Reverse<(u64, u64)>| r.0.0));
            for _ in 0..rng.random_range(0..3) {
                let at = next(&mut rng, now);
                q.push(Time::from_nanos(at), seq);
                heap.push(Reverse((at, seq)));
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

    /// `pop_before` pops what a peek-then-pop would when the earliest event is due before the
    /// limit, and otherwise changes nothing: the simulator's loop, with the limit its next CPU
    /// wake-up, against a binary heap on (time, seq).
    #[test]
    fn pop_before_matches_a_binary_heap_under_random_limits() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut q = EventQueue::new();
        let mut heap = BinaryHeap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for _ in 0..50_000 {
            for _ in 0..rng.random_range(0..3) {
                let at = match rng.random_range(0..4u32) {
                    0 => now,
                    1 => now + rng.random_range(0..4u64) * 300_000,
                    _ => now + (rng.random_range(0..1u64 << 40) >> rng.random_range(0..40u32)),
                };
                q.push(Time::from_nanos(at), seq);
                heap.push(Reverse((at, seq)));
                seq += 1;
            }
            // A limit around the next event: before it, at it, or after it.
            let next = heap.peek().map_or(now, |r: &Reverse<(u64, u64)>| r.0.0);
            let limit = match rng.random_range(0..3u32) {
                0 => next.saturating_sub(rng.random_range(0..1_000u64)).max(now),
                1 => next,
                _ => next + rng.random_range(1..1_000u64),
            };
            let got = q.pop_before(Time::from_nanos(limit));
            let want = if heap.peek().is_some_and(|r| r.0.0 < limit) {
                heap.pop().map(|r| r.0)
            } else {
                None
            };
            assert_eq!(got.map(|(t, s)| (t.as_nanos(), s)), want);
            if let Some((t, _)) = got {
                now = t.as_nanos();
            } else {
                // A wake-up handled in between may schedule at or after `now`, before `next`.
                now = now.max(limit.min(next));
            }
            assert_eq!(q.len(), heap.len());
        }
    }

    /// `push_first` puts an item ahead of those already queued at its time, and `holds` says
    /// whether any is: against a binary heap on (time, seq) where a `push_first` takes a seq
    /// below every other.
    #[test]
    fn push_first_and_holds_match_a_binary_heap() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
        let mut q = EventQueue::new();
        let mut heap: BinaryHeap<Reverse<(u64, i64)>> = BinaryHeap::new();
        let (mut now, mut back, mut ahead) = (0u64, 0i64, 1i64 << 40);
        for _ in 0..30_000 {
            for _ in 0..rng.random_range(0..3) {
                // Few distinct times, so that many items share one.
                let at = now + rng.random_range(0..6u64) * rng.random_range(0..3u64) * 64;
                assert_eq!(
                    q.holds(Time::from_nanos(at)),
                    heap.iter().any(|r| r.0.0 == at)
                );
                if rng.random_bool(0.3) {
                    back -= 1;
                    q.push_first(Time::from_nanos(at), back);
                    heap.push(Reverse((at, back)));
                } else {
                    ahead += 1;
                    q.push(Time::from_nanos(at), ahead);
                    heap.push(Reverse((at, ahead)));
                }
            }
            let limit = now + rng.random_range(0..200u64);
            let got = q.pop_before(Time::from_nanos(limit));
            let want = if heap.peek().is_some_and(|r| r.0.0 < limit) {
                heap.pop().map(|r| r.0)
            } else {
                None
            };
            assert_eq!(got.map(|(t, s)| (t.as_nanos(), s)), want);
            now = match got {
                Some((t, _)) => t.as_nanos(),
                None => now.max(limit.min(heap.peek().map_or(limit, |r| r.0.0))),
            };
            assert_eq!(q.len(), heap.len());
        }
    }

    /// A peek does not hold back what is scheduled after it: the simulator peeks, handles a
    /// CPU wake-up due before the peeked event, and that wake-up schedules a response due
    /// before it too.
    #[test]
    fn an_event_scheduled_after_a_peek_comes_out_at_its_own_time() {
        let mut q = EventQueue::new();
        q.push(Time::from_millis(5_000), 'd');
        q.push(Time::from_millis(1), 'a');
        assert_eq!(q.pop(), Some((Time::from_millis(1), 'a')));
        assert_eq!(q.peek_time(), Some(Time::from_millis(5_000)));
        q.push(Time::from_millis(2), 'r');
        assert_eq!(q.peek_time(), Some(Time::from_millis(2)));
        assert_eq!(q.pop(), Some((Time::from_millis(2), 'r')));
        assert_eq!(q.pop(), Some((Time::from_millis(5_000), 'd')));
    }
}
