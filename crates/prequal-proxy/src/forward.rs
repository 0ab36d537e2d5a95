//! Forwarding one request: route, pick, send, hedge, and retry within the rules.
//!
//! A request is matched to a cluster by its routes, then tried up to `max_attempts` times
//! (hedges included). Each try asks the cluster's policy for a replica (never one this request
//! already tried, while others are left), rewrites the URI to that replica, and waits at most
//! `try_timeout` (and never past the request's overall `request_timeout`) for the response
//! headers. A response body of declared length up to `response_buffer_limit` is read whole
//! within that time too, so a replica that stops after its head is timed out, hedged and
//! retried like one that never answered; longer bodies, and streams, go back as they come.
//!
//! **Hedging** (Dean and Barroso, "The Tail at Scale", CACM 2013): when the first try of a
//! request that may be retried has not answered after the hedge delay (by default the p95 of
//! the cluster's recent successful tries), one more try goes to another replica the policy
//! picks, if the hedge budget allows (10% of requests plus 1 per second by default). Whichever
//! answers first is used; the others are dropped, which the policy hears of as cancelled tries
//! (see [`Cluster::complete`]), so its in-flight counts stay right. The decisions (when, how
//! many, within what budget) are prequal-core's [`prequal_core::Hedger`], the same the
//! simulator runs. A try that fails while another is still running does not end the request:
//! the other may still answer.
//!
//! What is retried, always within the retry budget, at once if another try of the request is
//! still in flight (it may be hung) and otherwise once every try has failed:
//! - a connection that could not be opened (nothing reached the replica, so any method);
//! - a 5xx response or a timed-out try, for idempotent methods (GET, HEAD, OPTIONS, TRACE, PUT,
//!   DELETE) or every method when the cluster sets `retry_non_idempotent`. Only these requests
//!   are hedged too.
//!
//! A second try needs the request body again: bodies up to `replay_body_limit` are read whole
//! first (see [`crate::replay`]); larger ones stream to the first try and are never sent twice,
//! so such a request is neither retried nor hedged. Every try is reported to the policy with
//! its outcome (a 5xx is an error, so error aversion sees fast failures; so is a gRPC status
//! that blames the server, see [`head_outcome`] and [`prequal_http::grpc`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use http::uri::Authority;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prequal_core::{Outcome, ReplicaId};
use prequal_http::protocol::{LOAD_HEADER, parse_reply};
use prequal_http::{TrackedBody, grpc_outcome, head_outcome};
use tokio::time::Instant;

use crate::access_log::Served;
use crate::body::{IdleTimeout, ProxyBody, ReadWhole, WholeBody, full};
use crate::cluster::{Attempt, Cluster, HedgePlan, Strict};
use crate::headers::{ClientHop, Direction, add_forwarding, strip_hop_by_hop};
use crate::replay::{ClientFailed, RequestBody};
use crate::try_guard::TryGuard;
use crate::upstream::UpstreamBody;

/// [`LOAD_HEADER`] as a `HeaderName`, which every response is searched for: a string name would
/// be parsed and checked again on every search.
const LOAD: HeaderName = HeaderName::from_static(LOAD_HEADER);

/// Limits that apply to every request, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body, in bytes.
    pub max_body_bytes: u64,
}

