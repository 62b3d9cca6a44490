//! Primary-key tables: the changelog records of inserts, updates and deletes, lookups,
//! current state, replay of the state from the log, and refused input.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use hotgate_store::{ChangeOp, ScanRequest, Store, TableName, TableSpec};

use hotgate_testkit::{
    batch, int64_values, int64s, opt_float64_values, opt_float64s, string_values, strings,
    timestamps,
};

use crate::common::*;

fn users_spec() -> TableSpec {
    serde_json::from_value(serde_json::json!({
        "namespace": "app", "name": "users",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "name", "type": "string", "nullable": false},
            {"name": "score", "type": "float64"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "id", "buckets": 2, "primary_key": ["id"]
    }))
    .unwrap()
}

fn users() -> TableName {
    TableName::new("app", "users").unwrap()
}

fn rows(ids: &[i64], names: &[&str], scores: &[Option<f64>], ts: &[i64]) -> RecordBatch {
    batch([
        ("id", int64s(ids.iter().copied())),
        ("name", strings(names)),
        ("score", opt_float64s(scores.iter().copied())),
        ("ts", timestamps(ts.iter().copied())),
    ])
}

fn keys(ids: &[i64]) -> RecordBatch {
    batch([("id", int64s(ids.iter().copied()))])
}

/// One changelog record as read back from the log.
#[derive(Debug, PartialEq)]
struct Change {
    offset: u64,
    kind: String,
    id: i64,
    name: String,
    score: Option<f64>,
    ts: i64,
}

fn changelog(store: &Store) -> Vec<Change> {
    let table = store.table(&users()).unwrap();
    let mut out = Vec::new();
    for item in table.scan(&ScanRequest::default()).unwrap() {
        let item = item.unwrap();
        let b = &item.batch;
        assert_eq!(b.num_rows() as u64, item.offsets.end - item.offsets.start);
        for r in 0..b.num_rows() {
            let score = b
                .column_by_name("score")
                .unwrap()
                .as_primitive::<Float64Type>();
            out.push(Change {
                offset: item.offsets.start + r as u64,
                kind: b
                    .column_by_name("_change")
                    .unwrap()
                    .as_string::<i32>()
                    .value(r)
                    .into(),
                id: b
                    .column_by_name("id")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .value(r),
                name: b
                    .column_by_name("name")
                    .unwrap()
                    .as_string::<i32>()
                    .value(r)
                    .into(),
                score: score.is_valid(r).then(|| score.value(r)),
                ts: b
                    .column_by_name("ts")
                    .unwrap()
                    .as_primitive::<TimestampMicrosecondType>()
                    .value(r),
            });
        }
    }
    out
}

fn change(offset: u64, kind: &str, id: i64, name: &str, score: Option<f64>, ts: i64) -> Change {
    Change {
        offset,
        kind: kind.into(),
        id,
        name: name.into(),
        score,
        ts,
    }
}

