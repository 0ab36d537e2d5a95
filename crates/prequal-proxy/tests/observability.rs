//! Request ids and the JSON access log, over HTTP/1.1 and HTTP/2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};

async fn ids_and_access_log(proto: Proto) {
    let backend = Backend::start().await;
    let path = std::env::temp_dir().join(format!(
        "prequal-access-{proto:?}-{}.log",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let text = config_text(&[&backend], proto, "\"round-robin\"", "").replace(
        "[server]\n",
        &format!("[server]\naccess_log = {:?}\n", path.to_str().unwrap()),
    );
    let proxy = start_proxy(&text).await;
    let client = client(proto);
    // The client's id is kept, passed to the replica and returned.
    let req = Request::get(format!("http://{}/echo-headers?x=1", proxy.addr))
        .header("x-request-id", "client-chosen-7")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.headers()["x-request-id"], "client-chosen-7");
    let seen = resp.into_body().collect().await.unwrap().to_bytes();
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.contains("x-request-id: client-chosen-7"), "{seen}");
    // Without one, the proxy makes one, and the replica sees the same.
    let req = Request::get(format!("http://{}/echo-headers", proxy.addr))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let made = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(made.len(), 32, "{made}");
    let seen = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&seen).contains(&made));
    // One JSON line per request, with the id, the replica and the tries.
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if lines.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["request_id"], "client-chosen-7");
    assert_eq!(first["method"], "GET");
    assert_eq!(first["path"], "/echo-headers?x=1");
    assert_eq!(first["status"], 200);
    assert_eq!(first["cluster"], "test");
    assert_eq!(first["replica"], backend.addr.to_string());
    assert_eq!(first["tries"], 1);
    assert_eq!(first["hedged"], false);
    assert!(first["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(first["time"].as_str().unwrap().ends_with('Z'));
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(second["request_id"], made.as_str());
    let _ = std::fs::remove_file(&path);
}
over_h1_and_h2!(
    request_ids_are_kept_or_made_and_every_request_is_logged,
    ids_and_access_log
);

#[tokio::test]
async fn an_access_log_that_cannot_be_opened_is_an_error_naming_it() {
    let text = "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"/nonexistent-dir/x/access.log\"\n\
                [admin]\nenabled = false\n[clusters.test]\nupstreams = [\"127.0.0.1:1\"]\n";
    let config = prequal_proxy::ProxyConfig::from_toml(text, "test.toml").unwrap();
    let err = prequal_proxy::Proxy::bind(&config)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/nonexistent-dir/x/access.log") && err.contains("server.access_log"),
        "{err}"
    );
}
