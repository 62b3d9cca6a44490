//! Hot retention: age and the tiered watermark both gate segment deletion.

use std::collections::HashMap;

use hotgate_store::{LogOptions, Store, StoreOptions};

use crate::common::*;

fn now() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

const HOUR: i64 = 3_600_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untiered_segments_stay_until_the_watermark_passes_them() {
    let dir = tempfile::tempdir().unwrap();
    // Tiny segments: every group commit rolls, so each append is its own segment.
    let options = StoreOptions {
        log: LogOptions {
            segment_bytes: 1,
            ..LogOptions::default()
        },
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    store.create_table(events_spec(1)).await.unwrap();
    for k in 0..5 {
        store
            .append(&events_name(), &events(k * 10..k * 10 + 10, |i| T0 + i))
            .await
            .unwrap();
    }
    let table = store.table(&events_name()).unwrap();
    let log = table.logs()[0].id();

    // Too young: nothing goes, whatever the watermark.
    let r = table
        .apply_retention(now(), &HashMap::from([(log, 50)]))
        .await
        .unwrap();
    assert_eq!(r.segments_deleted, 0);
    // Old enough, but nothing tiered: nothing goes.
    let r = table
        .apply_retention(now() + 2 * HOUR, &HashMap::new())
        .await
        .unwrap();
    assert_eq!(r.segments_deleted, 0);
    assert_eq!(all_ids(&store).len(), 50);
    // Tiered up to offset 30 (mid-way would not count for the segment holding 30..40).
    let r = table
        .apply_retention(now() + 2 * HOUR, &HashMap::from([(log, 35)]))
        .await
        .unwrap();
    assert_eq!(r.segments_deleted, 3);
    assert!(r.bytes_freed > 0);
    assert_eq!(all_ids(&store), (30..50).collect::<Vec<_>>());
    assert_eq!(table.logs()[0].start_offset(), 30);
    store.close().await;
    drop(store);

    // Everything tiered: every segment goes, and the log still remembers its next offset.
    let store = Store::open(dir.path(), options).unwrap();
    let table = store.table(&events_name()).unwrap();
    let r = table
        .apply_retention(now() + 2 * HOUR, &HashMap::from([(log, 50)]))
        .await
        .unwrap();
    assert_eq!(r.segments_deleted, 2);
    assert!(all_ids(&store).is_empty());
    let next = store
        .append(&events_name(), &events(50..51, |i| T0 + i))
        .await
        .unwrap();
    assert_eq!(next.parts[0].start_offset, 50);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_off_tables_expire_by_age_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let mut spec = events_spec(2);
    spec.tiering.enabled = false;
    store.create_table(spec).await.unwrap();
    store
        .append(&events_name(), &events(0..100, |i| T0 + i))
        .await
        .unwrap();
    // A clean close leaves each log a recovery point in its active segment.
    store.close().await;
    drop(store);
    let recovery_points = || {
        hotgate_testkit::files::all_files(dir.path())
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "recovery-point"))
            .count()
    };
    assert_eq!(recovery_points(), 2);
    let store = open(dir.path()).await;
    let table = store.table(&events_name()).unwrap();
    let ends = table.end_offsets();
    let r = table
        .apply_retention(now() + 2 * HOUR, &HashMap::new())
        .await
        .unwrap();
    assert_eq!(
        r.segments_deleted,
        ends.len(),
        "the active segments are rolled, then deleted"
    );
    assert!(all_ids(&store).is_empty());
    store.close().await;
    drop(store);
    assert_eq!(
        recovery_points(),
        0,
        "no file of a removed segment stays, its recovery point neither"
    );
    // After a restart, offsets continue where they were.
    let store = open(dir.path()).await;
    let r = store
        .append(&events_name(), &events(0..100, |i| T0 + i))
        .await
        .unwrap();
    for p in r.parts {
        assert_eq!(p.start_offset, ends[&p.log]);
    }
    store.close().await;
}
