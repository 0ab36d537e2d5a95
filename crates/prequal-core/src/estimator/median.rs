//! The median of a handful of latencies.
//!
//! Every estimate ends in a median of at most 64 latencies, and most of them of exactly
//! `min_samples` (16 by default). A comparison sort of 16 random values mispredicts a branch on
//! almost every element it inserts, which made the sort the costliest part of an estimate. Up
//! to [`NETWORK`] values are therefore sorted by a fixed sorting network instead (Batcher's
//! odd-even merge sort, 63 compare-exchanges of branch-free `min`/`max`), after padding with
//! `u64::MAX`; more go to the standard library's sort. Both give the same sorted order, so the
//! median is the same.

/// Inputs of the sorting network.
const NETWORK: usize = 16;

/// The comparators of Batcher's odd-even merge sort on [`NETWORK`] inputs, in order (the
/// derivation that [`COMPARATORS`], the network as run, is tested against).
#[cfg(test)]
const PAIRS: [(u8, u8); 63] = batcher_pairs();

#[cfg(test)]
/// Generates [`PAIRS`] (Knuth, TAOCP vol. 3, 5.3.4, in the common iterative form).
const fn batcher_pairs() -> [(u8, u8); 63] {
    let mut pairs = [(0u8, 0u8); 63];
    let mut count = 0;
    let n = NETWORK;
    let mut p = 1;
    while p < n {
        let mut k = p;
        while k >= 1 {
            let mut j = k % p;
            while j + k < n {
                let mut i = 0;
                while i < k && i + j + k < n {
                    if (i + j) / (2 * p) == (i + j + k) / (2 * p) {
                        pairs[count] = ((i + j) as u8, (i + j + k) as u8);
                        count += 1;
                    }
                    i += 1;
                }
                j += 2 * k;
            }
            k /= 2;
        }
        p *= 2;
    }
    assert!(
        count == pairs.len(),
        "Batcher's network on 16 inputs has 63 comparators"
    );
    pairs
}

/// One compare-exchange: the smaller value to position `a`, the larger to `b`.
#[inline(always)]
fn exchange(v: &mut [u64; NETWORK], a: usize, b: usize) {
    let (x, y) = (v[a], v[b]);
    v[a] = x.min(y);
    v[b] = x.max(y);
}

/// Writes the network out as straight-line code, one [`exchange`] per comparator, and keeps
/// the list as [`COMPARATORS`] for the test that it is Batcher's. Constant positions let the
/// compiler drop the bounds checks and the loads of a comparator table, which took about half
/// the instructions of a sort when the network ran as a loop over [`PAIRS`].
macro_rules! network {
    ($($a:literal $b:literal,)*) => {
        /// The network's comparators in the order [`run_network`] applies them.
        #[cfg(test)]
        const COMPARATORS: &[(u8, u8)] = &[$(($a, $b),)*];

        /// Sorts 16 values in place.
        fn run_network(v: &mut [u64; NETWORK]) {
            $(exchange(v, $a, $b);)*
        }
    };
}

// One line per merge step (p, k) of the generator: comparators within a line are independent.
network! {
    0 1, 2 3, 4 5, 6 7, 8 9, 10 11, 12 13, 14 15,
    0 2, 1 3, 4 6, 5 7, 8 10, 9 11, 12 14, 13 15,
    1 2, 5 6, 9 10, 13 14,
    0 4, 1 5, 2 6, 3 7, 8 12, 9 13, 10 14, 11 15,
    2 4, 3 5, 10 12, 11 13,
    1 2, 3 4, 5 6, 9 10, 11 12, 13 14,
    0 8, 1 9, 2 10, 3 11, 4 12, 5 13, 6 14, 7 15,
    4 8, 5 9, 6 10, 7 11,
    2 4, 3 5, 6 8, 7 9, 10 12, 11 13,
    1 2, 3 4, 5 6, 7 8, 9 10, 11 12, 13 14,
}

/// Sorts `values` (at most [`NETWORK`]) with the network.
fn network_sort(values: &mut [u64]) {
    let mut v = [u64::MAX; NETWORK];
    v[..values.len()].copy_from_slice(values);
    run_network(&mut v);
    let n = values.len();
    values.copy_from_slice(&v[..n]);
}

/// The median of `latencies` (the mean of the middle two for an even count); must not be
/// empty. Sorts `latencies`.
pub(super) fn median(latencies: &mut [u64]) -> u64 {
    let n = latencies.len();
    let mid = n / 2;
    if n <= NETWORK {
        network_sort(latencies);
    } else {
        latencies.sort_unstable();
    }
    let upper = latencies[mid];
    if n % 2 == 1 {
        return upper;
    }
    let lower = latencies[mid - 1];
    lower + (upper - lower) / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// By the 0-1 principle, a comparator network sorts every input if it sorts every input
    /// of zeros and ones.
    #[test]
    fn the_network_run_is_batchers() {
        assert_eq!(COMPARATORS, &PAIRS[..]);
    }

    #[test]
    fn the_network_sorts_every_zero_one_input() {
        for bits in 0u32..1 << NETWORK {
            let mut v: Vec<u64> = (0..NETWORK).map(|i| u64::from(bits >> i & 1)).collect();
            network_sort(&mut v);
            assert!(v.is_sorted(), "input {bits:016b} gave {v:?}");
        }
    }

    proptest! {
        #[test]
        fn median_matches_a_sort(values in proptest::collection::vec(0u64..1000, 1..40)) {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let n = sorted.len();
            let want = if n % 2 == 1 {
                sorted[n / 2]
            } else {
                sorted[n / 2 - 1] + (sorted[n / 2] - sorted[n / 2 - 1]) / 2
            };
            let mut v = values;
            prop_assert_eq!(median(&mut v), want);
            prop_assert!(v.is_sorted());
        }
    }
}