/// A plain-text response made by the proxy itself.
pub fn local_response(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// A response made by the proxy itself, which no try served.
fn unserved(status: StatusCode, text: &'static str) -> (Response<ProxyBody>, Served) {
    (local_response(status, text), Served::default())
}

/// Forwards `request` to `cluster` over the connections of data-plane `worker` (the thread
/// this runs on), retrying and hedging as the module docs say. Returns the response with, for
/// the access log, the tries behind it (returned beside it rather than in its extensions, which
/// would cost two allocations per request).
pub async fn forward(
    cluster: &Arc<Cluster>,
    request: Request<Incoming>,
    client: &ClientHop,
    limits: Limits,
    worker: usize,
) -> (Response<ProxyBody>, Served) {
    let (mut parts, body) = request.into_parts();
    if parts.method == http::Method::CONNECT {
        // A reverse proxy forwards to its replicas; it does not open tunnels.
        return unserved(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not supported\n");
    }
    if too_large(&parts.headers, limits) {
        return unserved(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
    }
    prepare_headers(&mut parts, client, cluster.version());
    let config = cluster.config();
    // A body is kept for a second try only if there can be one.
    let replay_limit = match config.max_attempts > 1 {
        true => config.replay_body_limit,
        false => 0,
    };
    let body = RequestBody::read(body, &parts.headers, replay_limit, limits.max_body_bytes);
    let body = match tokio::time::timeout(config.request_timeout, body).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => {
            return unserved(StatusCode::BAD_REQUEST, "request body could not be read\n");
        }
        Err(_) => {
            return unserved(StatusCode::REQUEST_TIMEOUT, "request body too slow\n");
        }
    };
    let may_retry_failures = is_idempotent(&parts.method) || config.retry_non_idempotent;
    let hedgeable = may_retry_failures && body.is_replayable() && config.max_attempts > 1;
    let mut tries = Tries {
        cluster,
        parts,
        body,
        tried: Vec::new(),
        deadline: Instant::now() + config.request_timeout,
        worker,
        hedgeable,
        hedge_plan: None,
    };
    // The tries in flight: the first (or a retry), and the hedges sent while it runs.
    let mut running = Running::default();
    let (mut hedge_plan, mut hedge_at) = (None, None);
    let (mut attempts, mut hedges_sent) = (0, 0);
    let mut failure = None;
    loop {
        if running.is_empty() {
            // Nothing in flight: the first try, or a retry once every try failed.
            if attempts > 0 && !tries.may_retry(attempts, failure.as_ref(), may_retry_failures) {
                break;
            }
            let last = attempts + 1 == config.max_attempts;
            if !tries
                .start(&mut running, attempts == 0, false, Strict::No, last)
                .await
            {
                break;
            }
            attempts += 1;
            if attempts == 1 {
                // Planned with the first try's pick: the hedge clock starts once it is on its way.
                hedge_plan = tries.hedge_plan.take();
                hedge_at = hedge_plan.map(|plan| plan.due);
            }
        }
        let hedging = hedge_at.filter(|_| attempts < config.max_attempts);
        // One timer per request: the next hedge, or the lead try's deadline if that comes first.
        let wake_at = earliest(hedging, running.lead_deadline());
        let (step, hedge) = tokio::select! {
            // The tries first, so that a lead try whose deadline woke the request ends (timed
            // out) before the timer is looked at.
            biased;
            Some(ended) = std::future::poll_fn(|cx| running.poll_next(cx)) => ended,
            () = sleep_until_some(wake_at) => {
                if hedging.is_none_or(|at| Instant::now() < at) {
                    // Woken for the lead try's deadline: it ends when next polled.
                    continue;
                }
                hedge_at = None;
                let Some(HedgePlan { started, .. }) = hedge_plan else { continue };
                match cluster.poll_hedge(started, hedges_sent, &tries.tried) {
                    Some(Ok(())) => {
                        let last = attempts + 1 == config.max_attempts;
                        let strict = Strict::Hedge(started);
                        if tries.start(&mut running, false, true, strict, last).await {
                            attempts += 1;
                            hedges_sent += 1;
                            // Asked again at once: it says when the next hedge, if any, is due.
                            hedge_at = Some(Instant::now());
                        }
                    }
                    Some(Err(due)) => hedge_at = Some(due),
                    None => {}
                }
                continue;
            }
        };
        let step = match step {
            TryEnd::Step(step) => step,
            TryEnd::BodyLate { rest, deadline } => {
                // Its head is in and its body is not: it runs on to the same deadline, and a
                // hedge still due waits until the body is late as well (the head alone would
                // hedge every request whose replica sends its body after its head).
                running.push(
                    Box::pin(async move { (TryEnd::Step(rest.await), hedge) }),
                    deadline,
                );
                if let Some(at) = &mut hedge_at {
                    *at = (*at).max(Instant::now() + cluster.body_allowance());
                }
                continue;
            }
        };
        if let Step::Done(response, replica) = step {
            if hedge {
                cluster.metrics.hedges_won.inc();
            }
            // Dropping the tries still in flight cancels them, as losers.
            crate::try_guard::drop_losers(running);
            let served = Served {
                replica: Some(replica),
                tries: attempts,
                hedged: hedge,
            };
            return (response, served);
        }
        // A failed try while others are still out: one of them may be hung (a black hole holds
        // it until `try_timeout`), so a retryable failure is retried at once beside them, on a
        // replica this request has not tried (none is charged when every replica was tried).
        // With none left out, the retry comes above.
        if !running.is_empty()
            && cluster.has_untried(&tries.tried)
            && tries.may_retry(attempts, Some(&step), may_retry_failures)
        {
            let last = attempts + 1 == config.max_attempts;
            if tries
                .start(&mut running, false, false, Strict::Yes, last)
                .await
            {
                attempts += 1;
            }
        }
        failure = Some(step);
    }
    match failure {
        Some(step) => {
            let (response, replica) = step.into_parts();
            let served = Served {
                replica,
                tries: attempts,
                hedged: false,
            };
            (response, served)
        }
        None if attempts == 0 => {
            unserved(StatusCode::SERVICE_UNAVAILABLE, "no replica available\n")
        }
        None => unserved(StatusCode::BAD_GATEWAY, "no try succeeded\n"),
    }
}

/// One try, from sending its request to its response headers (or its failure), and whether
/// it is a hedge.
type TryFuture<'a> = Pin<Box<dyn Future<Output = (TryEnd, bool)> + Send + 'a>>;

/// The tries of one request in flight: one, the lead, polled directly, the others (hedges, and
/// retries sent beside a try that may be hung) in a `FuturesUnordered`. Most requests make a
/// single try, which so never pays for that set's allocation and wake-up bookkeeping.
///
/// The lead is polled whenever the request's task wakes, so it needs no timer of its own: it
/// checks its deadline when polled, and the request's loop keeps one timer for the earlier of
/// that deadline and the next hedge (two timers per request before). A try beside it is polled
/// only when it is woken itself, so it keeps its own timer.
#[derive(Default)]
struct Running<'a> {
    /// The lead try, and its deadline.
    lead: Option<(TryFuture<'a>, Instant)>,
    /// Made with the first try beside the lead: an empty `FuturesUnordered` already costs two
    /// allocations.
    beside: Option<FuturesUnordered<TryFuture<'a>>>,
}

impl<'a> Running<'a> {
    fn is_empty(&self) -> bool {
        self.lead.is_none() && self.beside.as_ref().is_none_or(FuturesUnordered::is_empty)
    }

    /// Whether the next try pushed becomes the lead, watched by the request's timer.
    fn next_is_lead(&self) -> bool {
        self.lead.is_none()
    }

    /// Adds a try that must end by `deadline`: as the lead if there is none (see
    /// [`Running::next_is_lead`]), else beside it.
    fn push(&mut self, next: TryFuture<'a>, deadline: Instant) {
        if self.next_is_lead() {
            self.lead = Some((next, deadline));
        } else {
            self.beside.get_or_insert_default().push(next);
        }
    }

    /// The lead try's deadline, for the request's timer.
    fn lead_deadline(&self) -> Option<Instant> {
        self.lead.as_ref().map(|(_, deadline)| *deadline)
    }

    /// The next try to end, as `FuturesUnordered::poll_next`: `None` once none is running.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(TryEnd, bool)>> {
        if let Some((lead, _)) = &mut self.lead
            && let Poll::Ready(ended) = lead.as_mut().poll(cx)
        {
            self.lead = None;
            return Poll::Ready(Some(ended));
        }
        let polled = match &mut self.beside {
            Some(beside) => beside.poll_next_unpin(cx),
            None => Poll::Ready(None),
        };
        match polled {
            Poll::Ready(None) if self.lead.is_some() => Poll::Pending,
            polled => polled,
        }
    }
}

/// The earlier of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `send`'s output, or `None` if it has not ended when polled at or after `deadline`. It keeps
/// no timer: whoever polls it must wake it by then (the request's loop does for its lead try).
async fn until_deadline<F: Future>(deadline: Instant, mut send: Pin<&mut F>) -> Option<F::Output> {
    std::future::poll_fn(|cx| match send.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending if Instant::now() >= deadline => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    })
    .await
}

