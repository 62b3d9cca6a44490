//! Appends from a source (a Kafka topic): the source position of every row is durable
//! with the row, so a replay from any earlier position writes each row once, across a
//! restart, a torn tail and a row-deleting rewrite.

use arrow_array::RecordBatch;
use hotgate_store::{ChangeOp, SourceRows, TableSpec};

use crate::common::*;

/// Ids `ids` as records of a two-partition topic: even ids on partition 0, odd on 1,
/// each at offset `id / 2` of its partition.
fn positions(ids: std::ops::Range<i64>) -> Vec<(i32, i64)> {
    ids.map(|id| ((id % 2) as i32, id / 2)).collect()
}

fn from_topic(positions: &[(i32, i64)]) -> SourceRows<'_> {
    SourceRows {
        source: "orders",
        positions,
    }
}

fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
    events(ids, |i| T0 + i * 1_000)
}

fn sorted(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_after_a_restart_writes_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).await;
        let table = store.create_table(events_spec(4)).await.unwrap();
        let p = positions(0..60);
        let written = table
            .append_from_source(&rows(0..60), from_topic(&p))
            .await
            .unwrap();
        assert_eq!(written.rows, 60);
        // The same records again, in the same run: nothing is written.
        let again = table
            .append_from_source(&rows(0..60), from_topic(&p))
            .await
            .unwrap();
        assert_eq!(again.rows, 0);
        assert!(again.parts.is_empty());
        store.close().await;
    }
    let store = open(dir.path()).await;
    let table = store.table(&events_name()).unwrap();
    assert_eq!(
        table.source_positions("orders"),
        [(0, 29), (1, 29)].into(),
        "the marks survive the restart"
    );
    assert!(table.source_positions("other").is_empty());
    // A replay from the start of both partitions writes the 40 new records once.
    let p = positions(0..100);
    let written = table
        .append_from_source(&rows(0..100), from_topic(&p))
        .await
        .unwrap();
    assert_eq!(written.rows, 40);
    assert_eq!(sorted(all_ids(&store)), (0..100).collect::<Vec<_>>());
    // Another source's records are its own: the same positions are new for it.
    let other = SourceRows {
        source: "returns",
        positions: &p[..5],
    };
    let written = table.append_from_source(&rows(0..5), other).await.unwrap();
    assert_eq!(written.rows, 5);
    // A batch whose positions do not match its rows is refused and writes nothing.
    let err = table
        .append_from_source(&rows(100..110), from_topic(&p[..3]))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("3 source positions for 10 rows"),
        "{err}"
    );
    assert_eq!(all_ids(&store).len(), 105);
}

/// A torn last frame takes its marks with it: the replay writes its rows again, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_loses_the_rows_and_their_marks_together() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).await;
        let table = store.create_table(events_spec(1)).await.unwrap();
        for range in [0..10, 10..20] {
            let p = positions(range.clone());
            table
                .append_from_source(&rows(range), from_topic(&p))
                .await
                .unwrap();
        }
        store.close().await;
    }
    let segments = segment_files(dir.path());
    assert_eq!(segments.len(), 1, "{segments:?}");
    let len = std::fs::metadata(&segments[0]).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segments[0])
        .unwrap();
    file.set_len(len - 3).unwrap();
    drop(file);

    let store = open(dir.path()).await;
    assert_eq!(sorted(all_ids(&store)), (0..10).collect::<Vec<_>>());
    let table = store.table(&events_name()).unwrap();
    assert_eq!(table.source_positions("orders"), [(0, 4), (1, 4)].into());
    let p = positions(0..20);
    let written = table
        .append_from_source(&rows(0..20), from_topic(&p))
        .await
        .unwrap();
    assert_eq!(written.rows, 10);
    assert_eq!(sorted(all_ids(&store)), (0..20).collect::<Vec<_>>());
}

/// Deleting rows rewrites their segments; the rewritten frames keep their marks, so a
/// replay does not bring the deleted rows back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_does_not_bring_deleted_rows_back() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).await;
        let table = store.create_table(events_spec(1)).await.unwrap();
        let p = positions(0..30);
        table
            .append_from_source(&rows(0..30), from_topic(&p))
            .await
            .unwrap();
        let report = table
            .delete_rows(None, &|batch| {
                let ids = batch
                    .column_by_name("id")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .unwrap();
                Ok(ids.iter().map(|id| id.map(|id| id % 3 == 0)).collect())
            })
            .await
            .unwrap();
        assert_eq!(report.rows_deleted, 10);
        store.close().await;
    }
    let store = open(dir.path()).await;
    let table = store.table(&events_name()).unwrap();
    let p = positions(0..30);
    let written = table
        .append_from_source(&rows(0..30), from_topic(&p))
        .await
        .unwrap();
    assert_eq!(written.rows, 0);
    let expected: Vec<i64> = (0..30).filter(|id| id % 3 != 0).collect();
    assert_eq!(sorted(all_ids(&store)), expected);
}

