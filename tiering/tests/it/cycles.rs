//! The tiering cycle: offsets, cadence and exactly-once against the real catalog.

use hotgate_tiering::TieredOffsets;
use iceberg::spec::Transform;

use crate::common::{DAY_US, T0, cold_ids, events, fixture, live_files};

#[tokio::test]
async fn a_forced_cycle_tiers_every_row_once_and_records_offsets() {
    let f = fixture(4).await;
    // Two days of rows: 8 logs at most (2 days × 4 buckets).
    f.hot
        .append(&events(0..100, T0 - DAY_US / 2))
        .await
        .unwrap();
    let report = f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    assert!(report.snapshot_id.is_some());
    assert_eq!(report.records, 100);
    let table = f.table().await;
    assert_eq!(cold_ids(&table).await, (0..100).collect::<Vec<_>>());

    // The offsets in the snapshot equal every log's end offset.
    let offsets = TieredOffsets::current(table.metadata()).unwrap();
    assert_eq!(offsets.to_map(), f.hot.end_offsets());
    assert_eq!(f.tierer.watermarks(f.def().name()), f.hot.end_offsets());

    // Partition spec day(ts), bucket(4, customer); pii column keeps no stats.
    let spec = table.metadata().default_partition_spec();
    let transforms: Vec<_> = spec.fields().iter().map(|p| p.transform).collect();
    assert_eq!(transforms, vec![Transform::Day, Transform::Bucket(4)]);
    assert_eq!(
        table.metadata().properties()["write.metadata.metrics.column.email"],
        "none"
    );
    // One file per (day, bucket) log.
    assert_eq!(live_files(&table).await.len(), f.hot.logs().len());

    // Nothing new: a cycle commits nothing.
    let idle = f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(idle.snapshot_id, None);
    assert!(idle.files.is_empty());

    // More rows: only they are tiered.
    f.hot.append(&events(100..150, T0)).await.unwrap();
    let second = f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(second.records, 50);
    let table = f.table().await;
    assert_eq!(cold_ids(&table).await, (0..150).collect::<Vec<_>>());
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(
        snapshot.summary().additional_properties["total-records"],
        "150"
    );
}