/// Sleeps until `at`; never ends if there is none.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What one request's tries share.
struct Tries<'a> {
    cluster: &'a Arc<Cluster>,
    parts: http::request::Parts,
    body: RequestBody,
    /// Replicas this request was sent to, never picked again while others are left.
    tried: Vec<ReplicaId>,
    deadline: Instant,
    /// The data-plane worker whose connections the tries use.
    worker: usize,
    /// Whether the request may be hedged.
    hedgeable: bool,
    /// Its hedge plan, from its first try's pick until the loop takes it.
    hedge_plan: Option<HedgePlan>,
}

impl<'a> Tries<'a> {
    /// Picks a replica and starts a try there, adding it to `running` (`strict`: only on a
    /// replica this request has not tried; `hedge` labels it for the metrics); false when no
    /// replica is available or the body cannot be sent again. `last` marks the last try the
    /// request may make, which takes the headers instead of copying them.
    async fn start(
        &mut self,
        running: &mut Running<'a>,
        first: bool,
        hedge: bool,
        strict: Strict,
        last: bool,
    ) -> bool {
        let Some(body) = self.body.for_try() else {
            return false;
        };
        let attempt = Attempt {
            first,
            plan_hedge: first && self.hedgeable,
            exclude: &self.tried,
            strict,
        };
        let Some(chosen) = self.cluster.pick(self.worker, attempt).await else {
            return false;
        };
        self.hedge_plan = chosen.hedge;
        self.tried.push(chosen.replica);
        let headers = match last {
            true => std::mem::take(&mut self.parts.headers),
            false => self.parts.headers.clone(),
        };
        let version = self.cluster.version();
        let upstream = upstream_request(&self.parts, headers, version, body);
        // The guard exists from the dispatch on, so the policy hears of this try's end even
        // if its future is dropped before it first runs.
        let guard = TryGuard::dispatched(self.cluster, &chosen, self.worker);
        // At most `try_timeout`, and never past the request's deadline.
        let now = Instant::now();
        let try_timeout = self.cluster.config().try_timeout;
        let deadline = now + try_timeout.min(self.deadline.saturating_duration_since(now));
        let watched = running.next_is_lead();
        let client_failed = self.body.client_failed().cloned();
        let step = one_try(
            guard,
            chosen.authority,
            upstream,
            deadline,
            watched,
            client_failed,
        );
        // `map`, not an async block: one awaiting `step` would hold it twice, as the captured
        // future and as the one awaited.
        running.push(Box::pin(step.map(move |end| (end, hedge))), deadline);
        true
    }

