//! [`Balance`]: a `tower::Service` that sends each request to the endpoint a core policy picks.
//!
//! Readiness works as in `tower::balance::p2c::Balance`: endpoints come and go through a
//! [`Discover`], wait in tower's [`ReadyCache`] until their own `poll_ready` says they can take
//! a request, and the balancer's `poll_ready` chooses one before `call` sends to it. An
//! endpoint whose `poll_ready` fails is dropped (and removed from the policy) until discovery
//! inserts it again; a balancer with no ready endpoint returns `Pending`, woken by discovery or
//! by an endpoint becoming ready. That is the backpressure: a caller that awaits readiness waits
//! for capacity instead of queueing requests in the balancer.
//!
//! What differs is the choice. `poll_ready` asks the policy to pick, and the policy knows
//! every endpoint discovery inserted, ready or not. If it names a ready endpoint, that is the
//! one. If it names one that is not ready, the policy is asked once more, and then a ready
//! endpoint is taken uniformly at random (as it is when the policy has none to offer), so a
//! policy never stalls requests that a ready endpoint could serve. Sync-mode policies
//! (`prequal-sync`), and `prequal` when its pool is stale (`wait_when_stale`, on by default),
//! answer later: `poll_ready` stays `Pending` until the decision comes (woken
//! by the probe replies or the policy's own deadline), or for four probe timeouts plus 10 ms at
//! most, after which a random ready endpoint is taken.
//!
//! `call` tells the policy the query is dispatched and returns a [`ResponseFuture`]; the
//! query counts in flight until its response body ends or is dropped (see [`crate::response`]).

use std::fmt;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use prequal_core::{Pick, QueryId, ReplicaId, Snapshot};
use tower::Service;
use tower::discover::{Change, Discover};
use tower::ready_cache::ReadyCache;
use tower::ready_cache::error::Failed;

use crate::box_error::BoxError;
use crate::driver::Driver;
use crate::error::{DiscoverError, NotReady};
use crate::probe::{MakeProbe, SendProbe, erase};
use crate::replica::ReplicaKeys;
use crate::response::{ResponseBody, ResponseFuture};
use crate::rif::InFlight;

/// Times the policy is asked per request before a ready endpoint is taken at random.
const MAX_PICKS: usize = 2;

/// Rounds of "choose, then check the choice is still ready" per `poll_ready`.
const MAX_CHOICES: usize = 4;

/// Makes each new endpoint's probe service, with its type erased.
type MakeProbeFn<K, S> = Box<dyn FnMut(&K, &S) -> SendProbe + Send>;

/// Balances requests over the endpoints of a [`Discover`] with a prequal-core policy.
///
/// See the [crate docs](crate) for an example and the [module docs](self) for how readiness
/// and the policy's choice meet. `B` is the request body type. Like tower's balancer it is not
/// `Clone`: share it between tasks with `tower::buffer::Buffer`.
pub struct Balance<D, B>
where
    D: Discover,
    D::Key: Hash,
{
    discover: D,
    discover_ended: bool,
    endpoints: ReadyCache<ReplicaId, D::Service, Request<B>>,
    replicas: ReplicaKeys<D::Key>,
    make_probe: MakeProbeFn<D::Key, D::Service>,
    driver: Arc<Driver>,
    /// The endpoint `poll_ready` chose, and the policy's id for the query it will carry.
    chosen: Option<(ReplicaId, QueryId)>,
    /// A sync-mode pick waiting for its decision, with the deadline of the wait.
    waiting: Option<(QueryId, Pin<Box<tokio::time::Sleep>>)>,
    next_query: u64,
}

/// A cloneable view of a balancer's policy, usable while the balancer itself is owned by a
/// `Buffer` or another task: for admin pages, metrics and tests.
#[derive(Clone, Debug)]
pub struct Handle {
    driver: Arc<Driver>,
}

impl Handle {
    /// The policy's state now: per replica its client-local RIF, picks and whether it is
    /// avoided; the probe pool with hot and cold replies; policy-specific values. Replicas the
    /// balancer has ejected ([`Handle::ejected`]) are out of the policy, so not listed, and so
    /// are all replicas until the first request (the balancer hears of the discovered ones
    /// then, as its starting set).
    pub fn snapshot(&self) -> Snapshot {
        self.driver.snapshot()
    }

    /// The replicas outlier ejection has taken out of the policy for now.
    pub fn ejected(&self) -> Vec<ReplicaId> {
        self.driver.ejected()
    }

    /// The policy's config name.
    pub fn policy(&self) -> &'static str {
        self.driver.policy_name()
    }
}

