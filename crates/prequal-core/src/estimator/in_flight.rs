//! How long the queries still in flight have been waiting: evidence of a stall that needs no
//! completion.
//!
//! The median of finished queries only learns that a replica turned slow when the first slow
//! query finishes: a replica that stalls (a long garbage-collection pause, a lock convoy, a
//! dependency timing out) keeps reporting its old, fast latency for as long as the stall lasts,
//! and a latency-led rule keeps choosing it. But a query that has been in flight for 300 ms
//! already proves that a query arriving now may take 300 ms. [`InFlightAges`] answers "how
//! long has the oldest query in flight (that arrived at or after a given time) been waiting";
//! the tracker uses it to grow its report during a stall (see `LoadTracker::stalled_for`).
//!
//! Queries are counted per arrival slot of [`SLOT`] (1 ms) in a deque that starts at the oldest
//! slot with a query still in flight. An arrival adds to the newest slot, a finish subtracts from
//! its arrival's slot, and emptied slots at the front are dropped: O(1) amortised, no allocation
//! once the deque has grown. Ages are measured from the end of a slot, so they understate by up
//! to 1 ms and never overstate. To bound memory when one query is stuck for a long time while
//! others come and go, the deque holds at most [`MAX_SLOTS`] slots (about 4 s); older queries
//! are merged into the oldest slot kept, which keeps their age a lower bound. A finish reported
//! twice (or without its arrival) takes a count from another query of the same slot or of the
//! oldest slot: that can only understate ages.

use std::collections::VecDeque;

use crate::time::Time;

/// Width of an arrival slot, in nanoseconds: the resolution of the age.
pub(crate) const SLOT: u64 = 1_000_000;

/// Most slots kept: beyond this span the oldest queries share a slot and their age is
/// understated (still at least `MAX_SLOTS - 2` slots).
pub(crate) const MAX_SLOTS: usize = 4096;

/// Queries in flight, counted by the slot in which they arrived.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlightAges {
    /// The slot number (`arrival nanos / SLOT`) of `counts[0]`.
    first: u64,
    /// Queries in flight per slot, oldest first; never starts with a zero.
    counts: VecDeque<u32>,
}

