//! Scans (projection, time pruning) and tails.

use std::time::Duration;

use arrow_array::{Array, Int64Array, StringArray, TimestampMicrosecondArray};
use hotgate_store::bucket::day_of_micros;
use hotgate_store::{ErrorKind, LogId, ScanRequest};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_returns_only_the_named_columns_in_order() {
    let (_dir, store, _) = store_with(events_spec(2)).await;
    store
        .append(&events_name(), &events(0..300, |i| T0 + i))
        .await
        .unwrap();
    let table = store.table(&events_name()).unwrap();
    let scan = table
        .scan(&ScanRequest {
            columns: Some(vec!["note".into(), "id".into()]),
            ..Default::default()
        })
        .unwrap();
    let names: Vec<_> = scan
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["note", "id"]);
    let mut n = 0;
    for b in scan {
        let b = b.unwrap().batch;
        assert_eq!(b.num_columns(), 2);
        let notes = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let ids = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            let id = ids.value(i);
            let expected = (id % 3 != 0).then(|| format!("note {id}"));
            assert_eq!(
                notes.is_valid(i).then(|| notes.value(i).to_owned()),
                expected
            );
            n += 1;
        }
    }
    assert_eq!(n, 300);
    let err = table
        .scan(&ScanRequest {
            columns: Some(vec!["nope".into()]),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("unknown column \"nope\""), "{err}");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_ranges_prune_frames_and_filter_rows() {
    let (_dir, store, _) = store_with(events_spec(1)).await;
    // Ten appends, each one hour of events: ten frames with disjoint time bounds.
    let hour = 3_600_000_000i64;
    for h in 0..10 {
        store
            .append(
                &events_name(),
                &events(h * 100..h * 100 + 100, |i| {
                    T0 + (i / 100) * hour + (i % 100) * 1_000_000
                }),
            )
            .await
            .unwrap();
    }
    let table = store.table(&events_name()).unwrap();
    assert_eq!(
        table
            .scan(&ScanRequest::default())
            .unwrap()
            .planned_frames(),
        10
    );
    // [03:00:30, 05:00:00) touches hours 3 and 4 only.
    let since = T0 + 3 * hour + 30_000_000;
    let until = T0 + 5 * hour;
    let scan = table
        .scan(&ScanRequest {
            columns: Some(vec!["id".into()]),
            since: Some(since),
            until: Some(until),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        scan.planned_frames(),
        2,
        "frames outside the range were not pruned"
    );
    let mut ids = Vec::new();
    for b in scan {
        let b = b.unwrap().batch;
        assert_eq!(
            b.num_columns(),
            1,
            "the time column used for filtering leaked"
        );
        ids.extend(int64_values(std::slice::from_ref(&b), "id"));
    }
    assert_eq!(ids, (330..500).collect::<Vec<_>>());
    // Exact boundaries: since is inclusive, until exclusive.
    let scan = table
        .scan(&ScanRequest {
            since: Some(T0 + hour),
            until: Some(T0 + hour + 1),
            ..Default::default()
        })
        .unwrap();
    let rows: Vec<_> = scan.map(|b| b.unwrap().batch).collect();
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let ts = rows[0]
        .column(3)
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(ts.value(0), T0 + hour);
    // A range on another day plans nothing.
    let scan = table
        .scan(&ScanRequest {
            since: Some(T0 - 2 * DAY_US),
            until: Some(T0 - DAY_US),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(scan.planned_frames(), 0);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_wakes_on_append() {
    let (_dir, store, table) = store_with(events_spec(1)).await;
    let log = LogId {
        day: Some(day_of_micros(T0)),
        bucket: 0,
    };
    // The tail starts before its log exists.
    let mut tail = table.tail(log, 0, Some(vec!["id".into()])).unwrap();
    let reader = tokio::spawn(async move {
        let mut ids = Vec::new();
        while ids.len() < 30 {
            let b = tail.next().await.unwrap();
            ids.extend(int64_values(std::slice::from_ref(&b.batch), "id"));
        }
        (ids, tail.position())
    });
    for k in 0..3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        store
            .append(&events_name(), &events(k * 10..k * 10 + 10, |i| T0 + i))
            .await
            .unwrap();
    }
    // Generous: this bounds a hang, it does not measure latency.
    let (ids, position) = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids, (0..30).collect::<Vec<_>>());
    assert_eq!(position, 30);
    // A tail from the middle starts there.
    let mut tail = table.tail(log, 25, None).unwrap();
    let b = tail.next().await.unwrap();
    assert_eq!(b.offsets, 25..30);
    assert_eq!(b.batch.num_rows(), 5);
    store.close().await;
}