#[tokio::test]
async fn cadence_waits_for_freshness_or_size() {
    let f = fixture(2).await;
    f.hot.append(&events(0..10, T0)).await.unwrap();
    // Each log's rows were committed by its own group commit, microseconds apart.
    let commit_times: Vec<i64> = f
        .hot
        .logs()
        .iter()
        .filter_map(|l| l.pending(0).oldest_commit_ts)
        .collect();
    let committed_at = *commit_times.iter().min().unwrap();
    let last_commit = *commit_times.iter().max().unwrap();
    // Fresh rows under the target size are not due.
    let early = f.tierer.cycle(&f.hot, committed_at, false).await.unwrap();
    assert_eq!(early.snapshot_id, None);
    let wait = f.tierer.next_due_in(&f.hot, committed_at).unwrap();
    assert_eq!(wait, f.def().tiering().max_freshness);
    // Past every log's freshness deadline they all are, however small.
    let late = last_commit + f.def().tiering().max_freshness.as_micros() as i64;
    let due = f.tierer.cycle(&f.hot, late, false).await.unwrap();
    assert_eq!(due.records, 10);
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..10).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_restarted_tierer_resumes_from_the_committed_offsets() {
    let f = fixture(3).await;
    f.hot.append(&events(0..40, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    f.hot.append(&events(40..70, T0)).await.unwrap();

    // A new tierer over the same catalog (a restart) knows nothing but the snapshot.
    let catalog = f.tierer.catalog().clone();
    let restarted = hotgate_tiering::Tierer::new(catalog);
    restarted.ensure_table(&f.hot).await.unwrap();
    let report = restarted.cycle(&f.hot, T0, true).await.unwrap();
    assert_eq!(report.records, 30);
    assert_eq!(
        cold_ids(&f.table().await).await,
        (0..70).collect::<Vec<_>>()
    );
    drop(f.dir);
}

#[tokio::test]
async fn cold_scans_push_comparisons_down_and_leave_out_what_does_not_bind() {
    use hotgate_tiering::{CmpOp, ColdFilter, ColdScanRequest, ColdValue};

    let f = fixture(4).await;
    f.hot.append(&events(0..100, T0)).await.unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    let cold = f.tierer.cold_snapshot(f.def().name()).unwrap().unwrap();
    let filter = |column: &str, op, value| ColdFilter {
        column: column.to_owned(),
        op,
        value,
    };
    let request = ColdScanRequest {
        schema: Some(std::sync::Arc::new(
            f.def().stored_schema().project(&[0]).unwrap(),
        )),
        filters: vec![
            // On a column that is not projected.
            filter(
                "customer",
                CmpOp::Eq,
                ColdValue::String("customer-3".into()),
            ),
            filter("id", CmpOp::GtEq, ColdValue::Long(50)),
            // A column the snapshot does not have: left out, not an error.
            filter("nope", CmpOp::Eq, ColdValue::Long(1)),
        ],
        ..ColdScanRequest::default()
    };
    let ids = crate::common::scanned_ids(&cold, request).await;
    // Only the matching rows come back: the comparisons reached iceberg's row filter.
    assert_eq!(ids, (50..100).filter(|i| i % 7 == 3).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_snapshot_scanned_in_parts_yields_each_row_once() {
    use hotgate_tiering::{ColdFiles, ColdPart, ColdScanRequest};

    let f = fixture(4).await;
    // Two days × 4 buckets: up to 8 files, more than the parts.
    f.hot
        .append(&events(0..200, T0 - DAY_US / 2))
        .await
        .unwrap();
    f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    let files = live_files(&f.table().await).await.len();
    assert!(files > 3, "{files} files");
    let cold = f.tierer.cold_snapshot(f.def().name()).unwrap().unwrap();
    let mut all = Vec::new();
    // The parts of one scan share its file list: planned once, by the first.
    let shared = ColdFiles::default();
    for index in 0..3 {
        let part = ColdScanRequest {
            part: Some(ColdPart {
                index,
                of: 3,
                files: shared.clone(),
            }),
            ..ColdScanRequest::default()
        };
        let ids = crate::common::scanned_ids(&cold, part).await;
        assert!(!ids.is_empty(), "part {index} of 3 read no file");
        all.extend(ids);
    }
    all.sort_unstable();
    assert_eq!(all, (0..200).collect::<Vec<_>>());
    // A part past the files reads nothing, and is not an error.
    let beyond = ColdScanRequest {
        part: Some(ColdPart {
            index: files,
            of: files + 1,
            files: ColdFiles::default(),
        }),
        ..ColdScanRequest::default()
    };
    assert!(crate::common::scanned_ids(&cold, beyond).await.is_empty());
}

#[tokio::test]
async fn files_roll_near_the_target_size_in_compressed_bytes() {
    const TARGET: u64 = 128 << 10;
    let mut spec = crate::common::events_spec(1);
    spec.tiering.target_file_size = TARGET;
    let f = crate::common::fixture_with(spec).await;
    // 200,000 rows of one day (events() puts one row a minute from its start).
    for _ in 0..200 {
        f.hot.append(&events(0..1_000, T0)).await.unwrap();
    }
    let report = f.tierer.cycle(&f.hot, T0, true).await.unwrap();
    let mut sizes: Vec<u64> = report.files.iter().map(|f| f.bytes).collect();
    assert!(sizes.len() >= 2, "{sizes:?}");
    // Every file but the last of the partition is between half and 1.5x the target.
    sizes.sort_unstable();
    for size in &sizes[1..] {
        assert!(
            *size * 2 >= TARGET && *size * 2 <= TARGET * 3,
            "a rolled file of {size} bytes against a target of {TARGET}: {sizes:?}"
        );
    }
}
