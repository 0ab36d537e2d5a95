//! A thread-pool replica in process: `workers` workers behind one FIFO queue, each query
//! holding a worker for a log-normal service time divided by the replica's speed (and
//! multiplied by its current slowdown, for the slow episode). Latency therefore grows with
//! queueing, as on a real server, while the CPU does nothing but timers.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::Full;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, LogNormal};
use tokio::sync::Semaphore;

/// One replica; clones share it.
#[derive(Clone)]
pub struct Replica {
    inner: Arc<Inner>,
}

struct Inner {
    /// Tokio's semaphore is fair: waiters get permits in arrival order, a FIFO queue.
    workers: Arc<Semaphore>,
    speed: f64,
    /// The current slowdown in thousandths (1000 = normal speed).
    slowdown_milli: AtomicU64,
    service: LogNormal<f64>,
    rng: Mutex<SmallRng>,
    served: AtomicU64,
}

impl Replica {
    /// A replica of `workers` workers whose service time has mean `mean` and standard
    /// deviation `sd` at speed 1, divided by `speed`.
    pub fn new(workers: usize, speed: f64, mean: Duration, sd: Duration, seed: u64) -> Self {
        let mean_s = mean.as_secs_f64();
        let cv = sd.as_secs_f64() / mean_s;
        let service = LogNormal::from_mean_cv(mean_s, cv).unwrap_or_else(|_| {
            LogNormal::new(mean_s.ln(), 0.0).unwrap_or_else(|_| unreachable!("finite mean"))
        });
        Self {
            inner: Arc::new(Inner {
                workers: Arc::new(Semaphore::new(workers)),
                speed,
                slowdown_milli: AtomicU64::new(1000),
                service,
                rng: Mutex::new(SmallRng::seed_from_u64(seed)),
                served: AtomicU64::new(0),
            }),
        }
    }

    /// Sets the slowdown factor (1.0 = normal).
    pub fn set_slowdown(&self, factor: f64) {
        let milli = (factor * 1000.0).round() as u64;
        self.inner.slowdown_milli.store(milli, Ordering::Relaxed);
    }

    /// Queries this replica started serving.
    pub fn served(&self) -> u64 {
        self.inner.served.load(Ordering::Relaxed)
    }

    fn service_time(&self) -> Duration {
        let sample = {
            let mut rng = self.inner.rng.lock().unwrap_or_else(|p| p.into_inner());
            self.inner.service.sample(&mut *rng)
        };
        let slowdown = self.inner.slowdown_milli.load(Ordering::Relaxed) as f64 / 1000.0;
        Duration::from_secs_f64((sample * slowdown / self.inner.speed).clamp(0.0, 60.0))
    }
}

impl<B> tower::Service<http::Request<B>> for Replica {
    type Response = http::Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<B>) -> Self::Future {
        let replica = self.clone();
        Box::pin(async move {
            // The semaphore is never closed, so a permit always comes.
            let _worker = replica.inner.workers.acquire().await;
            replica.inner.served.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(replica.service_time()).await;
            Ok(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
        })
    }
}
