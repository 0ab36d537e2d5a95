//! The server-side load tracker: what a replica answers when a Prequal client probes it.
//!
//! A probe reply carries two signals (Prequal paper, section 4, "Load signals"):
//!
//! - **RIF**, the replica's requests in flight: a counter incremented when a query reaches the
//!   application and decremented when the application hands its response back;
//! - **latency**, an estimate of how long a query arriving now would take. Each finished query
//!   leaves a sample (its latency, tagged with the RIF it saw when it arrived); the estimate is
//!   the median of the recent samples recorded at (or near) the current RIF. Tagging by RIF is
//!   what makes the estimate predictive: it answers "how slow are queries when this many others
//!   are in flight", not "how slow were queries on average".
//!
//! "Recent" adapts to the rate. At moderate and high rates the samples of the last few
//! milliseconds are plenty, so the estimate uses only those that finished within
//! [`EstimatorConfig::window`] (default 10 ms). At low rates that window is nearly empty, so the
//! estimate falls back to the [`EstimatorConfig::min_samples`] newest samples (default 16).
//!
//! Samples older than [`EstimatorConfig::max_age`] (default 1 s) do not count as "at this RIF":
//! a replica that was fast at RIF 0 an hour ago and is slow now must not report the old speed
//! just because its RIF fell back to 0. The search for samples near the current RIF skips stale
//! ones and widens to other RIFs for fresh ones; only when the whole replica has fewer than
//! `min_samples` fresh samples (it has been idle) does the estimate use the newest samples of
//! any RIF, however old, back to the first gap longer than `max_age + stale_half_life` in the
//! replica's traffic (a replica that clients shunned for a long while is judged by the queries
//! it served after the gap, not by those before it); and once the replica has had no fresh
//! sample at all, that stale estimate halves every [`EstimatorConfig::stale_half_life`]
//! (default 10 s), so a replica that clients shun for being slow is tried again eventually
//! instead of never. The first query it then gets is a trial: until it finishes, the report
//! is the estimate from before the fade.
//!
//! Queries whose clients went away before the answer ([`LoadTracker::on_abandon`]) leave their
//! wait as a sample when it is longer than the estimate: it is a lower bound on their latency,
//! and without it a replica too slow for its clients' patience would have no slow samples at
//! all and report the speed of its last queries that did finish. They also keep a stall in view
//! that cancellations would hide ([`LoadTracker::abandoned_stall_for`]): once one of them had
//! waited longer than every recent query and none that arrived later has finished, nothing
//! since its arrival has, and the report is at least that long.
//!
//! Two signals go beyond the paper's median, each with a key to turn it off. The stale decay
//! above is one. The other is the **in-flight floor** ([`EstimatorConfig::in_flight_floor`]):
//! a median of finished queries cannot see a stall until the first stalled query finishes, so
//! [`LoadTracker`] also watches the queries in flight. When the oldest one that no later query
//! has overtaken ([`LoadTracker::stalled_for`]) has waited longer than the slowest sample
//! behind the median, the report grows by the difference. Overtaken queries do not count, so
//! one long-lived stream or hung handler on an otherwise healthy replica changes nothing.
//!
//! ## Data structure
//!
//! [`LatencyEstimator`] keeps one bucket per arrival RIF: exact for RIF 0 to 15, then four
//! buckets per doubling (16-19, 20-23, 24-27, 28-31, 32-39, ...), so nearby RIFs share a bucket
//! exactly where they behave alike. Each bucket is a ring of the last 32 samples, allocated once
//! in [`LatencyEstimator::new`], plus one more ring of the newest 32 samples of any RIF.
//! Recording writes two slots: O(1), no allocation. A ring holds its samples in recording
//! order, and recording times never go backwards, so a ring is sorted by time: its fresh samples
//! are a suffix found by a search, and its newest are at its end. Estimating copies the fresh
//! samples of the bucket of the current RIF to a stack buffer and, while it has fewer than
//! `min_samples`, widens to the neighbouring buckets on both sides (a bucket whose newest sample
//! is stale is skipped without reading it, and the walk ends early once only buckets that never
//! held a sample are left), each bucket's samples one sorted run; it keeps the samples inside
//! the window (or the `min_samples` newest, merged from the runs' ends, if too few are recent)
//! and returns their median, sorting at most 64 latencies (up to 16 by a sorting network, see
//! `median.rs`). When the current RIF's own bucket holds `min_samples` fresh samples, the
//! common case under load, the estimate reads them straight from its ring instead.
//! With too few fresh samples anywhere it takes the newest of the any-RIF ring. That is a bounded
//! amount of work however long the replica has run. Repeated probes between two finishes
//! are cheaper still: each bucket remembers its last estimate for as long as it provably holds
//! (until a sample is recorded into a bucket it read, a sample it gathered goes stale, or, when
//! the window chose its samples, one of them leaves the window), so a repeat costs a lookup and
//! returns exactly what a fresh computation would.
//!
//! [`LoadTracker`] combines the RIF counter, the estimator, and bucketed counters of completions
//! and errors over [`EstimatorConfig::rate_window`] (default 1 s) into a [`LoadReport`].
//!
//! Everything here is single-threaded and takes `now` as an argument, like the rest of the core;
//! a server shares a tracker between threads behind a lock (each operation is short).
//!
//! ```
//! use std::time::Duration;
//! use prequal_core::{EstimatorConfig, LoadTracker, Outcome, Time};
//!
//! let mut tracker = LoadTracker::new(EstimatorConfig::default());
//! let arrival = tracker.on_arrival(Time::from_millis(1));
//! assert_eq!(tracker.rif(), 1);
//! tracker.on_finish(arrival, Outcome::Success, Time::from_millis(4));
//! let report = tracker.report(Time::from_millis(5));
//! assert_eq!(report.rif, 0);
//! assert_eq!(report.latency, Duration::from_millis(3));
//! ```

