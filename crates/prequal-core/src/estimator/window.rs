//! A count of events over a sliding time window, in fixed memory.
//!
//! The window is cut into [`SLOTS`] equal slots; each slot remembers which stretch of time
//! (its epoch, `now / slot width`) it counts. Adding to a slot whose epoch is stale resets it
//! first, so old counts expire without a timer. The sum covers the current slot and the
//! `SLOTS - 1` before it: a window that slides in steps of one slot, which is precise enough for
//! the qps and error rate a replica reports.

use std::cell::Cell;
use std::time::Duration;

use crate::time::{Time, duration_nanos};

/// Slots per window: the window slides in steps of a tenth of its length.
pub(crate) const SLOTS: u64 = 10;

/// Marks a slot that has never counted anything.
const EMPTY: u64 = u64::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    epoch: u64,
    count: u64,
}

/// Events counted over a sliding window of fixed length.
#[derive(Debug, Clone)]
pub(crate) struct WindowedCounter {
    slot_nanos: u64,
    slots: [Slot; SLOTS as usize],
    /// The last sum computed and the epoch it was for, until the next `add`: a replica is
    /// probed several times between two finishes, and the sum only changes when either does.
    cached: Cell<Option<(u64, u64)>>,
}

impl WindowedCounter {
    /// A counter over `window` (at least [`SLOTS`] nanoseconds, so every slot has a width).
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            slot_nanos: (duration_nanos(window) / SLOTS).max(1),
            slots: [Slot {
                epoch: EMPTY,
                count: 0,
            }; SLOTS as usize],
            cached: Cell::new(None),
        }
    }

    fn epoch(&self, now: Time) -> u64 {
        now.as_nanos() / self.slot_nanos
    }

    /// Counts `n` events at `now`.
    pub(crate) fn add(&mut self, now: Time, n: u64) {
        let epoch = self.epoch(now);
        let slot = &mut self.slots[(epoch % SLOTS) as usize];
        if slot.epoch != epoch {
            *slot = Slot { epoch, count: 0 };
        }
        slot.count = slot.count.saturating_add(n);
        self.cached.set(None);
    }

    /// Events counted in the window that ends at `now`.
    pub(crate) fn sum(&self, now: Time) -> u64 {
        let current = self.epoch(now);
        if let Some((epoch, sum)) = self.cached.get()
            && epoch == current
        {
            return sum;
        }
        let sum = self
            .slots
            .iter()
            // A slot from the future (time went backwards) is ignored like an expired one.
            .filter(|s| s.epoch != EMPTY && s.epoch <= current && current - s.epoch < SLOTS)
            .map(|s| s.count)
            .fold(0, u64::saturating_add);
        self.cached.set(Some((current, sum)));
        sum
    }

    /// The length of time [`WindowedCounter::sum`] covers at `now`: the full slots before the
    /// current one plus the part of the current one that has passed.
    pub(crate) fn span(&self, now: Time) -> Duration {
        let start = self.epoch(now).saturating_sub(SLOTS - 1) * self.slot_nanos;
        now.saturating_since(Time::from_nanos(start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_expire_slot_by_slot() {
        let mut counter = WindowedCounter::new(Duration::from_secs(1));
        counter.add(Time::from_millis(50), 3);
        counter.add(Time::from_millis(550), 2);
        assert_eq!(counter.sum(Time::from_millis(600)), 5);
        // At 1.05 s the window covers slots from 0.1 s on: the first add has expired.
        assert_eq!(counter.sum(Time::from_millis(1_050)), 2);
        assert_eq!(counter.sum(Time::from_millis(1_650)), 0);
        // A slot is reused for a later epoch without carrying the old count.
        counter.add(Time::from_millis(2_050), 1);
        assert_eq!(counter.sum(Time::from_millis(2_060)), 1);
    }

    #[test]
    fn span_covers_full_slots_and_the_current_part() {
        let counter = WindowedCounter::new(Duration::from_secs(1));
        assert_eq!(
            counter.span(Time::from_millis(250)),
            Duration::from_millis(250)
        );
        assert_eq!(
            counter.span(Time::from_millis(5_050)),
            Duration::from_millis(950)
        );
    }

    #[test]
    fn time_going_backwards_does_not_count_future_slots() {
        let mut counter = WindowedCounter::new(Duration::from_secs(1));
        counter.add(Time::from_secs(5), 4);
        assert_eq!(counter.sum(Time::from_secs(4)), 0);
        assert_eq!(counter.sum(Time::from_secs(5)), 4);
    }
}
