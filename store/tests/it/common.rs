//! The store's fixtures over the shared test kit: the events table with a `note`
//! column, its rows, and a scan of every id.

use arrow_array::RecordBatch;
use hotgate_store::{ScanRequest, Store, StoreOptions, TableName, TableSpec};
pub(crate) use hotgate_testkit::{DAY_US, T0, segment_bytes, segment_files};
use hotgate_testkit::{batch, int64_values, int64s, opt_strings, strings, timestamps, with};

pub(crate) fn events_spec(buckets: u32) -> TableSpec {
    let spec = hotgate_testkit::events_spec(
        serde_json::json!({"name": "note", "type": "string"}),
        buckets,
    );
    serde_json::from_value(with(spec, serde_json::json!({"hot_retention": "1h"}))).unwrap()
}

pub(crate) fn events_name() -> TableName {
    TableName::new("app", "events").unwrap()
}

/// Rows with ids `ids`, customers cycling over 7 names, timestamps `ts_of(id)`.
pub(crate) fn events(ids: std::ops::Range<i64>, ts_of: impl Fn(i64) -> i64) -> RecordBatch {
    let ids: Vec<i64> = ids.collect();
    batch([
        ("id", int64s(ids.iter().copied())),
        (
            "customer",
            strings(ids.iter().map(|i| format!("customer-{}", i % 7))),
        ),
        (
            "note",
            opt_strings(
                ids.iter()
                    .map(|i| (i % 3 != 0).then(|| format!("note {i}"))),
            ),
        ),
        ("ts", timestamps(ids.iter().map(|i| ts_of(*i)))),
    ])
}

pub(crate) async fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, StoreOptions::default()).unwrap()
}

/// Every id in the table's hot tier, in scan order.
pub(crate) fn all_ids(store: &Store) -> Vec<i64> {
    let table = store.table(&events_name()).unwrap();
    let scan = table
        .scan(&ScanRequest {
            columns: Some(vec!["id".into()]),
            ..Default::default()
        })
        .unwrap();
    let batches: Vec<RecordBatch> = scan.map(|b| b.unwrap().batch).collect();
    int64_values(&batches, "id")
}
