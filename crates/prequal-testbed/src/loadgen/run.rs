//! The run: one sender paced against the schedule, a task per query, one collector.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use http::Uri;
use prequal_core::{Outcome, Time};
use prequal_model::metrics::Recorder;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::client::{self, Answer, LoadClient};
use super::report::{LoadReport, Progress};
use super::schedule::Schedule;
use super::spec::{LoadSpec, LoadgenError};

/// After the schedule ends, how long past `timeout` the collector waits for stragglers.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Overdue queries sent back to back before the sender yields to the runtime.
const BURST: u32 = 64;

/// What the sender and the query tasks tell the collector.
#[derive(Debug)]
enum Event {
    /// Query `id`, due at `issued`, went to `target`, `lag` after it was due.
    Sent {
        id: u64,
        issued: Time,
        target: usize,
        lag: Duration,
    },
    /// A query due at `issued` was not sent: `max_in_flight` were in flight.
    NotSent { issued: Time },
    /// Query `id` ended `latency` after it was due; `None`: it timed out.
    Done {
        id: u64,
        latency: Duration,
        answer: Option<Answer>,
    },
    /// The schedule ended or the run was stopped; no more queries will be sent. `fell_behind`:
    /// stopped because queries were still unsent a timeout past the schedule's end.
    Finished { stopped: bool, fell_behind: bool },
}

/// Runs the load described by `spec`: waits for `start_at`, sends the whole schedule (or until
/// `stop` completes), waits at most `timeout` for queries still in flight, and reports.
/// `on_second` sees the progress of every elapsed second (and of the last, partial one).
pub async fn run(
    spec: &LoadSpec,
    on_second: &mut (dyn FnMut(&Progress) + Send),
    stop: impl Future<Output = ()>,
) -> Result<LoadReport, LoadgenError> {
    spec.validate()?;
    let objective_us = u64::try_from(spec.objective.as_micros()).unwrap_or(u64::MAX);
    let recorder = Recorder::new(objective_us, &spec.phases, spec.replicas, false)?;
    let mut collector = Collector::new(spec, recorder)?;
    let mut stop = std::pin::pin!(stop);
    if let Some(at) = spec.start_at {
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = &mut stop => {
                collector.stopped = true;
                return Ok(collector.report(Duration::ZERO));
            }
        }
    }
    let t0 = Instant::now();
    let (events, mut inbox) = mpsc::unbounded_channel();
    let (cancel, cancelled) = watch::channel(false);
    let schedule = Schedule::new(&spec.phases, spec.poisson, spec.seed);
    let sender = Sender {
        client: client::build(spec.http2, spec.max_in_flight),
        targets: spec.targets.clone().into(),
        http2: spec.http2,
        timeout: spec.timeout,
        max_in_flight: spec.max_in_flight,
        in_flight: Arc::new(AtomicUsize::new(0)),
        t0,
        give_up: t0 + schedule_end(spec).saturating_add(spec.timeout),
        events,
    };
    tokio::spawn(sender.send_all(schedule, cancelled));
    let mut tick = tokio::time::interval_at(t0 + Duration::from_secs(1), Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut drain: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            () = &mut stop, if !collector.stopped => {
                collector.stopped = true;
                let _ = cancel.send(true);
            }
            _ = tick.tick() => collector.emit(t0, false, on_second),
            event = inbox.recv() => match event {
                Some(Event::Finished { stopped, fell_behind }) => {
                    collector.stopped |= stopped;
                    collector.report.fell_behind = fell_behind;
                    drain = Some(Instant::now() + spec.timeout + DRAIN_GRACE);
                }
                Some(event) => collector.handle(event),
                None => break,
            },
            () = sleep_until_some(drain) => break,
        }
    }
    collector.abandon();
    collector.emit(t0, true, on_second);
    Ok(collector.report(t0.elapsed()))
}

