//! The two scenarios, after the simulator's `heterogeneous-70` class (scenarios/*.toml): ten
//! thread-pool replicas of four workers, log-normal service times, Poisson open-loop load at
//! 70% of the cluster's capacity (Σ workers × speed / mean service time) from four clients.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Exp};

use crate::replica::Replica;

/// A scenario: the replicas, the slow episode and the load.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub description: &'static str,
    pub workers: usize,
    pub speeds: Vec<f64>,
    pub mean_service: Duration,
    pub sd_service: Duration,
    /// `(replica, from, to, factor)`: the replica is `factor` times slower in `[from, to)`.
    pub slow: Option<(usize, Duration, Duration, f64)>,
    pub load: f64,
    pub clients: usize,
}

impl Scenario {
    /// Ten replicas with speeds 1x to 3x (3, 3, 3, 3, 2.5, 2.5, 1.5, 1.5, 1, 1).
    pub fn heterogeneous() -> Self {
        Self {
            name: "heterogeneous",
            description: "10 replicas x 4 workers, service ~40 ms (log-normal, sd 20 ms) / speed \
                          3, 3, 3, 3, 2.5, 2.5, 1.5, 1.5, 1, 1; 70% of capacity (1610/s) from 4 clients",
            workers: 4,
            speeds: vec![3.0, 3.0, 3.0, 3.0, 2.5, 2.5, 1.5, 1.5, 1.0, 1.0],
            mean_service: Duration::from_millis(40),
            sd_service: Duration::from_millis(20),
            slow: None,
            load: 0.7,
            clients: 4,
        }
    }

    /// Ten equal replicas, one of them ten times slower for the middle half of the run.
    pub fn slow_replica(duration: Duration) -> Self {
        Self {
            name: "slow-replica",
            description: "10 equal replicas x 4 workers, service ~20 ms (log-normal, sd 10 ms); \
                          replica 0 ten times slower for the middle half of the run; 70% of \
                          capacity (1400/s) from 4 clients",
            workers: 4,
            speeds: vec![1.0; 10],
            mean_service: Duration::from_millis(20),
            sd_service: Duration::from_millis(10),
            slow: Some((0, duration / 4, duration * 3 / 4, 10.0)),
            load: 0.7,
            clients: 4,
        }
    }

    /// Queries per second the replicas can serve at normal speed.
    pub fn capacity(&self) -> f64 {
        let speeds: f64 = self.speeds.iter().sum();
        self.workers as f64 * speeds / self.mean_service.as_secs_f64()
    }

    /// Fresh replicas, seeded so that every contender meets the same ones.
    pub fn replicas(&self, seed: u64) -> Vec<Replica> {
        self.speeds
            .iter()
            .enumerate()
            .map(|(i, &speed)| {
                let seed = seed.wrapping_mul(1000).wrapping_add(i as u64);
                Replica::new(
                    self.workers,
                    speed,
                    self.mean_service,
                    self.sd_service,
                    seed,
                )
            })
            .collect()
    }

    /// Each client's arrival times (Poisson at its share of the load) within `duration`; the
    /// same for every contender.
    pub fn arrivals(&self, duration: Duration, seed: u64) -> Vec<Vec<Duration>> {
        let rate = self.capacity() * self.load / self.clients as f64;
        (0..self.clients)
            .map(|client| {
                let mut rng = SmallRng::seed_from_u64(seed ^ (0x9e37_79b9 * (client as u64 + 1)));
                let gap = Exp::new(rate).unwrap_or_else(|_| unreachable!("positive rate"));
                let mut at = 0.0;
                let mut times = Vec::new();
                loop {
                    at += gap.sample(&mut rng);
                    if at >= duration.as_secs_f64() {
                        return times;
                    }
                    times.push(Duration::from_secs_f64(at));
                }
            })
            .collect()
    }

    /// Runs the slow episode on `replicas`, if the scenario has one, from `start`.
    pub fn spawn_episode(&self, replicas: &[Replica], start: tokio::time::Instant) {
        let Some((index, from, to, factor)) = self.slow else {
            return;
        };
        let Some(replica) = replicas.get(index).cloned() else {
            return;
        };
        tokio::spawn(async move {
            tokio::time::sleep_until(start + from).await;
            replica.set_slowdown(factor);
            tokio::time::sleep_until(start + to).await;
            replica.set_slowdown(1.0);
        });
    }
}
