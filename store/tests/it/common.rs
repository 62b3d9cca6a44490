//! Shared fixtures: a small event table and batch builders.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use hotgate_store::{ScanRequest, Store, StoreOptions, TableName, TableSpec};

pub const DAY_US: i64 = 86_400_000_000;
/// 2026-11-30T00:00:00Z in µs.
pub const T0: i64 = 1_795_996_800_000_000;

pub fn events_spec(buckets: u32) -> TableSpec {
    serde_json::from_value(serde_json::json!({
        "namespace": "app", "name": "events",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "customer", "type": "string", "nullable": false},
            {"name": "note", "type": "string"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "customer", "buckets": buckets, "hot_retention": "1h"
    }))
    .unwrap()
}

pub fn events_name() -> TableName {
    TableName::new("app", "events").unwrap()
}

pub fn input_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("note", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]))
}

/// Rows with ids `ids`, customers cycling over 7 names, timestamps `ts_of(id)`.
pub fn events(ids: std::ops::Range<i64>, ts_of: impl Fn(i64) -> i64) -> RecordBatch {
    let ids: Vec<i64> = ids.collect();
    let customers: Vec<String> = ids.iter().map(|i| format!("customer-{}", i % 7)).collect();
    let notes: Vec<Option<String>> = ids
        .iter()
        .map(|i| (i % 3 != 0).then(|| format!("note {i}")))
        .collect();
    let ts: Vec<i64> = ids.iter().map(|i| ts_of(*i)).collect();
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from(ids)) as ArrayRef,
            Arc::new(StringArray::from(customers)),
            Arc::new(StringArray::from(notes)),
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        ],
    )
    .unwrap()
}

pub async fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, StoreOptions::default()).unwrap()
}

/// Every id in the table's hot tier, in scan order.
pub fn all_ids(store: &Store) -> Vec<i64> {
    let table = store.table(&events_name()).unwrap();
    let scan = table
        .scan(&ScanRequest {
            columns: Some(vec!["id".into()]),
            ..Default::default()
        })
        .unwrap();
    let mut ids = Vec::new();
    for b in scan {
        let b = b.unwrap();
        let col = b
            .batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        ids.extend(col.values().iter().copied());
    }
    ids
}

/// Total bytes of every segment file under `dir`.
pub fn segment_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                total += std::fs::metadata(&p).unwrap().len();
            }
        }
    }
    total
}

/// Every segment file under `dir`, sorted.
pub fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
