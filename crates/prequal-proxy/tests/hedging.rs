//! Hedged requests end to end, over HTTP/1.1 and HTTP/2: a stalled replica is rescued by a
//! second try elsewhere, the loser is cancelled with the policy's accounting intact, and only
//! requests that may be sent twice are hedged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

async fn metrics(proxy: &Running) -> String {
    get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1
}

fn counter(text: &str, name: &str) -> f64 {
    metric(text, &format!("prequal_proxy_{name}{{cluster=\"test\"}}"))
}

async fn stalled_replica_is_rescued(proto: Proto) {
    let backends = futures_join(2).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    // Ejection off, so that every other request still goes to the stalled replica.
    let extra = "outlier_ejection = false";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    // The cluster learns what a normal try takes (50 successes before a learned delay).
    assert_eq!(load(&client, proxy.addr, 60, 2).await, 60);
    backends[0].set_delay_ms(60_000);
    // Eight requests stay within the hedge budget's floor (1 per second over 10 s).
    for i in 0..8 {
        let status = send_within(
            &client,
            proxy.addr,
            "GET",
            Vec::new(),
            Duration::from_secs(2),
        )
        .await;
        if status != Some(200) {
            let view = get(&client_again(Proto::H1), proxy.admin, "/clusters/test")
                .await
                .1;
            panic!("request {i}: {status:?}\n{}\n{view}", metrics(&proxy).await);
        }
    }
    let text = metrics(&proxy).await;
    let won = counter(&text, "hedges_won_total");
    assert!(
        won >= 4.0,
        "at least half met the stalled replica first: {won}\n{text}"
    );
    assert!(counter(&text, "hedges_total") >= won);
    // The losing tries were cancelled, and the policy's in-flight counts went back to zero.
    let cancelled = metric_sum(&text, &["upstream_tries_total", "outcome=\"cancelled\""]);
    assert!(cancelled >= 4.0, "{text}");
    let view = get(&client_again(Proto::H1), proxy.admin, "/clusters/test")
        .await
        .1;
    let json: serde_json::Value = serde_json::from_str(&view).unwrap();
    for replica in json["snapshot"]["replicas"].as_array().unwrap() {
        assert_eq!(replica["local_rif"], 0, "{view}");
    }
}
over_h1_and_h2!(
    a_stalled_replica_is_rescued_by_a_hedge_and_the_loser_is_cancelled,
    stalled_replica_is_rescued
);

