//! One emulated replica: the simulator's sans-IO [`ReplicaModel`] driven in real time.
//!
//! The model decides how each query is served ([`Admission`]): after a fixed delay (latency
//! model, pinned-latency episodes, fast failures) or as a job on the processor-sharing CPU
//! (capacity model). A delay is a tokio sleep. A CPU job completes when the model says so, and
//! the model only knows that when asked with `now`: a driver task per replica sleeps until the
//! earliest of the next job completion and the next capacity change (an antagonist redraw or
//! an episode edge), advances the model to the current time, and wakes the queries whose jobs
//! finished. An arrival can make the next completion earlier or later, so it nudges the
//! driver. Nothing burns CPU: latency grows with load because the model shares its virtual
//! cores, not because real cores are busy. Tokio's timers have millisecond resolution, so
//! emulated latencies are accurate to about a millisecond.
//!
//! Time zero of the model is when the backend started, so episodes (`start = "15s"`) happen
//! at those offsets from the start of the process.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use prequal_core::Time;
use prequal_model::model::{Admission, Fault, JobId, ReplicaModel};
use prequal_server::{Clock, SharedTracker};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::{Notify, oneshot, watch};

/// The response header naming the replica that served a request (for per-replica shares).
pub const REPLICA_HEADER: &str = "x-prequal-replica";

/// The body of a successful answer.
const OK_TEXT: &[u8] = b"ok\n";

/// An emulated replica's response body: its text, or, under a `stall-body` fault, a body that
/// declares its length and never sends a byte of it.
#[derive(Debug)]
pub enum ReplicaBody {
    /// The whole answer.
    Full(Full<Bytes>),
    /// `len` bytes declared, none ever sent.
    Stalled(u64),
}

impl Body for ReplicaBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ReplicaBody::Full(full) => Pin::new(full).poll_frame(cx),
            // Nothing will ever wake it: the connection holds it until the client leaves.
            ReplicaBody::Stalled(_) => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReplicaBody::Full(full) => full.is_end_stream(),
            ReplicaBody::Stalled(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReplicaBody::Full(full) => full.size_hint(),
            ReplicaBody::Stalled(len) => SizeHint::with_exact(*len),
        }
    }
}

/// How often the driver refreshes the reported utilisation.
const UTILIZATION_PERIOD: Duration = Duration::from_millis(100);

/// The mutable part of a replica, behind one short lock.
struct State {
    model: ReplicaModel,
    rng: SmallRng,
    /// Queries waiting for their CPU job, by job.
    waiting: HashMap<JobId, oneshot::Sender<()>>,
    /// Scratch buffer for jobs the model reports finished.
    done: Vec<JobId>,
    /// Busy core-nanoseconds and time at the last utilisation sample.
    last_sample: (f64, Time),
    /// When the driver last stepped the model.
    last_step: Time,
}

impl State {
    /// Applies the capacity changes (episode edges, antagonist redraws) due since the last
    /// call: all at once at `now`, at most one timer lag late.
    fn catch_up(&mut self, now: Time) {
        if self
            .model
            .next_change(self.last_step)
            .is_some_and(|change| change <= now)
        {
            self.model.on_change(now, &mut self.rng, &mut self.done);
        }
        self.last_step = self.last_step.max(now);
    }

    /// Wakes the queries whose jobs are in `done`.
    fn release_done(&mut self) {
        for job in self.done.drain(..) {
            if let Some(waiter) = self.waiting.remove(&job) {
                let _ = waiter.send(());
            }
        }
    }
}

/// One emulated replica; share it with `Arc`.
pub struct EmulatedReplica {
    index: u32,
    index_header: HeaderValue,
    state: Mutex<State>,
    wake: Notify,
    clock: Clock,
    /// Replaced when a `killed` fault ends: the restarted process starts with an empty tracker.
    tracker: Mutex<Arc<SharedTracker>>,
}

