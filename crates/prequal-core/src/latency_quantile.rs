//! Quantiles of recent latencies: "how slow is slow for this cluster, lately".
//!
//! A driver needs a sense of the normal latency of the replicas it talks to: to judge whether a
//! try that a client abandoned had outlived what a healthy replica takes (then it counts
//! against the replica), to time a hedged request, or to bound a try adaptively. A fixed number
//! in a config file is wrong the day the service changes; [`RecentLatencies`] learns it online.
//!
//! It keeps two log-linear histograms, each covering half of `window` (default 10 s), and
//! answers quantiles over the newer half plus the older one while the older is not past the
//! window: at any moment the answer covers between `window / 2` and `window` of history, and a
//! change in the service shows within one window. Buckets are exact below 32 µs and then 16 per
//! doubling, so a quantile is off by at most one part in 16 (about 6%); the answer is the upper
//! edge of the bucket the quantile falls in, so it errs towards "slower". Recording is O(1)
//! with no allocation; a quantile reads the at most 608 buckets once.
//!
//! Sans-IO like the rest of the core: `now` is an argument, and reads are pure.
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::latency_quantile::RecentLatencies;
//! use prequal_core::Time;
//!
//! let mut recent = RecentLatencies::new(Duration::from_secs(10));
//! for ms in 1..=100 {
//!     recent.record(Duration::from_millis(ms), Time::from_millis(ms));
//! }
//! let p95 = recent.quantile(0.95, Time::from_millis(100)).unwrap();
//! assert!(p95 >= Duration::from_millis(95) && p95 <= Duration::from_millis(101));
//! ```

use std::time::Duration;

use crate::time::{Time, duration_nanos};

/// Values below this many microseconds have a bucket each.
const EXACT: u64 = 32;
/// Buckets per doubling above [`EXACT`], as a power of two.
const SUB_BITS: u32 = 4;
/// The largest octave kept (2^40 µs is about 12.7 days); longer latencies share its buckets.
const MAX_OCTAVE: u32 = 40;
/// Bucket count.
const BUCKETS: usize = EXACT as usize + (((MAX_OCTAVE - 5 + 1) as usize) << SUB_BITS);

/// The bucket of a latency of `us` microseconds.
fn bucket_of(us: u64) -> usize {
    if us < EXACT {
        return us as usize;
    }
    let octave = (63 - us.leading_zeros()).min(MAX_OCTAVE);
    let sub = if octave == 63 - us.leading_zeros() {
        (us >> (octave - SUB_BITS)) & ((1 << SUB_BITS) - 1)
    } else {
        (1 << SUB_BITS) - 1
    };
    EXACT as usize + (((octave - 5) as usize) << SUB_BITS) + sub as usize
}

/// The largest latency, in microseconds, that falls in bucket `index`.
fn upper_edge(index: usize) -> u64 {
    if index < EXACT as usize {
        return index as u64;
    }
    let rest = index - EXACT as usize;
    let octave = (rest >> SUB_BITS) as u32 + 5;
    let sub = (rest & ((1 << SUB_BITS) - 1)) as u64;
    let step = 1u64 << (octave - SUB_BITS);
    (1u64 << octave) + (sub + 1) * step - 1
}

/// One half-window's counts.
#[derive(Clone, Debug)]
struct Histogram {
    counts: Box<[u32; BUCKETS]>,
    total: u64,
    /// When this half began.
    start: Time,
}

impl Histogram {
    fn new(start: Time) -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            start,
        }
    }

    fn clear(&mut self, start: Time) {
        if self.total > 0 {
            self.counts.fill(0);
            self.total = 0;
        }
        self.start = start;
    }
}

/// Recent latencies in two rotating half-window histograms. See the module docs.
#[derive(Clone, Debug)]
pub struct RecentLatencies {
    /// Nanoseconds each half covers.
    half_nanos: u64,
    newer: Histogram,
    older: Histogram,
}

impl RecentLatencies {
    /// Empty, remembering about `window` of history (at least 2 ns).
    pub fn new(window: Duration) -> Self {
        Self {
            half_nanos: (duration_nanos(window) / 2).max(1),
            newer: Histogram::new(Time::ZERO),
            older: Histogram::new(Time::ZERO),
        }
    }

    /// Records one latency observed at `now`. Times that go backwards count as `now` of the
    /// newest half.
    pub fn record(&mut self, latency: Duration, now: Time) {
        self.rotate(now);
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.newer.counts[bucket_of(us)] += 1;
        self.newer.total += 1;
    }

