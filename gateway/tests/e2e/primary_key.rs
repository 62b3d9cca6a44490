//! Primary-key tables over Flight: upserts and deletes through DoPut, the changelog with
//! before images, batched lookups, scans of the current state, and the
//! snapshot-then-changelog handoff under concurrent writers.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType, UInt32Type};
use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_array::{TimestampMicrosecondArray, UInt32Array};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_schema::{DataType, Field, Schema};
use futures::StreamExt;
use tonic::transport::Channel;

use crate::harness::*;

fn accounts_table() -> serde_json::Value {
    serde_json::json!({
        "namespace": "app", "name": "accounts",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "owner", "type": "string"},
            {"name": "balance", "type": "float64"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "primary_key": ["id"], "time_column": "ts", "bucket_key": "id", "buckets": 4,
        "hot_retention": "1h"
    })
}

fn accounts(rows: &[(i64, f64)]) -> RecordBatch {
    batch([
        ("id", int64s(rows.iter().map(|r| r.0))),
        (
            "owner",
            hotgate_testkit::strings(rows.iter().map(|r| format!("owner-{}", r.0))),
        ),
        ("balance", float64s(rows.iter().map(|r| r.1))),
        ("ts", timestamps(rows.iter().map(|r| T0 + r.0))),
    ])
}

fn ids_only(ids: &[i64]) -> RecordBatch {
    batch([("id", int64s(ids.iter().copied()))])
}

async fn upsert(client: &mut FlightServiceClient<Channel>, token: &str, rows: &[(i64, f64)]) {
    put_cmd(
        client,
        token,
        serde_json::json!({"table": "app.accounts"}),
        vec![accounts(rows)],
    )
    .await
    .unwrap();
}