fn users_spec() -> TableSpec {
    serde_json::from_value(serde_json::json!({
        "namespace": "app", "name": "users",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "name", "type": "string", "nullable": false},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "id", "buckets": 2, "primary_key": ["id"]
    }))
    .unwrap()
}

fn users(ids: &[i64], name: &str) -> RecordBatch {
    let names: Vec<String> = ids.iter().map(|id| format!("{name}{id}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    hotgate_testkit::batch([
        ("id", hotgate_testkit::int64s(ids.iter().copied())),
        ("name", hotgate_testkit::strings(&names)),
        ("ts", hotgate_testkit::timestamps(ids.iter().map(|_| T0))),
    ])
}

/// Upserts and deletes from a source are skipped on replay too: the changelog gets no
/// second record for a change it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_key_changes_from_a_source_are_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let upserts: Vec<(i32, i64)> = (0..10).map(|o| (0, o)).collect();
    let deletes: Vec<(i32, i64)> = (10..13).map(|o| (0, o)).collect();
    let ids: Vec<i64> = (0..10).collect();
    let gone = [1i64, 4, 7];
    let keys = hotgate_testkit::batch([("id", hotgate_testkit::int64s(gone))]);
    {
        let store = open(dir.path()).await;
        let table = store.create_table(users_spec()).await.unwrap();
        let up = table
            .write_changes_from_source(&users(&ids, "a"), ChangeOp::Upsert, from_topic(&upserts))
            .await
            .unwrap();
        assert_eq!(up.rows, 10);
        let del = table
            .write_changes_from_source(&keys, ChangeOp::Delete, from_topic(&deletes))
            .await
            .unwrap();
        assert_eq!(del.changes, 3);
        store.close().await;
    }
    let store = open(dir.path()).await;
    let table = store.table(&users_name()).unwrap();
    let ends_before = table.end_offsets();
    let up = table
        .write_changes_from_source(&users(&ids, "a"), ChangeOp::Upsert, from_topic(&upserts))
        .await
        .unwrap();
    assert_eq!((up.rows, up.changes), (0, 0));
    let del = table
        .write_changes_from_source(&keys, ChangeOp::Delete, from_topic(&deletes))
        .await
        .unwrap();
    assert_eq!((del.rows, del.changes), (0, 0));
    assert_eq!(
        table.end_offsets(),
        ends_before,
        "the changelog got nothing"
    );
    let mut current = int64_values(&table.current_rows(100).unwrap(), "id");
    current.sort_unstable();
    assert_eq!(current, vec![0, 2, 3, 5, 6, 8, 9]);
}

fn users_name() -> hotgate_store::TableName {
    hotgate_store::TableName::new("app", "users").unwrap()
}

/// A new data directory under a table whose cold tier holds rows (what tiering installs
/// as [`hotgate_store::LogFloor`]s after a lost disk): each log goes on at its tiered
/// offset, a replay from the start writes only the records the cold tier lacks, and a
/// log that ends below its floor is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_data_directory_goes_on_above_what_the_cold_tier_holds() {
    let lost = tempfile::tempdir().unwrap();
    let store = open(lost.path()).await;
    let table = store.create_table(events_spec(4)).await.unwrap();
    let p = positions(0..60);
    table
        .append_from_source(&rows(0..60), from_topic(&p))
        .await
        .unwrap();
    let mut floors = std::collections::HashMap::new();
    for log in table.logs() {
        let end = log.end_offset();
        let marks = log.source_marks_below(end).unwrap().unwrap();
        assert_eq!(marks, log.source_marks(), "the last frame holds every mark");
        assert_eq!(log.source_marks_below(0).unwrap(), None);
        floors.insert(
            log.id(),
            hotgate_store::LogFloor {
                first_offset: end,
                marks,
            },
        );
    }
    store.close().await;
    drop(lost);

    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let table = store.create_table(events_spec(4)).await.unwrap();
    table.set_floors(floors.clone()).unwrap();
    let p = positions(0..100);
    let written = table
        .append_from_source(&rows(0..100), from_topic(&p))
        .await
        .unwrap();
    assert_eq!(
        written.rows, 40,
        "the 60 records the cold tier holds are skipped"
    );
    assert_eq!(sorted(all_ids(&store)), (60..100).collect::<Vec<_>>());
    for log in table.logs() {
        if let Some(floor) = floors.get(&log.id()) {
            assert_eq!(log.start_offset(), floor.first_offset, "{}", log.id());
        }
    }
    assert_eq!(table.source_positions("orders"), [(0, 49), (1, 49)].into());
    // A floor above a log's end: the log is not the one that was tiered.
    let (id, mut floor) = floors.into_iter().next().unwrap();
    floor.first_offset = table.log(id).unwrap().end_offset() + 1_000;
    let err = table
        .set_floors([(id, floor)].into_iter().collect())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the hot tier is not the one that tiered them"),
        "{err}"
    );
}