/// When the schedule ends, from t=0.
fn schedule_end(spec: &LoadSpec) -> Duration {
    spec.phases
        .last()
        .map_or(Duration::ZERO, |p| Duration::from_nanos(p.end.as_nanos()))
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The sending side: paces the schedule, never waits for responses.
struct Sender {
    client: LoadClient,
    targets: Arc<[Uri]>,
    http2: bool,
    timeout: Duration,
    max_in_flight: usize,
    in_flight: Arc<AtomicUsize>,
    t0: Instant,
    /// The end of the schedule plus the timeout: a sender still behind it cannot keep up with
    /// the rate, and stops rather than run on for as long as the backlog would take.
    give_up: Instant,
    events: mpsc::UnboundedSender<Event>,
}

impl Sender {
    async fn send_all(self, schedule: Schedule, mut cancelled: watch::Receiver<bool>) {
        let mut burst = 0;
        let (mut stopped, mut fell_behind) = (false, false);
        for (id, issued) in (0u64..).zip(schedule) {
            let due = self.t0 + Duration::from_nanos(issued.as_nanos());
            if due > Instant::now() {
                burst = 0;
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    _ = cancelled.changed() => {}
                }
            } else {
                burst += 1;
                if burst >= BURST {
                    burst = 0;
                    tokio::task::yield_now().await;
                    if Instant::now() > self.give_up {
                        tracing::warn!(
                            "the load generator still had queries to send a timeout past the \
                             end of its schedule, and stopped: the rate is more than it can send"
                        );
                        (stopped, fell_behind) = (true, true);
                        break;
                    }
                }
            }
            if *cancelled.borrow() || self.events.is_closed() {
                stopped = true;
                break;
            }
            self.send(id, issued, due);
        }
        let _ = self.events.send(Event::Finished {
            stopped,
            fell_behind,
        });
    }

    fn send(&self, id: u64, issued: Time, due: Instant) {
        if self.in_flight.load(Ordering::Relaxed) >= self.max_in_flight {
            let _ = self.events.send(Event::NotSent { issued });
            return;
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let target = (id % self.targets.len() as u64) as usize;
        let _ = self.events.send(Event::Sent {
            id,
            issued,
            target,
            lag: Instant::now().saturating_duration_since(due),
        });
        let (client, targets, events) = (
            self.client.clone(),
            Arc::clone(&self.targets),
            self.events.clone(),
        );
        let (http2, timeout, in_flight) = (self.http2, self.timeout, Arc::clone(&self.in_flight));
        tokio::spawn(async move {
            let uri = &targets[target];
            let answer =
                tokio::time::timeout_at(due + timeout, client::query(&client, uri, http2)).await;
            // Counted from the intended time; a late answer is still at most the timeout.
            let latency = Instant::now().saturating_duration_since(due).min(timeout);
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let _ = events.send(Event::Done {
                id,
                latency: if answer.is_ok() { latency } else { timeout },
                answer: answer.ok(),
            });
        });
    }
}

/// The collecting side: the recorder, the report's counters and the current second.
struct Collector {
    recorder: Recorder,
    timeout: Duration,
    outstanding: HashMap<u64, Time>,
    report: LoadReport,
    second: Progress,
    second_latency: Histogram<u64>,
    stopped: bool,
}

impl Collector {
    fn new(spec: &LoadSpec, recorder: Recorder) -> Result<Collector, LoadgenError> {
        let report = LoadReport {
            measured: recorder.finish(),
            sent: 0,
            not_sent: 0,
            per_target: vec![0; spec.targets.len()],
            targets: spec.targets.iter().map(Uri::to_string).collect(),
            duration_s: 0.0,
            stopped_early: false,
            fell_behind: false,
            successes: 0,
            errors: 0,
            timeouts: 0,
            status: BTreeMap::new(),
            max_send_lag_ms: 0.0,
            http2: spec.http2,
            poisson: spec.poisson,
            seed: spec.seed,
            timeout_ms: spec.timeout.as_secs_f64() * 1e3,
            objective_ms: spec.objective.as_secs_f64() * 1e3,
        };
        Ok(Collector {
            recorder,
            timeout: spec.timeout,
            outstanding: HashMap::new(),
            report,
            second: Progress::default(),
            second_latency: Histogram::new_with_bounds(1, 24 * 3_600 * 1_000_000, 2)?,
            stopped: false,
        })
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Sent {
                id,
                issued,
                target,
                lag,
            } => {
                self.outstanding.insert(id, issued);
                self.report.sent += 1;
                self.second.sent += 1;
                if let Some(n) = self.report.per_target.get_mut(target) {
                    *n += 1;
                }
                let lag_ms = lag.as_secs_f64() * 1e3;
                self.report.max_send_lag_ms = self.report.max_send_lag_ms.max(lag_ms);
            }
            Event::NotSent { issued } => {
                self.report.not_sent += 1;
                self.second.errors += 1;
                self.second.completed += 1;
                self.recorder.query(issued, None, Some(Outcome::Error));
            }
            Event::Done {
                id,
                latency,
                answer,
            } => {
                if let Some(issued) = self.outstanding.remove(&id) {
                    self.done(issued, latency, answer);
                }
            }
            Event::Finished { .. } => {}
        }
    }

    fn done(&mut self, issued: Time, latency: Duration, answer: Option<Answer>) {
        let outcome = answer.map_or(Outcome::Timeout, |a| a.outcome());
        let latency_ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.recorder.query(issued, Some(latency_ns), Some(outcome));
        self.second.completed += 1;
        self.second_latency
            .saturating_record(latency_ns.div_ceil(1_000).max(1));
        match outcome {
            Outcome::Success => self.report.successes += 1,
            Outcome::Error => {
                self.report.errors += 1;
                self.second.errors += 1;
            }
            Outcome::Timeout | Outcome::Cancelled => {
                self.report.timeouts += 1;
                self.second.timeouts += 1;
            }
        }
        if let Some(answer) = answer {
            let key = answer
                .status
                .map_or_else(|| "transport".to_string(), |s| s.to_string());
            *self.report.status.entry(key).or_default() += 1;
            if let Some(replica) = answer.replica {
                self.recorder.served(issued, replica);
            }
        }
    }

    /// Queries still in flight when the collector gives up count as timeouts.
    fn abandon(&mut self) {
        let left: Vec<Time> = self.outstanding.drain().map(|(_, issued)| issued).collect();
        for issued in left {
            self.done(issued, self.timeout, None);
        }
    }

    /// Hands the current second to `on_second` and starts the next; the `last` one may be
    /// partial.
    fn emit(&mut self, t0: Instant, last: bool, on_second: &mut (dyn FnMut(&Progress) + Send)) {
        let ms = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1e3
            }
        };
        let mut progress = std::mem::take(&mut self.second);
        // A tick fires just after the whole second it ends; the last second ends part way.
        let elapsed = t0.elapsed().as_secs_f64();
        progress.t = if last {
            elapsed.ceil()
        } else {
            elapsed.round()
        }
        .max(1.0) as u64;
        progress.in_flight = self.outstanding.len() as u64;
        progress.p50_ms = ms(&self.second_latency, 0.5);
        progress.p99_ms = ms(&self.second_latency, 0.99);
        self.second_latency.reset();
        on_second(&progress);
    }

    fn report(mut self, elapsed: Duration) -> LoadReport {
        self.report.measured = self.recorder.finish();
        self.report.duration_s = elapsed.as_secs_f64();
        self.report.stopped_early = self.stopped;
        self.report
    }
}
