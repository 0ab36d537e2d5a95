//! Replica faults the proxy must read right, over HTTP/1.1 and HTTP/2: tries that clients
//! abandon on a replica that never answers, a hung host with many probes outstanding, and
//! healthy replicas asked for probes faster than their bound lets them be sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;

async fn abandoned_tries_eject(proto: Proto) {
    let backends = futures_join(2).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    // Hedging off: a hedge would answer these clients before they give up.
    let extra =
        format!("outlier = {{ consecutive_failures = 3, base_ejection = \"60s\" }}\n{NO_HEDGING}");
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", &extra)).await;
    let client = client(proto);
    // Enough successes for the cluster to know what a normal try takes.
    assert_eq!(load(&client, proxy.addr, 60, 2).await, 60);
    // Replica 0 stops answering (as under SIGSTOP: connections accepted, nothing sent back),
    // and clients give up long before the proxy's 10 s try timeout.
    backends[0].set_delay_ms(60_000);
    let mut answered = 0;
    for _ in 0..20 {
        if send_within(
            &client,
            proxy.addr,
            "GET",
            Vec::new(),
            Duration::from_millis(300),
        )
        .await
            == Some(200)
        {
            answered += 1;
        }
        // Lets the proxy see the client leave before the next request is picked for.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    let stopped = backends[0].addr.to_string();
    let cancelled = metric_sum(
        &metrics,
        &["upstream_tries_total", &stopped, "outcome=\"cancelled\""],
    );
    let success = metric_sum(
        &metrics,
        &["upstream_tries_total", &stopped, "outcome=\"success\""],
    );
    assert!(
        (3.0..=4.0).contains(&cancelled),
        "abandoned tries are counted as cancelled: {cancelled}\n{metrics}"
    );
    assert_eq!(success, 30.0, "only the tries before the stop succeeded");
    assert_eq!(
        ejected_replicas(&metrics),
        1.0,
        "a replica whose tries outlive every client is ejected\n{metrics}"
    );
    assert!(
        answered >= 16,
        "after the ejection every request is answered: {answered}"
    );
    let view = get(&admin, proxy.admin, "/clusters/test").await.1;
    assert!(view.contains("\"ejected\": true"), "{view}");
    // The ejection as an operator reads it: by address, with the time left and its end.
    let json: serde_json::Value = serde_json::from_str(&view).unwrap();
    let entry = json["outlier"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["address"] == stopped.as_str())
        .expect("the stopped replica's outlier entry names its address")
        .clone();
    let left = entry["ejected_for"].as_str().unwrap();
    assert!(left.ends_with('s') || left.ends_with("ms"), "{entry}");
    assert!(
        entry["ejected_until"].as_str().unwrap().ends_with('Z'),
        "{entry}"
    );
    assert_eq!(entry["ejections"], 1);
}
over_h1_and_h2!(
    tries_abandoned_by_clients_count_as_cancelled_and_eject_a_stopped_replica,
    abandoned_tries_eject
);

async fn quick_abandon_is_not_a_failure(proto: Proto) {
    let backends = futures_join(1).await;
    backends[0].set_delay_ms(200);
    let refs: Vec<&Backend> = backends.iter().collect();
    let extra = "outlier = { consecutive_failures = 2, base_ejection = \"60s\" }";
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", extra)).await;
    let client = client(proto);
    // With nothing known yet, a try abandoned after 50 ms has not outlived a healthy one.
    for _ in 0..4 {
        assert_eq!(
            send_within(
                &client,
                proxy.addr,
                "GET",
                Vec::new(),
                Duration::from_millis(50)
            )
            .await,
            None
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    assert!(
        metric_sum(&metrics, &["upstream_tries_total", "outcome=\"cancelled\""]) >= 3.0,
        "{metrics}"
    );
    assert_eq!(ejected_replicas(&metrics), 0.0, "{metrics}");
    assert_eq!(
        send_within(
            &client,
            proxy.addr,
            "GET",
            Vec::new(),
            Duration::from_secs(2)
        )
        .await,
        Some(200)
    );
}
over_h1_and_h2!(
    a_client_giving_up_early_does_not_count_against_the_replica,
    quick_abandon_is_not_a_failure
);

async fn slow_request_given_up_on_a_live_replica(proto: Proto) {
    let backends = futures_join(2).await;
    let refs: Vec<&Backend> = backends.iter().collect();
    // One failure ejects: any abandoned try held against a replica shows at once.
    let extra =
        format!("outlier = {{ consecutive_failures = 1, base_ejection = \"60s\" }}\n{NO_HEDGING}");
    let proxy = start_proxy(&config_text(&refs, proto, "\"round-robin\"", &extra)).await;
    let client = client(proto);
    // Past the 50 successes after which the hedge delay is known (learned with hedging off
    // too): from then on the abandoned tries below are far past it and past twice the
    // replicas' usual time.
    assert_eq!(load(&client, proxy.addr, 60, 2).await, 60);
    let hits = || backends.iter().map(Backend::hits).sum::<u64>();
    // A slow endpoint (2 s) whose clients give up after 300 ms, while both replicas keep
    // answering other requests.
    for round in 1..=3 {
        let before = hits();
        let slow = get_within(
            &client,
            proxy.addr,
            "/slow/2000",
            Duration::from_millis(300),
        );
        let others = async {
            // Once the slow request has reached its replica, requests to both replicas end
            // successfully after it was sent.
            while hits() == before {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            load(&client, proxy.addr, 6, 2).await
        };
        let (slow, others) = tokio::join!(slow, others);
        assert_eq!(slow, None, "the client gave up");
        assert_eq!(others, 6, "the other requests are answered meanwhile");
        // The proxy sees the client leave.
        let admin = client_again(Proto::H1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let metrics = get(&admin, proxy.admin, "/metrics").await.1;
            let cancelled =
                metric_sum(&metrics, &["upstream_tries_total", "outcome=\"cancelled\""]);
            if cancelled >= f64::from(round) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{metrics}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    assert_eq!(
        ejected_replicas(&metrics),
        0.0,
        "a live replica is not ejected for requests its clients gave up on\n{metrics}"
    );
}
over_h1_and_h2!(
    a_client_giving_up_on_a_slow_request_does_not_count_against_a_live_replica,
    slow_request_given_up_on_a_live_replica
);

async fn hung_host_keeps_probes_flowing(proto: Proto) {
    let backends = futures_join(4).await;
    // A host down: the replica and its probe endpoint accept and never answer.
    backends[0].set_delay_ms(60_000);
    backends[0].set_probe_delay_ms(60_000);
    let refs: Vec<&Backend> = backends.iter().collect();
    let policy = "{ name = \"prequal\", probe_timeout = \"100ms\" }";
    // A small cluster budget (three times the default per-replica bound), which a few dozen
    // queries would fill with probes that hang if nothing else bounded them.
    let extra = "max_probes_in_flight = 24\ntry_timeout = \"300ms\"\noutlier_ejection = false";
    let proxy = start_proxy(&config_text(&refs, proto, policy, extra)).await;
    let client = client(proto);
    let ok = load(&client, proxy.addr, 200, 4).await;
    let metrics = get(&client_again(Proto::H1), proxy.admin, "/metrics")
        .await
        .1;
    let dropped = metric_sum(&metrics, &["probes_total", "result=\"dropped\""]);
    let skipped = metric_sum(&metrics, &["probes_total", "result=\"skipped\""]);
    let answered = metric_sum(&metrics, &["probes_total", "result=\"ok\""]);
    assert_eq!(
        dropped, 0.0,
        "the hung host never used up the cluster's probe slots\n{metrics}"
    );
    assert!(
        skipped > 0.0,
        "probes beyond the hung host's own bound were skipped"
    );
    assert!(
        answered > 300.0,
        "the healthy replicas kept answering probes: {answered}"
    );
    assert_eq!(ok, 200, "timed-out tries were retried elsewhere");
    assert!(
        backends[0].hits() <= 10,
        "the policy avoided the replica whose probes fail: {} tries",
        backends[0].hits()
    );
}
over_h1_and_h2!(
    a_hung_host_does_not_starve_the_probes_of_the_others,
    hung_host_keeps_probes_flowing
);

async fn probes_beyond_the_bound_are_no_failure(proto: Proto) {
    let backends = futures_join(2).await;
    // Healthy replicas whose probe replies take a while: with one probe outstanding allowed per
    // replica, most probes the policy asks for cannot be sent.
    for backend in &backends {
        backend.set_probe_delay_ms(20);
    }
    let refs: Vec<&Backend> = backends.iter().collect();
    let policy = "{ name = \"prequal\", probe_timeout = \"1s\" }";
    let proxy = start_proxy(&config_text(
        &refs,
        proto,
        policy,
        "max_probes_per_replica = 1",
    ))
    .await;
    let client = client(proto);
    assert_eq!(load(&client, proxy.addr, 100, 4).await, 100);
    let admin = client_again(Proto::H1);
    let metrics = get(&admin, proxy.admin, "/metrics").await.1;
    let skipped = metric_sum(&metrics, &["probes_total", "result=\"skipped\""]);
    let failed = metric_sum(&metrics, &["probes_total", "result=\"failed\""]);
    assert!(
        skipped > 20.0,
        "the bound held most probes back: {skipped}\n{metrics}"
    );
    assert_eq!(failed, 0.0, "probes not sent are not failures\n{metrics}");
    let text = get(&admin, proxy.admin, "/clusters").await.1;
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    for replica in json[0]["snapshot"]["replicas"].as_array().unwrap() {
        assert_eq!(replica["avoided"], false, "{replica}");
    }
}
over_h1_and_h2!(
    probes_held_back_by_the_bound_do_not_count_against_healthy_replicas,
    probes_beyond_the_bound_are_no_failure
);
