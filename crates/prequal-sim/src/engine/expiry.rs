//! Per-client FIFO of expiry times (query deadlines, probe timeouts).
//!
//! A client's deadlines are its dispatch times plus one constant, and its probe timeouts are
//! its probe send times plus another, so each list is already sorted. Keeping them in a FIFO
//! with a single pending wake-up event per list, instead of one queue event per query and per
//! probe, keeps the global event queue several times smaller on large scenarios. Entries whose
//! query or probe finished in time are simply skipped when they come due.

use std::collections::VecDeque;

use prequal_core::Time;

/// Sorted expiry times with at most one wake-up armed.
#[derive(Debug, Default)]
pub(super) struct Expiries {
    items: VecDeque<(Time, u64)>,
    armed: bool,
}

impl Expiries {
    /// Adds `key` expiring at `at` (clamped to keep the list sorted); returns the time of a
    /// wake-up to schedule, if none is armed.
    pub(super) fn push(&mut self, at: Time, key: u64) -> Option<Time> {
        let at = self.items.back().map_or(at, |&(last, _)| at.max(last));
        self.items.push_back((at, key));
        if self.armed {
            return None;
        }
        self.armed = true;
        Some(at)
    }

    /// Removes the keys due at `now` into `out`, drops entries at the front that are no longer
    /// `pending` (answered in time), and returns the next wake-up to schedule, if any.
    pub(super) fn pop_due(
        &mut self,
        now: Time,
        out: &mut Vec<u64>,
        pending: impl Fn(u64) -> bool,
    ) -> Option<Time> {
        while let Some(&(at, key)) = self.items.front() {
            if at <= now {
                out.push(key);
            } else if pending(key) {
                break;
            }
            self.items.pop_front();
        }
        let next = self.items.front().map(|&(at, _)| at);
        self.armed = next.is_some();
        next
    }
}
