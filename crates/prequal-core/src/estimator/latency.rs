//! [`LatencyEstimator`]: latency samples tagged with their arrival RIF, and the estimate at the
//! current RIF (the median of the fresh samples in and near its bucket). See the module docs of
//! [`crate::estimator`].

use std::time::Duration;

use crate::time::{Time, duration_nanos};

use super::buckets::*;
use super::config::EstimatorConfig;
use super::median::median;
use super::memo::{Estimate, Memo, Span};
use super::runs::*;

/// Latency samples tagged with the RIF seen at arrival; single-threaded, O(1) record.
///
/// See the module docs for how an estimate is formed.
#[derive(Debug, Clone)]
pub struct LatencyEstimator {
    pub(super) config: EstimatorConfig,
    pub(super) buckets: Box<[Bucket]>,
    /// The highest bucket that has ever held a sample.
    pub(super) top: usize,
    /// The newest samples of any RIF: the fallback when no RIF has enough fresh ones.
    pub(super) newest: Bucket,
    /// Estimates already computed, reused while provably unchanged.
    pub(super) memo: Memo,
    /// The instant the stale fade counts from (`max_age` later it starts): the newest sample,
    /// except a trial that could start a faster regime (see [`LatencyEstimator::record`]).
    pub(super) fade_from: u64,
    /// Whether the newest sample was such a trial, which kept the fade running: the next
    /// sample ends the fade whatever it is.
    pub(super) fade_kept: bool,
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
            fade_from: 0,
            fade_kept: false,
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
        // A query that arrived after the estimate had gone stale (a trial: it arrived
        // `latency` before it finished) and could start a faster regime leaves the fade where
        // it was, so the next trial comes at once instead of after another `max_age` and the
        // halvings back down. Only one: the next sample ends the fade, whether it confirms the
        // faster regime (`new_regime` then takes the two) or not.
        let arrived = sample.at.saturating_sub(sample.latency);
        let keep = !self.fade_kept
            && arrived > self.stale_since().as_nanos()
            && self.may_start_regime(sample);
        self.newest.push(sample);
        self.memo.invalidate(bucket);
        if !keep {
            self.fade_from = sample.at;
        }
        self.fade_kept = keep;
    }

    /// Whether `sample`, about to be recorded, lies below half of every one of the newest
    /// samples before it (at least [`REGIME_BEFORE`] of them, at most `min_samples - 2`, none
    /// across a gap in the traffic longer than `max_age + stale_half_life`): the first of a
    /// run of two that [`new_regime`] would take for a faster regime, since it looks at the
    /// newest `min_samples`.
    fn may_start_regime(&self, sample: Sample) -> bool {
        if self.config.min_samples < REGIME_BEFORE + 2 {
            return false;
        }
        let gap = self.regime_gap();
        let [older, newer] = self.newest.in_order();
        let (mut after, mut count, mut fastest) = (sample.at, 0, u64::MAX);
        for before in newer.iter().rev().chain(older.iter().rev()) {
            if count + 2 >= self.config.min_samples || after.saturating_sub(before.at) > gap {
                break;
            }
            fastest = fastest.min(before.latency);
            count += 1;
            after = before.at;
        }
        count >= REGIME_BEFORE && sample.latency.saturating_mul(2) < fastest
    }

    /// A gap in the replica's traffic longer than this (`max_age + stale_half_life`, in
    /// nanoseconds) separates two regimes: samples from before it no longer count once one
    /// follows it.
    fn regime_gap(&self) -> u64 {
        duration_nanos(
            self.config
                .max_age
                .saturating_add(self.config.stale_half_life),
        )
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
    pub(super) fn estimate_nanos(&self, rif: u32, now: Time) -> Option<Estimate> {
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

    /// When the estimate goes (or went) stale: `max_age` after the newest sample, or, when the
    /// newest is a trial that could start a faster regime, after the sample before it (see
    /// [`LatencyEstimator::record`]).
    pub fn stale_since(&self) -> Time {
        Time::from_nanos(
            self.fade_from
                .saturating_add(duration_nanos(self.config.max_age)),
        )
    }

    /// How much an idle replica's stale estimate still counts at `now`: 1 until
    /// [`LatencyEstimator::stale_since`] (`max_age` after the newest sample, unless that is a
    /// trial that kept the fade running), then halving every `stale_half_life` (always 1 when
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
    pub(super) fn compute(&self, center: usize, now: u64) -> (Option<Estimate>, u64) {
        let (value, until, _) = self.compute_with_span(center, now);
        (value, until)
    }

    /// Like `compute`, also saying which buckets the estimate read.
    pub(super) fn compute_with_span(
        &self,
        center: usize,
        now: u64,
    ) -> (Option<Estimate>, u64, Span) {
        if let Some(computed) = self.compute_in_bucket(center, now) {
            return computed;
        }
        let mut runs = Runs::new();
        let (lo, hi, highest) = self.gather(center, now, &mut runs);
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
            let gap = self.regime_gap();
            runs.clear();
            runs.push_run(self.newest.in_order(), 0);
            let samples = &runs.buf[..runs.len];
            let after_gap = (1..samples.len())
                .rev()
                .find(|&i| samples[i].at.saturating_sub(samples[i - 1].at) > gap)
                .unwrap_or(0);
            runs.drop_front(after_gap);
            span.newest = true;
            let window = runs.len.saturating_sub(self.config.min_samples);
            let samples = &runs.buf[window..runs.len];
            // Only stale samples give way to a faster regime. The answer changes when the
            // oldest of these goes stale, but `until` already ends then: a fresh sample here
            // was gathered above.
            let stale = samples.first().is_some_and(|oldest| {
                oldest
                    .at
                    .saturating_add(duration_nanos(self.config.max_age))
                    < now
            });
            if stale && let Some(start) = new_regime(samples) {
                runs.drop_front(window + start);
            }
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
        let mut estimate = estimate_of(chosen);
        if self.config.scale_above_samples
            && !span.newest
            && let Some(highest) = highest.filter(|&highest| highest < center)
        {
            estimate = estimate.scaled(lowest_rif(center), lowest_rif(highest));
        }
        (Some(estimate), until, span)
    }

    /// The common case of `compute_with_span`, read straight from the rings: the bucket
    /// `center` alone holds at least `min_samples` fresh samples, so the gather would stop
    /// there with one run. Gives the same result, or None when that is not the case.
    pub(super) fn compute_in_bucket(
        &self,
        center: usize,
        now: u64,
    ) -> Option<(Option<Estimate>, u64, Span)> {
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
    /// walk would have reached: the memo's span must cover them), and the highest bucket that
    /// gave a sample.
    pub(super) fn gather(
        &self,
        center: usize,
        now: u64,
        runs: &mut Runs,
    ) -> (usize, usize, Option<usize>) {
        let wanted = self.config.min_samples;
        let oldest = now.saturating_sub(duration_nanos(self.config.max_age));
        let mut highest = self.copy_fresh(center, oldest, runs).then_some(center);
        let (mut lo, mut hi) = (center, center);
        let mut distance = 1;
        while runs.len < wanted && distance < BUCKETS {
            if distance > center && center + distance > self.top {
                // Nothing is left to visit but buckets that never held a sample: the walk
                // would end at both ends without adding anything.
                return (0, BUCKETS - 1, highest);
            }
            if let Some(below) = center.checked_sub(distance) {
                if self.copy_fresh(below, oldest, runs) && highest.is_none() {
                    highest = Some(below);
                }
                lo = below;
            }
            if runs.len < wanted && center + distance < BUCKETS {
                if self.copy_fresh(center + distance, oldest, runs) {
                    highest = Some(center + distance);
                }
                hi = center + distance;
            }
            distance += 1;
        }
        (lo, hi, highest)
    }

    /// Appends the samples of bucket `index` recorded at or after `oldest`, as one run; true
    /// when there were any.
    pub(super) fn copy_fresh(&self, index: usize, oldest: u64, runs: &mut Runs) -> bool {
        let bucket = &self.buckets[index];
        if bucket.len == 0 || bucket.newest_at() < oldest {
            return false;
        }
        let before = runs.len;
        runs.push_run(bucket.in_order(), oldest);
        runs.len > before
    }
}

/// Where the newest samples of a replica with too few fresh ones, the oldest of them stale,
/// start a faster regime, if they do: the longest run of newest samples, two or more, all below
/// half the fastest of the [`REGIME_BEFORE`] or more samples before them. A replica back from a
/// slow spell then reports its own speed after two queries, instead of after enough to outvote
/// the spell's samples (at one stray query a second, some ten seconds during which it gets
/// almost no traffic). Samples of one regime are rarely so far apart, one lucky query is never
/// enough, and a replica with a short history has no regime to leave. Only faster: a replica
/// turning slower already shows it through the in-flight floor and the stall its abandoned
/// queries leave, which are forgotten on purpose once they stop.
fn new_regime(samples: &[Sample]) -> Option<usize> {
    let n = samples.len();
    if !(REGIME_BEFORE + 2..=RING).contains(&n) {
        return None;
    }
    // The slowest of every suffix (`min_samples` is at most a ring).
    let mut slowest = [0u64; RING + 1];
    for i in (0..n).rev() {
        slowest[i] = slowest[i + 1].max(samples[i].latency);
    }
    let mut fastest_before = u64::MAX;
    for start in 1..=n - 2 {
        fastest_before = fastest_before.min(samples[start - 1].latency);
        if start >= REGIME_BEFORE && slowest[start].saturating_mul(2) < fastest_before {
            return Some(start);
        }
    }
    None
}

/// The fewest samples that make a regime a new one can be told from ([`new_regime`]).
const REGIME_BEFORE: usize = 4;

/// The estimate from the chosen latencies: their median and their largest, read off the end
/// once the median has sorted them. Sorts `latencies`.
pub(super) fn estimate_of(latencies: &mut [u64]) -> Estimate {
    let median = median(latencies);
    Estimate {
        median,
        max: latencies.last().copied().unwrap_or(0),
    }
}
