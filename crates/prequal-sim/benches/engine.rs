//! Simulator benchmarks: the event queue under a hold model with many events pending, against
//! a binary heap, and whole runs in events per second.

// Benchmarks unwrap: a failure is a broken benchmark, not a condition to handle.
#![allow(clippy::unwrap_used, missing_docs)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prequal_core::{PolicyConfig, Time};
use prequal_sim::queue::EventQueue;
use prequal_sim::scenario::Scenario;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const HOLD_OPS: u64 = 200_000;

/// Hold model: `pending` events queued; each step pops the earliest and schedules one new event
/// up to 10 ms later (the shape of a simulation in steady state).
fn queue_hold(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_hold");
    group.throughput(Throughput::Elements(HOLD_OPS));
    group.sample_size(10);
    for pending in [1_000usize, 100_000, 1_000_000] {
        group.bench_with_input(BenchmarkId::new("radix", pending), &pending, |b, &n| {
            let mut rng = SmallRng::seed_from_u64(1);
            let mut q = EventQueue::new();
            for _ in 0..n {
                q.push(Time::from_nanos(rng.random_range(0..10_000_000)), 0u64);
            }
            b.iter(|| {
                for _ in 0..HOLD_OPS {
                    let (t, v) = q.pop().unwrap();
                    let next = t.as_nanos() + rng.random_range(0..10_000_000);
                    q.push(Time::from_nanos(next), black_box(v + 1));
                }
            });
        });
        group.bench_with_input(
            BenchmarkId::new("binary_heap", pending),
            &pending,
            |b, &n| {
                let mut rng = SmallRng::seed_from_u64(1);
                let mut heap = BinaryHeap::new();
                let mut seq = 0u64;
                for _ in 0..n {
                    heap.push(Reverse((rng.random_range(0..10_000_000u64), seq, 0u64)));
                    seq += 1;
                }
                b.iter(|| {
                    for _ in 0..HOLD_OPS {
                        let Reverse((t, _, v)) = heap.pop().unwrap();
                        let next = t + rng.random_range(0..10_000_000);
                        heap.push(Reverse((next, seq, black_box(v + 1))));
                        seq += 1;
                    }
                });
            },
        );
    }
    group.finish();
}

/// Whole runs: beyond-round-robin (60 s, 1000 qps) under two policies, reported in events/s.
fn whole_runs(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/beyond-round-robin.toml");
    let compiled = Scenario::load(&path).unwrap();
    let mut group = c.benchmark_group("run_beyond_round_robin");
    group.sample_size(10);
    for name in ["round-robin", "prequal"] {
        let policy = PolicyConfig::from_name(name).unwrap();
        let events = prequal_sim::engine::run(&compiled, &policy, 1.0)
            .unwrap()
            .events;
        group.throughput(Throughput::Elements(events));
        group.bench_function(name, |b| {
            b.iter(|| {
                prequal_sim::engine::run(&compiled, &policy, 1.0)
                    .unwrap()
                    .events
            })
        });
    }
    group.finish();
}

criterion_group!(benches, queue_hold, whole_runs);
criterion_main!(benches);