    /// Whether a request whose tries all failed, the last with `failure`, gets another.
    fn may_retry(&self, attempts: u32, failure: Option<&Step>, may_retry_failures: bool) -> bool {
        let retryable = match failure {
            Some(Step::Failed { connect, .. }) => *connect || may_retry_failures,
            _ => false,
        };
        retryable
            && self.body.is_replayable()
            && Instant::now() < self.deadline
            && self.cluster.try_retry(attempts)
    }
}

/// True when the declared `Content-Length` is over the limit.
fn too_large(headers: &http::HeaderMap, limits: Limits) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|len| len > limits.max_body_bytes)
}

/// Rewrites the request head for the replica: host, hop-by-hop, forwarding headers.
fn prepare_headers(parts: &mut http::request::Parts, client: &ClientHop, upstream: Version) {
    // HTTP/2 clients name the host in :authority; keep it for an HTTP/1.1 replica.
    if !parts.headers.contains_key(header::HOST)
        && let Some(authority) = parts.uri.authority()
        && let Ok(value) = HeaderValue::from_str(authority.as_str())
    {
        parts.headers.insert(header::HOST, value);
    }
    if upstream == Version::HTTP_2
        && let Some(host) = parts.headers.remove(header::HOST)
    {
        // Over HTTP/2 the replica's address becomes :authority, and a Host that differs from
        // it is not allowed (RFC 9113 section 8.3.1); the client's host goes in
        // X-Forwarded-Host instead.
        if !parts.headers.contains_key("x-forwarded-host") {
            parts.headers.insert("x-forwarded-host", host);
        }
    }
    strip_hop_by_hop(&mut parts.headers, Direction::Request);
    add_forwarding(&mut parts.headers, client, parts.version);
}