mod in_flight;
mod median;
mod memo;
mod window;

#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::policy::{LoadReport, Outcome};
use crate::time::{Time, duration_nanos};
use in_flight::InFlightAges;
use median::median;
use memo::{Estimate, Memo, Span};
use window::WindowedCounter;

/// Samples kept per RIF bucket.
const RING: usize = 32;
/// RIFs below this have a bucket each.
const EXACT: u32 = 16;
/// Buckets per doubling of RIF above [`EXACT`], as a power of two.
const SUB_BITS: u32 = 2;
/// Bucket count: the exact ones, then 4 per octave for octaves 4 to 31 of a `u32`.
const BUCKETS: usize = EXACT as usize + (32 - 4) * (1 << SUB_BITS);
/// The estimate gathers at most `min_samples - 1` samples and then one more bucket.
const GATHER: usize = 2 * RING;

/// Settings of the load tracker. Embedded (as `[estimator]` or similar) in the sidecar's and the
/// testbed backend's configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EstimatorConfig {
    /// `window`, default `"10ms"`: samples that finished within this span are "recent"; when at
    /// least `min_samples` of them are near the current RIF, only they count. Must be > 0.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// `min_samples`, default `16`: below this many recent samples, the estimate uses this many
    /// newest samples instead (the low-rate fallback, the paper's "last K"). Between 1 and 32.
    pub min_samples: usize,
    /// `rate_window`, default `"1s"`: the span over which qps and error rate are measured.
    /// Between 10 ms and 1 hour.
    #[serde(with = "humantime_serde")]
    pub rate_window: Duration,
    /// `max_age`, default `"1s"`: samples older than this are stale and never stand for the
    /// current RIF; they are used only when the replica has too few fresh samples at any RIF.
    /// Must be at least `window`.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// `in_flight_floor`, default `true`: when a query in flight that no later query has
    /// overtaken has waited longer than the slowest sample behind the median, the report grows
    /// by the difference, so a replica that stalls shows it before its first slow query
    /// finishes (see the module docs). `false` reports the median alone, as the Prequal paper
    /// does.
    pub in_flight_floor: bool,
    /// `stale_half_life`, default `"10s"`: once a replica has had no fresh sample at all for
    /// `max_age` (it gets no traffic), its estimate halves for every `stale_half_life` more, so
    /// a replica that was shunned for being slow is eventually tried again. `"0s"` keeps the
    /// stale estimate for ever.
    #[serde(with = "humantime_serde")]
    pub stale_half_life: Duration,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_millis(10),
            min_samples: 16,
            rate_window: Duration::from_secs(1),
            max_age: Duration::from_secs(1),
            in_flight_floor: true,
            stale_half_life: Duration::from_secs(10),
        }
    }
}

/// An [`EstimatorConfig`] value the tracker cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("estimator: `{key}` {message}")]
pub struct EstimatorConfigError {
    /// The offending key.
    pub key: &'static str,
    /// What was wrong and what is expected.
    pub message: String,
}

impl EstimatorConfig {
    /// Checks every setting; the error names the offending key.
    pub fn validate(&self) -> Result<(), EstimatorConfigError> {
        let bad = |key, message: String| Err(EstimatorConfigError { key, message });
        if self.window.is_zero() {
            return bad("window", "must be greater than zero".into());
        }
        if !(1..=RING).contains(&self.min_samples) {
            return bad(
                "min_samples",
                format!("must be between 1 and {RING}, got {}", self.min_samples),
            );
        }
        let rate_range = Duration::from_millis(10)..=Duration::from_secs(3600);
        if !rate_range.contains(&self.rate_window) {
            return bad(
                "rate_window",
                format!("must be between 10ms and 1h, got {:?}", self.rate_window),
            );
        }
        if self.max_age < self.window {
            return bad(
                "max_age",
                format!(
                    "must be at least `window` ({:?}), got {:?}",
                    self.window, self.max_age
                ),
            );
        }
        Ok(())
    }
}