impl std::fmt::Debug for EmulatedReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedReplica")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl EmulatedReplica {
    /// A replica running `model`, whose time zero is `clock`'s origin; `seed` drives its
    /// random choices (errors, sampled latencies).
    pub fn new(
        index: u32,
        model: ReplicaModel,
        seed: u64,
        clock: Clock,
        tracker: Arc<SharedTracker>,
    ) -> Self {
        Self {
            index,
            index_header: HeaderValue::from(index),
            state: Mutex::new(State {
                model,
                rng: SmallRng::seed_from_u64(seed),
                waiting: HashMap::new(),
                done: Vec::new(),
                last_sample: (0.0, Time::ZERO),
                last_step: Time::ZERO,
            }),
            wake: Notify::new(),
            clock,
            tracker: Mutex::new(tracker),
        }
    }

    /// The replica's index in the scenario.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The load tracker that answers this replica's probes (the current one: a restart after
    /// a `killed` fault replaces it).
    pub fn tracker(&self) -> Arc<SharedTracker> {
        Arc::clone(&self.tracker.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts a fresh tracker in place, as a restarted process has.
    pub fn replace_tracker(&self, tracker: Arc<SharedTracker>) {
        *self.tracker.lock().unwrap_or_else(PoisonError::into_inner) = tracker;
    }

    /// The replica's clock (time zero is the scenario's).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The whole-replica fault in effect at `now`, if any.
    pub fn fault_at(&self, now: Time) -> Option<Fault> {
        self.lock().model.effects(now).fault
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update under the lock is a single model step; a poisoned lock is still sound.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves one query: waits as the model says, then answers 200, or 500 for an emulated
    /// error. If the caller gives up (the future is dropped), its CPU job is cancelled. Under
    /// a `black-hole` fault the query is held and never answered (the tracker, outside, counts
    /// it in flight until the caller gives up), as in the simulator; under `stall-body` its
    /// head is answered at once and its body never comes (the tracker counts it in flight the
    /// same way).
    pub async fn serve<B>(self: Arc<Self>, _request: Request<B>) -> Response<ReplicaBody> {
        let now = self.clock.now();
        match self.fault_at(now) {
            Some(Fault::BlackHole) => return std::future::pending().await,
            Some(Fault::StallBody) => return self.stalled(),
            _ => {}
        }
        let (admission, error, waiter) = {
            let mut state = self.lock();
            let state = &mut *state;
            // An arrival sees the capacity of its moment even if the driver's timer is late.
            state.catch_up(now);
            let (admission, error) = state.model.admit(now, &mut state.rng, &mut state.done);
            state.release_done();
            let waiter = match admission {
                Admission::Job(job) => {
                    let (tx, rx) = oneshot::channel();
                    state.waiting.insert(job, tx);
                    Some((job, rx))
                }
                Admission::After(_) => None,
            };
            (admission, error, waiter)
        };
        match (admission, waiter) {
            (Admission::After(delay), _) => tokio::time::sleep(delay).await,
            (Admission::Job(_), Some((job, rx))) => {
                // The arrival changed the sharing, so the driver must recompute its deadline.
                self.wake.notify_one();
                let cancel = CancelOnDrop {
                    replica: &self,
                    job: Some(job),
                };
                let _ = rx.await;
                cancel.disarm();
            }
            (Admission::Job(_), None) => {}
        }
        self.respond(error)
    }

    fn respond(&self, error: bool) -> Response<ReplicaBody> {
        let (status, text): (_, &'static [u8]) = if error {
            (StatusCode::INTERNAL_SERVER_ERROR, b"emulated error\n")
        } else {
            (StatusCode::OK, OK_TEXT)
        };
        let body = ReplicaBody::Full(Full::new(Bytes::from_static(text)));
        let mut response = Response::new(body);
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(REPLICA_HEADER, self.index_header.clone());
        response
    }

    /// The head of a success, declaring the usual body, which never comes (`stall-body`).
    fn stalled(&self) -> Response<ReplicaBody> {
        let len = OK_TEXT.len() as u64;
        let mut response = Response::new(ReplicaBody::Stalled(len));
        let headers = response.headers_mut();
        headers.insert(REPLICA_HEADER, self.index_header.clone());
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
        response
    }

    /// Charges a probe's CPU cost to the model (capacity model with `probe_cost`).
    pub fn charge_probe(&self) {
        let now = self.clock.now();
        let mut state = self.lock();
        let state = &mut *state;
        if state.model.charge_probe(now, &mut state.done).is_some() {
            state.release_done();
            self.wake.notify_one();
        }
    }

    /// Moves the model to now: completes finished jobs, applies due capacity changes, refreshes
    /// utilisation. Returns when the driver should come back.
    fn step(&self) -> Option<Time> {
        let now = self.clock.now();
        let mut state = self.lock();
        let state = &mut *state;
        state.catch_up(now);
        if let Some(cpu) = state.model.cpu_mut() {
            cpu.advance(now, &mut state.done);
        }
        state.release_done();
        self.sample_utilization(state, now);
        let completion = state.model.cpu().and_then(|cpu| cpu.next_completion());
        let change = state.model.next_change(now);
        let tick = now + UTILIZATION_PERIOD;
        [completion, change, Some(tick)].into_iter().flatten().min()
    }

    fn sample_utilization(&self, state: &mut State, now: Time) {
        let (Some(cpu), Some(allocation)) = (state.model.cpu(), state.model.allocation_cores())
        else {
            return;
        };
        let (busy_before, at) = state.last_sample;
        let span = now.saturating_since(at).as_nanos() as f64;
        if span < UTILIZATION_PERIOD.as_nanos() as f64 / 2.0 {
            return;
        }
        let busy = cpu.busy_core_nanos();
        let utilization = (busy - busy_before) / (span * allocation.max(f64::MIN_POSITIVE));
        self.tracker().set_utilization(Some(utilization.max(0.0)));
        state.last_sample = (busy, now);
    }

    /// Drives the model in real time until `stop` changes or is dropped.
    pub async fn drive(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            let next = self.step();
            let sleep = match next {
                Some(at) => at.saturating_since(self.clock.now()),
                None => UTILIZATION_PERIOD,
            };
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.wake.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// Cancels a query's CPU job if the query is abandoned before the job finished.
struct CancelOnDrop<'a> {
    replica: &'a EmulatedReplica,
    job: Option<JobId>,
}

impl CancelOnDrop<'_> {
    fn disarm(mut self) {
        self.job = None;
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let Some(job) = self.job.take() else {
            return;
        };
        let now = self.replica.clock.now();
        let mut state = self.replica.lock();
        let state = &mut *state;
        state.waiting.remove(&job);
        if let Some(cpu) = state.model.cpu_mut() {
            cpu.cancel(now, job, &mut state.done);
        }
        state.release_done();
        self.replica.wake.notify_one();
    }
}

/// A `tower` service answering every request from `replica`.
pub fn service<B: Send + 'static>(
    replica: Arc<EmulatedReplica>,
) -> impl tower::Service<
    Request<B>,
    Response = Response<ReplicaBody>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<ReplicaBody>, Infallible>> + Send,
> + Clone {
    tower::service_fn(move |request: Request<B>| {
        let replica = Arc::clone(&replica);
        async move { Ok(replica.serve(request).await) }
    })
}
