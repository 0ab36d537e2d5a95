//! A few distinct replicas drawn at random, without allocating.
//!
//! Probing policies and the power-of-d-choices family draw a handful of distinct replica
//! indices on every query. `rand::seq::index::sample` does that with Floyd's algorithm for
//! small counts, but returns a freshly allocated vector; [`for_each_distinct`] runs the very
//! same algorithm on the stack (the same random numbers, the same order) and falls back to
//! `rand` where it would take another algorithm, so results do not depend on which path ran.

use rand::seq::index::sample;
use rand::{Rng, RngCore};

/// Most indices drawn on the stack: `rand` uses Floyd's algorithm for up to this many.
const FEW: usize = 11;

/// Calls `f` with `k` distinct indices below `n`, drawn exactly as
/// `rand::seq::index::sample(rng, n, k)` draws them, in its order. Panics if `k > n`, as it
/// does.
pub(crate) fn for_each_distinct(
    rng: &mut dyn RngCore,
    n: usize,
    k: usize,
    mut f: impl FnMut(usize),
) {
    match (u32::try_from(n), u32::try_from(k)) {
        (Ok(n), Ok(k)) if k as usize <= FEW && k <= n => {
            // Floyd's combination algorithm.
            let mut drawn = [0u32; FEW];
            for (len, j) in (n - k..n).enumerate() {
                let t = rng.random_range(..=j);
                if let Some(slot) = drawn[..len].iter_mut().find(|x| **x == t) {
                    *slot = j;
                }
                drawn[len] = t;
            }
            drawn[..k as usize].iter().for_each(|&i| f(i as usize));
        }
        _ => sample(rng, n, k).iter().for_each(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    /// The indices `rand` draws, in its order, and the RNG left in the same state, for every
    /// small count and a few above [`FEW`].
    #[test]
    fn draws_exactly_what_rand_draws() {
        for seed in 0..50u64 {
            for n in 1..120usize {
                for k in 0..=(FEW + 2).min(n) {
                    let (mut ours, mut theirs) =
                        (SmallRng::seed_from_u64(seed), SmallRng::seed_from_u64(seed));
                    let mut got = Vec::new();
                    for_each_distinct(&mut ours, n, k, |i| got.push(i));
                    let want = sample(&mut theirs, n, k).into_vec();
                    assert_eq!(got, want, "seed {seed}, n {n}, k {k}");
                    assert_eq!(ours.next_u64(), theirs.next_u64());
                }
            }
        }
    }
}
