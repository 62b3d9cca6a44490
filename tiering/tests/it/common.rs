//! Shared fixtures: a hot store with an event table, a catalog in a temp dir, and a
//! reader that scans the Iceberg table with iceberg-rust.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use hotgate_store::{HotTable, Store, StoreOptions, TableDef, TableSpec};
use hotgate_tiering::{Catalog, CatalogConfig, ColdScanRequest, ColdSnapshot, Tierer};
use iceberg::table::Table;

pub(crate) use hotgate_testkit::{DAY_US, T0};
use hotgate_testkit::{MINUTE_US, int64_values, strings};

pub(crate) struct Fixture {
    pub dir: tempfile::TempDir,
    /// Kept open for the test: its logs' writer tasks live as long as it.
    pub _store: Store,
    pub hot: Arc<HotTable>,
    pub tierer: Tierer,
}

pub(crate) fn events_spec(buckets: u32) -> TableSpec {
    serde_json::from_value(hotgate_testkit::events_spec(
        serde_json::json!({"name": "email", "type": "string", "tags": ["pii"]}),
        buckets,
    ))
    .unwrap()
}

pub(crate) async fn fixture(buckets: u32) -> Fixture {
    fixture_with(events_spec(buckets)).await
}

pub(crate) async fn fixture_with(spec: TableSpec) -> Fixture {
    fixture_in(spec, CatalogConfig::embedded).await
}

/// A fixture whose catalog is `catalog(data dir)`.
pub(crate) async fn fixture_in(
    spec: TableSpec,
    catalog: impl FnOnce(&std::path::Path) -> CatalogConfig,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hot"), StoreOptions::default()).unwrap();
    let hot = store.create_table(spec).await.unwrap();
    let catalog = Catalog::open(catalog(dir.path())).await.unwrap();
    let tierer = Tierer::new(catalog);
    tierer.ensure_table(&hot).await.unwrap();
    Fixture {
        dir,
        _store: store,
        hot,
        tierer,
    }
}

impl Fixture {
    pub(crate) fn def(&self) -> Arc<TableDef> {
        self.hot.def()
    }

    pub(crate) async fn table(&self) -> Table {
        self.tierer.catalog().load(self.def().name()).await.unwrap()
    }

    /// `n` tiering cycles of ten new rows each (ids `0..10n`), so the cold tier holds
    /// `n` files of one log.
    pub(crate) async fn cycles(&self, n: i64) {
        for i in 0..n {
            self.hot
                .append(&events(i * 10..(i + 1) * 10, T0))
                .await
                .unwrap();
            self.tierer.cycle(&self.hot, T0, true).await.unwrap();
        }
    }
}

/// Rows with ids `ids`, customers cycling over 7 names, one row a minute from `start`.
pub(crate) fn events(ids: std::ops::Range<i64>, start: i64) -> RecordBatch {
    let email = |ids: &[i64]| strings(ids.iter().map(|i| format!("user{i}@example.com")));
    hotgate_testkit::events_rows(ids, ("email", &email), |i| start + i * MINUTE_US)
}

/// Every id in the table's current snapshot, read with iceberg-rust's scan; duplicates
/// are kept, so a row tiered twice shows up twice.
pub(crate) async fn cold_ids(table: &Table) -> Vec<i64> {
    if table.metadata().current_snapshot().is_none() {
        return Vec::new();
    }
    let mut ids = int64_values(&cold_rows(table, &["id"]).await, "id");
    ids.sort_unstable();
    ids
}

/// The `columns` of every row of the table's current snapshot, read with
/// iceberg-rust's scan.
pub(crate) async fn cold_rows(table: &Table, columns: &[&str]) -> Vec<RecordBatch> {
    let stream = table
        .scan()
        .select(columns.iter().copied())
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap();
    stream.try_collect().await.unwrap()
}

/// The ids of the rows a hotgate cold scan of `snapshot` returns for `request`.
pub(crate) async fn scanned_ids(snapshot: &ColdSnapshot, request: ColdScanRequest) -> Vec<i64> {
    let stream = snapshot.scan(request).await.unwrap();
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    hotgate_testkit::ints(&batches, "id")
}

/// The data files live in the current snapshot.
pub(crate) async fn live_files(table: &Table) -> BTreeSet<String> {
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
