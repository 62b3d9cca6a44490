//! Writes: DoPut round trips, bad batches, SIGKILL mid-ingest and SIGTERM.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_round_trips() {
    let server = Server::fresh();
    let token = server.caller("alice", &["writer"]);
    let created = create_table(&server, &token, events_table()).await;
    assert_eq!(created.status(), 201);
    let results = token
        .put_ok("app.events", vec![events(0..100), events(100..250)])
        .await;
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["rows"], 100);
    assert_eq!(results[1]["rows"], 150);
    let parts = results[1]["parts"].as_array().unwrap();
    assert!(
        parts
            .iter()
            .all(|p| p["partition"].is_string() && p["bucket"].as_u64().unwrap() < 4)
    );
    let written: u64 = parts
        .iter()
        .map(|p| p["end_offset"].as_u64().unwrap() - p["start_offset"].as_u64().unwrap())
        .sum();
    assert_eq!(written, 150);

    let batches = token.rows(serde_json::json!({"table": "app.events"})).await;
    assert_eq!(ints(&batches, "id"), (0..250).collect::<Vec<_>>());

    // The table is listed over HTTP with its offsets.
    let listed: serde_json::Value = reqwest::Client::new()
        .get(server.http_url("/v1/tables/app.events"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(hotgate_testkit::described_rows(&listed), 250);
    // Metrics count the appends: the rows put exactly; the store's rows also hold the
    // audit log's own records.
    let metrics = server.metrics().await;
    assert!(metrics.contains("hotgate_put_rows_total 250"), "{metrics}");
    let stored: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hotgate_store_rows_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no hotgate_store_rows_total: {metrics}"));
    assert!(stored > 250, "{stored}");
    assert!(metrics.contains("hotgate_store_fsyncs_total"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_writes_are_refused_with_the_reason() {
    let server = Server::fresh();
    let token = server.caller("alice", &["writer"]);
    create_table(&server, &token, events_table()).await;
    // Bad table bodies name the field.
    let mut bad = events_table();
    bad["columns"][0]["type"] = "varchar".into();
    let r = create_table(&server, &token, bad).await;
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("columns[0].type") && text.contains("unknown type"),
        "{text}"
    );
    let mut bad = events_table();
    bad["name"] = "events2".into();
    bad["bucket_key"] = "amount".into();
    let text = create_table(&server, &token, bad)
        .await
        .text()
        .await
        .unwrap();
    assert!(text.contains("bucket_key amount"), "{text}");

    let status = token.put("app.nope", vec![events(0..1)]).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(status.message().contains("app.nope"));
    // A batch whose schema does not match: nothing is written.
    let wrong = events(0..3).project(&[0, 2, 3]).unwrap();
    let status = token.put("app.events", vec![wrong]).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("missing bucket key \"customer\""),
        "{}",
        status.message()
    );
    let rows = token.rows(serde_json::json!({"table": "app.events"})).await;
    assert!(rows.iter().all(|b| b.num_rows() == 0));
}

/// SIGKILL while clients are writing; after a restart every acknowledged row is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_ingest_loses_no_acknowledged_row() {
    let dir = tempfile::tempdir().unwrap();
    let (flight, http) = (free_addr(), free_addr());
    let server = Server::start_with(dir.path(), flight, http);
    let token = server.caller("ingest", &["writer"]);
    create_table(&server, &token, events_table()).await;
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let writers: Vec<_> = (0..4i64)
        .map(|w| {
            let (token, acked) = (token.clone(), std::sync::Arc::clone(&acked));
            let addr = server.flight;
            tokio::spawn(async move {
                let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let mut client =
                    arrow_flight::flight_service_client::FlightServiceClient::new(channel);
                let mut next = w * 1_000_000;
                // Each DoPut is one batch: its PutResult is the acknowledgement.
                let path = ["app", "events"];
                while let Ok(r) =
                    put(&mut client, &token, &path, vec![events(next..next + 20)]).await
                {
                    if r.len() != 1 {
                        break;
                    }
                    acked.lock().unwrap().extend(next..next + 20);
                    next += 20;
                }
            })
        })
        .collect();
    // Let them write, then kill without warning.
    let start = std::time::Instant::now();
    while acked.lock().unwrap().len() < 400 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "writers made no progress"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    server.kill9();
    for w in writers {
        let _ = w.await;
    }
    let acked: Vec<i64> = acked.lock().unwrap().clone();

    let server = Server::start_with(dir.path(), flight, http);
    let token = token.at(&server);
    let rows = token
        .rows(serde_json::json!({"table": "app.events", "columns": ["id"]}))
        .await;
    hotgate_testkit::assert_acked_once(&acked, &ints(&rows, "id"), "after SIGKILL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let token = server.caller("alice", &["writer"]);
    create_table(&server, &token, events_table()).await;
    token.put_ok("app.events", vec![events(0..10)]).await;
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
    let server = Server::start(dir.path());
    let token = token.at(&server);
    let rows = token.rows(serde_json::json!({"table": "app.events"})).await;
    assert_eq!(ints(&rows, "id"), (0..10).collect::<Vec<_>>());
}
