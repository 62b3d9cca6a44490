//! Maintenance: compaction reduces the file count with the rows unchanged, expiry drops
//! old snapshots, and the purge deletes every file nothing live references.

use std::time::Duration;

use hotgate_tiering::MaintenanceOptions;

use crate::common::{T0, cold_ids, events, fixture, live_files};

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[tokio::test]
async fn compaction_expiry_and_purge_leave_one_readable_snapshot() {
    let f = fixture(1).await;
    f.cycles(4).await;
    let before = f.table().await;
    let old_files = live_files(&before).await;
    assert_eq!(old_files.len(), 4);
    let offsets_before = hotgate_tiering::TieredOffsets::current(before.metadata()).unwrap();

    // A clock a minute ahead: every file this test wrote, including those maintenance
    // itself writes before the purge, is past the (zero) safety age.
    let now_ms = chrono::Utc::now().timestamp_millis() + 60_000;
    let options = MaintenanceOptions {
        compact: true,
        snapshot_retention: Duration::ZERO,
        retain_last: 1,
        purge_min_age: Duration::ZERO,
        ..MaintenanceOptions::default()
    };
    let report = f.tierer.maintain(&f.def(), now_ms, &options).await.unwrap();
    assert_eq!(report.compaction.files_removed, 4);
    assert_eq!(report.compaction.files_added, 1);
    assert_eq!(report.snapshots_expired, 4, "{report:?}");
    assert!(report.files_purged >= 4, "{report:?}");

    let after = f.table().await;
    assert_eq!(after.metadata().snapshots().count(), 1);
    assert_eq!(live_files(&after).await.len(), 1);
    assert_eq!(cold_ids(&after).await, (0..40).collect::<Vec<_>>());
    // The compaction snapshot keeps the tiered offsets: tiering resumes where it was.
    let offsets_after = hotgate_tiering::TieredOffsets::current(after.metadata()).unwrap();
    assert_eq!(offsets_after, offsets_before);
    f.hot.append(&events(40..45, T0)).await.unwrap();
    assert_eq!(f.tierer.cycle(&f.hot, T0, true).await.unwrap().records, 5);

    // The old data files are gone from disk; every file left is referenced.
    for path in &old_files {
        let local = path.strip_prefix("file://").unwrap();
        assert!(
            !std::path::Path::new(local).exists(),
            "{local} survived the purge"
        );
    }
    let location = after
        .metadata()
        .location()
        .strip_prefix("file://")
        .unwrap()
        .to_owned();
    let metadata_files = files_under(std::path::Path::new(&location))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .count();
    // The current metadata, plus the one the last cycle wrote after the purge.
    assert!(metadata_files <= 2, "{metadata_files} metadata files left");
}