/// Where a try stands when its future ends: done (answered or failed), or answered with a head
/// whose body, to be read whole, has not all come yet.
enum TryEnd {
    Step(Step),
    /// The rest of the try, which reads the body to the end, by `deadline`.
    BodyLate {
        rest: Pin<Box<dyn Future<Output = Step> + Send>>,
        deadline: Instant,
    },
}

/// How one try ended.
enum Step {
    /// A response to hand back, and the replica that sent it.
    Done(Response<ProxyBody>, Authority),
    /// A failure: the response to give if it is not retried, the replica that sent it (none
    /// when none answered), and whether it was a connect error.
    Failed {
        response: Response<ProxyBody>,
        replica: Option<Authority>,
        connect: bool,
    },
}

impl Step {
    fn into_parts(self) -> (Response<ProxyBody>, Option<Authority>) {
        match self {
            Step::Done(response, replica) => (response, Some(replica)),
            Step::Failed {
                response, replica, ..
            } => (response, replica),
        }
    }
}

/// One try, which times out at `deadline`: by a timer of its own, or, when `watched`, by the
/// request's timer (see [`Running`]). `client_failed` is set if the request body it streams
/// fails on the client's side: the try then fails as the client's fault (400), and the
/// replica is not charged. A response of up to `response_buffer_limit` bytes is read whole
/// before the try ends: at once when its body came with its head, else in a
/// [`TryEnd::BodyLate`] the request's loop runs on.
///
/// Not an async fn: one would keep its arguments beside the head's future, which holds them
/// too, and the try's future is copied whole when it is boxed.
fn one_try(
    guard: TryGuard,
    authority: Authority,
    upstream: Request<ProxyBody>,
    deadline: Instant,
    watched: bool,
    client_failed: Option<ClientFailed>,
) -> impl Future<Output = TryEnd> + Send {
    let head = head_of_try(guard, authority, upstream, deadline, watched, client_failed);
    head.map(move |head| match head {
        Ok((response, guard, authority)) => {
            after_head(response, guard, authority, deadline, watched)
        }
        Err(failed) => TryEnd::Step(failed),
    })
}

/// A try whose response head came: relayed, once its body is read if it is to be read whole
/// (see [`one_try`]). Not async, so that the try's future, which is boxed, holds none of this.
fn after_head(
    response: Response<UpstreamBody>,
    mut guard: TryGuard,
    authority: Authority,
    deadline: Instant,
    watched: bool,
) -> TryEnd {
    let limit = guard.cluster.config().response_buffer_limit;
    if !reads_whole(response.body(), limit) {
        return TryEnd::Step(relay(response.map(Reply::Streamed), guard, authority));
    }
    // A small response is read whole before the proxy answers, still within the try: a replica
    // that stops after its head is then timed out (and hedged, and retried) like one that
    // never answered, where a streamed body would hold the client until the client gave up.
    guard.head = Some(guard.start.elapsed());
    let (parts, body) = response.into_parts();
    let mut read = ReadWhole::new(body);
    // Most bodies come with their head: what is there is taken without waiting. The body is
    // polled with a waker that does nothing; if it must wait, the rest of the try polls it
    // again with its own, which is then the one woken.
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(&mut read).poll(&mut cx) {
        Poll::Ready(whole) => {
            // Answered in full at the head's instant: no second clock read.
            guard.answered = guard.head;
            TryEnd::Step(read_end(Some(whole), parts, guard, authority))
        }
        Poll::Pending => {
            let rest = async move {
                let since = Instant::now();
                let whole = match watched {
                    true => until_deadline(deadline, Pin::new(&mut read)).await,
                    false => tokio::time::timeout_at(deadline, &mut read).await.ok(),
                };
                let waited = since.elapsed();
                // Sooner, the body was only handed over in parts (hyper passes an HTTP/1.1
                // body on a chunk at a time), not late.
                if let Some(Ok(_)) = &whole
                    && waited >= LATE_BODY
                {
                    guard.cluster.record_body_wait(waited);
                }
                read_end(whole, parts, guard, authority)
            };
            TryEnd::BodyLate {
                rest: Box::pin(rest),
                deadline,
            }
        }
    }
}

