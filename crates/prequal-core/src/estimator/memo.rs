//! A memo of the last estimate per RIF bucket, so repeated probes between two finishes cost a
//! lookup instead of a gather and a median.
//!
//! An estimate depends only on the samples recorded so far, on the bucket of the RIF asked
//! about, and on `now` through two boundaries: which gathered samples are still fresh (no older
//! than `max_age`) and which are inside the window. Time only moves forward, so a sample can
//! only *leave* those sets. The estimate therefore stays exactly the same from the moment it
//! was computed until either a new sample is recorded (the generation changes) or the first of
//! the samples it used crosses one of the two boundaries (`until`). The memo stores that
//! interval; a hit returns the very value a fresh computation would, so results are identical
//! with or without it.

use std::cell::Cell;

/// One bucket's remembered estimate.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The recording generation it was computed in (0 = never computed).
    generation: u64,
    /// When it was computed, in nanoseconds; earlier times must recompute.
    from: u64,
    /// The last instant, in nanoseconds, at which it still holds.
    until: u64,
    /// The estimate in nanoseconds (None before any sample).
    value: Option<u64>,
}

/// Remembered estimates, one per bucket, invalidated wholesale by each recorded sample.
#[derive(Debug, Clone)]
pub(super) struct Memo {
    /// Bumped by every recorded sample; starts at 1 so default entries never match.
    generation: u64,
    entries: Box<[Cell<Entry>]>,
}

impl Memo {
    /// An empty memo for `buckets` buckets.
    pub(super) fn new(buckets: usize) -> Self {
        Self {
            generation: 1,
            entries: vec![Cell::new(Entry::default()); buckets].into_boxed_slice(),
        }
    }

    /// A sample was recorded: every remembered estimate may have changed.
    pub(super) fn invalidate(&mut self) {
        self.generation = self.generation.wrapping_add(1).max(1);
    }

    /// The remembered estimate of `bucket`, if it still holds at `now`.
    pub(super) fn get(&self, bucket: usize, now: u64) -> Option<Option<u64>> {
        let entry = self.entries.get(bucket)?.get();
        let valid = entry.generation == self.generation && entry.from <= now && now <= entry.until;
        valid.then_some(entry.value)
    }

    /// Remembers that `bucket` estimates `value` from `now` through `until`.
    pub(super) fn put(&self, bucket: usize, now: u64, until: u64, value: Option<u64>) {
        if let Some(cell) = self.entries.get(bucket) {
            cell.set(Entry {
                generation: self.generation,
                from: now,
                until,
                value,
            });
        }
    }
}
