//! A real SIGTERM drains: this test binary sends SIGTERM to itself while a request is in
//! flight through a proxy whose shutdown future is `shutdown_signal()`. It lives alone in its
//! own test binary because the signal goes to the whole process.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use prequal_proxy::{Proxy, ProxyConfig, shutdown_signal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_then_stops() {
    let backend = Backend::start().await;
    backend.set_delay_ms(300);
    let text = config_text(&[&backend], Proto::H1, "\"round-robin\"", "");
    let proxy = Proxy::bind(&ProxyConfig::from_toml(&text, "t.toml").unwrap())
        .await
        .unwrap();
    let addr = proxy.local_addr().unwrap();
    // Install the handler before the signal is sent (registration happens on first poll).
    let (armed_tx, armed_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(proxy.run(async move {
        let signal = shutdown_signal();
        tokio::pin!(signal);
        // Poll once so the SIGTERM handler is registered, then report it.
        tokio::select! {
            biased;
            () = &mut signal => return,
            () = std::future::ready(()) => {}
        }
        let _ = armed_tx.send(());
        signal.await;
    }));
    armed_rx.await.unwrap();
    let client = client(Proto::H1);
    let in_flight = tokio::spawn(async move { get(&client, addr, "/slow").await });
    for _ in 0..500 {
        if backend.in_flight.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(backend.in_flight.load(Ordering::SeqCst), 1);
    let pid = std::process::id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let (code, body) = in_flight.await.unwrap();
    assert_eq!(
        (code, body.as_str()),
        (200, "ok"),
        "the in-flight request finished"
    );
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the proxy stopped after draining")
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