/// A try up to its response head: the response (with the try's guard and replica), or the step
/// it failed with.
async fn head_of_try(
    mut guard: TryGuard,
    authority: Authority,
    upstream: Request<ProxyBody>,
    deadline: Instant,
    watched: bool,
    client_failed: Option<ClientFailed>,
) -> Result<(Response<UpstreamBody>, TryGuard, Authority), Step> {
    let cluster = Arc::clone(&guard.cluster);
    let upstream_pool = cluster.upstream(guard.worker);
    let sent = {
        // Pinned here, once: moved into either wrapper, it would be held twice in this future,
        // which is copied whole when it is boxed.
        let mut send = std::pin::pin!(upstream_pool.send(guard.replica, &authority, upstream));
        if watched {
            until_deadline(deadline, send.as_mut()).await
        } else {
            tokio::time::timeout_at(deadline, send.as_mut()).await.ok()
        }
    };
    match sent {
        None => {
            guard.outcome = Outcome::Timeout;
            Err(timed_out())
        }
        Some(Err(error)) if client_failed.as_ref().is_some_and(ClientFailed::is_set) => {
            // The client's body broke (a malformed chunk, too many bytes, the client gone):
            // nothing says the replica did anything wrong.
            guard.outcome = Outcome::Cancelled;
            guard.client_fault = true;
            tracing::debug!(cluster = cluster.name(), replica = %authority, %error, "request body failed");
            let response =
                local_response(StatusCode::BAD_REQUEST, "request body could not be read\n");
            Err(Step::Failed {
                response,
                replica: None,
                connect: false,
            })
        }
        Some(Err(error)) => {
            guard.outcome = Outcome::Error;
            tracing::debug!(cluster = cluster.name(), replica = %authority, %error, "try failed");
            Err(unavailable(error.is_connect()))
        }
        Some(Ok(response)) => Ok((response, guard, authority)),
    }
}

/// The end of reading a body whole: `None` if the try's deadline came first.
fn read_end(
    whole: Option<Result<WholeBody, hyper::Error>>,
    parts: http::response::Parts,
    mut guard: TryGuard,
    authority: Authority,
) -> Step {
    match whole {
        None => {
            guard.outcome = Outcome::Timeout;
            timed_out()
        }
        Some(Err(error)) => {
            guard.outcome = Outcome::Error;
            tracing::debug!(cluster = guard.cluster.name(), replica = %authority, %error, "response body failed");
            unavailable(false)
        }
        Some(Ok(whole)) => relay(
            Response::from_parts(parts, Reply::Whole(whole)),
            guard,
            authority,
        ),
    }
}

/// A try that timed out (504 if no other try answers).
fn timed_out() -> Step {
    Step::Failed {
        response: local_response(StatusCode::GATEWAY_TIMEOUT, "upstream timed out\n"),
        replica: None,
        connect: false,
    }
}

/// A try that failed on the replica's side of the connection (502 if no other try answers);
/// `connect`: before the request reached it.
fn unavailable(connect: bool) -> Step {
    Step::Failed {
        response: local_response(StatusCode::BAD_GATEWAY, "upstream unavailable\n"),
        replica: None,
        connect,
    }
}

/// The least wait after its head for which a body read whole counts as late, for the body
/// allowance (see `Cluster::body_allowance`).
const LATE_BODY: Duration = Duration::from_millis(1);

