//! [`Runs`]: the samples one estimate gathers from the buckets it reads, one sorted run per
//! bucket, in a stack buffer; and the newest `n` of them merged from the runs' ends.

use super::buckets::*;

/// The estimate gathers at most `min_samples - 1` samples and then one more bucket.
pub(super) const GATHER: usize = 2 * RING;

/// The samples one estimate reads, in a stack buffer: one run per bucket, each in the order
/// its samples were recorded (oldest first).
pub(super) struct Runs {
    pub(super) buf: [Sample; GATHER],
    pub(super) len: usize,
    /// Where each run ends in `buf`.
    pub(super) ends: [u8; GATHER],
    pub(super) count: usize,
}

impl Runs {
    pub(super) fn new() -> Self {
        Runs {
            buf: [Sample::default(); GATHER],
            len: 0,
            ends: [0; GATHER],
            count: 0,
        }
    }

    /// Forgets every run (the buffer's contents are overwritten by the next ones).
    pub(super) fn clear(&mut self) {
        self.len = 0;
        self.count = 0;
    }

    /// Appends the samples recorded at or after `oldest` as one run. Never overflows: the
    /// gather adds a run only while fewer than `min_samples <= RING` are in, and a run holds
    /// at most `RING`.
    pub(super) fn push_run(&mut self, parts: [&[Sample]; 2], oldest: u64) {
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
    pub(super) fn drop_front(&mut self, first: usize) {
        self.buf.copy_within(first..self.len, 0);
        self.len -= first;
        self.ends[0] = self.len as u8;
        self.count = usize::from(self.len > 0);
    }

    /// The time of the oldest sample.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.buf[..self.len].iter().map(|s| s.at).min()
    }

    /// The start of run `r` in `buf`.
    pub(super) fn start(&self, r: usize) -> usize {
        if r == 0 {
            0
        } else {
            usize::from(self.ends[r - 1])
        }
    }

    /// Copies the latencies of the samples recorded at or after `since` into `out`; returns
    /// how many and the oldest time among them (`u64::MAX` when none).
    pub(super) fn since(&self, since: u64, out: &mut [u64; GATHER]) -> (usize, u64) {
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
    pub(super) fn newest(&self, k: usize, out: &mut [u64; GATHER]) -> usize {
        if self.count == 1 || self.len <= k {
            let first = self.len.saturating_sub(k);
            for (slot, sample) in out.iter_mut().zip(&self.buf[first..self.len]) {
                *slot = sample.latency;
            }
            return self.len - first;
        }
        // The runs that still hold samples, in run order: the time of each one's newest
        // untaken sample, where that sample is, and where the run starts. A run leaves the
        // list once it is taken out, so the pick compares live runs only.
        let mut heads = [(0u64, 0usize, 0usize); GATHER];
        let mut live = 0;
        for r in 0..self.count {
            let (start, end) = (self.start(r), usize::from(self.ends[r]));
            if end > start {
                heads[live] = (self.buf[end - 1].at, end - 1, start);
                live += 1;
            }
        }
        for slot in out.iter_mut().take(k) {
            if live == 0 {
                break;
            }
            // The run whose last untaken sample is newest (the lower run on a tie).
            let mut best = 0;
            for j in 1..live {
                if heads[j].0 > heads[best].0 {
                    best = j;
                }
            }
            let (_, taken, start) = heads[best];
            *slot = self.buf[taken].latency;
            if taken > start {
                heads[best] = (self.buf[taken - 1].at, taken - 1, start);
            } else {
                heads.copy_within(best + 1..live, best);
                live -= 1;
            }
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The k newest by the plain definition: repeatedly the run whose last untaken sample is
    /// newest, the lower run on a tie.
    fn reference_newest(runs: &Runs, k: usize) -> Vec<u64> {
        let mut tails: Vec<usize> = (0..runs.count).map(|r| usize::from(runs.ends[r])).collect();
        let mut out = Vec::new();
        while out.len() < k.min(runs.len) {
            let best = (0..runs.count).filter(|&r| tails[r] > runs.start(r)).fold(
                None,
                |best: Option<usize>, r| match best {
                    Some(b) if runs.buf[tails[r] - 1].at <= runs.buf[tails[b] - 1].at => Some(b),
                    _ => Some(r),
                },
            );
            let Some(b) = best else { break };
            tails[b] -= 1;
            out.push(runs.buf[tails[b]].latency);
        }
        out
    }

    proptest! {
        /// Runs of samples sorted by time, with many times shared across runs: the same
        /// samples as the definition picks, ties between runs included.
        #[test]
        fn newest_merges_like_its_definition(
            runs in prop::collection::vec(prop::collection::vec(0u64..40, 1..12), 1..6),
            k in 1usize..40,
        ) {
            let mut gathered = Runs::new();
            let mut latency = 0;
            for times in &runs {
                let mut times = times.clone();
                times.sort_unstable();
                let samples: Vec<Sample> = times
                    .iter()
                    .map(|&at| {
                        latency += 1;
                        Sample { at, latency }
                    })
                    .collect();
                gathered.push_run([&samples, &[]], 0);
            }
            let mut out = [0u64; GATHER];
            let n = gathered.newest(k, &mut out);
            // The same samples (the estimate sorts them; a single run comes out oldest first).
            let mut want = reference_newest(&gathered, k);
            let mut got = out[..n].to_vec();
            want.sort_unstable();
            got.sort_unstable();
            prop_assert_eq!(n, k.min(gathered.len));
            prop_assert_eq!(got, want);
        }
    }
}
