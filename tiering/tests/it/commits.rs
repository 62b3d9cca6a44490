//! hotgate-built commits: overwrite (the basis of compaction) and the compare-and-swap
//! that refuses a stale base.

use std::collections::HashSet;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use hotgate_store::LogId;
use hotgate_tiering::ErrorKind;
use hotgate_tiering::commit::{CommitRequest, commit};
use hotgate_tiering::convert::Converter;

use crate::common::{T0, cold_ids, cold_rows, events, fixture, live_files};

#[tokio::test]
async fn an_overwrite_replaces_files_and_keeps_rows() {
    let f = fixture(1).await;
    f.cycles(3).await;
    let table = f.table().await;
    let before = live_files(&table).await;
    assert_eq!(before.len(), 3);

    // Rewrite the three small files of the one partition as one.
    let rows = cold_rows(&table, &["id", "customer", "email", "ts"]).await;
    let converter = Converter::new(&table, 1 << 30, "compact-test".into()).unwrap();
    let log = LogId {
        day: Some((T0 / 86_400_000_000) as i32),
        bucket: 0,
    };
    let added = converter
        .write_batches(converter.partition_key(log).unwrap(), rows)
        .await
        .unwrap();
    assert_eq!(added.len(), 1);
    let remove: HashSet<String> = before.iter().cloned().collect();
    let offsets_before = table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties["hotgate.offsets"]
        .clone();
    let request =
        CommitRequest::overwrite(remove, added).with_property("hotgate.offsets", offsets_before);
    let after = commit(f.tierer.catalog(), f.def().name(), &table, request)
        .await
        .unwrap();

    let reloaded = f.table().await;
    assert_eq!(
        reloaded.metadata().current_snapshot_id(),
        after.metadata().current_snapshot_id()
    );
    assert_eq!(live_files(&reloaded).await.len(), 1);
    assert_eq!(cold_ids(&reloaded).await, (0..30).collect::<Vec<_>>());
    let summary = &reloaded
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(summary["total-data-files"], "1");
    assert_eq!(summary["total-records"], "30");
    assert_eq!(summary["deleted-data-files"], "3");

    // Time travel to the snapshot before still reads the old files.
    let old = table.metadata().current_snapshot_id().unwrap();
    let stream = reloaded
        .scan()
        .snapshot_id(old)
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap();
    let old_rows: usize = stream
        .try_collect::<Vec<RecordBatch>>()
        .await
        .unwrap()
        .iter()
        .map(|b| b.num_rows())
        .sum();
    assert_eq!(old_rows, 30);
}

#[tokio::test]
async fn a_commit_on_a_stale_base_is_a_conflict_and_changes_nothing() {
    let f = fixture(1).await;
    f.hot.append(&events(0..10, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    let stale = f.table().await;
    f.hot.append(&events(10..20, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    let current = f.table().await;

    let files = live_files(&stale).await;
    let err = commit(
        f.tierer.catalog(),
        f.def().name(),
        &stale,
        CommitRequest::overwrite(files.into_iter().collect(), Vec::new()),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let after = f.table().await;
    assert_eq!(after.metadata_location(), current.metadata_location());
    assert_eq!(cold_ids(&after).await, (0..20).collect::<Vec<_>>());

    // Removing a file that is not live is refused before anything is written.
    let err = commit(
        f.tierer.catalog(),
        f.def().name(),
        &after,
        CommitRequest::overwrite(["file:///nowhere.parquet".to_owned()].into(), Vec::new()),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not live"), "{err}");
}