    /// Moves the halves on so that the newer one holds `now`.
    fn rotate(&mut self, now: Time) {
        let end = self.newer.start.as_nanos().saturating_add(self.half_nanos);
        if now.as_nanos() < end {
            return;
        }
        // Halves are aligned to multiples of the half window from the origin.
        let start = Time::from_nanos(now.as_nanos() - now.as_nanos() % self.half_nanos);
        if now.as_nanos() < end.saturating_add(self.half_nanos) {
            std::mem::swap(&mut self.newer, &mut self.older);
            self.newer.clear(start);
        } else {
            self.older.clear(start);
            self.newer.clear(start);
        }
    }

    /// The halves that still count at `now`.
    fn live(&self, now: Time) -> impl Iterator<Item = &Histogram> {
        let window = self.half_nanos.saturating_mul(2);
        [&self.newer, &self.older].into_iter().filter(move |h| {
            h.total > 0 && now.as_nanos() < h.start.as_nanos().saturating_add(window)
        })
    }

    /// How many latencies count at `now`.
    pub fn count(&self, now: Time) -> u64 {
        self.live(now).map(|h| h.total).sum()
    }

    /// The `q` quantile (0 to 1) of the latencies that count at `now`, rounded up to its
    /// bucket's upper edge; `None` when there are none.
    pub fn quantile(&self, q: f64, now: Time) -> Option<Duration> {
        let total = self.count(now);
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest value with at least q of the
        // samples at or below it.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let live: Vec<&Histogram> = self.live(now).collect();
        let mut seen = 0u64;
        for index in 0..BUCKETS {
            seen += live.iter().map(|h| u64::from(h.counts[index])).sum::<u64>();
            if seen >= rank {
                return Some(Duration::from_micros(upper_edge(index)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_ordered_and_cover_their_values() {
        let mut last = 0;
        for us in [
            0,
            1,
            31,
            32,
            33,
            63,
            64,
            100,
            1_000,
            20_000,
            1 << 39,
            1 << 41,
            u64::MAX,
        ] {
            let index = bucket_of(us);
            assert!(index < BUCKETS, "{us}");
            assert!(index >= last, "{us}");
            last = index;
            if us < 1 << (MAX_OCTAVE + 1) {
                assert!(upper_edge(index) >= us, "{us}");
            }
        }
        assert_eq!(upper_edge(bucket_of(31)), 31);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    proptest! {
        #[test]
        fn a_bucket_is_within_one_sixteenth(us in 32u64..(1 << 40)) {
            let edge = upper_edge(bucket_of(us));
            prop_assert!(edge >= us);
            prop_assert!((edge - us) as f64 <= us as f64 / 16.0);
            if bucket_of(us) > 0 {
                prop_assert!(upper_edge(bucket_of(us) - 1) < us);
            }
        }
    }

    #[test]
    fn quantiles_of_a_uniform_spread() {
        let mut recent = RecentLatencies::new(Duration::from_secs(10));
        let now = Time::from_secs(1);
        for ms in 1..=1000 {
            recent.record(Duration::from_millis(ms), now);
        }
        let p50 = recent.quantile(0.5, now).unwrap();
        let p99 = recent.quantile(0.99, now).unwrap();
        assert!(p50 >= Duration::from_millis(500) && p50 <= Duration::from_millis(532));
        assert!(p99 >= Duration::from_millis(990) && p99 <= Duration::from_millis(1_052));
        assert_eq!(recent.count(now), 1000);
    }

    #[test]
    fn old_latencies_leave_within_one_window() {
        let window = Duration::from_secs(10);
        let mut recent = RecentLatencies::new(window);
        for i in 0..100 {
            recent.record(Duration::from_secs(2), Time::from_millis(i));
        }
        for i in 0..100 {
            recent.record(Duration::from_millis(10), Time::from_millis(6_000 + i));
        }
        let mixed = recent.quantile(0.5, Time::from_secs(7)).unwrap();
        assert!(mixed >= Duration::from_millis(10), "both halves count");
        assert!(recent.quantile(0.9, Time::from_secs(7)).unwrap() >= Duration::from_secs(2));
        // Past the window, only the newer latencies are left.
        let later = Time::from_millis(10_500);
        assert_eq!(recent.count(later), 100);
        assert!(recent.quantile(0.99, later).unwrap() <= Duration::from_millis(11));
        // Long after, nothing.
        assert_eq!(recent.quantile(0.5, Time::from_secs(60)), None);
        recent.record(Duration::from_millis(3), Time::from_secs(60));
        assert_eq!(recent.count(Time::from_secs(60)), 1);
    }

    #[test]
    fn same_events_same_answers() {
        let run = || {
            let mut recent = RecentLatencies::new(Duration::from_secs(2));
            let mut out = Vec::new();
            for i in 0..5_000u64 {
                let now = Time::from_millis(i);
                recent.record(Duration::from_micros((i * 7919) % 50_000), now);
                out.push(recent.quantile(0.95, now));
            }
            out
        };
        assert_eq!(run(), run());
    }
}
