//! Shared fixtures: a hot store with an event table, a catalog in a temp dir, and a
//! reader that scans the Iceberg table with iceberg-rust.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use futures::TryStreamExt;
use hotgate_store::{HotTable, Store, StoreOptions, TableDef, TableSpec};
use hotgate_tiering::{Catalog, CatalogConfig, Tierer};
use iceberg::table::Table;

/// 2026-11-30T00:00:00Z in µs.
pub const T0: i64 = 1_795_996_800_000_000;
pub const DAY_US: i64 = 86_400_000_000;

pub struct Fixture {
    pub dir: tempfile::TempDir,
    /// Kept open for the test: its logs' writer tasks live as long as it.
    pub _store: Store,
    pub hot: Arc<HotTable>,
    pub tierer: Tierer,
}

pub fn events_spec(buckets: u32) -> TableSpec {
    serde_json::from_value(serde_json::json!({
        "namespace": "app", "name": "events",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "customer", "type": "string", "nullable": false},
            {"name": "email", "type": "string", "tags": ["pii"]},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "customer", "buckets": buckets
    }))
    .unwrap()
}

pub async fn fixture(buckets: u32) -> Fixture {
    fixture_with(events_spec(buckets)).await
}

pub async fn fixture_with(spec: TableSpec) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hot"), StoreOptions::default()).unwrap();
    let hot = store.create_table(spec).await.unwrap();
    let catalog = Catalog::open(CatalogConfig::embedded(dir.path()))
        .await
        .unwrap();
    let tierer = Tierer::new(catalog);
    tierer.ensure_table(&hot.def()).await.unwrap();
    Fixture {
        dir,
        _store: store,
        hot,
        tierer,
    }
}

impl Fixture {
    pub fn def(&self) -> Arc<TableDef> {
        self.hot.def()
    }

    pub async fn table(&self) -> Table {
        self.tierer.catalog().load(self.def().name()).await.unwrap()
    }
}

/// Rows with ids `ids`, customers cycling over 7 names, one row a minute from `start`.
pub fn events(ids: std::ops::Range<i64>, start: i64) -> RecordBatch {
    let ids: Vec<i64> = ids.collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("email", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.clone())) as ArrayRef,
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("customer-{}", i % 7)),
            )),
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("user{i}@example.com")),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    ids.iter().map(|i| start + i * 60_000_000),
                )
                .with_timezone("UTC"),
            ),
        ],
    )
    .unwrap()
}

/// Every id in the table's current snapshot, read with iceberg-rust's scan; duplicates
/// are kept, so a row tiered twice shows up twice.
pub async fn cold_ids(table: &Table) -> Vec<i64> {
    if table.metadata().current_snapshot().is_none() {
        return Vec::new();
    }
    let stream = table
        .scan()
        .select(["id"])
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap();
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    ids.sort_unstable();
    ids
}

/// The data files live in the current snapshot.
pub async fn live_files(table: &Table) -> BTreeSet<String> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return BTreeSet::new();
    };
    let list = table.manifest_list_reader(snapshot).load().await.unwrap();
    let mut files = BTreeSet::new();
    for m in list.entries() {
        let manifest = m.load_manifest(table.file_io()).await.unwrap();
        for e in manifest.entries().iter().filter(|e| e.is_alive()) {
            files.insert(e.file_path().to_owned());
        }
    }
    files
}