#[tokio::test]
async fn cold_retention_drops_whole_old_days_with_their_files() {
    const DAY_US: i64 = crate::common::DAY_US;
    let mut spec = crate::common::events_spec(2);
    spec.cold_retention = Some(Duration::from_secs(30 * 86_400));
    let f = crate::common::fixture_with(spec).await;
    // Days relative to the real clock: maintenance compares with it.
    let now_us = chrono::Utc::now().timestamp_micros();
    let today = now_us - now_us.rem_euclid(DAY_US);
    for (ids, day) in [(0..50, today - 40 * DAY_US), (50..100, today - 35 * DAY_US)] {
        f.hot.append(&events(ids, day)).await.unwrap();
    }
    f.tierer.cycle(&f.hot, now_us, true).await.unwrap();
    f.hot
        .append(&events(100..150, today - DAY_US))
        .await
        .unwrap();
    f.tierer.cycle(&f.hot, now_us, true).await.unwrap();
    let before = f.table().await;
    let offsets_before = hotgate_tiering::TieredOffsets::current(before.metadata()).unwrap();
    let old_files: Vec<String> = live_files(&before)
        .await
        .into_iter()
        .filter(|p| !p.contains(&day_of(today - DAY_US)))
        .collect();
    assert!(!old_files.is_empty());

    // No compaction and the default (long) snapshot retention and purge age: retention
    // expires and deletes what it dropped regardless.
    let options = MaintenanceOptions {
        compact: false,
        ..MaintenanceOptions::default()
    };
    let now_ms = now_us / 1000;
    let report = f.tierer.maintain(&f.def(), now_ms, &options).await.unwrap();
    let retention = report
        .cold_retention
        .expect("the table has a cold retention");
    assert_eq!(
        retention.days_removed,
        [day_of(today - 40 * DAY_US), day_of(today - 35 * DAY_US)]
    );
    assert_eq!(retention.files_removed, old_files.len());
    assert_eq!(retention.records_removed, 100);
    assert!(retention.snapshots_expired >= 2, "{retention:?}");

    // The rows of recent days are intact, the old ones gone from every snapshot left,
    // and their files gone from disk.
    let after = f.table().await;
    assert_eq!(cold_ids(&after).await, (100..150).collect::<Vec<_>>());
    assert_eq!(after.metadata().snapshots().count(), 1);
    for path in &old_files {
        let local = path.strip_prefix("file://").unwrap();
        assert!(
            !std::path::Path::new(local).exists(),
            "{path} is still on disk"
        );
    }
    assert_eq!(
        hotgate_tiering::TieredOffsets::current(after.metadata()).unwrap(),
        offsets_before
    );
    let status = f.tierer.status(&f.def()).await;
    assert_eq!(status.last_error, None);
    assert_eq!(status.oldest_day, Some(day_of(today - DAY_US)));
    assert_eq!(status.cold_retention.as_deref(), Some("30days"));
    assert_eq!(status.last_cold_retention, Some(retention));

    // Nothing more is old enough: a second run drops nothing.
    let again = f.tierer.maintain(&f.def(), now_ms, &options).await.unwrap();
    assert_eq!(again.cold_retention.unwrap().files_removed, 0);
}

fn day_of(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string()
}

/// The compliance purge and a read of an older snapshot: the read holds a lease, so the
/// purge expires the snapshot but leaves its files until the read ends; the read sees
/// every row it planned on. Then the purge deletes them.
#[tokio::test]
async fn erasing_history_waits_for_reads_of_expired_snapshots() {
    use arrow_array::cast::AsArray;

    let f = fixture(1).await;
    f.cycles(2).await;
    let reading = f.tierer.cold_snapshot(f.def().name()).unwrap().unwrap();
    let planned_on = live_files(&f.table().await).await;

    // A copy-on-write deletion of ids below 5, then the history erased with a read of
    // the old snapshot still open.
    let cow = f
        .tierer
        .delete_matching(
            &f.def(),
            &|batch: &arrow_array::RecordBatch| {
                let ids = batch
                    .column_by_name("id")
                    .unwrap()
                    .as_primitive::<arrow_array::types::Int64Type>();
                Ok(ids.iter().map(|i| i.map(|i| i < 5)).collect())
            },
            &[],
        )
        .await
        .unwrap();
    assert_eq!(cow.rows_deleted, 5);
    let report = f
        .tierer
        .erase_history(&f.def(), Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(report.reads_waited_out, 1, "{report:?}");
    assert_eq!(report.snapshots_expired, 3, "{report:?}");
    assert_eq!(report.files_deleted, 0, "{report:?}");
    assert_eq!(f.table().await.metadata().snapshots().count(), 1);

    // The read completes on the snapshot it planned on.
    let ids = crate::common::scanned_ids(&reading, Default::default()).await;
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
    drop(reading);

    // Read done: the files only the expired snapshots referenced go.
    let report = f
        .tierer
        .erase_history(&f.def(), Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(report.reads_waited_out, 0, "{report:?}");
    assert!(report.files_deleted > 0, "{report:?}");
    let removed: Vec<_> = planned_on
        .difference(&live_files(&f.table().await).await)
        .cloned()
        .collect();
    assert!(!removed.is_empty());
    for path in removed {
        assert!(
            !std::path::Path::new(path.trim_start_matches("file://")).exists(),
            "{path} is still there"
        );
    }
    assert_eq!(
        cold_ids(&f.table().await).await,
        (5..20).collect::<Vec<_>>()
    );
    // Nothing under the location is unreferenced any more.
    let referenced = files_under(&f.dir.path().join("warehouse")).len();
    let again = f
        .tierer
        .erase_history(&f.def(), Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(again.files_deleted, 0, "{again:?}");
    assert_eq!(
        files_under(&f.dir.path().join("warehouse")).len(),
        referenced
    );
}
