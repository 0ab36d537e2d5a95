//! The admin listener (127.0.0.1:9901 by default: it is not meant to face clients), speaking
//! HTTP/1.1 and h2c like the data plane.
//!
//! - `GET /metrics`: Prometheus metrics (OpenMetrics text format);
//! - `GET /live`: 200 while the process serves;
//! - `GET /ready`: 200 when every cluster has a replica it can send to and the proxy is not
//!   draining, else 503 (for load balancers and orchestrators in front of the proxy);
//! - `GET /clusters`: a JSON array, one object per cluster: its replicas (address, ejected,
//!   ramping), the policy's snapshot (per-replica RIF, scores, pick counts; the probe pool with
//!   each reply's RIF, latency, age and hot/cold), outlier state and the retry budget left;
//! - `GET /clusters/NAME`: the same for one cluster;
//! - `GET /` or `GET /dashboard`: a self-contained HTML page (inline CSS and script, nothing
//!   fetched from elsewhere) that polls `/clusters` every second and draws each cluster's
//!   replicas (local RIF, score, picks, ejection and ramp-up), the probe pool with hot and cold
//!   replies, and the policy's scalars.

use std::convert::Infallible;
use std::sync::Arc;

use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::body::{ProxyBody, full};
use crate::shared::Shared;

/// The dashboard page: static, it reads everything from `/clusters` in the browser.
const DASHBOARD: &str = include_str!("dashboard.html");

/// Serves the admin endpoints on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let state = Arc::clone(&shared);
        let service = service_fn(move |req| answer(Arc::clone(&state), req));
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let path = request.uri().path();
    let routing = shared.routing();
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics.encode(),
        ),
        "/" | "/dashboard" => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            DASHBOARD.to_string(),
        ),
        "/live" => (StatusCode::OK, "text/plain", "live\n".to_string()),
        "/ready" => {
            let ready = !shared.is_draining() && routing.clusters().values().all(|c| c.is_ready());
            match ready {
                true => (StatusCode::OK, "text/plain", "ready\n".to_string()),
                false => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "not ready\n".to_string(),
                ),
            }
        }
        "/clusters" => {
            let views: Vec<_> = routing.clusters().values().map(|c| c.view()).collect();
            (StatusCode::OK, "application/json", json_text(&views))
        }
        other => match other
            .strip_prefix("/clusters/")
            .and_then(|name| routing.clusters().get(name))
        {
            Some(cluster) => (
                StatusCode::OK,
                "application/json",
                json_text(&cluster.view()),
            ),
            None => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_string(),
            ),
        },
    };
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