fn state(store: &Store) -> Vec<(i64, String, Option<f64>)> {
    let batches = store.table(&users()).unwrap().current_rows(2).unwrap();
    let names = string_values(&batches, "name").into_iter().flatten();
    let scores = opt_float64_values(&batches, "score");
    let mut out: Vec<_> = int64_values(&batches, "id")
        .into_iter()
        .zip(names)
        .zip(scores)
        .map(|((id, name), score)| (id, name, score))
        .collect();
    out.sort_by_key(|r| r.0);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_update_delete_write_exact_changelog_records() {
    let (_dir, store, table) = store_with(users_spec()).await;

    let r = table
        .write_changes(&rows(&[7], &["ann"], &[Some(1.5)], &[T0]), ChangeOp::Upsert)
        .await
        .unwrap();
    assert_eq!((r.rows, r.changes, r.missing), (1, 1, 0));
    let r = table
        .write_changes(
            &rows(&[7], &["ann b"], &[None], &[T0 + 1]),
            ChangeOp::Upsert,
        )
        .await
        .unwrap();
    assert_eq!(
        (r.changes, r.parts[0].start_offset, r.parts[0].end_offset),
        (2, 1, 3)
    );
    // A delete reads only the key columns; a delete of a missing key writes nothing.
    let r = table
        .write_changes(&keys(&[7, 8]), ChangeOp::Delete)
        .await
        .unwrap();
    assert_eq!(
        (r.rows, r.changes, r.missing, r.missing_rows.clone()),
        (2, 1, 1, vec![1])
    );
    let r = table
        .write_changes(&keys(&[8]), ChangeOp::Delete)
        .await
        .unwrap();
    assert_eq!((r.changes, r.missing, r.parts.len()), (0, 1, 0));

    assert_eq!(
        changelog(&store),
        [
            change(0, "+I", 7, "ann", Some(1.5), T0),
            change(1, "-U", 7, "ann", Some(1.5), T0),
            change(2, "+U", 7, "ann b", None, T0 + 1),
            change(3, "-D", 7, "ann b", None, T0 + 1),
        ]
    );
    assert!(state(&store).is_empty());

    // Several changes of one key in one batch apply in order.
    table
        .write_changes(
            &rows(
                &[1, 2, 1],
                &["a", "b", "a2"],
                &[Some(1.0), Some(2.0), Some(3.0)],
                &[T0; 3],
            ),
            ChangeOp::Upsert,
        )
        .await
        .unwrap();
    // Logs are read bucket by bucket; within a key the order is the write order.
    let kinds: Vec<(String, i64, String)> = changelog(&store)
        .into_iter()
        .filter(|c| c.id != 7)
        .map(|c| (c.kind, c.id, c.name))
        .collect();
    let mut kinds_sorted = kinds.clone();
    kinds_sorted.sort_by_key(|k| k.1);
    assert_eq!(
        kinds_sorted,
        [
            ("+I".into(), 1, "a".into()),
            ("-U".into(), 1, "a".into()),
            ("+U".into(), 1, "a2".into()),
            ("+I".into(), 2, "b".into()),
        ]
    );
    assert_eq!(
        state(&store),
        [(1, "a2".into(), Some(3.0)), (2, "b".into(), Some(2.0))]
    );

    // Lookups: request order, missing keys named by their index.
    let found = table.lookup(&keys(&[2, 99, 1])).unwrap();
    let ids = found
        .rows
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec();
    assert_eq!(ids, [2, 1]);
    assert_eq!(found.missing, [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_meta_and_snapshots_name_exact_offsets() {
    let (_dir, _store, table) = store_with(users_spec()).await;
    let ids: Vec<i64> = (0..40).collect();
    let names: Vec<&str> = vec!["n"; 40];
    let ts: Vec<i64> = ids.iter().map(|i| T0 + i).collect();
    table
        .write_changes(&rows(&ids, &names, &vec![None; 40], &ts), ChangeOp::Upsert)
        .await
        .unwrap();
    table
        .write_changes(&keys(&[3, 4, 5]), ChangeOp::Delete)
        .await
        .unwrap();

    // With a time bound, the rows left keep their own offsets and their frame's commit.
    let request = ScanRequest {
        since: Some(T0 + 20),
        change_meta: true,
        ..Default::default()
    };
    let mut seen = 0;
    for item in table.scan(&request).unwrap() {
        let item = item.unwrap();
        let b = &item.batch;
        let schema = b.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "name",
                "score",
                "ts",
                "_change",
                "_bucket",
                "_offset",
                "_commit_ts"
            ]
        );
        let bucket = b.column(5).as_primitive::<arrow_array::types::UInt32Type>();
        let offsets = b.column(6).as_primitive::<Int64Type>();
        let times = b.column(3).as_primitive::<TimestampMicrosecondType>();
        let commits = b.column(7).as_primitive::<TimestampMicrosecondType>();
        // Read the same frame in full to find where each row really sits.
        let full = table
            .scan(&ScanRequest {
                logs: Some(vec![item.log]),
                start_offsets: [(item.log, item.offsets.start)].into(),
                end_offsets: [(item.log, item.offsets.end)].into(),
                ..Default::default()
            })
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .batch;
        let full_times = full.column(3).as_primitive::<TimestampMicrosecondType>();
        for r in 0..b.num_rows() {
            assert!(times.value(r) >= T0 + 20);
            assert_eq!(bucket.value(r), item.log.bucket);
            let offset = offsets.value(r) as u64;
            assert!(item.offsets.contains(&offset));
            let at = (offset - item.offsets.start) as usize;
            assert_eq!(full_times.value(at), times.value(r));
            assert!(commits.is_valid(r) && commits.value(r) > T0);
            seen += 1;
        }
    }
    assert_eq!(seen, 20);

    // A snapshot reflects exactly the log's ends, and holds the current rows.
    let mut snapshot = table.snapshot_state(7).await.unwrap();
    assert_eq!(snapshot.offsets, table.end_offsets());
    let mut rows = 0;
    while let Some(item) = snapshot.batches.recv().await {
        let (bucket, batch) = item.unwrap();
        assert!(bucket < 2 && batch.num_rows() <= 7);
        rows += batch.num_rows();
    }
    assert_eq!(rows, 37);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).await;
        let table = store.create_table(users_spec()).await.unwrap();
        for i in 0..50i64 {
            let ids: Vec<i64> = (0..20).map(|k| (i * 7 + k) % 30).collect();
            let names: Vec<String> = ids.iter().map(|id| format!("n{id}-{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            table
                .write_changes(
                    &rows(&ids, &names, &[Some(i as f64); 20], &[T0 + i; 20]),
                    ChangeOp::Upsert,
                )
                .await
                .unwrap();
            if i % 5 == 0 {
                table
                    .write_changes(&keys(&[i % 30, (i + 11) % 30]), ChangeOp::Delete)
                    .await
                    .unwrap();
            }
        }
        store.close().await;
    }
    let before = {
        let store = open(dir.path()).await;
        let s = state(&store);
        store.close().await;
        s
    };
    assert!(!before.is_empty());
    // Lose the whole RocksDB state: the log alone rebuilds it.
    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    let store = open(dir.path()).await;
    assert_eq!(state(&store), before);
    // And the changelog folds to the same state.
    let mut folded = std::collections::BTreeMap::new();
    for c in changelog(&store) {
        match c.kind.as_str() {
            "+I" | "+U" => {
                folded.insert(c.id, (c.name, c.score));
            }
            "-D" => {
                folded.remove(&c.id);
            }
            _ => {}
        }
    }
    let folded: Vec<_> = folded.into_iter().map(|(id, (n, s))| (id, n, s)).collect();
    assert_eq!(folded, before);
}

/// Rebuilding lost buckets from rows the cold tier holds: the state is refused to
/// reads and writes until every bucket is whole, rows are checked against their
/// bucket, a bucket the hot tier has is not rebuilt, and a rebuilt bucket's log starts
/// at its floor, with the state on disk across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_buckets_are_rebuilt_and_refused_until_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let table = store.create_table(users_spec()).await.unwrap();
    let ids: Vec<i64> = (0..40).collect();
    let bucket_of = |id: i64| hotgate_store::bucket::bucket_of_long(id, 2);
    let of = |bucket: u32| -> Vec<i64> {
        ids.iter()
            .copied()
            .filter(|i| bucket_of(*i) == bucket)
            .collect()
    };
    let cold_rows = |ids: &[i64]| {
        let names: Vec<String> = ids.iter().map(|id| format!("cold-{id}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        rows(
            ids,
            &names,
            &vec![Some(1.0); ids.len()],
            &vec![T0; ids.len()],
        )
    };
    let floors = (0..2u32)
        .map(|bucket| {
            (
                hotgate_store::LogId { day: None, bucket },
                hotgate_store::LogFloor {
                    first_offset: 100 + u64::from(bucket),
                    marks: Default::default(),
                },
            )
        })
        .collect();
    table.set_floors(floors).unwrap();

    table.begin_restore(&[0, 1]).unwrap();
    let refused = table.lookup(&keys(&[1])).unwrap_err();
    assert_eq!(refused.kind(), hotgate_store::ErrorKind::Unavailable);
    assert!(refused.to_string().contains("being rebuilt"), "{refused}");
    let write = table
        .write_changes(&cold_rows(&[1]), ChangeOp::Upsert)
        .await
        .unwrap_err();
    assert_eq!(write.kind(), hotgate_store::ErrorKind::Unavailable);
    // A row of the other bucket among a bucket's cold rows is refused, and puts nothing.
    let mixed = table.restore_rows(0, &cold_rows(&ids)).await.unwrap_err();
    assert!(
        mixed.to_string().contains("came with the cold rows"),
        "{mixed}"
    );
    for bucket in 0..2 {
        let put = table
            .restore_rows(bucket, &cold_rows(&of(bucket)))
            .await
            .unwrap();
        assert_eq!(put, of(bucket).len() as u64);
    }
    table.finish_restore(0).await.unwrap();
    // Still one bucket to go: still refused.
    assert!(table.lookup(&keys(&[1])).is_err());
    table.finish_restore(1).await.unwrap();
    assert!(
        table.finish_restore(1).await.is_err(),
        "not being rebuilt any more"
    );
    let found = table.lookup(&keys(&ids)).unwrap();
    assert!(found.missing.is_empty());
    let names = string_values(std::slice::from_ref(&found.rows), "name");
    assert_eq!(names[0].as_deref(), Some("cold-0"));
    // Each log starts at its floor; a bucket with a log is not rebuilt again.
    let ends = table.end_offsets();
    assert_eq!(
        ends[&hotgate_store::LogId {
            day: None,
            bucket: 1
        }],
        101
    );
    assert!(table.begin_restore(&[1]).is_err());
    assert!(table.begin_restore(&[7]).is_err(), "no such bucket");
    // A change goes on from the floor, with the rebuilt row as its before image.
    let id = of(1)[0];
    table
        .write_changes(&rows(&[id], &["hot"], &[None], &[T0 + 1]), ChangeOp::Upsert)
        .await
        .unwrap();
    let changes = changelog(&store);
    let kinds: Vec<(u64, &str, &str)> = changes
        .iter()
        .map(|c| (c.offset, c.kind.as_str(), c.name.as_str()))
        .collect();
    let before_name = format!("cold-{id}");
    assert_eq!(
        kinds,
        vec![(101, "-U", before_name.as_str()), (102, "+U", "hot")]
    );
    store.close().await;
    drop(table);
    drop(store);
    // The rebuilt rows are on disk: the state has them after a restart.
    let store = open(dir.path()).await;
    let after = state(&store);
    assert_eq!(after.len(), ids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_changes_are_refused_and_write_nothing() {
    let (_dir, store, table) = store_with(users_spec()).await;
    // A delete without the key column.
    let no_key = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["x"])) as ArrayRef],
    )
    .unwrap();
    let e = table
        .write_changes(&no_key, ChangeOp::Delete)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("missing key column \"id\""), "{e}");
    // A null key.
    let null_key = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef],
    )
    .unwrap();
    let e = table
        .write_changes(&null_key, ChangeOp::Delete)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("null in row 1"), "{e}");
    let e = table.lookup(&null_key).unwrap_err();
    assert!(e.to_string().contains("lookup"), "{e}");
    // A mistyped lookup key.
    let wrong = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["1"])) as ArrayRef],
    )
    .unwrap();
    let e = table.lookup(&wrong).unwrap_err();
    assert!(
        e.to_string().contains("has type Utf8, expected Int64"),
        "{e}"
    );
    // Appends are for log tables.
    let e = table
        .append(&rows(&[1], &["a"], &[None], &[T0]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("primary-key table"), "{e}");
    assert!(changelog(&store).is_empty());
    // A primary key without the bucket key is refused at creation.
    let mut spec = users_spec();
    spec.name = "other".into();
    spec.primary_key = Some(vec!["name".into()]);
    let e = store.create_table(spec).await.unwrap_err();
    assert!(
        e.to_string().contains("must contain the bucket_key id"),
        "{e}"
    );
}