/// One latency sample: when it was recorded and how long the query took, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at: u64,
    latency: u64,
}

/// A ring of the newest samples of one RIF bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    samples: [Sample; RING],
    /// Slot the next sample goes to.
    next: u8,
    /// Slots filled so far (saturates at `RING`).
    len: u8,
}

impl Default for Bucket {
    fn default() -> Self {
        Self {
            samples: [Sample::default(); RING],
            next: 0,
            len: 0,
        }
    }
}

impl Bucket {
    fn push(&mut self, sample: Sample) {
        self.samples[usize::from(self.next)] = sample;
        self.next = ((usize::from(self.next) + 1) % RING) as u8;
        self.len = (usize::from(self.len) + 1).min(RING) as u8;
    }

    fn filled(&self) -> &[Sample] {
        &self.samples[..usize::from(self.len)]
    }

    /// The samples from the oldest recorded to the newest, as two slices (the ring wraps).
    /// Recording times never decrease, so both are sorted by time.
    fn in_order(&self) -> [&[Sample]; 2] {
        let split = if usize::from(self.len) < RING {
            0
        } else {
            usize::from(self.next)
        };
        let filled = self.filled();
        [&filled[split..], &filled[..split]]
    }

    /// When the newest sample was recorded (0 when empty).
    fn newest_at(&self) -> u64 {
        if self.len == 0 {
            return 0;
        }
        self.samples[(usize::from(self.next) + RING - 1) % RING].at
    }
}

