//! The open-loop load: each client sends its queries at their scheduled times, whatever the
//! balancer's state, and a query's latency runs from its *scheduled* time to the end of its
//! response body, so a balancer that makes queries wait for readiness pays for it (no
//! coordinated omission). Bounded: a fixed schedule, and each query gets at most
//! [`QUERY_LIMIT`] before it counts as timed out.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body::Body;
use http_body_util::{BodyExt, Full};
use prequal_tower::BoxError;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// The longest a query may take before it counts as timed out.
pub const QUERY_LIMIT: Duration = Duration::from_secs(10);

/// What one contender's queries came to, after the warm-up.
pub struct Tally {
    pub latency_us: Histogram<u64>,
    pub errors: u64,
    pub timeouts: u64,
}

impl Tally {
    pub fn new() -> Result<Self, BoxError> {
        Ok(Self {
            // 1 µs to 100 s at 3 significant figures.
            latency_us: Histogram::new_with_bounds(1, 100_000_000, 3)?,
            errors: 0,
            timeouts: 0,
        })
    }
}

enum Ended {
    Ok,
    Error,
    TimedOut,
}

/// Runs one client: sends `arrivals` (offsets from `start`) through `balance`, counts each
/// query that was scheduled after `warmup`.
pub async fn run_client<S, RB>(
    mut balance: S,
    arrivals: Vec<Duration>,
    start: Instant,
    warmup: Duration,
    tally: Arc<Mutex<Tally>>,
) where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    RB: Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    let mut queries = tokio::task::JoinSet::new();
    for at in arrivals {
        let scheduled = start + at;
        tokio::time::sleep_until(scheduled).await;
        let counted = at >= warmup;
        let request = http::Request::new(Full::new(Bytes::new()));
        let response = match balance.ready().await {
            Ok(ready) => ready.call(request),
            Err(_) => {
                record(&tally, counted, scheduled, Ended::Error);
                continue;
            }
        };
        queries.spawn(async move {
            let query = async {
                let response = response.await.map_err(Into::into)?;
                response.into_body().collect().await.map_err(Into::into)?;
                Ok::<_, BoxError>(())
            };
            let ended = match tokio::time::timeout(QUERY_LIMIT, query).await {
                Ok(Ok(())) => Ended::Ok,
                Ok(Err(_)) => Ended::Error,
                Err(_) => Ended::TimedOut,
            };
            (counted, scheduled, ended)
        });
        // Reap what has finished, so the set stays the size of the queries in flight.
        while let Some(Ok((counted, scheduled, ended))) = queries.try_join_next() {
            record(&tally, counted, scheduled, ended);
        }
    }
    while let Some(joined) = queries.join_next().await {
        if let Ok((counted, scheduled, ended)) = joined {
            record(&tally, counted, scheduled, ended);
        }
    }
}

fn record(tally: &Mutex<Tally>, counted: bool, scheduled: Instant, ended: Ended) {
    if !counted {
        return;
    }
    let latency_us = u64::try_from(scheduled.elapsed().as_micros()).unwrap_or(u64::MAX);
    let mut tally = tally.lock().unwrap_or_else(|p| p.into_inner());
    match ended {
        Ended::Ok => tally.latency_us.saturating_record(latency_us.max(1)),
        Ended::Error => tally.errors += 1,
        Ended::TimedOut => tally.timeouts += 1,
    }
}