impl<D, B> Balance<D, B>
where
    D: Discover,
    D::Key: Hash,
{
    // `Balance::new` is in builder.rs, beside the `Builder` it is a shortcut for.

    pub(crate) fn from_parts<P>(discover: D, driver: Driver, prober: P) -> Self
    where
        D::Service: Service<Request<B>>,
        P: MakeProbe<D::Key, D::Service> + Send + 'static,
    {
        let mut prober = prober;
        Self {
            discover,
            discover_ended: false,
            endpoints: ReadyCache::default(),
            replicas: ReplicaKeys::new(),
            make_probe: Box::new(move |key, endpoint| erase(prober.make_probe(key, endpoint))),
            driver: Arc::new(driver),
            chosen: None,
            waiting: None,
            next_query: 0,
        }
    }

    /// A view of the policy that outlives moving the balancer into a `Buffer`.
    pub fn handle(&self) -> Handle {
        Handle {
            driver: Arc::clone(&self.driver),
        }
    }

    /// Endpoints known, ready or not.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// True when there is no endpoint.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

impl<D, B> Balance<D, B>
where
    D: Discover + Unpin,
    D::Key: Hash + fmt::Debug,
    D::Error: Into<BoxError>,
    D::Service: Service<Request<B>>,
    <D::Service as Service<Request<B>>>::Error: Into<BoxError>,
{
    /// Applies every change discovery has ready.
    fn update_from_discover(&mut self, cx: &mut Context<'_>) -> Result<(), BoxError> {
        while !self.discover_ended {
            match Pin::new(&mut self.discover).poll_discover(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    tracing::debug!("discovery ended; the endpoints known stay");
                    self.discover_ended = true;
                }
                Poll::Ready(Some(Err(error))) => {
                    return Err(Box::new(DiscoverError(error.into())));
                }
                Poll::Ready(Some(Ok(Change::Insert(key, endpoint)))) => {
                    self.insert(key, endpoint);
                }
                Poll::Ready(Some(Ok(Change::Remove(key)))) => {
                    if let Some(replica) = self.replicas.remove(&key) {
                        tracing::debug!(%replica, "endpoint removed by discovery");
                        self.forget(replica);
                    }
                }
            }
        }
        Ok(())
    }

    fn insert(&mut self, key: D::Key, endpoint: D::Service) {
        let send = (self.make_probe)(&key, &endpoint);
        // Written once, for the logs that name the replica to a person.
        let written = format!("{key:?}");
        let (replica, replaced) = self.replicas.insert(key);
        if let Some(old) = replaced {
            self.forget(old);
        }
        tracing::debug!(%replica, key = %written, "endpoint inserted by discovery");
        self.endpoints.push(replica, endpoint);
        self.driver.insert(replica, written, send);
    }

    /// Takes `replica` out of the endpoints and the policy.
    fn forget(&mut self, replica: ReplicaId) {
        self.endpoints.evict(&replica);
        self.driver.remove(replica);
        if self.chosen.is_some_and(|(chosen, _)| chosen == replica) {
            self.chosen = None;
        }
    }

    fn endpoint_failed(&mut self, Failed(replica, error): Failed<ReplicaId>) {
        tracing::debug!(%replica, %error, "endpoint failed; dropped until discovery inserts it again");
        self.forget(replica);
    }

    /// Polls the endpoints that are not ready yet.
    fn promote_pending(&mut self, cx: &mut Context<'_>) {
        loop {
            match self.endpoints.poll_pending(cx) {
                Poll::Ready(Ok(())) | Poll::Pending => return,
                Poll::Ready(Err(failed)) => self.endpoint_failed(failed),
            }
        }
    }

    /// Chooses a ready endpoint for the next request; `Ready(None)` when none is ready.
    fn choose(&mut self, cx: &mut Context<'_>) -> Poll<Option<(ReplicaId, QueryId)>> {
        if self.endpoints.ready_len() == 0 {
            return Poll::Ready(None);
        }
        let (query, pick) = match self.waiting.take() {
            Some(waiting) => ready!(self.poll_waiting(waiting, cx)),
            None => {
                self.next_query += 1;
                let query = QueryId(self.next_query);
                let mut pick = Pick::NoReplica;
                for _ in 0..MAX_PICKS {
                    pick = self.driver.pick(query);
                    match pick {
                        Pick::Replica(replica) if self.endpoints.get_ready(&replica).is_some() => {
                            return Poll::Ready(Some((replica, query)));
                        }
                        Pick::Replica(replica) => {
                            tracing::trace!(%replica, "policy picked an endpoint that is not ready");
                        }
                        Pick::Pending => {
                            let limit = self.driver.probe_timeout * 4 + Duration::from_millis(10);
                            let deadline = Box::pin(tokio::time::sleep(limit));
                            self.waiting = Some((query, deadline));
                            return self.choose(cx);
                        }
                        Pick::NoReplica => break,
                    }
                }
                (query, pick)
            }
        };
        if let Pick::Replica(replica) = pick
            && self.endpoints.get_ready(&replica).is_some()
        {
            return Poll::Ready(Some((replica, query)));
        }
        // The policy had nothing ready to offer: any ready endpoint beats waiting, one the
        // balancer has not ejected if there is one.
        let ready: Vec<ReplicaId> = (0..self.endpoints.ready_len())
            .filter_map(|i| self.endpoints.get_ready_index(i).map(|(id, _)| *id))
            .collect();
        let ejected = self.driver.ejected();
        let usable: Vec<ReplicaId> = ready
            .iter()
            .copied()
            .filter(|id| !ejected.contains(id))
            .collect();
        let from = if usable.is_empty() { &ready } else { &usable };
        let chosen = from.get(self.driver.random_below(from.len())).copied();
        tracing::trace!(?chosen, "random ready endpoint");
        Poll::Ready(chosen.map(|replica| (replica, query)))
    }

    /// Waits for a decision the policy hands out later (sync mode, or `prequal` waiting for
    /// fresh replies), up to its deadline.
    fn poll_waiting(
        &mut self,
        (query, mut deadline): (QueryId, Pin<Box<tokio::time::Sleep>>),
        cx: &mut Context<'_>,
    ) -> Poll<(QueryId, Pick)> {
        if let Some(pick) = self.driver.poll_decision(query, cx.waker()) {
            return Poll::Ready((query, pick));
        }
        if deadline.as_mut().poll(cx).is_ready() {
            tracing::debug!(
                query = query.0,
                "no decision in time; a random ready endpoint"
            );
            self.driver.abandon_decision(query);
            return Poll::Ready((query, Pick::NoReplica));
        }
        self.waiting = Some((query, deadline));
        Poll::Pending
    }
}