/// Whether a response body is read whole within its try: `limit` is on and the body's
/// declared length (`Content-Length`) is within it. Streams, and bodies of undeclared length,
/// are passed on as they come.
fn reads_whole(body: &impl Body, limit: u64) -> bool {
    limit > 0 && body.size_hint().upper().is_some_and(|len| len <= limit)
}

/// Turns the replica's response into the client's: hop-by-hop headers out, and the replica's
/// piggybacked load (it describes the replica to the balancer that chose it, so a client, or a
/// balancer in front of this proxy, must not read it as this proxy's), body tracked so the
/// policy hears when it ends (a success once it has been read to its end; cancelled if the
/// client leaves before); a 5xx is a failed step (which the caller may retry). `replica` is
/// the one that sent it.
fn relay(mut response: Response<Reply>, mut guard: TryGuard, replica: Authority) -> Step {
    guard.report = response
        .headers_mut()
        .remove(LOAD)
        .and_then(|v| parse_reply(v.as_bytes()).ok());
    if guard.answered.is_none() {
        guard.answered = Some(guard.start.elapsed());
    }
    let outcome = head_outcome(response.status(), response.headers());
    let failed = response.status().is_server_error();
    if outcome.is_failure() {
        // Known from the head: the try is a failure even if its body is never read.
        guard.outcome = outcome;
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers, Direction::Response);
    // The replica's HTTP version is per hop; hyper answers the client in the client's version.
    parts.version = Version::HTTP_11;
    // A body streamed from the replica is cut off once the replica has sent nothing of it for
    // `response_idle_timeout`; the cut is outside the try's tracking, so the try ends as
    // cancelled and the replica is not charged (a stream may rightly be quiet a long time).
    let idle = |guard: &TryGuard| {
        Some(guard.cluster.config().response_idle_timeout).filter(|idle| !idle.is_zero())
    };
    let body = match body {
        // Read whole: the replica is done with the try already, and its trailers are known.
        Reply::Whole(body) => {
            guard.outcome = match body.trailers() {
                Some(trailers) if outcome == Outcome::Success => grpc_outcome(trailers),
                _ => outcome,
            };
            drop(guard);
            for_client(body, None)
        }
        // A 5xx is an error as of its head: the try ends now, not when the body that may be
        // passed to the client (if no retry succeeds) is read, so the replica's in-flight count
        // does not stay up through a retry.
        Reply::Streamed(body) if failed => {
            let idle = idle(&guard);
            drop(guard);
            for_client(body, idle)
        }
        Reply::Streamed(body) => {
            let idle = idle(&guard);
            for_client(TrackedBody::new(body, outcome, guard), idle)
        }
    };
    let response = Response::from_parts(parts, body);
    match failed {
        true => Step::Failed {
            response,
            replica: Some(replica),
            connect: false,
        },
        false => Step::Done(response, replica),
    }
}

/// `body` as the client's response body: boxed, and cut off after `idle` without a frame if
/// given.
fn for_client<B>(body: B, idle: Option<Duration>) -> ProxyBody
where
    B: Body<Data = Bytes, Error: Into<crate::body::BoxError>> + Send + Unpin + 'static,
{
    match idle {
        Some(idle) => IdleTimeout::new(body, idle).boxed_unsync(),
        None => body.map_err(Into::into).boxed_unsync(),
    }
}

/// A replica's response body as [`relay`] takes it.
enum Reply {
    /// Streamed from the replica as it comes.
    Streamed(UpstreamBody),
    /// Read whole within the try (`response_buffer_limit`).
    Whole(WholeBody),
}

/// The request for one try: same method, path, headers; the URI in origin form (the pool
/// knows the replica's address).
fn upstream_request(
    parts: &http::request::Parts,
    headers: http::HeaderMap,
    version: http::Version,
    body: ProxyBody,
) -> Request<ProxyBody> {
    let path = match parts.uri.path_and_query() {
        Some(path) => path.clone(),
        None => http::uri::PathAndQuery::from_static("/"),
    };
    let mut request = Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = http::Uri::from(path);
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    request
}
