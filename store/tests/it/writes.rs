//! The append path: round trips, offsets, validation failures and concurrency.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, TimeUnit};
use arrow_select::concat::concat_batches;
use hotgate_store::{ErrorKind, LogId, ScanRequest, TableName};

use hotgate_testkit::{batch, int64s, opt_strings, strings, timestamps, with_column};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_survives_restart() {
    let (dir, store, _) = store_with(events_spec(4)).await;
    let batch = events(0..1000, |i| T0 + i * 1_000);
    let result = store.append(&events_name(), &batch).await.unwrap();
    assert_eq!(result.rows, 1000);
    assert_eq!(
        result
            .parts
            .iter()
            .map(|p| p.end_offset - p.start_offset)
            .sum::<u64>(),
        1000
    );
    assert!(
        result
            .parts
            .iter()
            .all(|p| p.partition == "2026-11-30" && p.bucket < 4)
    );
    store.close().await;
    drop(store);

    // Reopen: the definition and every row come back.
    let store = open(dir.path()).await;
    let table = store.table(&events_name()).unwrap();
    assert_eq!(table.def().spec().buckets, 4);
    let batches: Vec<RecordBatch> = table
        .scan(&ScanRequest::default())
        .unwrap()
        .map(|b| b.unwrap().batch)
        .collect();
    let all = concat_batches(table.def().stored_schema(), &batches).unwrap();
    assert_eq!(all.num_rows(), 1000);
    // Same rows, compared as a sorted set of (id, customer, note, ts).
    let rows = |b: &RecordBatch| {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let cust = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        let note = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        let ts = b
            .column(3)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        let mut v: Vec<_> = (0..b.num_rows())
            .map(|i| {
                (
                    ids.value(i),
                    cust.value(i).to_owned(),
                    note.is_valid(i).then(|| note.value(i).to_owned()),
                    ts.value(i),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(rows(&all), rows(&batch));
    // The stored schema carries the Iceberg field ids and the canonical UTC zone.
    assert_eq!(
        all.schema().field(3).data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
    );
    assert_eq!(all.schema().field(0).metadata()["PARQUET:field_id"], "1");

    // Offsets continue after a restart.
    let again = store
        .append(&events_name(), &events(1000..1001, |_| T0))
        .await
        .unwrap();
    let part = &again.parts[0];
    assert_eq!(part.start_offset, table.end_offsets()[&part.log] - 1);
    assert!(part.start_offset > 0);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_contiguous_per_log() {
    let (_dir, store, _) = store_with(events_spec(3)).await;
    let mut by_log: BTreeMap<LogId, Vec<(u64, u64)>> = BTreeMap::new();
    for round in 0..20 {
        let r = store
            .append(
                &events_name(),
                &events(round * 50..round * 50 + 50, |i| T0 + i),
            )
            .await
            .unwrap();
        for p in r.parts {
            by_log
                .entry(p.log)
                .or_default()
                .push((p.start_offset, p.end_offset));
        }
    }
    let table = store.table(&events_name()).unwrap();
    for (log, ranges) in by_log {
        assert_eq!(ranges[0].0, 0);
        for w in ranges.windows(2) {
            assert_eq!(w[0].1, w[1].0, "gap or overlap in {log}");
        }
        assert_eq!(ranges.last().unwrap().1, table.end_offsets()[&log]);
        // Reading an offset range returns exactly that many rows.
        let (from, to) = (ranges[1].0 + 3, ranges[4].1 - 2);
        let rows: usize = table
            .scan(&ScanRequest {
                logs: Some(vec![log]),
                start_offsets: [(log, from)].into(),
                end_offsets: [(log, to)].into(),
                ..Default::default()
            })
            .unwrap()
            .map(|b| b.unwrap().batch.num_rows())
            .sum();
        assert_eq!(rows as u64, to - from);
    }
    store.close().await;
}

fn expect_invalid(err: hotgate_store::StoreError, needle: &str) {
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(needle),
        "error {msg:?} should mention {needle:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_are_refused_and_write_nothing() {
    let (dir, store, _) = store_with(events_spec(2)).await;
    let good = events(0..10, |i| T0 + i);
    let ts = || timestamps([T0; 2]);

    // Wrong type: id as int32.
    let b = batch([
        ("id", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
        ("customer", strings(["a", "b"])),
        ("ts", ts()),
    ]);
    let err = store.append(&events_name(), &b).await.unwrap_err();
    expect_invalid(err, "column \"id\" has type Int32, expected Int64");

    // A null in a non-nullable column (the bucket key).
    let b = batch([
        ("id", int64s([1, 2])),
        ("customer", opt_strings([Some("a"), None])),
        ("ts", ts()),
    ]);
    let err = store.append(&events_name(), &b).await.unwrap_err();
    expect_invalid(
        err,
        "bucket key \"customer\" is not nullable but row 1 is null",
    );

    // A missing time column.
    let b = good.project(&[0, 1, 2]).unwrap();
    let err = store.append(&events_name(), &b).await.unwrap_err();
    expect_invalid(err, "missing time column \"ts\"");

    // A naive timestamp.
    let b = batch([
        ("id", int64s([1])),
        ("customer", strings(["a"])),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![T0])) as ArrayRef,
        ),
    ]);
    let err = store.append(&events_name(), &b).await.unwrap_err();
    expect_invalid(err, "time zone UTC");

    // An unknown column.
    let b = with_column(&good, "extra", strings(["x"; 10]));
    let err = store.append(&events_name(), &b).await.unwrap_err();
    expect_invalid(err, "unknown column \"extra\"");

    // A column sent twice: neither copy is stored, whichever comes first.
    let b = with_column(&good, "customer", strings(["other"; 10]));
    let err = store.append(&events_name(), &b).await.unwrap_err();
    expect_invalid(err, "column \"customer\" appears twice in the batch");

    // An unknown table.
    let err = store
        .append(&TableName::new("app", "nope").unwrap(), &good)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("app.nope"));

    // Nothing reached disk, and no log was even created.
    assert_eq!(segment_bytes(dir.path()), 0);
    assert!(store.table(&events_name()).unwrap().logs().is_empty());
    assert_eq!(store.metrics().snapshot().rejected, 6);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_lose_and_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()).await);
    store.create_table(events_spec(4)).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut parts = Vec::new();
                for round in 0..25 {
                    let first = (t * 25 + round) * 10;
                    let r = store
                        .append(&events_name(), &events(first..first + 10, |i| T0 + i))
                        .await
                        .unwrap();
                    parts.extend(r.parts);
                }
                parts
            })
        })
        .collect();
    let mut by_log: BTreeMap<LogId, Vec<(u64, u64)>> = BTreeMap::new();
    for t in tasks {
        for p in t.await.unwrap() {
            by_log
                .entry(p.log)
                .or_default()
                .push((p.start_offset, p.end_offset));
        }
    }
    // Acknowledged offset ranges tile each log exactly.
    for (log, mut ranges) in by_log {
        ranges.sort();
        assert_eq!(ranges[0].0, 0, "{log}");
        for w in ranges.windows(2) {
            assert_eq!(w[0].1, w[1].0, "gap or overlap in {log}");
        }
    }
    let ids = all_ids(&store);
    assert_eq!(ids.len(), 8000);
    let unique: HashSet<i64> = ids.into_iter().collect();
    assert_eq!(unique, (0..8000).collect());
    // Group commit shared fsyncs between concurrent appenders.
    let m = store.metrics().snapshot();
    assert!(m.fsyncs < m.appends, "{m:?}");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_definitions_are_checked_and_persisted() {
    let (dir, store, _) = store_with(events_spec(2)).await;
    // The same definition again is fine; a different one is refused.
    store.create_table(events_spec(2)).await.unwrap();
    let err = store.create_table(events_spec(3)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    let mut spec = events_spec(2);
    spec.name = "../../etc".into();
    let err = store.create_table(spec).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(!dir.path().join("etc").exists());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_appends_commit_in_the_order_they_were_begun() {
    let (_dir, store, table) = store_with(events_spec(1)).await;
    let mut pending = Vec::new();
    for k in 0..50 {
        pending.push(
            table
                .begin_append(&events(k * 4..k * 4 + 4, |i| T0 + i))
                .await
                .unwrap(),
        );
    }
    let mut next = 0;
    for p in pending {
        let r = p.durable().await.unwrap();
        assert_eq!(r.parts.len(), 1);
        assert_eq!(
            (r.parts[0].start_offset, r.parts[0].end_offset),
            (next, next + 4)
        );
        next += 4;
    }
    assert_eq!(all_ids(&store), (0..200).collect::<Vec<_>>());
    let m = store.metrics().snapshot();
    assert!(m.fsyncs < m.appends, "queued appends shared no sync: {m:?}");
    // A bad batch queues nothing.
    let bad = events(0..2, |i| T0 + i).project(&[0, 1, 2]).unwrap();
    assert!(table.begin_append(&bad).await.is_err());
    assert_eq!(all_ids(&store).len(), 200);
    store.close().await;
}
