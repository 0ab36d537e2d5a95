//! A memo of the last estimate per RIF bucket, so repeated probes between two finishes cost a
//! lookup instead of a gather and a median.
//!
//! An estimate depends only on the samples in the buckets its gather visited (plus, when it
//! fell back to them, the newest samples of any RIF), on the bucket of the RIF asked about, and
//! on `now` through two boundaries: which gathered samples are still fresh (no older than
//! `max_age`) and which are inside the window. Time only moves forward, so a sample can only
//! *leave* those sets. The estimate therefore stays exactly the same from the moment it was
//! computed until either a sample is recorded into one of the buckets it visited (or into any
//! bucket, if it used the any-RIF fallback) or a boundary is crossed that matters (`until`):
//! the first gathered sample going stale, and, only when at least `min_samples` were inside the
//! window and so chose the estimate, the first of those leaving it. With fewer inside, the
//! estimate uses the newest `min_samples` (or all) whatever the window holds, and fewer still
//! will be inside later, so samples leaving the window change nothing. A sample recorded into a bucket the gather never reached
//! cannot change which buckets it visits or what it copies, since the visit order is fixed and
//! stops on a count of what was already copied. The memo stores that interval and that span
//! of buckets; a hit returns the very value a fresh computation would, so results are identical
//! with or without it.

use std::cell::Cell;

use crate::time::scale_with_rif;

/// What one estimate read: the buckets its gather visited, and whether it fell back to the
/// newest samples of any RIF.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Span {
    /// Lowest bucket visited.
    pub(super) lo: usize,
    /// Highest bucket visited.
    pub(super) hi: usize,
    /// Whether the any-RIF ring was used.
    pub(super) newest: bool,
}

/// An estimate: the median of the samples chosen, and the largest of them, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Estimate {
    pub(super) median: u64,
    pub(super) max: u64,
}

impl Estimate {
    /// Samples taken at RIF `from` carried up to RIF `to`: each query in flight ahead of a new
    /// one adds its share, so latency grows as (RIF + 1).
    pub(super) fn scaled(self, to: u32, from: u32) -> Estimate {
        Estimate {
            median: scale_with_rif(self.median, from, to),
            max: scale_with_rif(self.max, from, to),
        }
    }
}

/// One bucket's remembered estimate.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The recording generation it was computed in (0 = never computed).
    generation: u64,
    /// When it was computed, in nanoseconds; earlier times must recompute.
    from: u64,
    /// The last instant, in nanoseconds, at which it still holds.
    until: u64,
    /// What it read.
    span: Span,
    /// The estimate in nanoseconds (None before any sample).
    value: Option<Estimate>,
}

/// Remembered estimates, one per bucket, invalidated by samples recorded where they read.
#[derive(Debug, Clone)]
pub(super) struct Memo {
    /// Bumped by every recorded sample; starts at 1 so default entries never match.
    generation: u64,
    /// Per bucket, the generation of the last sample recorded into it (0 = none yet).
    recorded: Box<[u64]>,
    entries: Box<[Cell<Entry>]>,
}

impl Memo {
    /// An empty memo for `buckets` buckets.
    pub(super) fn new(buckets: usize) -> Self {
        Self {
            generation: 1,
            recorded: vec![0; buckets].into_boxed_slice(),
            entries: vec![Cell::new(Entry::default()); buckets].into_boxed_slice(),
        }
    }

    /// A sample was recorded into `bucket`: estimates that read it may have changed.
    pub(super) fn invalidate(&mut self, bucket: usize) {
        self.generation += 1;
        if let Some(slot) = self.recorded.get_mut(bucket) {
            *slot = self.generation;
        }
    }

    /// The remembered estimate of `bucket`, if it still holds at `now`.
    pub(super) fn get(&self, bucket: usize, now: u64) -> Option<Option<Estimate>> {
        let entry = self.entries.get(bucket)?.get();
        if entry.generation == 0 || now < entry.from || now > entry.until {
            return None;
        }
        let unchanged = if entry.span.newest {
            entry.generation == self.generation
        } else {
            self.recorded
                .get(entry.span.lo..=entry.span.hi)?
                .iter()
                .all(|&g| g <= entry.generation)
        };
        unchanged.then_some(entry.value)
    }

    /// Remembers that `bucket`, having read `span`, estimates `value` from `now` through
    /// `until`.
    pub(super) fn put(
        &self,
        bucket: usize,
        now: u64,
        until: u64,
        span: Span,
        value: Option<Estimate>,
    ) {
        if let Some(cell) = self.entries.get(bucket) {
            cell.set(Entry {
                generation: self.generation,
                from: now,
                until,
                span,
                value,
            });
        }
    }
}
