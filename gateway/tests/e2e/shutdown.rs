//! A clean stop: SIGTERM while a tiering cycle, a deletion step and a follow stream
//! run. The server stops accepting calls, ends the streams, waits for its background
//! work and closes the store, within 30 s; after a restart no acknowledged row is lost
//! and the deletion resumes where it stopped.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::deletion::{file_deletion, wait_for_state};
use crate::harness::*;
use crate::tiering::{FAST_TICK, scan_ids, short_lived_events};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_tiering_a_deletion_step_and_a_follow_stream_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (flight, http) = (free_addr(), free_addr());
    // The cold step of a deletion takes 3 s (a fail point sleeps in it), so SIGTERM
    // lands while it runs.
    let server = Server::start_env(
        dir.path(),
        flight,
        http,
        &[
            ("FAILPOINTS", "deletion-apply-cold=sleep(3000)"),
            FAST_TICK[0],
        ],
    );
    let token = server.caller("alice", &["analyst"]);
    token.create_table(short_lived_events()).await;
    for start in (0..2000).step_by(200) {
        token
            .put_ok("app.events", vec![events(start..start + 200)])
            .await;
    }

    // A follow stream, reading as rows arrive.
    let ticket = serde_json::json!({"table": "app.events",
                                    "changelog": {"from": "earliest", "follow": true}});
    let mut follow = token.stream(ticket).await.unwrap();
    assert!(follow.next().await.unwrap().unwrap().num_rows() > 0);

    // A deletion, held in its cold step.
    let record = file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.events"], "predicate": "customer = 'c3'",
            "subject": "case-sigterm"}),
    )
    .await;
    let id = record["id"].as_str().unwrap().to_owned();
    wait_for_state(&server, &token, &id, "hot_applied").await;

    // A tiering cycle on request, not awaited: SIGTERM goes out while it runs.
    let tier_url = server.http_url("/v1/tables/app.events/tier");
    let tier_token = token.clone();
    let tiering = tokio::spawn(async move {
        reqwest::Client::new()
            .post(tier_url)
            .bearer_auth(tier_token)
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let asked = Instant::now();
    let status = server.terminate();
    let took = asked.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(30), "exit took {took:?}");
    // The follow stream ended (with or without an error), rather than hanging.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(item) = follow.next().await {
            if item.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the follow stream did not end");
    // The tiering call finished or was cut: either way, the restart below decides.
    let _ = tiering.await;

    let server = Server::start_env(dir.path(), flight, http, &FAST_TICK);
    let token = token.at(&server);
    let shown = wait_for_state(&server, &token, &id, "verified").await;
    assert_eq!(shown["state"], "verified", "{shown}");
    let mut ids = scan_ids(&server, &token).await;
    ids.sort_unstable();
    let kept: Vec<i64> = (0..2000).filter(|i| i % 5 != 3).collect();
    assert_eq!(
        ids, kept,
        "every acknowledged row but the deleted ones, once"
    );
    token.http_get("/v1/tables/app.events/tiering").await;
    server.terminate();
}
