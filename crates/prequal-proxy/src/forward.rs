//! Forwarding one request: route, pick, send, and retry within the rules.
//!
//! A request is matched to a cluster by its routes, then tried up to `max_attempts` times. Each
//! try asks the cluster's policy for a replica (never one this request already tried, while
//! others are left), rewrites the URI to that replica, and waits at most `try_timeout` (and
//! never past the request's overall `request_timeout`) for the response headers. The body
//! streams through untouched in both directions.
//!
//! What is retried, always within the cluster's retry budget:
//! - a connection that could not be opened (nothing reached the replica, so any method);
//! - a 5xx response or a timed-out try, for idempotent methods (GET, HEAD, OPTIONS, TRACE, PUT,
//!   DELETE) or every method when the cluster sets `retry_non_idempotent`.
//!
//! Only requests without a body are replayed: a streamed body cannot be sent twice without
//! buffering it, and the proxy never buffers bodies. Every try, retried or not, is reported to
//! the policy with its outcome (a 5xx is an error, so error aversion sees fast failures; so is
//! a gRPC status that blames the server, see [`grpc_failed`]).

use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use prequal_core::{Outcome, ReplicaId};
use prequal_server::protocol::{LOAD_HEADER, parse_reply};

use crate::body::{ProxyBody, Tracked, TryGuard, empty, full, grpc_failed};
use crate::cluster::{Chosen, Cluster};
use crate::headers::{ClientHop, add_forwarding, strip_hop_by_hop};
use crate::upstream::UpstreamBody;

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

/// Forwards `request` to `cluster`, retrying as the module docs say.
pub async fn forward(
    cluster: &Arc<Cluster>,
    request: Request<Incoming>,
    client: &ClientHop,
    limits: Limits,
) -> Response<ProxyBody> {
    let (mut parts, body) = request.into_parts();
    if parts.method == http::Method::CONNECT {
        // A reverse proxy forwards to its replicas; it does not open tunnels.
        return local_response(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not supported\n");
    }
    if too_large(&parts.headers, limits) {
        return local_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
    }
    prepare_headers(&mut parts, client, cluster.version());
    let replayable = body.is_end_stream();
    let limit = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
    let mut body = Some(Limited::new(body, limit).boxed_unsync());
    let config = cluster.config();
    let may_retry_failures = is_idempotent(&parts.method) || config.retry_non_idempotent;
    let deadline = Instant::now() + config.request_timeout;
    let mut tried: Vec<ReplicaId> = Vec::new();
    for attempt in 1..=config.max_attempts {
        let Some(chosen) = cluster.pick(attempt == 1, &tried).await else {
            return local_response(StatusCode::SERVICE_UNAVAILABLE, "no replica available\n");
        };
        tried.push(chosen.replica);
        let try_body = match replayable {
            true => empty(),
            false => body.take().unwrap_or_else(empty),
        };
        let can_retry = replayable && attempt < config.max_attempts;
        // The last possible try takes the headers instead of copying them.
        let headers = match can_retry {
            true => parts.headers.clone(),
            false => std::mem::take(&mut parts.headers),
        };
        let upstream = upstream_request(&parts, headers, cluster.version(), try_body);
        let step = one_try(cluster, chosen, upstream, deadline).await;
        let retry = match &step {
            Step::Done(_) => false,
            Step::Failed { connect, .. } => {
                can_retry && (*connect || may_retry_failures) && Instant::now() < deadline
            }
        };
        if retry && cluster.try_retry() {
            continue;
        }
        return step.into_response();
    }
    local_response(StatusCode::BAD_GATEWAY, "no try succeeded\n")
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
    strip_hop_by_hop(&mut parts.headers, true);
    add_forwarding(&mut parts.headers, client, parts.version);
}

/// How one try ended.
enum Step {
    /// A response to hand back (possibly a 5xx, if it is not retried).
    Done(Response<ProxyBody>),
    /// A failure: the response to give if it is not retried, and whether it was a connect error.
    Failed {
        response: Response<ProxyBody>,
        connect: bool,
    },
}

impl Step {
    fn into_response(self) -> Response<ProxyBody> {
        match self {
            Step::Done(response) | Step::Failed { response, .. } => response,
        }
    }
}

async fn one_try(
    cluster: &Arc<Cluster>,
    chosen: Chosen,
    upstream: Request<ProxyBody>,
    deadline: Instant,
) -> Step {
    // A try is cancelled until proven otherwise: if this future is dropped (the client went
    // away, or another try answered first), the guard reports it as such.
    let mut guard = TryGuard {
        cluster: Arc::clone(cluster),
        replica: chosen.replica,
        query: chosen.query,
        start: Instant::now(),
        outcome: Outcome::Cancelled,
        report: None,
    };
    let limit = cluster
        .config()
        .try_timeout
        .min(deadline - Instant::now().min(deadline));
    let send = cluster
        .upstream()
        .send(chosen.replica, &chosen.authority, upstream);
    let sent = tokio::time::timeout(limit, send).await;
    let response = match sent {
        Err(_) => {
            guard.outcome = Outcome::Timeout;
            let response = local_response(StatusCode::GATEWAY_TIMEOUT, "upstream timed out\n");
            return Step::Failed {
                response,
                connect: false,
            };
        }
        Ok(Err(error)) => {
            guard.outcome = Outcome::Error;
            tracing::debug!(cluster = cluster.name(), replica = %chosen.authority, %error, "try failed");
            let response = local_response(StatusCode::BAD_GATEWAY, "upstream unavailable\n");
            return Step::Failed {
                response,
                connect: error.is_connect(),
            };
        }
        Ok(Ok(response)) => response,
    };
    relay(response, guard)
}

/// Turns the replica's response into the client's: hop-by-hop headers out, body tracked so
/// the policy hears when it ends (a success once it has been read to its end; cancelled if the
/// client leaves before); a 5xx is a failed step (which the caller may retry).
fn relay(response: Response<UpstreamBody>, mut guard: TryGuard) -> Step {
    guard.report = response
        .headers()
        .get(LOAD_HEADER)
        .and_then(|v| parse_reply(v.as_bytes()).ok());
    let failed = response.status().is_server_error();
    if failed || grpc_failed(response.headers()) {
        guard.outcome = Outcome::Error;
    } else if response.body().is_end_stream() {
        // Nobody polls a body that is known to be empty, so its end is now.
        guard.outcome = Outcome::Success;
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    // The replica's HTTP version is per hop; hyper answers the client in the client's version.
    parts.version = Version::HTTP_11;
    let body = Tracked::new(body, guard).boxed_unsync();
    let response = Response::from_parts(parts, body);
    match failed {
        true => Step::Failed {
            response,
            connect: false,
        },
        false => Step::Done(response),
    }
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
