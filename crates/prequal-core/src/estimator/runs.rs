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