fn strings(batches: &[RecordBatch], column: &str) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(column).unwrap().as_string::<i32>();
            (0..c.len())
                .map(|i| c.value(i).to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

async fn setup() -> (tempfile::TempDir, Server, Caller) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let token = server.caller("alice", &["writer"]);
    let created = create_table(&server, &token, accounts_table()).await;
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    (dir, server, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_update_delete_leave_exact_changelog_records() {
    let (_dir, server, token) = setup().await;
    let mut client = server.client().await;
    let cmd = |op: Option<&str>| match op {
        Some(op) => serde_json::json!({"table": "app.accounts", "op": op}),
        None => serde_json::json!({"table": "app.accounts"}),
    };

    // A batch that says nothing is an upsert: an insert, then an update.
    let r = put_cmd(&mut client, &token, cmd(None), vec![accounts(&[(7, 10.0)])])
        .await
        .unwrap();
    assert_eq!(r[0]["rows"], 1);
    assert_eq!(r[0]["changes"], 1);
    let r = put_cmd(
        &mut client,
        &token,
        cmd(Some("upsert")),
        vec![accounts(&[(7, 20.0)])],
    )
    .await
    .unwrap();
    assert_eq!(r[0]["changes"], 2);
    // A delete of the key and of a missing key: the missing one writes nothing and the
    // result says which row it was.
    let r = put_cmd(
        &mut client,
        &token,
        cmd(Some("delete")),
        vec![ids_only(&[7, 99])],
    )
    .await
    .unwrap();
    assert_eq!(r[0]["rows"], 2);
    assert_eq!(r[0]["changes"], 1);
    assert_eq!(r[0]["missing"], 1);
    assert_eq!(r[0]["missing_rows"], serde_json::json!([1]));

    let log = token
        .rows(serde_json::json!({"table": "app.accounts", "changelog": {"from": "earliest"}}))
        .await;
    let schema = log[0].schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "id",
            "owner",
            "balance",
            "ts",
            "_change",
            "_bucket",
            "_offset",
            "_commit_ts"
        ]
    );
    assert_eq!(strings(&log, "_change"), ["+I", "-U", "+U", "-D"]);
    assert_eq!(opt_int64_values(&log, "id"), [Some(7); 4]);
    // -U carries the before image, +U the after image, -D the deleted row.
    assert_eq!(float64_values(&log, "balance"), [10.0, 10.0, 20.0, 20.0]);
    assert_eq!(strings(&log, "owner"), ["owner-7"; 4]);
    assert_eq!(
        opt_int64_values(&log, "_offset"),
        [Some(0), Some(1), Some(2), Some(3)]
    );
    let buckets: Vec<u32> = log
        .iter()
        .flat_map(|b| {
            b.column_by_name("_bucket")
                .unwrap()
                .as_primitive::<UInt32Type>()
                .values()
                .to_vec()
        })
        .collect();
    assert!(
        buckets.iter().all(|b| *b == buckets[0] && *b < 4),
        "{buckets:?}"
    );
    let commits: Vec<i64> = log
        .iter()
        .flat_map(|b| {
            let c = b
                .column_by_name("_commit_ts")
                .unwrap()
                .as_primitive::<TimestampMicrosecondType>();
            assert_eq!(c.null_count(), 0);
            c.values().to_vec()
        })
        .collect();
    // -U and +U share their commit; each write commits after the one before.
    assert_eq!(commits[1], commits[2]);
    assert!(
        commits[0] < commits[1] && commits[2] < commits[3],
        "{commits:?}"
    );
    let now = chrono::Utc::now().timestamp_micros();
    assert!(commits.iter().all(|c| now - c < 600_000_000), "{commits:?}");

    // Resuming from explicit offsets: the next offset after the first record.
    let bucket = buckets[0].to_string();
    let resumed = token
        .rows(serde_json::json!({"table": "app.accounts",
                           "changelog": {"from": {bucket.clone(): 1}}}))
        .await;
    assert_eq!(strings(&resumed, "_change"), ["-U", "+U", "-D"]);
    let err = token.get(serde_json::json!({"table": "app.accounts", "changelog": {"from": {"2026-11-30/1": 0}}}))
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("by bucket"), "{}", err.message());

    // The key is gone from the current state.
    let scan = token
        .rows(serde_json::json!({"table": "app.accounts"}))
        .await;
    assert_eq!(scan.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_and_scans_read_the_current_state() {
    let (_dir, server, token) = setup().await;
    let mut client = server.client().await;
    let rows: Vec<(i64, f64)> = (0..200).map(|i| (i, i as f64)).collect();
    upsert(&mut client, &token, &rows).await;
    upsert(&mut client, &token, &[(5, 500.0)]).await;

    // Request order, missing keys absent and named in the trailer, a key asked twice.
    let (batches, meta) = get_with_metadata(
        &mut client,
        &token,
        serde_json::json!({"table": "app.accounts", "columns": ["id", "balance"],
                           "lookup": [{"id": 5}, {"id": 1000}, {"id": 3}, {"id": 5}]}),
    )
    .await
    .unwrap();
    assert_eq!(
        opt_int64_values(&batches, "id"),
        [Some(5), Some(3), Some(5)]
    );
    assert_eq!(float64_values(&batches, "balance"), [500.0, 3.0, 500.0]);
    assert_eq!(batches[0].num_columns(), 2);
    assert_eq!(
        meta,
        [serde_json::json!({"requested": 4, "found": 3, "missing": [1]})]
    );
    // No key found: still one (empty) batch carrying the metadata.
    let (batches, meta) = get_with_metadata(
        &mut client,
        &token,
        serde_json::json!({"table": "app.accounts", "lookup": [{"id": -1}]}),
    )
    .await
    .unwrap();
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    assert_eq!(
        meta,
        [serde_json::json!({"requested": 1, "found": 0, "missing": [0]})]
    );

    // Scans see the current state, with filter and projection.
    let scan = token
        .rows(
            serde_json::json!({"table": "app.accounts", "columns": ["id"],
                           "filter": "balance >= 190 OR id = 5"}),
        )
        .await;
    let ids = ints(&scan, "id");
    assert_eq!(ids, [5, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199]);
    let all = token
        .rows(serde_json::json!({"table": "app.accounts"}))
        .await;
    assert_eq!(all.iter().map(RecordBatch::num_rows).sum::<usize>(), 200);
    // Time bounds apply to the current rows' event time (ts = T0 + id µs).
    let recent = token
        .rows(
            serde_json::json!({"table": "app.accounts", "columns": ["id"],
                           "since": "2026-11-30T00:00:00.000195Z",
                           "until": "2026-11-30T00:00:00.000198Z"}),
        )
        .await;
    let ids = ints(&recent, "id");
    assert_eq!(ids, [195, 196, 197]);

    // Bad lookups: a clear InvalidArgument each.
    for (keys, expect) in [
        (
            serde_json::json!([{"owner": "x"}]),
            "no value for key column \"id\"",
        ),
        (serde_json::json!([{"id": "seven"}]), "key column types"),
        (
            serde_json::json!([{"id": 1, "balance": 2}]),
            "not a key column",
        ),
        (serde_json::json!([3]), "not an object"),
    ] {
        let err = token
            .get(serde_json::json!({"table": "app.accounts", "lookup": keys}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{keys}");
        assert!(err.message().contains(expect), "{keys}: {}", err.message());
    }
    // A lookup on a log table names the problem.
    token.create_table(events_table()).await;
    let err = token
        .get(serde_json::json!({"table": "app.events", "lookup": [{"id": 1}]}))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("primary-key table"),
        "{}",
        err.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_changes_are_refused_and_write_nothing() {
    let (_dir, server, token) = setup().await;
    let mut client = server.client().await;
    upsert(&mut client, &token, &[(1, 1.0)]).await;

    // A null in a key column.
    let schema = accounts(&[]).schema();
    let mut nullable: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    nullable[0] = Field::new("id", DataType::Int64, true);
    let with_null = RecordBatch::try_new(
        Arc::new(Schema::new(nullable)),
        vec![
            Arc::new(Int64Array::from(vec![Some(2), None])),
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(Float64Array::from(vec![1.0, 2.0])),
            Arc::new(TimestampMicrosecondArray::from(vec![T0, T0]).with_timezone("UTC")),
        ],
    )
    .unwrap();
    let err = token
        .put_cmd(
            serde_json::json!({"table": "app.accounts"}),
            vec![with_null],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("null"), "{}", err.message());
    // A delete batch without the key column.
    let no_key = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "owner",
            DataType::Utf8,
            false,
        )])),
        vec![Arc::new(StringArray::from(vec!["owner-1"]))],
    )
    .unwrap();
    let err = token
        .put_cmd(
            serde_json::json!({"table": "app.accounts", "op": "delete"}),
            vec![no_key],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("missing key column"),
        "{}",
        err.message()
    );
    // An unknown op.
    let err = put_cmd(
        &mut client,
        &token,
        serde_json::json!({"table": "app.accounts", "op": "merge"}),
        vec![accounts(&[(3, 3.0)])],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    // An op on a log table.
    token.create_table(events_table()).await;
    let err = put_cmd(
        &mut client,
        &token,
        serde_json::json!({"table": "app.events", "op": "delete"}),
        vec![events(0..1)],
    )
    .await
    .unwrap_err();
    assert!(err.message().contains("log table"), "{}", err.message());
    // Nothing of the refused batches reached the changelog.
    let log = token
        .rows(serde_json::json!({"table": "app.accounts", "changelog": {"from": "earliest"}}))
        .await;
    assert_eq!(strings(&log, "_change"), ["+I"]);
    assert_eq!(opt_int64_values(&log, "id"), [Some(1)]);

    // A primary key without the bucket key is refused at creation.
    let mut bad = accounts_table();
    bad["name"] = "bad".into();
    bad["primary_key"] = serde_json::json!(["ts"]);
    let response = create_table(&server, &token, bad).await;
    assert_eq!(response.status(), 400);
    let body = response.text().await.unwrap();
    assert!(body.contains("bucket"), "{body}");
}

