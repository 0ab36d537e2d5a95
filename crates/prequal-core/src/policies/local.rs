//! Client-local pieces shared by several policies, so no policy leans on a sibling.
//!
//! - [`LocalLoad`]: one replica's client-local requests in flight (RIF) and pick count, kept
//!   from [`Policy::on_dispatch`](crate::policy::Policy::on_dispatch) to
//!   [`Policy::on_complete`](crate::policy::Policy::on_complete) by `least-loaded`,
//!   `least-loaded-p2c`, `peak-ewma`, `least-time`, `yarp-p2c` and `weighted-round-robin`.
//! - `best_of_draws`: the "power of d choices" comparison (`least-loaded-p2c`, `yarp-p2c`,
//!   `peak-ewma`).
//! - `Poller` and `next_on_grid`: a fixed-interval polling schedule and its probe queue
//!   (`yarp-p2c`, `weighted-round-robin`).

use std::collections::VecDeque;
use std::time::Duration;

use rand::RngCore;

use crate::policy::{ProbeId, ProbeRequest, ReplicaView};
use crate::replica::ReplicaId;
use crate::sampling::for_each_distinct;
use crate::time::{Time, duration_nanos};

/// Client-local load of one replica, shared by the policies that count requests in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalLoad {
    /// Queries dispatched and not yet completed.
    pub rif: u32,
    /// Queries this client sent to the replica.
    pub picks: u64,
}

impl LocalLoad {
    /// A query was dispatched to the replica.
    pub fn dispatched(&mut self) {
        self.rif = self.rif.saturating_add(1);
        self.picks = self.picks.saturating_add(1);
    }

    /// A query sent to the replica completed. A completion without a matching dispatch (a
    /// driver bug, or a replica removed and re-added meanwhile) cannot take the count below 0.
    pub fn completed(&mut self) {
        self.rif = self.rif.saturating_sub(1);
    }

    /// The replica's row in a [`Snapshot`](crate::policy::Snapshot).
    pub fn view(&self, id: ReplicaId, score: Option<f64>) -> ReplicaView {
        ReplicaView {
            id: Some(id),
            local_rif: self.rif,
            score,
            picks: self.picks,
            avoided: false,
        }
    }
}

/// Draws `d` distinct positions out of `n` (all of them when `d >= n`), in random order, and
/// returns the first one with the smallest `key`.
pub(crate) fn best_of_draws<K: PartialOrd>(
    n: usize,
    d: usize,
    rng: &mut dyn RngCore,
    mut key: impl FnMut(usize) -> K,
) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let mut best: Option<(usize, K)> = None;
    for_each_distinct(rng, n, d.min(n), |i| {
        let k = key(i);
        // Strictly better replaces, so ties keep the earlier (random) draw.
        if best.as_ref().is_none_or(|(_, b)| k < *b) {
            best = Some((i, k));
        }
    });
    best.map(|(i, _)| i)
}

/// A fixed-interval polling schedule and its queue of probes. Rounds stay on the grid of the first one; a driver that wakes late
/// gets one round, not one per interval missed.
#[derive(Debug)]
pub(crate) struct Poller {
    interval: Duration,
    /// When the next round is due; `None` while there is nothing to poll.
    next_round: Option<Time>,
    outbox: VecDeque<ProbeRequest>,
    next_id: u64,
}

impl Poller {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            next_round: None,
            outbox: VecDeque::new(),
            next_id: 0,
        }
    }

    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    pub(crate) fn next_round(&self) -> Option<Time> {
        self.next_round
    }

    /// Starts the schedule, first round one interval after `now`, unless it is running.
    pub(crate) fn start(&mut self, now: Time) {
        self.next_round.get_or_insert(now + self.interval);
    }

    /// Stops the schedule (no replicas left).
    pub(crate) fn stop(&mut self) {
        self.next_round = None;
        self.outbox.clear();
    }

    /// True, and the schedule moves to the next grid point after `now`, if a round is due.
    pub(crate) fn take_due_round(&mut self, now: Time) -> bool {
        let Some(due) = self.next_round.filter(|due| *due <= now) else {
            return false;
        };
        self.next_round = Some(next_on_grid(due, self.interval, now));
        true
    }

    /// Queues a probe to `replica` and returns its id.
    pub(crate) fn queue(&mut self, replica: ReplicaId) -> ProbeId {
        let id = ProbeId(self.next_id);
        self.next_id += 1;
        self.outbox.push_back(ProbeRequest {
            id,
            replica,
            query: None,
            hint: None,
        });
        id
    }

    /// Drops the queued probes to a replica that left.
    pub(crate) fn cancel(&mut self, replica: ReplicaId) {
        self.outbox.retain(|p| p.replica != replica);
    }

    pub(crate) fn pop(&mut self) -> Option<ProbeRequest> {
        self.outbox.pop_front()
    }

    pub(crate) fn queued(&self) -> usize {
        self.outbox.len()
    }
}

/// The first time on the grid `due + k·period` (k >= 1) that is after `now`, so a periodic
/// task that woke late runs once and keeps its phase.
pub(crate) fn next_on_grid(due: Time, period: Duration, now: Time) -> Time {
    let step = duration_nanos(period).max(1);
    let missed = now.as_nanos().saturating_sub(due.as_nanos()) / step;
    Time::from_nanos(
        due.as_nanos()
            .saturating_add(step.saturating_mul(missed + 1)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The draws are distinct, and the chosen one is never worse than any other draw.
        #[test]
        fn never_picks_the_worse_of_distinct_draws(
            keys in prop::collection::vec(0u32..5, 1..20),
            d in 1usize..6,
            seed in any::<u64>(),
        ) {
            let mut drawn = Vec::new();
            let best = best_of_draws(keys.len(), d, &mut rng(seed), |i| {
                drawn.push(i);
                keys[i]
            });
            let best = best.unwrap();
            let unique: BTreeSet<usize> = drawn.iter().copied().collect();
            prop_assert_eq!(unique.len(), drawn.len());
            prop_assert_eq!(drawn.len(), d.min(keys.len()));
            prop_assert!(drawn.contains(&best));
            prop_assert!(drawn.iter().all(|&i| keys[best] <= keys[i]));
        }
    }

    #[test]
    fn a_late_wake_up_lands_on_the_next_grid_point() {
        let ms = Time::from_millis;
        let period = Duration::from_millis(500);
        assert_eq!(next_on_grid(ms(500), period, ms(500)), ms(1_000));
        assert_eq!(next_on_grid(ms(500), period, ms(1_700)), ms(2_000));
    }
}
