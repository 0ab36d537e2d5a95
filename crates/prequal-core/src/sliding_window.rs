//! Two event counts over a sliding time window, in fixed memory: the one window behind the retry
//! budget (requests, retries), outlier ejection (successes, failures) and the load tracker's
//! rates (completions, errors).
//!
//! The window is cut into [`BUCKETS`] buckets of `window / BUCKETS` each; a bucket remembers
//! which stretch of time (its epoch, `now / width`) it counts, so old counts expire without a
//! timer, and a sum covers the current bucket and the ones before it: a window that slides in
//! steps of one bucket. One more bucket is kept so that a caller can cover the whole span
//! ending now (the retry budget counts its retries that generously). Time is taken to be the
//! latest seen: a reading earlier than the newest bucket counts in, and reads from, the newest
//! bucket, so a clock going backwards never resurrects old counts nor hides new ones.

use std::cell::Cell;
use std::time::Duration;

use crate::time::{Time, duration_nanos};

/// How many buckets the window is divided into.
pub const BUCKETS: usize = 10;

/// An empty bucket: `(epoch, a, b)` with an epoch no time reaches.
const EMPTY: (u64, u64, u64) = (u64::MAX, 0, 0);

/// Two counters per bucket over a sliding window of [`BUCKETS`] buckets, plus one extra bucket.
/// Reads are pure: a bucket whose epoch is outside the span asked for is simply skipped.
///
/// The newest bucket is kept inline and the older ones behind a pointer: a count goes to the
/// newest bucket almost always, so a balancer that keeps one window per replica (outlier
/// ejection) touches one small record per result instead of a 300-byte one, which matters when
/// a simulation holds thousands of them.
#[derive(Clone, Debug)]
pub(crate) struct SlidingWindow {
    width_nanos: u64,
    /// The newest bucket, `(epoch, a, b)`; epoch = time / width. Its epoch is the latest seen,
    /// so a clock going backwards never resurrects old counts.
    newest: (u64, u64, u64),
    older: Box<Older>,
}

/// `(epoch, buckets)` of a sum.
type SumKey = (u64, u64);

#[derive(Clone, Debug)]
struct Older {
    /// Each at `epoch % (BUCKETS + 1)`; never one as new as `newest`.
    buckets: [(u64, u64, u64); BUCKETS + 1],
    /// The last sum of these older buckets, for `(epoch, buckets)`, until one of them changes
    /// (rarely: when the newest bucket retires, or on `clear`): a replica is probed several
    /// times between two finishes, and a count, which goes to the newest bucket, leaves it
    /// valid without touching this allocation.
    cached: Cell<Option<(SumKey, (u64, u64))>>,
}

/// Equal counts; the remembered sum does not count.
impl PartialEq for SlidingWindow {
    fn eq(&self, other: &Self) -> bool {
        self.width_nanos == other.width_nanos
            && self.newest == other.newest
            && self.older.buckets == other.older.buckets
    }
}

impl SlidingWindow {
    /// A window of `window` (at least [`BUCKETS`] nanoseconds, so every bucket has a width).
    pub(crate) fn new(window: Duration) -> Self {
        let width_nanos = (duration_nanos(window) / BUCKETS as u64).max(1);
        Self {
            width_nanos,
            newest: (0, 0, 0),
            older: Box::new(Older {
                buckets: [EMPTY; BUCKETS + 1],
                cached: Cell::new(None),
            }),
        }
    }

    fn epoch(&self, now: Time) -> u64 {
        (now.as_nanos() / self.width_nanos).max(self.newest.0)
    }

    /// Adds to the current bucket.
    pub(crate) fn add(&mut self, now: Time, a: u64, b: u64) {
        let epoch = self.epoch(now);
        if self.newest.0 != epoch {
            let retired = self.newest;
            if retired.1 != 0 || retired.2 != 0 {
                self.older.buckets[(retired.0 % (BUCKETS as u64 + 1)) as usize] = retired;
                self.older.cached.set(None);
            }
            self.newest = (epoch, 0, 0);
        }
        self.newest.1 = self.newest.1.saturating_add(a);
        self.newest.2 = self.newest.2.saturating_add(b);
    }