impl InFlightAges {
    /// A query arrived at `now`.
    pub(crate) fn arrive(&mut self, now: Time) {
        let slot = now.as_nanos() / SLOT;
        if self.counts.is_empty() {
            self.first = slot;
        }
        // Keep at most MAX_SLOTS slots: the queries of older slots join the oldest slot kept,
        // so their age is understated but still spans the whole deque.
        let oldest_kept = slot.saturating_sub(MAX_SLOTS as u64 - 1);
        if oldest_kept > self.first {
            let shift = usize::try_from(oldest_kept - self.first).unwrap_or(usize::MAX);
            let merged: u32 = self.counts.drain(..shift.min(self.counts.len())).sum();
            self.first = oldest_kept;
            match self.counts.front_mut() {
                Some(front) => *front = front.saturating_add(merged),
                None => self.counts.push_back(merged),
            }
        }
        // Arrivals recorded from several threads may come slightly out of order: one earlier
        // than the first kept slot joins that slot, and its finish finds it there the same way.
        let index = usize::try_from(slot.saturating_sub(self.first)).unwrap_or(0);
        if index == self.counts.len() {
            // The common case, a query in a slot of its own, without `resize`'s general path.
            self.counts.push_back(0);
        } else if index > self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] = self.counts[index].saturating_add(1);
    }

    /// The query that arrived at `arrival` left (finished or abandoned).
    pub(crate) fn leave(&mut self, arrival: Time) {
        let index = (arrival.as_nanos() / SLOT).saturating_sub(self.first);
        // A query older than the kept span was merged into the first slot.
        let index = usize::try_from(index).unwrap_or(usize::MAX);
        match self.counts.get_mut(index) {
            Some(count) => *count = count.saturating_sub(1),
            // Not counted (a finish without its arrival): nothing to undo.
            None => return,
        }
        while self.counts.front() == Some(&0) {
            self.counts.pop_front();
            self.first += 1;
        }
    }

    /// How long the oldest query in flight has waited at `now`, rounded down to the slot; zero
    /// when nothing is in flight.
    pub(crate) fn oldest_age_nanos(&self, now: Time) -> u64 {
        self.oldest_age_since(None, now).unwrap_or(0)
    }

    /// How long the oldest query in flight that arrived at or after `since` (in the same slot or
    /// later; any query when `since` is None) has waited at `now`, rounded down to the slot;
    /// None when there is no such query.
    pub(crate) fn oldest_age_since(&self, since: Option<Time>, now: Time) -> Option<u64> {
        let skip = since.map_or(0, |t| (t.as_nanos() / SLOT).saturating_sub(self.first));
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        let offset = self.counts.iter().skip(skip).position(|&count| count > 0)?;
        let slot = self.first + (skip + offset) as u64;
        let end = (slot + 1).saturating_mul(SLOT);
        Some(now.as_nanos().saturating_sub(end))
    }

    /// Queries counted in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// Slots kept.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(m: u64) -> Time {
        Time::from_millis(m)
    }

    #[test]
    fn empty_has_no_age() {
        let ages = InFlightAges::default();
        assert_eq!(ages.oldest_age_nanos(ms(500)), 0);
    }

    #[test]
    fn age_follows_the_oldest_query_still_in_flight() {
        let mut ages = InFlightAges::default();
        ages.arrive(ms(10));
        ages.arrive(ms(20));
        ages.arrive(ms(30));
        // The oldest arrived during [10 ms, 11 ms): at 100 ms it has waited at least 89 ms.
        assert_eq!(ages.oldest_age_nanos(ms(100)), 89 * SLOT);
        ages.leave(ms(20));
        assert_eq!(ages.oldest_age_nanos(ms(100)), 89 * SLOT);
        ages.leave(ms(10));
        assert_eq!(ages.oldest_age_nanos(ms(100)), 69 * SLOT);
        ages.leave(ms(30));
        assert_eq!(ages.oldest_age_nanos(ms(100)), 0);
        assert_eq!(ages.slots(), 0);
    }

    #[test]
    fn an_out_of_order_arrival_joins_the_first_slot_and_leaves_from_it() {
        let mut ages = InFlightAges::default();
        ages.arrive(ms(50));
        ages.arrive(ms(49)); // another thread read the clock earlier
        assert_eq!(ages.len(), 2);
        ages.leave(ms(49));
        ages.leave(ms(50));
        assert_eq!(ages.len(), 0);
        assert_eq!(ages.slots(), 0);
    }

    #[test]
    fn a_stray_leave_changes_nothing() {
        let mut ages = InFlightAges::default();
        ages.leave(ms(5));
        ages.arrive(ms(10));
        ages.leave(ms(900));
        assert_eq!(ages.len(), 1);
        assert_eq!(ages.oldest_age_nanos(ms(20)), 9 * SLOT);
    }

    #[test]
    fn a_stuck_query_bounds_memory_and_keeps_a_lower_bound() {
        let mut ages = InFlightAges::default();
        ages.arrive(ms(0)); // stuck for the whole test
        for t in (1..20_000).step_by(3) {
            ages.arrive(ms(t));
            ages.leave(ms(t));
        }
        assert!(ages.slots() <= MAX_SLOTS);
        assert_eq!(ages.len(), 1);
        // The stuck query was merged into the oldest slot kept, 4095 slots before the last
        // arrival at 19 999 ms: a lower bound on its true 20 s.
        let age = ages.oldest_age_nanos(ms(20_000));
        assert_eq!(age, (MAX_SLOTS as u64 - 1) * SLOT);
        ages.leave(ms(0));
        assert_eq!(ages.len(), 0);
    }

    #[test]
    fn age_since_skips_the_queries_that_arrived_before() {
        let mut ages = InFlightAges::default();
        ages.arrive(ms(10));
        ages.arrive(ms(40));
        ages.arrive(ms(70));
        assert_eq!(ages.oldest_age_since(None, ms(100)), Some(89 * SLOT));
        assert_eq!(
            ages.oldest_age_since(Some(ms(10)), ms(100)),
            Some(89 * SLOT)
        );
        assert_eq!(
            ages.oldest_age_since(Some(ms(11)), ms(100)),
            Some(59 * SLOT)
        );
        assert_eq!(
            ages.oldest_age_since(Some(ms(50)), ms(100)),
            Some(29 * SLOT)
        );
        assert_eq!(ages.oldest_age_since(Some(ms(71)), ms(100)), None);
        assert_eq!(ages.oldest_age_since(Some(ms(5)), ms(100)), Some(89 * SLOT));
        assert_eq!(InFlightAges::default().oldest_age_since(None, ms(1)), None);
    }

    #[test]
    fn a_long_gap_restarts_the_span_without_losing_queries() {
        let mut ages = InFlightAges::default();
        ages.arrive(ms(0));
        ages.arrive(ms(1));
        ages.arrive(ms(100_000)); // long after: both old ones are still in flight
        assert_eq!(ages.len(), 3);
        assert_eq!(ages.slots(), MAX_SLOTS);
        let age = ages.oldest_age_nanos(ms(100_001));
        assert!(age >= (MAX_SLOTS as u64 - 1) * SLOT, "still long: {age}");
        ages.leave(ms(0));
        ages.leave(ms(1));
        ages.leave(ms(100_000));
        assert_eq!(ages.len(), 0);
    }
}