async fn only_replayable_requests_are_hedged(proto: Proto) {
    let backends = futures_join(2).await;
    for b in &backends {
        b.set_delay_ms(40);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "outlier_ejection = false\nreplay_body_limit = 1024\n\
                 hedge = { delay = \"5ms\", ratio = 1.0 }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    let patience = Duration::from_secs(2);
    let hits = || backends.iter().map(Backend::hits).sum::<u64>();
    // A GET waits 40 ms; its hedge goes out after 5 ms to the other replica.
    assert_eq!(
        send_within(&client, proxy.addr, "GET", Vec::new(), patience).await,
        Some(200)
    );
    // A PUT with a small body is idempotent and its body is kept: hedged too.
    assert_eq!(
        send_within(&client, proxy.addr, "PUT", vec![7; 100], patience).await,
        Some(200)
    );
    let hedged = counter(&metrics(&proxy).await, "hedges_total");
    assert_eq!(hedged, 2.0);
    let before = hits();
    // A POST is not idempotent, and a PUT whose body is over the limit cannot be sent twice.
    assert_eq!(
        send_within(&client, proxy.addr, "POST", vec![1; 10], patience).await,
        Some(200)
    );
    assert_eq!(
        send_within(&client, proxy.addr, "PUT", vec![2; 4096], patience).await,
        Some(200)
    );
    assert_eq!(counter(&metrics(&proxy).await, "hedges_total"), hedged);
    assert_eq!(hits() - before, 2, "one try each");
}
over_h1_and_h2!(
    only_requests_that_may_be_sent_twice_are_hedged,
    only_replayable_requests_are_hedged
);

async fn one_replica_is_never_hedged(proto: Proto) {
    let backend = Backend::start().await;
    backend.set_delay_ms(30);
    let extra = "hedge = { delay = \"2ms\", ratio = 1.0 }";
    let proxy = start_proxy(&config_text(&[&backend], proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 5, 1).await, 5);
    assert_eq!(
        backend.hits(),
        5,
        "a hedge never goes to the replica it backs up"
    );
    assert_eq!(counter(&metrics(&proxy).await, "hedges_total"), 0.0);
}
over_h1_and_h2!(
    a_hedge_never_goes_to_the_same_replica,
    one_replica_is_never_hedged
);

async fn budget_bounds_hedges(proto: Proto) {
    let backends = futures_join(2).await;
    for b in &backends {
        b.set_delay_ms(20);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    // Every request would be hedged after 2 ms (`idle_only` off: no replica is idle here, and
    // this is about the budget); the budget allows 10% and no floor.
    let extra = "hedge = { delay = \"2ms\", ratio = 0.1, min_per_second = 0.0, idle_only = false }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 60, 4).await, 60);
    let text = metrics(&proxy).await;
    let sent = counter(&text, "hedges_total");
    assert!(sent <= 6.0, "at most 10% of 60 requests: {sent}");
    assert!(sent >= 1.0, "{text}");
    assert_eq!(sent + counter(&text, "hedges_refused_total"), 60.0);
}
over_h1_and_h2!(the_hedge_budget_bounds_the_extra_load, budget_bounds_hedges);

async fn failed_hedge_beside_a_hung_try(proto: Proto) {
    let backends = futures_join(3).await;
    // One replica hangs, one answers 502 at once, one works.
    backends[0].set_delay_ms(60_000);
    backends[1].set_status(502);
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "outlier_ejection = false\nhedge = { delay = \"5ms\", ratio = 1.0 }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    // Whichever order round robin takes, a try that fails while the hung one is still out is
    // retried at once on the replica left, instead of waiting for the hung try.
    for i in 0..12 {
        let status = send_within(
            &client,
            proxy.addr,
            "GET",
            Vec::new(),
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(status, Some(200), "request {i}");
    }
}
over_h1_and_h2!(
    a_try_that_fails_beside_a_hung_one_is_retried_at_once,
    failed_hedge_beside_a_hung_try
);

async fn no_hedge_charged_with_nowhere_to_go(proto: Proto) {
    let backends = futures_join(2).await;
    // Every request ends up trying both replicas. When its first try goes to the replica that
    // answers 502, its retry goes to the slow one, the only replica left, so the hedge then
    // due has nowhere to go; when it goes to the slow one first, its hedge goes to the 502 one
    // and the retry beside them has nowhere to go.
    backends[0].set_status(502);
    backends[1].set_delay_ms(40);
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "outlier_ejection = false\nhedge = { delay = \"5ms\", ratio = 1.0 }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 6, 1).await, 6);
    let text = metrics(&proxy).await;
    // A hedge or a retry with no replica left is neither charged nor counted: every one
    // counted as sent reached a replica.
    let (retries, hedges) = (
        counter(&text, "retries_total"),
        counter(&text, "hedges_total"),
    );
    let hits = (backends[0].hits() + backends[1].hits()) as f64;
    assert_eq!(hits, 6.0 + retries + hedges, "{text}");
    assert_eq!(counter(&text, "hedges_refused_total"), 0.0, "{text}");
}
over_h1_and_h2!(
    a_hedge_with_nowhere_to_go_is_not_charged,
    no_hedge_charged_with_nowhere_to_go
);

async fn loser_on_a_live_replica_counts(proto: Proto) {
    let backends = futures_join(2).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    // One failure ejects; a fixed hedge delay of 200 ms.
    let extra = "outlier = { consecutive_failures = 1, base_ejection = \"60s\" }\n\
                 hedge = { delay = \"200ms\", ratio = 1.0 }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 60, 2).await, 60);
    // Replica 0 turns slow (300 ms). Two POSTs (never hedged) go one to each replica: the one
    // on replica 0 ends successfully at about 300 ms, which shows it alive.
    backends[0].set_delay_ms(300);
    let send = |method| {
        send_within(
            &client,
            proxy.addr,
            method,
            Vec::new(),
            Duration::from_secs(3),
        )
    };
    let posts = async { tokio::join!(send("POST"), send("POST")) };
    // At 150 ms two GETs go one to each replica. The one on replica 0 is hedged at 350 ms to
    // replica 1, which answers at once: the try left on replica 0 lost, after that replica's
    // POST ended. A loser counts against its replica however alive it showed itself (only a
    // try whose client left is judged by that), so replica 0 is ejected.
    let gets = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        tokio::join!(send("GET"), send("GET"))
    };
    let ((p1, p2), (g1, g2)) = tokio::join!(posts, gets);
    assert_eq!([p1, p2, g1, g2], [Some(200); 4]);
    let text = metrics(&proxy).await;
    assert_eq!(counter(&text, "hedges_won_total"), 1.0, "{text}");
    assert_eq!(counter(&text, "ejected_replicas"), 1.0, "{text}");
    let slow = backends[0].addr.to_string();
    let view = get(&client_again(Proto::H1), proxy.admin, "/clusters/test")
        .await
        .1;
    let json: serde_json::Value = serde_json::from_str(&view).unwrap();
    let ejected: Vec<&str> = json["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ejected"] == true)
        .map(|r| r["address"].as_str().unwrap())
        .collect();
    assert_eq!(ejected, [slow.as_str()], "{view}");
}
over_h1_and_h2!(
    a_hedge_loser_counts_against_its_replica_even_when_it_showed_life,
    loser_on_a_live_replica_counts
);
