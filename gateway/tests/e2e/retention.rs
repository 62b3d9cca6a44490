//! Retention through the real binary: the scheduler's hot retention (gated by the tiered
//! watermark) and cold retention (whole day partitions past `cold_retention` leave the
//! Iceberg table, with their files), both audited as `hotgate:system` actions.

use std::time::{Duration, Instant};

use crate::harness::*;

const DAY_US: i64 = 86_400_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_retention_drops_old_days_in_both_tiers_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_vars(
        dir.path(),
        &[
            ("HOTGATE_TIERING_TICK", "200ms"),
            ("HOTGATE_TIERING_MAINTENANCE_INTERVAL", "1s"),
        ],
    );
    let token = server.caller("alice", &["analyst"]);
    let mut table = events_table();
    table["hot_retention"] = "1s".into();
    table["cold_retention"] = "30days".into();
    // Freshness 1s: the scheduler tiers on its own.
    table["tiering"] = serde_json::json!({"max_freshness": "1s"});
    token.create_table(table).await;

    // Rows of a day 40 days ago and of yesterday, by the real clock.
    let now = chrono::Utc::now().timestamp_micros();
    let today = now - now.rem_euclid(DAY_US);
    let shift = |batch: arrow_array::RecordBatch, to: i64| shifted(batch, to - T0);
    token
        .put_ok(
            "app.events",
            vec![
                shift(events(0..50), today - 40 * DAY_US),
                shift(events(50..80), today - DAY_US),
            ],
        )
        .await;
    let old_day = day_of(today - 40 * DAY_US);
    let recent_day = day_of(today - DAY_US);

    // The scheduler tiers, drops the tiered hot segments, and drops the old day.
    let start = Instant::now();
    let status = loop {
        let status = token.http_get("/v1/tables/app.events/tiering").await;
        if status["oldest_day"] == recent_day.as_str() && status["last_cold_retention"].is_object()
        {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "cold retention never ran: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["cold_retention"], "30days");
    assert_eq!(
        status["last_cold_retention"]["days_removed"],
        serde_json::json!([old_day])
    );
    assert_eq!(status["last_cold_retention"]["records_removed"], 50);
    assert_eq!(status["records"], 30, "{status}");

    // Reads see only the recent day, and no file of the old day is left anywhere.
    let batches = token
        .rows(serde_json::json!({"table": "app.events", "columns": ["id"]}))
        .await;
    let mut ids = ints(&batches, "id");
    ids.sort_unstable();
    assert_eq!(ids, (50..80).collect::<Vec<_>>());
    let old_partition = format!("ts_day={old_day}");
    let mut left = Vec::new();
    let mut stack = vec![dir.path().join("warehouse"), dir.path().join("data")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().contains(&old_partition)
                // The hot log of the old day keeps its (empty) active segment.
                || p.to_string_lossy().contains(&format!("day={old_day}/"))
                    && std::fs::metadata(&p).unwrap().len() > 0
            {
                left.push(p);
            }
        }
    }
    assert!(left.is_empty(), "data of {old_day} is left: {left:?}");

    // Both retentions are on the audit record, as hotgate's own actions.
    let root = server.caller("root", &["admin"]);
    for action in ["cold_retention", "hot_retention"] {
        let body = root
            .http_get(&format!(
                "/v1/audit?limit=100&action={action}&table=app.events"
            ))
            .await;
        let records = body["records"].as_array().unwrap();
        assert!(!records.is_empty(), "no {action} record: {body}");
        assert_eq!(records[0]["principal"], "hotgate:system", "{body}");
        assert_eq!(records[0]["decision"], "allow", "{body}");
    }
    server.terminate();
}

/// `batch` with its `ts` column moved by `delta` µs.
fn shifted(batch: arrow_array::RecordBatch, delta: i64) -> arrow_array::RecordBatch {
    use arrow_array::{Array, TimestampMicrosecondArray};

    let i = batch.schema().index_of("ts").unwrap();
    let ts = batch
        .column(i)
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    let moved = TimestampMicrosecondArray::from_iter_values(ts.values().iter().map(|t| t + delta))
        .with_timezone_opt(ts.timezone().map(str::to_owned));
    let mut columns = batch.columns().to_vec();
    columns[i] = std::sync::Arc::new(moved);
    arrow_array::RecordBatch::try_new(batch.schema(), columns).unwrap()
}

fn day_of(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string()
}