    /// Sums over the last `buckets` buckets including the current one (at most `BUCKETS + 1`).
    pub(crate) fn sum(&self, now: Time, buckets: u64) -> (u64, u64) {
        let epoch = self.epoch(now);
        let oldest = epoch.saturating_sub(buckets.saturating_sub(1));
        let in_span = |s: &(u64, u64, u64)| s.0 != u64::MAX && s.0 >= oldest && s.0 <= epoch;
        let older = match self.older.cached.get() {
            Some((key, sum)) if key == (epoch, buckets) => sum,
            _ => {
                let sum = self
                    .older
                    .buckets
                    .iter()
                    .filter(|s| in_span(s))
                    .fold((0u64, 0u64), |(a, b), s| {
                        (a.saturating_add(s.1), b.saturating_add(s.2))
                    });
                self.older.cached.set(Some(((epoch, buckets), sum)));
                sum
            }
        };
        if in_span(&self.newest) {
            (
                older.0.saturating_add(self.newest.1),
                older.1.saturating_add(self.newest.2),
            )
        } else {
            older
        }
    }

    /// Sums over the whole window (the `BUCKETS` most recent buckets).
    pub(crate) fn sum_window(&self, now: Time) -> (u64, u64) {
        self.sum(now, BUCKETS as u64)
    }

    /// The length of time [`SlidingWindow::sum_window`] covers at `now`: the full buckets before
    /// the current one plus the part of the current one that has passed.
    pub(crate) fn span(&self, now: Time) -> Duration {
        let start = self.epoch(now).saturating_sub(BUCKETS as u64 - 1) * self.width_nanos;
        now.saturating_since(Time::from_nanos(start))
    }

    /// Forgets everything (the clock's latest reading stays).
    pub(crate) fn clear(&mut self) {
        self.newest = (self.newest.0, 0, 0);
        self.older.buckets = [EMPTY; BUCKETS + 1];
        self.older.cached.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_expire_bucket_by_bucket() {
        let mut window = SlidingWindow::new(Duration::from_secs(1));
        window.add(Time::from_millis(50), 3, 1);
        window.add(Time::from_millis(550), 2, 0);
        assert_eq!(window.sum_window(Time::from_millis(600)), (5, 1));
        // At 1.05 s the window covers buckets from 0.1 s on: the first add has expired.
        assert_eq!(window.sum_window(Time::from_millis(1_050)), (2, 0));
        // The extra bucket reaches one bucket further back.
        assert_eq!(window.sum(Time::from_millis(1_050), 11), (5, 1));
        assert_eq!(window.sum_window(Time::from_millis(1_650)), (0, 0));
        // A bucket is reused for a later epoch without carrying the old count.
        window.add(Time::from_millis(2_050), 1, 0);
        assert_eq!(window.sum_window(Time::from_millis(2_060)), (1, 0));
    }

    #[test]
    fn span_covers_full_buckets_and_the_current_part() {
        let window = SlidingWindow::new(Duration::from_secs(1));
        assert_eq!(
            window.span(Time::from_millis(250)),
            Duration::from_millis(250)
        );
        assert_eq!(
            window.span(Time::from_millis(5_050)),
            Duration::from_millis(950)
        );
    }

    #[test]
    fn a_clock_going_backwards_reads_and_counts_the_newest_bucket() {
        let mut window = SlidingWindow::new(Duration::from_secs(1));
        window.add(Time::from_secs(5), 4, 0);
        assert_eq!(window.sum_window(Time::from_secs(4)), (4, 0));
        window.add(Time::from_secs(3), 1, 0);
        assert_eq!(window.sum_window(Time::from_secs(5)), (5, 0));
    }

    #[test]
    fn clear_forgets_the_counts_and_the_remembered_sum() {
        let mut window = SlidingWindow::new(Duration::from_secs(1));
        window.add(Time::from_millis(10), 2, 2);
        assert_eq!(window.sum_window(Time::from_millis(20)), (2, 2));
        window.clear();
        assert_eq!(window.sum_window(Time::from_millis(20)), (0, 0));
        assert_eq!(window, SlidingWindow::new(Duration::from_secs(1)));
    }
}
