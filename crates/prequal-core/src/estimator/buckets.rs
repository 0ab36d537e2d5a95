//! The samples of one RIF bucket: a ring of the newest [`RING`] samples, kept in recording
//! order, and the map from an arrival RIF to its bucket (exact below [`EXACT`], then four per
//! doubling).

/// Samples kept per RIF bucket.
pub(super) const RING: usize = 32;
/// RIFs below this have a bucket each.
pub(super) const EXACT: u32 = 16;
/// Buckets per doubling of RIF above [`EXACT`], as a power of two.
pub(super) const SUB_BITS: u32 = 2;
/// Bucket count: the exact ones, then 4 per octave for octaves 4 to 31 of a `u32`.
pub(super) const BUCKETS: usize = EXACT as usize + (32 - 4) * (1 << SUB_BITS);

/// One latency sample: when it was recorded and how long the query took, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sample {
    pub(super) at: u64,
    pub(super) latency: u64,
}

/// A ring of the newest samples of one RIF bucket.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    pub(super) samples: [Sample; RING],
    /// Slot the next sample goes to.
    pub(super) next: u8,
    /// Slots filled so far (saturates at `RING`).
    pub(super) len: u8,
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
    pub(super) fn push(&mut self, sample: Sample) {
        self.samples[usize::from(self.next)] = sample;
        self.next = ((usize::from(self.next) + 1) % RING) as u8;
        self.len = (usize::from(self.len) + 1).min(RING) as u8;
    }

    pub(super) fn filled(&self) -> &[Sample] {
        &self.samples[..usize::from(self.len)]
    }

    /// The samples from the oldest recorded to the newest, as two slices (the ring wraps).
    /// Recording times never decrease, so both are sorted by time.
    pub(super) fn in_order(&self) -> [&[Sample]; 2] {
        let split = if usize::from(self.len) < RING {
            0
        } else {
            usize::from(self.next)
        };
        let filled = self.filled();
        [&filled[split..], &filled[..split]]
    }

    /// When the newest sample was recorded (0 when empty).
    pub(super) fn newest_at(&self) -> u64 {
        if self.len == 0 {
            return 0;
        }
        self.samples[(usize::from(self.next) + RING - 1) % RING].at
    }
}

/// The bucket that holds samples tagged with `rif`.
pub(super) fn bucket_of(rif: u32) -> usize {
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

/// The lowest RIF that falls in `bucket`: the inverse of [`bucket_of`] at a bucket's start.
pub(super) fn lowest_rif(bucket: usize) -> u32 {
    let bucket = bucket as u32;
    if bucket < EXACT {
        return bucket;
    }
    let octave = 4 + ((bucket - EXACT) >> SUB_BITS);
    let sub = (bucket - EXACT) & ((1 << SUB_BITS) - 1);
    (1 << octave) | (sub << (octave - SUB_BITS))
}

/// The samples of a ring's two sorted parts recorded at or after `since`, as two parts.
pub(super) fn suffix_since(parts: [&[Sample]; 2], since: u64) -> [&[Sample]; 2] {
    let [a, b] = parts;
    let cut = b.partition_point(|s| s.at < since);
    if cut > 0 {
        // Part `a` is older than b's first sample, so older than `since`.
        return [&[], &b[cut..]];
    }
    [&a[a.partition_point(|s| s.at < since)..], b]
}

/// The time of the first sample of two consecutive parts, if any.
pub(super) fn first_at(parts: [&[Sample]; 2]) -> Option<u64> {
    parts[0].first().or(parts[1].first()).map(|s| s.at)
}

/// The last `n` samples (all, if fewer) of two consecutive parts, as two parts.
pub(super) fn suffix_len(parts: [&[Sample]; 2], n: usize) -> [&[Sample]; 2] {
    let [a, b] = parts;
    if n <= b.len() {
        return [&[], &b[b.len() - n..]];
    }
    [&a[a.len().saturating_sub(n - b.len())..], b]
}