const PK_CHILD_DIR_ENV: &str = "HOTGATE_PK_KILL9_DIR";
const PK_CHILD_SEED_ENV: &str = "HOTGATE_PK_KILL9_SEED";
const PK_TASKS: i64 = 4;

/// The writing child of `kill_9_keeps_state_and_changelog_in_step`: 4 tasks upsert and
/// delete their own keys (key % 4 == task), one write at a time, printing `BEGIN` before
/// and `ACK` after each acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of kill_9_keeps_state_and_changelog_in_step"]
async fn pk_kill9_child() {
    use std::io::Write;
    let Ok(dir) = std::env::var(PK_CHILD_DIR_ENV) else {
        return;
    };
    let seed: i64 = std::env::var(PK_CHILD_SEED_ENV).unwrap().parse().unwrap();
    let store = Arc::new(open(std::path::Path::new(&dir)).await);
    let table = store.create_table(users_spec()).await.unwrap();
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = tokio::task::JoinSet::new();
    (0..PK_TASKS).for_each(|t| {
        let (table, out) = (Arc::clone(&table), Arc::clone(&out));
        tasks.spawn(async move {
            let mut n = seed * 1_000_000 + t * 100_000;
            loop {
                n += 1;
                let key = t + PK_TASKS * (n * 7919 % 50);
                let delete = n % 5 == 0;
                {
                    let mut o = out.lock().unwrap();
                    let op = if delete { "D" } else { "U" };
                    writeln!(o, "BEGIN {t} {op} {key} {n}").unwrap();
                    o.flush().unwrap();
                }
                if delete {
                    table
                        .write_changes(&keys(&[key]), ChangeOp::Delete)
                        .await
                        .unwrap();
                } else {
                    let name = format!("v{n}");
                    table
                        .write_changes(
                            &rows(&[key], &[&name], &[Some(n as f64)], &[T0 + n]),
                            ChangeOp::Upsert,
                        )
                        .await
                        .unwrap();
                }
                let mut o = out.lock().unwrap();
                writeln!(o, "ACK {t}").unwrap();
                o.flush().unwrap();
            }
        });
    });
    // The writers never finish: this waits until the parent kills the process (or
    // a writer panics).
    if let Some(Err(e)) = tasks.join_next().await {
        panic!("a writer failed: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_keeps_state_and_changelog_in_step() {
    use std::collections::HashMap;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    // key -> name of its current row (None: deleted or never written).
    let mut expected: HashMap<i64, Option<String>> = HashMap::new();
    for round in 1..=3i64 {
        let mut child = ChildTest::spawn(
            "primary_key::pk_kill9_child",
            &[
                (PK_CHILD_DIR_ENV, dir.path().display().to_string()),
                (PK_CHILD_SEED_ENV, round.to_string()),
            ],
        );
        child.wait_for("ACK", 40);
        std::thread::sleep(Duration::from_millis(50 * round as u64));
        let lines = child.kill9();
        // Fold the acknowledged writes; the one write per task still in flight may or
        // may not have landed.
        let mut pending: HashMap<i64, (i64, Option<String>)> = HashMap::new();
        for l in lines {
            // libtest prints `test <name> ... ` before the child's first line.
            let l = ["BEGIN ", "ACK "]
                .iter()
                .filter_map(|m| l.find(m))
                .min()
                .map_or("", |at| &l[at..]);
            let parts: Vec<&str> = l.split_whitespace().collect();
            match parts.as_slice() {
                ["BEGIN", t, op, key, n] => {
                    let value = (*op == "U").then(|| format!("v{n}"));
                    pending.insert(t.parse().unwrap(), (key.parse().unwrap(), value));
                }
                ["ACK", t] => {
                    if let Some((key, value)) = pending.remove(&t.parse::<i64>().unwrap()) {
                        expected.insert(key, value);
                    }
                }
                _ => {}
            }
        }
        let store = open(dir.path()).await;
        let actual: HashMap<i64, String> =
            state(&store).into_iter().map(|(k, n, _)| (k, n)).collect();
        let in_flight: HashMap<i64, Option<String>> = pending.into_values().collect();
        for key in expected
            .keys()
            .chain(actual.keys())
            .chain(in_flight.keys())
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
        {
            let got = actual.get(&key).cloned();
            let acked = expected.get(&key).cloned().flatten();
            let ok = got == acked || in_flight.get(&key).is_some_and(|v| *v == got);
            assert!(
                ok,
                "round {round} key {key}: state {got:?}, acknowledged {acked:?}, in flight {:?}",
                in_flight.get(&key)
            );
            expected.insert(key, got);
        }
        // The changelog folds to exactly the state: no change is in only one of them.
        let mut folded: HashMap<i64, String> = HashMap::new();
        for c in changelog(&store) {
            match c.kind.as_str() {
                "+I" | "+U" => {
                    folded.insert(c.id, c.name);
                }
                "-D" => {
                    folded.remove(&c.id);
                }
                _ => {}
            }
        }
        assert_eq!(folded, actual, "round {round}");
        store.close().await;
    }
}

/// `(id, name, tier)` of the current rows, read with a lookup of `ids`.
fn tiers_of(store: &Store, ids: &[i64]) -> Vec<(i64, Option<String>)> {
    let found = store.table(&users()).unwrap().lookup(&keys(ids)).unwrap();
    let b = &found.rows;
    let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
    let tier = b.column_by_name("tier").unwrap().as_string::<i32>();
    (0..b.num_rows())
        .map(|r| {
            (
                id.value(r),
                tier.is_valid(r).then(|| tier.value(r).to_owned()),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_added_column_reads_as_null_in_old_state_and_old_changelog_frames() {
    let (dir, store, table) = store_with(users_spec()).await;
    table
        .write_changes(
            &rows(
                &[1, 2, 3],
                &["a", "b", "c"],
                &[Some(1.0), None, Some(3.0)],
                &[10, 20, 30],
            ),
            ChangeOp::Upsert,
        )
        .await
        .unwrap();
    table
        .write_changes(&keys(&[3]), ChangeOp::Delete)
        .await
        .unwrap();

    let base = table.def();
    let column: hotgate_store::ColumnSpec =
        serde_json::from_value(serde_json::json!({"name": "tier", "type": "string"})).unwrap();
    let next = base.with_added_columns(vec![column], 1).unwrap();
    assert_eq!(next.spec().columns[4].field_id, Some(5));
    store.add_columns(&base, next).await.unwrap();

    // A writer with the column, and one without it.
    let mut with_tier = rows(&[1], &["a2"], &[Some(1.5)], &[40]);
    let mut fields = with_tier.schema().fields().to_vec();
    fields.push(Arc::new(Field::new("tier", DataType::Utf8, true)));
    let mut columns = with_tier.columns().to_vec();
    columns.push(Arc::new(StringArray::from(vec!["gold"])));
    with_tier = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    table
        .write_changes(&with_tier, ChangeOp::Upsert)
        .await
        .unwrap();
    table
        .write_changes(&rows(&[4], &["d"], &[None], &[50]), ChangeOp::Upsert)
        .await
        .unwrap();

    let want = vec![(1, Some("gold".to_owned())), (2, None), (4, None)];
    assert_eq!(tiers_of(&store, &[1, 2, 3, 4]), want);
    // Old frames read with `_change` in its place and the new column null (records in
    // log order, grouped by key: a key's records share a bucket log).
    let batches: Vec<_> = table
        .scan(&ScanRequest {
            columns: Some(vec!["id".into(), "_change".into(), "tier".into()]),
            ..Default::default()
        })
        .unwrap()
        .map(|item| item.unwrap().batch)
        .collect();
    let kinds = string_values(&batches, "_change").into_iter().flatten();
    let mut records: Vec<(i64, String, Option<String>)> = int64_values(&batches, "id")
        .into_iter()
        .zip(kinds)
        .zip(string_values(&batches, "tier"))
        .map(|((id, kind), tier)| (id, kind, tier))
        .collect();
    records.sort_by_key(|r| r.0);
    let record =
        |id: i64, kind: &str, tier: Option<&str>| (id, kind.to_owned(), tier.map(str::to_owned));
    assert_eq!(
        records,
        [
            record(1, "+I", None),
            record(1, "-U", None),
            record(1, "+U", Some("gold")),
            record(2, "+I", None),
            record(3, "+I", None),
            record(3, "-D", None),
            record(4, "+I", None),
        ]
    );
    assert_eq!(changelog(&store).len(), 7);

    // Without its RocksDB state the table replays the mixed changelog to the same rows.
    store.close().await;
    drop(table);
    drop(store);
    std::fs::remove_dir_all(dir.path().join("state")).unwrap();
    let store = open(dir.path()).await;
    assert_eq!(tiers_of(&store, &[1, 2, 3, 4]), want);
}

/// Lookups racing writes, through the state cache: a lookup never shows half of a
/// bucket's write (every key of a bucket has the same version), never goes back to an
/// older version once it saw a newer one (a stale RocksDB read put in the cache would),
/// and after the writes the cache and RocksDB both hold the last write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_racing_writes_see_whole_bucket_writes_and_the_last_write() {
    let (dir, store, table) = store_with(users_spec()).await;
    let ids: Vec<i64> = (0..64).collect();
    let buckets = hotgate_store::bucket::buckets_of(
        &(Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
        2,
    )
    .unwrap();
    assert!(buckets.contains(&0) && buckets.contains(&1));
    let version = |v: i64| {
        let names: Vec<String> = ids.iter().map(|_| format!("v{v}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let scores: Vec<Option<f64>> = ids.iter().map(|_| Some(v as f64)).collect();
        let ts = vec![T0 + v; ids.len()];
        rows(&ids, &names, &scores, &ts)
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (table, stop, ids, buckets) = (
                Arc::clone(&table),
                Arc::clone(&stop),
                ids.clone(),
                buckets.clone(),
            );
            std::thread::spawn(move || {
                // Per bucket: the highest version seen so far.
                let mut seen = [0.0f64; 2];
                let mut lookups = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let found = table.lookup(&keys(&ids)).unwrap();
                    lookups += 1;
                    let mut at = vec![None; ids.len()];
                    let b = &found.rows;
                    let found_ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
                    let scores = b
                        .column_by_name("score")
                        .unwrap()
                        .as_primitive::<Float64Type>();
                    for (id, score) in found_ids.values().iter().zip(scores.values()) {
                        at[*id as usize] = Some(*score);
                    }
                    for b in 0..2u32 {
                        let versions: std::collections::BTreeSet<Option<u64>> = ids
                            .iter()
                            .filter(|i| buckets[**i as usize] == b)
                            .map(|i| at[*i as usize].map(f64::to_bits))
                            .collect();
                        assert_eq!(versions.len(), 1, "bucket {b} shows a half write");
                        if let Some(Some(v)) = versions.first() {
                            let v = f64::from_bits(*v);
                            assert!(v >= seen[b as usize], "bucket {b} went back to {v}");
                            seen[b as usize] = v;
                        }
                    }
                }
                lookups
            })
        })
        .collect();
    for v in 1..=60i64 {
        if v % 10 == 0 {
            table
                .write_changes(&keys(&ids), ChangeOp::Delete)
                .await
                .unwrap();
        } else {
            table
                .write_changes(&version(v), ChangeOp::Upsert)
                .await
                .unwrap();
        }
    }
    table
        .write_changes(&version(61), ChangeOp::Upsert)
        .await
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0, "a reader never looked up");
    }
    let last = table.lookup(&keys(&ids)).unwrap();
    assert!(last.missing.is_empty());
    let scores = last.rows.column_by_name("score").unwrap();
    let scores = scores.as_primitive::<Float64Type>();
    assert!(scores.values().iter().all(|s| *s == 61.0));
    drop(table);
    store.close().await;
    drop(store);
    // RocksDB holds the same: a reopened store (empty cache) looks up the last write.
    let store = open(dir.path()).await;
    let table = store.table(&users()).unwrap();
    let reopened = table.lookup(&keys(&ids)).unwrap();
    assert_eq!(reopened.rows, last.rows);
}
