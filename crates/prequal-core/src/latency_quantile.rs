//! A quantile of the last `capacity` latencies: O(1) to record, a short walk to query.
//!
//! Hedging waits for "the 95th percentile of recent requests" before it sends a second try; an
//! adaptive per-try timeout waits for a high quantile of recent tries; judging whether an
//! abandoned try "outlived the replica's normal latency" compares it with one. All three need a
//! quantile of a *recent* window that moves with the workload and costs next to nothing per
//! request. [`LatencyQuantile`] keeps:
//!
//! - a ring of the last `capacity` samples (each stored as its bucket number), so the window is
//!   exactly the most recent samples and the oldest one leaves when a new one arrives;
//! - a log-linear histogram of the samples in the ring: values below 32 µs have a bucket each;
//!   above, every power of two is split into 32 equal buckets, so a bucket is at most 1/32
//!   (3.1%) of its value wide, from 1 µs to about 50 days;
//! - one count per power of two, so a query walks at most ~37 groups and 32 buckets.
//!
//! Recording is O(1) (one bucket out, one in). [`LatencyQuantile::quantile`] is a pure read and
//! answers the nearest-rank quantile rounded *up* to its bucket's upper edge: a hedge or a
//! timeout built on it fires at most 3.1% late, never early. The window is counted in samples,
//! not seconds (a quiet client keeps its last `capacity` latencies however old), which is what
//! a hedge delay wants: a stable estimate at any request rate. HdrHistogram (the `hdrhistogram`
//! crate) answers the same query but cannot forget single old samples, which a sliding window
//! needs, hence this small type.
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::LatencyQuantile;
//!
//! let mut recent = LatencyQuantile::new(1000);
//! for ms in 1..=100 {
//!     recent.record(Duration::from_millis(ms));
//! }
//! let p95 = recent.quantile(0.95).unwrap();
//! assert!(p95 >= Duration::from_millis(95) && p95 <= Duration::from_millis(98));
//! ```

use std::time::Duration;

/// Buckets per power of two (and the number of one-microsecond buckets at the bottom).
const SUB: u64 = 32;
/// log2(SUB).
const SUB_BITS: u32 = 5;
/// Latencies are clamped below 2^42 µs (about 50 days).
const MAX_EXP: u32 = 41;
/// Groups: the linear group below `SUB`, then one per power of two up to `MAX_EXP`.
const GROUPS: usize = (MAX_EXP - SUB_BITS + 2) as usize;
const BUCKETS: usize = GROUPS * SUB as usize;

