//! The store's fixtures over the shared test kit: the events table with a `note`
//! column, its rows, and a scan of every id.

use arrow_array::RecordBatch;
use hotgate_store::{ScanRequest, Store, StoreOptions, TableName, TableSpec};
pub(crate) use hotgate_testkit::{
    ChildTest, DAY_US, T0, copy_dir, file_contains, int64_values, segment_bytes, segment_files,
};
use hotgate_testkit::{opt_strings, with};

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
    let note = |ids: &[i64]| {
        opt_strings(
            ids.iter()
                .map(|i| (i % 3 != 0).then(|| format!("note {i}"))),
        )
    };
    hotgate_testkit::events_rows(ids, ("note", &note), ts_of)
}

pub(crate) async fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, StoreOptions::default()).unwrap()
}

/// A new store in a temporary directory with the table `spec`.
pub(crate) async fn store_with(
    spec: TableSpec,
) -> (
    tempfile::TempDir,
    Store,
    std::sync::Arc<hotgate_store::HotTable>,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let table = store.create_table(spec).await.unwrap();
    (dir, store, table)
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

/// A closed store at `dir` whose one-bucket events table holds `frames` frames of three
/// rows each (ids `0..3 × frames`). Closing cuts the segment to its frames (an open one
/// has zeros preallocated after them), so file lengths are frame bounds.
pub(crate) async fn closed_store_with_frames(dir: &std::path::Path, frames: i64) {
    let store = open(dir).await;
    store.create_table(events_spec(1)).await.unwrap();
    for k in 0..frames {
        store
            .append(&events_name(), &events(k * 3..k * 3 + 3, |i| T0 + i))
            .await
            .unwrap();
    }
    store.close().await;
}
