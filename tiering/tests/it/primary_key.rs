//! Primary-key tables: each cycle replaces the files of every changed bucket with a
//! dump of its current state, in one overwrite commit without delete files.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use hotgate_store::{ChangeOp, HotTable, Store, StoreOptions, TableSpec};
use hotgate_tiering::{Catalog, CatalogConfig, TieredOffsets, Tierer};
use iceberg::spec::Transform;
use iceberg::table::Table;

use hotgate_testkit::{batch, int64s, strings};

use crate::common::{T0, cold_rows, live_files};

const BUCKETS: u32 = 4;

fn accounts_spec() -> TableSpec {
    serde_json::from_value(serde_json::json!({
        "namespace": "app", "name": "accounts",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "owner", "type": "string"},
            {"name": "balance", "type": "int64"}
        ],
        "bucket_key": "id", "buckets": BUCKETS, "primary_key": ["id"]
    }))
    .unwrap()
}

fn upserts(ids: &[i64], balance: impl Fn(i64) -> i64) -> RecordBatch {
    batch([
        ("id", int64s(ids.iter().copied())),
        ("owner", strings(ids.iter().map(|i| format!("owner-{i}")))),
        ("balance", int64s(ids.iter().map(|i| balance(*i)))),
    ])
}

fn deletes(ids: &[i64]) -> RecordBatch {
    batch([("id", int64s(ids.iter().copied()))])
}

fn bucket_of(id: i64) -> u32 {
    hotgate_store::bucket::bucket_of_long(id, BUCKETS)
}

/// `id -> balance` of the current snapshot, read with iceberg-rust; a duplicate key
/// fails the test.
async fn cold_state(table: &Table) -> BTreeMap<i64, i64> {
    let batches = cold_rows(table, &["id", "balance"]).await;
    let mut state = BTreeMap::new();
    for b in &batches {
        let ids = b.column(0).as_primitive::<Int64Type>();
        let balances = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            assert!(
                state.insert(ids.value(i), balances.value(i)).is_none(),
                "key {} is in the cold tier twice",
                ids.value(i)
            );
        }
    }
    state
}

/// Live files by the bucket in their partition path.
async fn files_by_bucket(table: &Table) -> BTreeMap<u32, BTreeSet<String>> {
    let mut out: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for path in live_files(table).await {
        let bucket = path
            .split("id_bucket=")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("no bucket in {path}"));
        out.entry(bucket).or_default().insert(path);
    }
    out
}

async fn setup() -> (tempfile::TempDir, Store, Arc<HotTable>, Tierer) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("hot"), StoreOptions::default()).unwrap();
    let hot = store.create_table(accounts_spec()).await.unwrap();
    let catalog = Catalog::open(CatalogConfig::embedded(dir.path()))
        .await
        .unwrap();
    let tierer = Tierer::new(catalog);
    tierer.ensure_table(&hot).await.unwrap();
    (dir, store, hot, tierer)
}

#[tokio::test]
async fn each_cycle_replaces_the_changed_buckets_with_their_current_state() {
    let (_dir, _store, hot, tierer) = setup().await;
    let name = hot.def().name().clone();
    let ids: Vec<i64> = (0..200).collect();
    hot.write_changes(&upserts(&ids, |i| i * 10), ChangeOp::Upsert)
        .await
        .unwrap();
    let first = tierer.cycle(&hot, T0, true).await.unwrap();
    assert_eq!(first.records, 200);
    let table = tierer.catalog().load(&name).await.unwrap();
    let mut want: BTreeMap<i64, i64> = ids.iter().map(|i| (*i, i * 10)).collect();
    assert_eq!(cold_state(&table).await, want);

    // Bucket-only spec, the key as identifier field, offsets = the changelog ends.
    let metadata = table.metadata();
    let transforms: Vec<_> = metadata
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| f.transform)
        .collect();
    assert_eq!(transforms, [Transform::Bucket(BUCKETS)]);
    let id_field = metadata.current_schema().field_by_name("id").unwrap().id;
    assert_eq!(
        metadata
            .current_schema()
            .identifier_field_ids()
            .collect::<Vec<_>>(),
        [id_field]
    );
    assert_eq!(
        TieredOffsets::current(metadata).unwrap().to_map(),
        hot.end_offsets()
    );
    let before = files_by_bucket(&table).await;
    assert_eq!(before.len(), BUCKETS as usize);

    // Updates and deletes in one bucket only: that bucket's files are replaced, the
    // others stay as they were, and no delete file is written.
    let target = bucket_of(0);
    let in_target: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|i| bucket_of(*i) == target)
        .collect();
    let (updated, deleted) = in_target.split_at(in_target.len() / 2);
    hot.write_changes(&upserts(updated, |i| -i), ChangeOp::Upsert)
        .await
        .unwrap();
    hot.write_changes(&deletes(deleted), ChangeOp::Delete)
        .await
        .unwrap();
    let second = tierer.cycle(&hot, T0, true).await.unwrap();
    assert_eq!(second.records, updated.len() as u64);
    let table = tierer.catalog().load(&name).await.unwrap();
    for i in updated {
        want.insert(*i, -i);
    }
    for i in deleted {
        want.remove(i);
    }
    assert_eq!(cold_state(&table).await, want);
    let after = files_by_bucket(&table).await;
    for b in 0..BUCKETS {
        if b == target {
            assert!(
                after[&b].is_disjoint(&before[&b]),
                "bucket {b} was not rewritten"
            );
        } else {
            assert_eq!(after[&b], before[&b], "bucket {b} changed");
        }
    }
    let summary = &table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(summary["total-delete-files"], "0");
    assert_eq!(summary["total-records"], want.len().to_string());
    assert_eq!(
        TieredOffsets::current(table.metadata()).unwrap().to_map(),
        hot.end_offsets()
    );

    // A bucket whose keys are all deleted loses its files.
    hot.write_changes(&deletes(updated), ChangeOp::Delete)
        .await
        .unwrap();
    tierer.cycle(&hot, T0, true).await.unwrap();
    let table = tierer.catalog().load(&name).await.unwrap();
    assert!(!files_by_bucket(&table).await.contains_key(&target));
    for i in updated {
        want.remove(i);
    }
    assert_eq!(cold_state(&table).await, want);

    // Nothing changed: nothing is committed.
    let idle = tierer.cycle(&hot, T0, true).await.unwrap();
    assert_eq!(idle.snapshot_id, None);
}