/// Folds changelog rows into a key → balance state: `+I`/`+U` put, `-U`/`-D` remove.
fn fold(state: &mut BTreeMap<i64, f64>, batch: &RecordBatch) {
    let ids = batch
        .column_by_name("id")
        .unwrap()
        .as_primitive::<Int64Type>();
    let balances = batch
        .column_by_name("balance")
        .unwrap()
        .as_primitive::<Float64Type>();
    let kinds = batch.column_by_name("_change").unwrap().as_string::<i32>();
    for i in 0..batch.num_rows() {
        match kinds.value(i) {
            "+I" | "+U" => {
                state.insert(ids.value(i), balances.value(i));
            }
            "-U" | "-D" => {
                state.remove(&ids.value(i));
            }
            other => panic!("unknown change {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_changelog_has_no_gap_and_no_duplicate() {
    let (_dir, server, token) = setup().await;
    let mut client = server.client().await;
    let seed: Vec<(i64, f64)> = (0..300).map(|i| (i, 0.0)).collect();
    upsert(&mut client, &token, &seed).await;

    // Two writers upsert and delete while the reader switches from snapshot to changes;
    // they stop once the reader has seen changes of every bucket after its snapshot.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..2i64 {
        let mut client = server.client().await;
        let token = token.clone();
        let stop = Arc::clone(&stop);
        writers.push(tokio::spawn(async move {
            let mut x: u64 = 0x9E37_79B9 + w as u64;
            let mut round = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let key = (x >> 33) as i64 % 400;
                if round % 4 == 3 {
                    put_cmd(
                        &mut client,
                        &token,
                        serde_json::json!({"table": "app.accounts", "op": "delete"}),
                        vec![ids_only(&[key, (key + 7) % 400])],
                    )
                    .await
                    .unwrap();
                } else {
                    let rows: Vec<(i64, f64)> = (0..5)
                        .map(|j| ((key + j * 13) % 400, (w * 1000 + round) as f64))
                        .collect();
                    upsert(&mut client, &token, &rows).await;
                }
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let ticket = serde_json::json!({"table": "app.accounts",
                                    "changelog": {"from": "snapshot", "follow": true}});
    let mut stream = token.stream(ticket).await.unwrap();
    let mut state = BTreeMap::new();
    // Per bucket, the offsets of the changes seen after the snapshot.
    let mut seen: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    let mut snapshot_rows = 0usize;
    let mut writers_done = false;
    let mut final_ends: Option<BTreeMap<u32, i64>> = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        assert!(std::time::Instant::now() < deadline, "no handoff: {seen:?}");
        let changed: usize = seen.values().map(Vec::len).sum();
        if seen.len() == 4 && changed >= 40 {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if !writers_done && writers.iter().all(|w| w.is_finished()) {
            for w in writers.drain(..) {
                w.await.unwrap();
            }
            writers_done = true;
            let (status, table) = token
                .http(reqwest::Method::GET, "/v1/tables/app.accounts", None)
                .await;
            assert_eq!(status, 200);
            final_ends = Some(
                hotgate_testkit::described_end_offsets(&table)
                    .into_iter()
                    .map(|(log, end)| {
                        let bucket = log.rsplit('=').next().unwrap().parse().unwrap();
                        (bucket, end as i64)
                    })
                    .collect(),
            );
        }
        if let Some(ends) = &final_ends {
            let caught_up = ends.iter().all(|(bucket, end)| {
                seen.get(bucket)
                    .and_then(|o| o.last())
                    .is_some_and(|last| last + 1 == *end)
            });
            if caught_up {
                break;
            }
        }
        let batch =
            match tokio::time::timeout(std::time::Duration::from_secs(5), stream.next()).await {
                Ok(Some(b)) => b.unwrap(),
                Ok(None) => panic!("the follow stream ended"),
                Err(_) if writers_done => panic!("stalled before the final offsets: {seen:?}"),
                Err(_) => continue,
            };
        let offsets = batch
            .column_by_name("_offset")
            .unwrap()
            .as_primitive::<Int64Type>();
        let buckets = batch
            .column_by_name("_bucket")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt32Array>()
            .unwrap();
        for i in 0..batch.num_rows() {
            if offsets.is_null(i) {
                // Snapshot rows come first, all of them before any change.
                assert!(seen.is_empty(), "a snapshot row after a change");
                snapshot_rows += 1;
            } else {
                seen.entry(buckets.value(i))
                    .or_default()
                    .push(offsets.value(i));
            }
        }
        fold(&mut state, &batch);
    }
    assert!(snapshot_rows >= 1, "the snapshot sent nothing");
    // No gap and no duplicate: each bucket's changes after the snapshot are consecutive.
    for (bucket, offsets) in &seen {
        for pair in offsets.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "bucket {bucket}: {offsets:?}");
        }
    }
    assert!(!seen.is_empty(), "the writers' changes never arrived");
    // The folded stream equals the table's final state.
    assert_eq!(state, current_state(&mut client, &token).await);
}

/// One write of the kill -9 test: an upsert of `key` to `balance`, or a delete.
#[derive(Debug, Clone, Copy)]
struct Op {
    key: i64,
    balance: Option<f64>,
}

fn op(i: i64) -> Op {
    Op {
        key: (i * 7) % 50,
        balance: (i % 3 != 2).then_some(i as f64),
    }
}

fn apply(state: &mut BTreeMap<i64, f64>, op: Op) {
    match op.balance {
        Some(b) => state.insert(op.key, b),
        None => state.remove(&op.key),
    };
}

async fn current_state(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
) -> BTreeMap<i64, f64> {
    let batches = get(
        client,
        token,
        serde_json::json!({"table": "app.accounts", "columns": ["id", "balance"]}),
    )
    .await
    .unwrap();
    let mut state = BTreeMap::new();
    for b in &batches {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let balances = b.column(1).as_primitive::<Float64Type>();
        for i in 0..b.num_rows() {
            state.insert(ids.value(i), balances.value(i));
        }
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_acknowledged_changes_in_state_and_changelog() {
    let (dir, server, token) = setup().await;
    let (flight, http) = (server.flight, server.http);
    // A writer applies upserts and deletes one at a time and records each acknowledged one.
    let acked = Arc::new(std::sync::Mutex::new(0i64));
    let writer = {
        let acked = Arc::clone(&acked);
        let token = token.clone();
        let mut client = server.client().await;
        tokio::spawn(async move {
            for i in 0.. {
                let op = op(i);
                let written = match op.balance {
                    Some(b) => {
                        put_cmd(
                            &mut client,
                            &token,
                            serde_json::json!({"table": "app.accounts"}),
                            vec![accounts(&[(op.key, b)])],
                        )
                        .await
                    }
                    None => {
                        put_cmd(
                            &mut client,
                            &token,
                            serde_json::json!({"table": "app.accounts", "op": "delete"}),
                            vec![ids_only(&[op.key])],
                        )
                        .await
                    }
                };
                if written.is_err() {
                    return;
                }
                *acked.lock().unwrap() = i + 1;
            }
        })
    };
    let start = std::time::Instant::now();
    while *acked.lock().unwrap() < 150 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "the writer made no progress"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    server.kill9();
    writer.await.unwrap();
    let acked = *acked.lock().unwrap();

    let server = Server::start_with(dir.path(), flight, http);
    let token = token.at(&server);
    let mut client = server.client().await;
    let state = current_state(&mut client, &token).await;
    // Every acknowledged change holds; the one in flight at the kill may or may not.
    let mut expected = BTreeMap::new();
    (0..acked).for_each(|i| apply(&mut expected, op(i)));
    let mut with_in_flight = expected.clone();
    apply(&mut with_in_flight, op(acked));
    assert!(
        state == expected || state == with_in_flight,
        "after kill -9 the state is {state:?}, acknowledged {expected:?}"
    );
    // The changelog folds to the same state: the two agree.
    let log = token
        .rows(serde_json::json!({"table": "app.accounts", "changelog": {"from": "earliest"}}))
        .await;
    let mut folded = BTreeMap::new();
    log.iter().for_each(|b| fold(&mut folded, b));
    assert_eq!(folded, state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_table_may_omit_the_time_column() {
    let server = Server::fresh();
    let token = server.caller("alice", &["writer"]);
    let spec = serde_json::json!({
        "namespace": "app", "name": "flags",
        "columns": [
            {"name": "flag", "type": "string", "nullable": false},
            {"name": "enabled", "type": "bool"}
        ],
        "primary_key": ["flag"], "bucket_key": "flag", "buckets": 2
    });
    let created = create_table(&server, &token, spec.clone()).await;
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("flag", DataType::Utf8, false),
            Field::new("enabled", DataType::Boolean, true),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["dark-mode", "beta"])),
            Arc::new(arrow_array::BooleanArray::from(vec![true, false])),
        ],
    )
    .unwrap();
    token
        .put_cmd(serde_json::json!({"table": "app.flags"}), vec![batch])
        .await
        .unwrap();
    let rows = token
        .rows(serde_json::json!({"table": "app.flags", "filter": "enabled"}))
        .await;
    assert_eq!(strings(&rows, "flag"), ["dark-mode"]);
    let log = token
        .rows(serde_json::json!({"table": "app.flags", "changelog": {"from": "earliest"}}))
        .await;
    assert_eq!(strings(&log, "_change"), ["+I", "+I"]);
    // Reading by time needs a time column: a clear error, not an empty answer.
    for ticket in [
        serde_json::json!({"table": "app.flags", "since": "2026-11-30T00:00:00Z"}),
        serde_json::json!({"table": "app.flags", "changelog": {"from": "2026-11-30T00:00:00Z"}}),
    ] {
        let err = token.get(ticket).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().contains("no time_column"),
            "{}",
            err.message()
        );
    }
    // A log table still needs one.
    let mut log_table = spec;
    log_table["name"] = "flag_events".into();
    log_table.as_object_mut().unwrap().remove("primary_key");
    let response = create_table(&server, &token, log_table).await;
    assert_eq!(response.status(), 400);
    let body = response.text().await.unwrap();
    assert!(body.contains("time_column is required"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_lookup_is_split_into_grpc_sized_messages() {
    let (_dir, server, token) = setup().await;
    let mut client = server.client().await;
    // 20,000 rows of ~300 bytes: about 6 MB, more than one 4 MB gRPC message.
    let n = 20_000i64;
    let batch = RecordBatch::try_new(
        accounts(&[]).schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("{i:0>300}")),
            )),
            Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
            Arc::new(TimestampMicrosecondArray::from(vec![T0; n as usize]).with_timezone("UTC")),
        ],
    )
    .unwrap();
    token
        .put_cmd(serde_json::json!({"table": "app.accounts"}), vec![batch])
        .await
        .unwrap();
    let keys: Vec<serde_json::Value> = (0..n + 1).map(|i| serde_json::json!({"id": i})).collect();
    let (batches, meta) = get_with_metadata(
        &mut client,
        &token,
        serde_json::json!({"table": "app.accounts", "lookup": keys}),
    )
    .await
    .unwrap();
    assert!(batches.len() > 1, "one message of {} rows", n);
    let ids: Vec<i64> = opt_int64_values(&batches, "id")
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
    assert_eq!(
        meta,
        [serde_json::json!({"requested": n + 1, "found": n, "missing": [n]})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_deletion_hides_keys_from_lookups_scans_and_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    // A short time bound, and verification held back by a fail point: the request
    // stays `purged` and becomes overdue.
    let server = Server::start_vars(
        dir.path(),
        &[
            ("HOTGATE_DELETION_TIME_BOUND", "1s"),
            ("FAILPOINTS", "deletion-verify=return"),
        ],
    );
    let token = server.caller("alice", &["analyst"]);
    token.create_table(accounts_table()).await;
    let mut client = server.client().await;
    let rows: Vec<(i64, f64)> = (0..20).map(|i| (i, i as f64)).collect();
    upsert(&mut client, &token, &rows).await;
    let record = crate::deletion::file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.accounts"], "predicate": "id < 5",
            "subject": "case-9"}),
    )
    .await;

    // A hidden key is missing from a lookup, exactly like a key without a row.
    let (batches, meta) = get_with_metadata(
        &mut client,
        &token,
        serde_json::json!({"table": "app.accounts", "columns": ["id"],
                           "lookup": [{"id": 1}, {"id": 7}]}),
    )
    .await
    .unwrap();
    assert_eq!(opt_int64_values(&batches, "id"), [Some(7)]);
    assert_eq!(
        meta,
        [serde_json::json!({"requested": 2, "found": 1, "missing": [0]})]
    );
    // Scans of the state and the snapshot-then-changelog handoff skip them too.
    let batches = token
        .rows(serde_json::json!({"table": "app.accounts", "columns": ["id"]}))
        .await;
    let mut ids = ints(&batches, "id");
    ids.sort_unstable();
    assert_eq!(ids, (5..20).collect::<Vec<_>>());
    let batches = token
        .rows(
            serde_json::json!({"table": "app.accounts", "columns": ["id"],
                           "changelog": {"from": "snapshot", "follow": false}}),
        )
        .await;
    let mut ids = ints(&batches, "id");
    ids.sort_unstable();
    assert_eq!(ids, (5..20).collect::<Vec<_>>());

    // The hot step deletes the five keys with -D and erases their changelog records.
    let id = record["id"].as_str().unwrap();
    let shown = crate::deletion::wait_for_state(&server, &token, id, "hot_applied").await;
    assert_eq!(shown["receipt"]["keys_erased"], 5, "{shown}");
    let batches = token
        .rows(
            serde_json::json!({"table": "app.accounts", "columns": ["id"],
                           "changelog": {"from": "earliest", "follow": false}}),
        )
        .await;
    assert!(
        ints(&batches, "id").iter().all(|i| *i >= 5),
        "the changelog still has erased keys"
    );

    // Past its time bound the request shows as overdue, in its status and in /metrics.
    assert_eq!(record["overdue"], false);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let (status, shown) = token
        .http(reqwest::Method::GET, &format!("/v1/deletions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(shown["overdue"], true, "{shown}");
    assert_eq!(shown["state"], "purged", "{shown}");
    // The failing step shows its attempts and its last error, and is retried.
    assert!(shown["attempts"].as_u64().unwrap() >= 1, "{shown}");
    let last_error = shown["last_error"].as_str().unwrap();
    assert!(
        last_error.contains("fail point deletion-verify")
            && last_error.contains("retried with backoff"),
        "{shown}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hotgate_deletion_requests_overdue 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hotgate_deletion_requests{state=\"accepted\"} 0"),
        "{metrics}"
    );
    server.terminate();
}