/// The bucket of a latency of `us` microseconds.
fn bucket_of(us: u64) -> usize {
    let us = us.min((1u64 << (MAX_EXP + 1)) - 1);
    if us < SUB {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let sub = (us >> shift) & (SUB - 1);
    ((exp - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The largest latency (µs) that falls into `bucket`.
fn upper_edge_us(bucket: usize) -> u64 {
    let (group, sub) = (bucket as u64 / SUB, bucket as u64 % SUB);
    if group == 0 {
        return sub;
    }
    let shift = group - 1;
    ((SUB + sub + 1) << shift) - 1
}

/// A quantile of the most recent latencies. See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyQuantile {
    /// Bucket of each sample in the window, oldest at `next` once full.
    ring: Box<[u16]>,
    next: usize,
    len: usize,
    counts: Box<[u32]>,
    group_counts: [u32; GROUPS],
}

impl LatencyQuantile {
    /// An empty window of the last `capacity` samples (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            ring: vec![0; capacity.max(1)].into_boxed_slice(),
            next: 0,
            len: 0,
            counts: vec![0; BUCKETS].into_boxed_slice(),
            group_counts: [0; GROUPS],
        }
    }

    /// How many samples the window holds at most.
    pub fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// How many samples the window holds now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a latency; once the window is full, the oldest sample leaves it.
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let bucket = bucket_of(us);
        if self.len == self.ring.len() {
            let old = usize::from(self.ring[self.next]);
            self.counts[old] -= 1;
            self.group_counts[old / SUB as usize] -= 1;
        } else {
            self.len += 1;
        }
        // BUCKETS < 2^16, so a bucket number always fits.
        self.ring[self.next] = bucket as u16;
        self.counts[bucket] += 1;
        self.group_counts[bucket / SUB as usize] += 1;
        self.next = (self.next + 1) % self.ring.len();
    }

    /// The `q` quantile (nearest rank, 0 ≤ q ≤ 1, clamped) of the samples in the window,
    /// rounded up to its bucket's upper edge; None when empty. Pure.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.len == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        // Nearest rank: the smallest sample with at least ceil(q·n) samples at or below it.
        let rank = ((q * self.len as f64).ceil() as u64).clamp(1, self.len as u64);
        let mut seen = 0u64;
        for (group, &in_group) in self.group_counts.iter().enumerate() {
            if seen + u64::from(in_group) < rank {
                seen += u64::from(in_group);
                continue;
            }
            let first = group * SUB as usize;
            for bucket in first..first + SUB as usize {
                seen += u64::from(self.counts[bucket]);
                if seen >= rank {
                    return Some(Duration::from_micros(upper_edge_us(bucket)));
                }
            }
        }
        // Unreachable while the counts add up to `len`; answer the top rather than panic.
        Some(Duration::from_micros(upper_edge_us(BUCKETS - 1)))
    }

    /// Forgets every sample.
    pub fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
        self.counts.fill(0);
        self.group_counts = [0; GROUPS];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for us in [0u64, 1, 31, 32, 33, 63, 64, 65, 1000, 123_456, 1 << 40] {
            let b = bucket_of(us);
            assert!(b >= last, "bucket order at {us}");
            last = b;
            let upper = upper_edge_us(b);
            assert!(upper >= us, "{us} above its bucket's edge {upper}");
            assert!(
                (upper - us) as f64 <= us as f64 / 32.0 + 1.0,
                "{us} -> {upper}"
            );
        }
        assert!(bucket_of(u64::MAX) < BUCKETS);
        for b in 1..BUCKETS {
            assert_eq!(bucket_of(upper_edge_us(b - 1) + 1), b, "bucket {b}");
        }
    }

    #[test]
    fn empty_has_no_quantile_and_clear_forgets() {
        let mut w = LatencyQuantile::new(4);
        assert_eq!(w.quantile(0.5), None);
        w.record(Duration::from_millis(3));
        assert_eq!(w.len(), 1);
        w.clear();
        assert!(w.is_empty() && w.quantile(0.9).is_none());
    }

    #[test]
    fn tracks_a_changing_distribution() {
        let mut w = LatencyQuantile::new(500);
        for i in 0..2000u64 {
            w.record(Duration::from_micros(10_000 + i % 100));
        }
        let p95 = w.quantile(0.95).unwrap();
        assert!(p95 >= Duration::from_micros(10_095) && p95 < Duration::from_millis(11));
        // The workload slows down tenfold: after one window the old samples are gone.
        for i in 0..500u64 {
            w.record(Duration::from_micros(100_000 + i % 100));
        }
        let p50 = w.quantile(0.5).unwrap();
        assert!(p50 >= Duration::from_millis(100) && p50 < Duration::from_millis(104));
    }

    proptest! {
        /// Against sorting the window: the answer is the nearest-rank sample rounded up to its
        /// bucket's edge, so never below it and at most 1/32 above.
        #[test]
        fn matches_sorted_window(
            samples in prop::collection::vec(0u64..5_000_000, 1..400),
            capacity in 1usize..100,
            q in 0.0f64..=1.0,
        ) {
            let mut w = LatencyQuantile::new(capacity);
            for &us in &samples {
                w.record(Duration::from_micros(us));
            }
            let mut window: Vec<u64> = samples.iter().rev().take(capacity).copied().collect();
            window.sort_unstable();
            let rank = ((q * window.len() as f64).ceil() as usize).clamp(1, window.len());
            let exact = window[rank - 1];
            let got = w.quantile(q).unwrap().as_micros() as u64;
            prop_assert!(got >= exact && got as f64 <= exact as f64 * (1.0 + 1.0 / 32.0) + 1.0,
                "q={q} exact={exact} got={got}");
        }
    }
}