/// `id -> balance` of the hot state of `hot`, by lookups of `ids`.
fn hot_state(hot: &HotTable, ids: &[i64]) -> BTreeMap<i64, i64> {
    let found = hot.lookup(&deletes(ids)).unwrap();
    let rows = &found.rows;
    let id = rows
        .column_by_name("id")
        .unwrap()
        .as_primitive::<Int64Type>();
    let balance = rows
        .column_by_name("balance")
        .unwrap()
        .as_primitive::<Int64Type>();
    (0..rows.num_rows())
        .map(|i| (id.value(i), balance.value(i)))
        .collect()
}

/// A primary-key table on a new hot store (a lost data directory) under a catalog that
/// holds its tiered buckets: opening it rebuilds the state of every tiered bucket from
/// the cold tier, changes go on from there with the right before images, and the
/// rebuilt state survives a restart without being rebuilt again.
#[tokio::test]
async fn a_new_hot_state_is_rebuilt_from_the_cold_rows() {
    let (dir, _store, hot, tierer) = setup().await;
    let name = hot.def().name().clone();
    let ids: Vec<i64> = (0..50).collect();
    hot.write_changes(&upserts(&ids, |i| i), ChangeOp::Upsert)
        .await
        .unwrap();
    // History the cold tier does not keep: an update and a delete.
    hot.write_changes(&upserts(&[3], |_| 300), ChangeOp::Upsert)
        .await
        .unwrap();
    hot.write_changes(&deletes(&[4]), ChangeOp::Delete)
        .await
        .unwrap();
    tierer.cycle(&hot, T0, true).await.unwrap();
    let tiered = hot.end_offsets();
    let mut want: BTreeMap<i64, i64> = ids.iter().map(|i| (*i, *i)).collect();
    want.insert(3, 300);
    want.remove(&4);

    // A write before the Iceberg table opens makes a log below the cold tier's: refused
    // with the reason, nothing rebuilt or tiered over the cold rows.
    let early = Store::open(dir.path().join("early-hot"), StoreOptions::default()).unwrap();
    let early_table = early.create_table(accounts_spec()).await.unwrap();
    early_table
        .write_changes(&upserts(&[1], |_| 99), ChangeOp::Upsert)
        .await
        .unwrap();
    let refused = Tierer::new(tierer.catalog().clone());
    let err = refused.ensure_table(&early_table).await.unwrap_err();
    assert!(
        err.to_string().contains("the hot tier is not the one"),
        "{err}"
    );
    assert!(!refused.is_ready(&name));

    let new_dir = dir.path().join("new-hot");
    let lost = Store::open(&new_dir, StoreOptions::default()).unwrap();
    let fresh = lost.create_table(accounts_spec()).await.unwrap();
    let restarted = Tierer::new(tierer.catalog().clone());
    restarted.ensure_table(&fresh).await.unwrap();
    assert!(restarted.is_ready(&name));
    assert_eq!(hot_state(&fresh, &ids), want);
    // Each bucket's log starts where the tiered one ended: offsets mean the same rows.
    assert_eq!(fresh.end_offsets(), tiered);
    // Nothing new: a cycle commits nothing, the cold rows stay.
    let idle = restarted.cycle(&fresh, T0, true).await.unwrap();
    assert_eq!(idle.snapshot_id, None);

    // A change reads its before image from the rebuilt state.
    let changed = fresh
        .write_changes(&upserts(&[3], |_| 301), ChangeOp::Upsert)
        .await
        .unwrap();
    assert_eq!(changed.changes, 2, "-U and +U: the key was found");
    let missing = fresh
        .write_changes(&deletes(&[4]), ChangeOp::Delete)
        .await
        .unwrap();
    assert_eq!(
        missing.missing, 1,
        "a key deleted before the loss stays deleted"
    );
    restarted.cycle(&fresh, T0, true).await.unwrap();
    want.insert(3, 301);
    let table = restarted.catalog().load(&name).await.unwrap();
    assert_eq!(cold_state(&table).await, want);

    // The rebuilt state is on disk: a restart finds it and rebuilds nothing.
    lost.close().await;
    drop(fresh);
    drop(lost);
    let reopened = Store::open(&new_dir, StoreOptions::default()).unwrap();
    let again = reopened.table(&name).unwrap();
    let third = Tierer::new(tierer.catalog().clone());
    third.ensure_table(&again).await.unwrap();
    assert_eq!(hot_state(&again, &ids), want);
}