impl<D, B, RB> Service<Request<B>> for Balance<D, B>
where
    D: Discover + Unpin,
    D::Key: Hash + fmt::Debug,
    D::Error: Into<BoxError>,
    D::Service: Service<Request<B>, Response = Response<RB>>,
    <D::Service as Service<Request<B>>>::Error: Into<BoxError>,
    RB: Body,
{
    type Response = Response<ResponseBody<RB>>;
    type Error = BoxError;
    type Future = ResponseFuture<<D::Service as Service<Request<B>>>::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        crate::prober::start_timer(&self.driver);
        self.update_from_discover(cx)?;
        self.promote_pending(cx);
        for _ in 0..MAX_CHOICES {
            if let Some((replica, _)) = self.chosen {
                // Checked again in this very poll, so the endpoint is ready when `call` comes.
                match self.endpoints.check_ready(cx, &replica) {
                    Ok(true) => return Poll::Ready(Ok(())),
                    Ok(false) => tracing::trace!(%replica, "chosen endpoint no longer ready"),
                    Err(failed) => self.endpoint_failed(failed),
                }
                self.chosen = None;
            }
            match ready!(self.choose(cx)) {
                Some(chosen) => self.chosen = Some(chosen),
                // Discovery and the pending endpoints will wake this task.
                None => return Poll::Pending,
            }
        }
        // Choices kept slipping away: try again on the next poll rather than spin here.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let Some((replica, query)) = self.chosen.take() else {
            return ResponseFuture::failed(Box::new(NotReady));
        };
        if self.endpoints.get_ready(&replica).is_none() {
            return ResponseFuture::failed(Box::new(NotReady));
        }
        let in_flight = InFlight::dispatch(&self.driver, replica, query);
        let future = self.endpoints.call_ready(&replica, request);
        ResponseFuture::new(future, in_flight)
    }
}

impl<D, B> Drop for Balance<D, B>
where
    D: Discover,
    D::Key: Hash,
{
    fn drop(&mut self) {
        // Without this, a `Handle` kept for metrics would keep the policy probing replicas
        // nobody balances over any more.
        self.driver.close();
    }
}

impl<D, B> fmt::Debug for Balance<D, B>
where
    D: Discover,
    D::Key: Hash,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Balance")
            .field("policy", &self.driver.policy_name())
            .field("endpoints", &self.endpoints.len())
            .field("ready", &self.endpoints.ready_len())
            .finish_non_exhaustive()
    }
}
