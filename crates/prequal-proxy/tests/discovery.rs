//! Discovery and slow start end to end: a watched replica file, DNS re-resolution of
//! `localhost`, and a replica that joins later ramping up. Bounded loops, 127.0.0.1 only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

fn file_config(path: &std::path::Path, proto: Proto, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams_file = {:?}\ndiscovery_interval = \"20ms\"\n\
         policy = \"round-robin\"\nprotocol = \"{}\"\n{extra}\n",
        path.display().to_string(),
        proto.toml()
    )
}

/// Writes then renames, as a deployment tool should, so the watcher never sees half a file.
fn write_atomically(path: &std::path::Path, text: String) {
    let staging = path.with_extension("new");
    std::fs::write(&staging, text).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

fn temp_path(name: &str) -> std::path::PathBuf {
    let unique = format!("prequal-proxy-{name}-{}", std::process::id());
    std::env::temp_dir().join(unique)
}

async fn file_discovery_and_slow_start(proto: Proto) {
    let (a, b, c) = (
        Backend::start().await,
        Backend::start().await,
        Backend::start().await,
    );
    let path = temp_path(&format!("replicas-{proto:?}"));
    write_atomically(&path, format!("# test replicas\n{}\n{}\n", a.addr, b.addr));
    let extra = format!("slow_start = {{ window = \"60s\", min_weight = 0.1 }}\n{NO_HEDGING}");
    let proxy = start_proxy(&file_config(&path, proto, &extra)).await;
    let admin = client(Proto::H1);
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 20, 2).await, 20);
    assert_eq!(a.hits() + b.hits(), 20);
    assert_eq!(c.hits(), 0);
    // C joins; the watcher sees the file change within a few intervals.
    write_atomically(&path, format!("{}\n{}\n{}\n", a.addr, b.addr, c.addr));
    let mut seen = false;
    for _ in 0..200 {
        let view = get(&admin, proxy.admin, "/clusters/test").await.1;
        if view.contains(&c.addr.to_string()) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "the new replica was discovered");
    let before = (a.hits() + b.hits(), c.hits());
    assert_eq!(load(&client, proxy.addr, 300, 2).await, 300);
    let new = c.hits() - before.1;
    let old = a.hits() + b.hits() - before.0;
    assert_eq!(new + old, 300);
    // Round robin alone would give it 100; ramping from 10% it gets about a tenth of that.
    assert!(new > 0 && new < 40, "ramping replica got {new} of 300");
    // A removes itself from the file: no more traffic to it.
    write_atomically(&path, format!("{}\n{}\n", b.addr, c.addr));
    for _ in 0..200 {
        let view = get(&admin, proxy.admin, "/clusters/test").await.1;
        if !view.contains(&a.addr.to_string()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a_before = a.hits();
    assert_eq!(load(&client, proxy.addr, 30, 2).await, 30);
    assert_eq!(a.hits(), a_before, "a removed replica gets no traffic");
    let _ = std::fs::remove_file(&path);
}
over_h1_and_h2!(
    file_discovery_adds_and_removes_replicas_and_new_ones_ramp_up,
    file_discovery_and_slow_start
);

async fn dns_discovery(proto: Proto) {
    let backend = Backend::start().await;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [clusters.test]\nupstreams_dns = \"localhost:{}\"\ndiscovery_interval = \"50ms\"\n\
         policy = \"round-robin\"\nprotocol = \"{}\"\n",
        backend.addr.port(),
        proto.toml()
    );
    let proxy = start_proxy(&text).await;
    let admin = client(Proto::H1);
    let wanted = backend.addr.to_string();
    let mut found = false;
    for _ in 0..200 {
        let view = get(&admin, proxy.admin, "/clusters/test").await.1;
        if view.contains(&wanted) {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(found, "localhost resolved to {wanted}");
    // localhost may also resolve to ::1, where nothing listens: retries cover it.
    assert_eq!(load(&client(proto), proxy.addr, 10, 1).await, 10);
    assert_eq!(backend.hits(), 10);
}
over_h1_and_h2!(dns_discovery_resolves_the_name, dns_discovery);