/// The bucket that holds samples tagged with `rif`.
fn bucket_of(rif: u32) -> usize {
    if rif < EXACT {
        return rif as usize;
    }
    // The position of the highest set bit picks the octave (4 for 16..=31); the next SUB_BITS
    // bits pick the sub-bucket within it.
    let octave = 31 - rif.leading_zeros();
    let sub = (rif >> (octave - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    let index = EXACT + ((octave - 4) << SUB_BITS) + sub;
    (index as usize).min(BUCKETS - 1)
}

/// Latency samples tagged with the RIF seen at arrival; single-threaded, O(1) record.
///
/// See the module docs for how an estimate is formed.
#[derive(Debug, Clone)]
pub struct LatencyEstimator {
    config: EstimatorConfig,
    buckets: Box<[Bucket]>,
    /// The highest bucket that has ever held a sample.
    top: usize,
    /// The newest samples of any RIF: the fallback when no RIF has enough fresh ones.
    newest: Bucket,
    /// Estimates already computed, reused while provably unchanged.
    memo: Memo,
}

impl LatencyEstimator {
    /// An empty estimator. `config` should have passed [`EstimatorConfig::validate`]; an
    /// out-of-range `min_samples` is clamped to 1..=32 rather than trusted.
    pub fn new(config: EstimatorConfig) -> Self {
        let config = EstimatorConfig {
            min_samples: config.min_samples.clamp(1, RING),
            ..config
        };
        Self {
            config,
            buckets: vec![Bucket::default(); BUCKETS].into_boxed_slice(),
            top: 0,
            newest: Bucket::default(),
            memo: Memo::new(BUCKETS),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &EstimatorConfig {
        &self.config
    }

    /// Records that a query which arrived when `rif_at_arrival` others were in flight took
    /// `latency`, finishing at `now`.
    ///
    /// Samples are kept in the order they are recorded, so a `now` earlier than the last one
    /// recorded (threads that read the clock before taking the tracker's lock) counts as that
    /// last time.
    pub fn record(&mut self, rif_at_arrival: u32, latency: Duration, now: Time) {
        let sample = Sample {
            at: now.as_nanos().max(self.newest.newest_at()),
            latency: duration_nanos(latency),
        };
        let bucket = bucket_of(rif_at_arrival);
        self.buckets[bucket].push(sample);
        self.top = self.top.max(bucket);
        self.newest.push(sample);
        self.memo.invalidate(bucket);
    }

    /// Median of recent samples at or near `rif`; None before any sample.
    pub fn estimate(&self, rif: u32, now: Time) -> Option<Duration> {
        self.estimate_with_max(rif, now).map(|(median, _)| median)
    }

    /// The median of recent samples at or near `rif` and the largest of those same samples;
    /// None before any sample.
    pub fn estimate_with_max(&self, rif: u32, now: Time) -> Option<(Duration, Duration)> {
        self.estimate_nanos(rif, now)
            .map(|e| (Duration::from_nanos(e.median), Duration::from_nanos(e.max)))
    }

    /// [`LatencyEstimator::estimate_with_max`] in nanoseconds.
    fn estimate_nanos(&self, rif: u32, now: Time) -> Option<Estimate> {
        let (center, now) = (bucket_of(rif), now.as_nanos());
        match self.memo.get(center, now) {
            Some(hit) => hit,
            None => {
                let (value, until, span) = self.compute_with_span(center, now);
                self.memo.put(center, now, until, span, value);
                value
            }
        }
    }

    /// When the estimate goes (or went) stale: `max_age` after the newest sample.
    pub fn stale_since(&self) -> Time {
        Time::from_nanos(
            self.newest
                .newest_at()
                .saturating_add(duration_nanos(self.config.max_age)),
        )
    }

    /// How much an idle replica's stale estimate still counts at `now`: 1 while the newest
    /// sample is at most `max_age` old, then halving every `stale_half_life` (always 1 when
    /// that is zero).
    pub fn stale_factor(&self, now: Time) -> f64 {
        let half_life = duration_nanos(self.config.stale_half_life);
        let stale_since = self.stale_since().as_nanos();
        let now = now.as_nanos();
        if half_life == 0 || now <= stale_since {
            return 1.0;
        }
        let halvings = (now - stale_since) as f64 / half_life as f64;
        (-halvings).exp2()
    }

    /// The estimate for bucket `center` at `now`, and the last instant at which it still holds
    /// if nothing is recorded meanwhile (when the first sample gathered goes stale or, if the
    /// window chose the samples, the first of them leaves it; see [`memo`]).
    #[cfg(test)]
    fn compute(&self, center: usize, now: u64) -> (Option<Estimate>, u64) {
        let (value, until, _) = self.compute_with_span(center, now);
        (value, until)
    }

    /// Like `compute`, also saying which buckets the estimate read.
    fn compute_with_span(&self, center: usize, now: u64) -> (Option<Estimate>, u64, Span) {
        if let Some(computed) = self.compute_in_bucket(center, now) {
            return computed;
        }
        let mut runs = Runs::new();
        let (lo, hi) = self.gather(center, now, &mut runs);
        let mut span = Span {
            lo,
            hi,
            newest: false,
        };
        let mut until = runs.oldest().map_or(u64::MAX, |at| {
            at.saturating_add(duration_nanos(self.config.max_age))
        });
        if runs.len < self.config.min_samples {
            // Idle replica: too few fresh samples at any RIF, so the newest of any age, back to
            // the first gap in its traffic longer than `max_age + stale_half_life`: samples from
            // before such a gap describe another regime once anything has finished after it (a
            // replica shunned while slow is judged by the queries it served since). Shorter
            // gaps are bridged, so a few lucky queries after a brief lull do not decide alone.
            let gap = duration_nanos(
                self.config
                    .max_age
                    .saturating_add(self.config.stale_half_life),
            );
            runs.clear();
            runs.push_run(self.newest.in_order(), 0);
            let samples = &runs.buf[..runs.len];
            let after_gap = (1..samples.len())
                .rev()
                .find(|&i| samples[i].at.saturating_sub(samples[i - 1].at) > gap)
                .unwrap_or(0);
            runs.drop_front(after_gap);
            span.newest = true;
        }
        if runs.len == 0 {
            return (None, until, span);
        }
        let window = duration_nanos(self.config.window);
        let mut latencies = [0u64; GATHER];
        let (recent, oldest_recent) = runs.since(now.saturating_sub(window), &mut latencies);
        let chosen = if recent >= self.config.min_samples {
            // The choice holds until the first of these samples leaves the window. When too
            // few are recent, samples leaving the window changes nothing: fewer still are.
            until = until.min(oldest_recent.saturating_add(window));
            &mut latencies[..recent]
        } else {
            // Too few recent samples: the newest `min_samples` (or all, if that is fewer).
            let n = runs.newest(self.config.min_samples, &mut latencies);
            &mut latencies[..n]
        };
        let estimate = estimate_of(chosen);
        (Some(estimate), until, span)
    }

    /// The common case of `compute_with_span`, read straight from the rings: the bucket
    /// `center` alone holds at least `min_samples` fresh samples, so the gather would stop
    /// there with one run. Gives the same result, or None when that is not the case.
    fn compute_in_bucket(&self, center: usize, now: u64) -> Option<(Option<Estimate>, u64, Span)> {
        let wanted = self.config.min_samples;
        let oldest = now.saturating_sub(duration_nanos(self.config.max_age));
        let bucket = &self.buckets[center];
        if bucket.len == 0 || bucket.newest_at() < oldest {
            return None;
        }
        let fresh = suffix_since(bucket.in_order(), oldest);
        if fresh[0].len() + fresh[1].len() < wanted {
            return None;
        }
        let mut until = first_at(fresh)?.saturating_add(duration_nanos(self.config.max_age));
        let window = duration_nanos(self.config.window);
        let recent = suffix_since(fresh, now.saturating_sub(window));
        let chosen = if recent[0].len() + recent[1].len() >= wanted {
            until = until.min(first_at(recent)?.saturating_add(window));
            recent
        } else {
            suffix_len(fresh, wanted)
        };
        let mut latencies = [0u64; RING];
        let mut n = 0;
        // Part by part: a chained iterator costs a branch per sample to know which part it is in.
        for part in chosen {
            for (slot, sample) in latencies[n..].iter_mut().zip(part) {
                *slot = sample.latency;
            }
            n = (n + part.len()).min(RING);
        }
        let chosen = &mut latencies[..n];
        let estimate = estimate_of(chosen);
        let span = Span {
            lo: center,
            hi: center,
            newest: false,
        };
        Some((Some(estimate), until, span))
    }

    /// Copies the fresh samples (no older than `max_age`) into `runs`, one run per bucket, from
    /// the bucket `center` outwards, alternating below and above, until at least `min_samples`
    /// are in or every bucket was visited. Returns the lowest and highest bucket the walk
    /// covered (when it ends early, past buckets that never held a sample, the ends the full
    /// walk would have reached: the memo's span must cover them).
    fn gather(&self, center: usize, now: u64, runs: &mut Runs) -> (usize, usize) {
        let wanted = self.config.min_samples;
        let oldest = now.saturating_sub(duration_nanos(self.config.max_age));
        self.copy_fresh(center, oldest, runs);
        let (mut lo, mut hi) = (center, center);
        let mut distance = 1;
        while runs.len < wanted && distance < BUCKETS {
            if distance > center && center + distance > self.top {
                // Nothing is left to visit but buckets that never held a sample: the walk
                // would end at both ends without adding anything.
                return (0, BUCKETS - 1);
            }
            if let Some(below) = center.checked_sub(distance) {
                self.copy_fresh(below, oldest, runs);
                lo = below;
            }
            if runs.len < wanted && center + distance < BUCKETS {
                self.copy_fresh(center + distance, oldest, runs);
                hi = center + distance;
            }
            distance += 1;
        }
        (lo, hi)
    }

    /// Appends the samples of bucket `index` recorded at or after `oldest`, as one run.
    fn copy_fresh(&self, index: usize, oldest: u64, runs: &mut Runs) {
        let bucket = &self.buckets[index];
        if bucket.len == 0 || bucket.newest_at() < oldest {
            return;
        }
        runs.push_run(bucket.in_order(), oldest);
    }
}

/// The samples of a ring's two sorted parts recorded at or after `since`, as two parts.
fn suffix_since(parts: [&[Sample]; 2], since: u64) -> [&[Sample]; 2] {
    let [a, b] = parts;
    let cut = b.partition_point(|s| s.at < since);
    if cut > 0 {
        // Part `a` is older than b's first sample, so older than `since`.
        return [&[], &b[cut..]];
    }
    [&a[a.partition_point(|s| s.at < since)..], b]
}

/// The estimate from the chosen latencies: their median and their largest, read off the end
/// once the median has sorted them. Sorts `latencies`.
fn estimate_of(latencies: &mut [u64]) -> Estimate {
    let median = median(latencies);
    Estimate {
        median,
        max: latencies.last().copied().unwrap_or(0),
    }
}

/// The time of the first sample of two consecutive parts, if any.
fn first_at(parts: [&[Sample]; 2]) -> Option<u64> {
    parts[0].first().or(parts[1].first()).map(|s| s.at)
}

/// The last `n` samples (all, if fewer) of two consecutive parts, as two parts.
fn suffix_len(parts: [&[Sample]; 2], n: usize) -> [&[Sample]; 2] {
    let [a, b] = parts;
    if n <= b.len() {
        return [&[], &b[b.len() - n..]];
    }
    [&a[a.len().saturating_sub(n - b.len())..], b]
}

/// The samples one estimate reads, in a stack buffer: one run per bucket, each in the order
/// its samples were recorded (oldest first).
struct Runs {
    buf: [Sample; GATHER],
    len: usize,
    /// Where each run ends in `buf`.
    ends: [u8; GATHER],
    count: usize,
}

impl Runs {
    fn new() -> Self {
        Runs {
            buf: [Sample::default(); GATHER],
            len: 0,
            ends: [0; GATHER],
            count: 0,
        }
    }

    /// Forgets every run (the buffer's contents are overwritten by the next ones).
    fn clear(&mut self) {
        self.len = 0;
        self.count = 0;
    }

    /// Appends the samples recorded at or after `oldest` as one run. Never overflows: the
    /// gather adds a run only while fewer than `min_samples <= RING` are in, and a run holds
    /// at most `RING`.
    fn push_run(&mut self, parts: [&[Sample]; 2], oldest: u64) {
        let start = self.len;
        for fresh in suffix_since(parts, oldest) {
            let n = fresh.len().min(GATHER - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&fresh[..n]);
            self.len += n;
        }
        if self.len > start && self.count < GATHER {
            self.ends[self.count] = self.len as u8;
            self.count += 1;
        }
    }

    /// Keeps a single run's samples from `first` on.
    fn drop_front(&mut self, first: usize) {
        self.buf.copy_within(first..self.len, 0);
        self.len -= first;
        self.ends[0] = self.len as u8;
        self.count = usize::from(self.len > 0);
    }

    /// The time of the oldest sample.
    fn oldest(&self) -> Option<u64> {
        self.buf[..self.len].iter().map(|s| s.at).min()
    }

    /// The start of run `r` in `buf`.
    fn start(&self, r: usize) -> usize {
        if r == 0 {
            0
        } else {
            usize::from(self.ends[r - 1])
        }
    }

    /// Copies the latencies of the samples recorded at or after `since` into `out`; returns
    /// how many and the oldest time among them (`u64::MAX` when none).
    fn since(&self, since: u64, out: &mut [u64; GATHER]) -> (usize, u64) {
        let (mut n, mut oldest) = (0, u64::MAX);
        for sample in &self.buf[..self.len] {
            if sample.at >= since {
                out[n] = sample.latency;
                oldest = oldest.min(sample.at);
                n += 1;
            }
        }
        (n, oldest)
    }

    /// Copies the latencies of the `k` newest samples (all, if fewer) into `out`, merging the
    /// runs from their newest ends; returns how many.
    fn newest(&self, k: usize, out: &mut [u64; GATHER]) -> usize {
        if self.count == 1 || self.len <= k {
            let first = self.len.saturating_sub(k);
            for (slot, sample) in out.iter_mut().zip(&self.buf[first..self.len]) {
                *slot = sample.latency;
            }
            return self.len - first;
        }
        let mut tails = [0usize; GATHER];
        for (r, tail) in tails.iter_mut().enumerate().take(self.count) {
            *tail = usize::from(self.ends[r]);
        }
        for slot in out.iter_mut().take(k) {
            // The run whose last untaken sample is newest (the lower run on a tie).
            let mut best: Option<usize> = None;
            for r in 0..self.count {
                if tails[r] > self.start(r)
                    && best.is_none_or(|b| self.buf[tails[r] - 1].at > self.buf[tails[b] - 1].at)
                {
                    best = Some(r);
                }
            }
            let Some(b) = best else { break };
            tails[b] -= 1;
            *slot = self.buf[tails[b]].latency;
        }
        k
    }
}

/// What a query's arrival left behind, handed back at its finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When the query arrived.
    pub at: Time,
    /// RIF seen at arrival, before counting itself.
    pub rif: u32,
}

/// RIF counter + [`LatencyEstimator`] + recent qps / error-rate windows: one replica, one
/// thread.
#[derive(Debug, Clone)]
pub struct LoadTracker {
    rif: u32,
    estimator: LatencyEstimator,
    completions: WindowedCounter,
    errors: WindowedCounter,
    /// Queries in flight by arrival time, for the age of the oldest.
    in_flight: InFlightAges,
    /// The latest arrival time among the queries that have finished: a query in flight that
    /// arrived before it has been overtaken (see [`LoadTracker::stalled_for`]).
    last_finished_arrival: Option<Time>,
    /// A stall that abandoned queries proved: the arrival of the oldest abandoned query that no
    /// later query has overtaken, and when the latest such query was abandoned (see
    /// [`LoadTracker::abandoned_stall_for`]).
    abandoned_stall: Option<AbandonedStall>,
    /// The first event seen, so rates early in a replica's life are not diluted by a window
    /// that reaches back before it started.
    first_seen: Option<Time>,
}

/// A stall seen through abandoned queries: nothing that arrived at or after `since` has
/// finished, and the latest of those queries was abandoned at `last_abandon`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct AbandonedStall {
    since: Time,
    last_abandon: Time,
}

impl AbandonedStall {
    /// Still evidence at `now`: its last abandon is at most `max_age` old.
    fn is_recent(&self, now: Time, max_age: Duration) -> bool {
        now.saturating_since(self.last_abandon) <= max_age
    }
}

impl LoadTracker {
    /// A tracker with nothing in flight and no samples.
    pub fn new(config: EstimatorConfig) -> Self {
        Self {
            rif: 0,
            estimator: LatencyEstimator::new(config),
            completions: WindowedCounter::new(config.rate_window),
            errors: WindowedCounter::new(config.rate_window),
            in_flight: InFlightAges::default(),
            last_finished_arrival: None,
            abandoned_stall: None,
            first_seen: None,
        }
    }

    /// A query reached the application: counts it in flight.
    pub fn on_arrival(&mut self, now: Time) -> Arrival {
        self.first_seen.get_or_insert(now);
        let arrival = Arrival {
            at: now,
            rif: self.rif,
        };
        self.rif = self.rif.saturating_add(1);
        self.in_flight.arrive(now);
        arrival
    }

    /// The application handed back the response of the query that `arrival` describes.
    ///
    /// Error responses do not feed the latency estimate: a replica that fails fast would
    /// otherwise look quick and attract more traffic (sinkholing). They still count in the
    /// error rate, which clients use to avoid such a replica.
    pub fn on_finish(&mut self, arrival: Arrival, outcome: Outcome, now: Time) {
        self.first_seen.get_or_insert(arrival.at);
        self.rif = self.rif.saturating_sub(1);
        self.in_flight.leave(arrival.at);
        self.last_finished_arrival = self.last_finished_arrival.max(Some(arrival.at));
        if self
            .abandoned_stall
            .is_some_and(|stall| arrival.at >= stall.since)
        {
            // A query that arrived after the stall began has finished: it is over.
            self.abandoned_stall = None;
        }
        if outcome != Outcome::Error {
            let latency = now.saturating_since(arrival.at);
            self.estimator.record(arrival.rif, latency, now);
        }
        self.completions.add(now, 1);
        if outcome.is_failure() {
            self.errors.add(now, 1);
        }
    }

    /// The query that `arrival` describes left at `now` without a response (its client went
    /// away): no longer in flight.
    ///
    /// How long it had waited is a lower bound on its latency. When that bound is above what
    /// the estimate says a query at its RIF takes, it is recorded as a sample: a replica too
    /// slow for its clients' patience, whose queries all end this way, must not report the
    /// fast latency of its last completed ones (or none at all) once the in-flight floor no
    /// longer sees them. A bound below the estimate says nothing against it and is dropped, so
    /// clients that give up early (or hedges cancelled on a healthy replica) never make the
    /// estimate look faster than it is.
    ///
    /// An abandoned query that no later query has overtaken also keeps the stall it was part
    /// of in view, and then leaves the stall's length as its sample: see
    /// [`LoadTracker::abandoned_stall_for`].
    pub fn on_abandon(&mut self, arrival: Arrival, now: Time) {
        self.rif = self.rif.saturating_sub(1);
        self.in_flight.leave(arrival.at);
        let believed = self.estimator.estimate_with_max(arrival.rif, now);
        let mut waited = now.saturating_since(arrival.at);
        let overtaken = self
            .last_finished_arrival
            .is_some_and(|last| arrival.at <= last);
        let max_age = self.estimator.config.max_age;
        let ongoing = self
            .abandoned_stall
            .filter(|stall| stall.is_recent(now, max_age));
        if !overtaken {
            // A query that waited longer than any recent query took, with no later query
            // finished, shows a stall that began no later than it arrived; any query of an
            // ongoing stall that no later query overtook extends it.
            let since = match ongoing {
                Some(stall) => Some(stall.since.min(arrival.at)),
                None if believed.is_none_or(|(_, max)| waited > max) => Some(arrival.at),
                None => None,
            };
            if let Some(since) = since {
                self.abandoned_stall = Some(AbandonedStall {
                    since,
                    last_abandon: now,
                });
                // Nothing that arrived since the stall began has finished: that is the bound.
                waited = now.saturating_since(since);
            }
        }
        if believed.is_none_or(|(median, _)| waited > median) {
            self.estimator.record(arrival.rif, waited, now);
        }
    }

    /// Requests in flight now.
    pub fn rif(&self) -> u32 {
        self.rif
    }

    /// How long the oldest query still in flight has waited at `now` (understated by up to
    /// 1 ms); zero when none is.
    pub fn oldest_in_flight_age(&self, now: Time) -> Duration {
        Duration::from_nanos(self.in_flight.oldest_age_nanos(now))
    }

    /// How long the replica has been stalled at `now`: the age of the oldest query in flight
    /// that no later query has overtaken (none that arrived after it has finished), understated
    /// by up to 1 ms; None when every query in flight has been overtaken or none is in flight.
    ///
    /// In a stall nothing that arrives finishes, so the oldest stuck query counts from the
    /// moment the stall began. A single long query on a healthy replica (a hung handler, a
    /// streamed response held open for minutes) is soon overtaken by later ones that finish,
    /// so it does not count: it says nothing about how long a query arriving now will take.
    pub fn stalled_for(&self, now: Time) -> Option<Duration> {
        self.in_flight
            .oldest_age_since(self.last_finished_arrival, now)
            .map(Duration::from_nanos)
    }

    /// How long abandoned queries prove the replica stalled at `now`: since the arrival of the
    /// oldest abandoned query that no later query has overtaken, once one of them had waited
    /// longer than every recent sample (an early give-up on a healthy replica starts nothing;
    /// later abandons of an ongoing stall extend it whatever their wait). When clients cancel what a
    /// stalled replica holds (hedges that won elsewhere, clients out of patience), its queries
    /// in flight stay young and [`LoadTracker::stalled_for`] sees little, yet nothing that
    /// arrived since the first of them has finished. While queries are in flight the evidence
    /// runs to `now`; once none is, it ends at the last abandon, and it is forgotten `max_age`
    /// after that, so a replica that clients left alone is judged afresh by its next queries.
    pub fn abandoned_stall_for(&self, now: Time) -> Option<Duration> {
        let stall = self.abandoned_stall?;
        if self.stalled_for(now).is_some() {
            Some(now.saturating_since(stall.since))
        } else if stall.is_recent(now, self.estimator.config.max_age) {
            Some(stall.last_abandon.saturating_since(stall.since))
        } else {
            None
        }
    }

    /// Whether a query sent to the replica after its estimate went stale is still in flight.
    fn on_trial(&self, now: Time) -> bool {
        let stale_since = self.estimator.stale_since();
        now > stale_since
            && self
                .in_flight
                .oldest_age_since(Some(stale_since), now)
                .is_some()
    }

    /// The latency estimator, for inspection.
    pub fn estimator(&self) -> &LatencyEstimator {
        &self.estimator
    }

    /// rif, latency estimate at the current RIF (Duration::ZERO before any sample; decayed by
    /// [`LatencyEstimator::stale_factor`] once no sample is fresh; with `in_flight_floor`,
    /// grown by as much as [`LoadTracker::stalled_for`] exceeds the slowest sample behind the
    /// median),
    /// qps and error_rate over the recent window; utilization None (the caller fills it).
    ///
    /// `qps` counts completions per second over the rate window (or since the first event, if
    /// that is more recent); `error_rate` is the failed share of those completions, 0 when
    /// there were none.
    pub fn report(&self, now: Time) -> LoadReport {
        self.report_at_rif(self.rif, now)
    }

    /// Like [`LoadTracker::report`], but for a RIF counted elsewhere: a multi-threaded server
    /// may keep RIF in an atomic outside the lock that guards this tracker, and only feed
    /// finishes here.
    pub fn report_at_rif(&self, rif: u32, now: Time) -> LoadReport {
        let completed = self.completions.sum(now);
        let failed = self.errors.sum(now);
        let span = self.completions.span(now);
        let span = match self.first_seen {
            Some(first) => span.min(now.saturating_since(first)),
            None => span,
        };
        // A floor on the span keeps the first millisecond from reporting absurd rates.
        let secs = span.max(Duration::from_millis(1)).as_secs_f64();
        let error_rate = if completed == 0 {
            0.0
        } else {
            failed as f64 / completed as f64
        };
        LoadReport {
            qps: Some(completed as f64 / secs),
            error_rate: Some(error_rate),
            ..self.report_without_rates_at(rif, now)
        }
    }

    /// [`LoadTracker::report`] without the rates (`qps` and `error_rate` are None), at less
    /// cost: for a reader that uses only RIF and latency (see
    /// [`crate::Policy::reads_probe_rates`]).
    pub fn report_without_rates(&self, now: Time) -> LoadReport {
        self.report_without_rates_at(self.rif, now)
    }

    fn report_without_rates_at(&self, rif: u32, now: Time) -> LoadReport {
        // Nanoseconds until the report is assembled: exact, and cheaper than `Duration`s.
        let Estimate { median, max } = self.estimator.estimate_nanos(rif, now).unwrap_or_default();
        // An idle replica's stale estimate fades, except while its trial query is in flight:
        // the fade invites one query, not as many as its decayed latency and empty queue would
        // draw before any of them has finished.
        let factor = if self.on_trial(now) {
            1.0
        } else {
            self.estimator.stale_factor(now)
        };
        let median = Duration::from_nanos(median);
        let mut latency = if factor < 1.0 {
            median.mul_f64(factor)
        } else {
            median
        };
        if self.estimator.config.in_flight_floor {
            // A query stuck for longer than any recent query took is a stall the median cannot
            // see yet: the report grows by as much as that query outlasts them.
            let stalled_for = self
                .in_flight
                .oldest_age_since(self.last_finished_arrival, now)
                .unwrap_or(0);
            latency = latency.saturating_add(Duration::from_nanos(stalled_for.saturating_sub(max)));
            // Nothing that arrived since the abandoned stall began has finished: a query
            // arriving now takes at least as long as that.
            if let Some(stall) = self.abandoned_stall_for(now) {
                latency = latency.max(stall);
            }
        }
        LoadReport {
            rif,
            latency,
            qps: None,
            utilization: None,
            error_rate: None,
        }
    }
}
