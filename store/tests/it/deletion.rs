//! Row deletion by rewrite: deleted rows leave the segment bytes, every other row keeps
//! its offset, and the deletion survives a restart and later appends.

use std::collections::BTreeMap;

use arrow_array::BooleanArray;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use hotgate_store::ScanRequest;

use crate::common::*;

/// `offset -> id` of every row, per log.
fn offsets_and_ids(store: &hotgate_store::Store) -> BTreeMap<(String, u64), i64> {
    let table = store.table(&events_name()).unwrap();
    let mut out = BTreeMap::new();
    for item in table
        .scan(&ScanRequest {
            change_meta: false,
            ..Default::default()
        })
        .unwrap()
    {
        let item = item.unwrap();
        let ids = item.batch.column(0).as_primitive::<Int64Type>();
        // Without deletions in a frame, row i has offset start + i; the test only
        // records frames it can attribute exactly.
        if ids.len() as u64 == item.offsets.end - item.offsets.start {
            for (i, id) in ids.values().iter().enumerate() {
                out.insert((item.log.to_string(), item.offsets.start + i as u64), *id);
            }
        }
    }
    out
}

/// Ids whose note is `note {id}` with id ≡ 1 (mod 10): the "subject" rows.
fn subject(id: i64) -> bool {
    id % 10 == 1
}

fn segment_bytes_contain(dir: &std::path::Path, needle: &[u8]) -> bool {
    segment_files(dir).iter().any(|p| file_contains(p, needle))
}

#[tokio::test]
async fn deleted_rows_leave_the_bytes_and_other_rows_keep_their_offsets() {
    let (dir, store, table) = store_with(events_spec(2)).await;
    for chunk in 0..4 {
        table
            .append(&events(chunk * 50..(chunk + 1) * 50, |i| T0 + i))
            .await
            .unwrap();
    }
    let before = offsets_and_ids(&store);
    assert_eq!(before.len(), 200);
    assert!(segment_bytes_contain(dir.path(), b"note 41"));

    let report = table
        .delete_rows(None, &|batch| {
            let ids = batch.column(0).as_primitive::<Int64Type>();
            Ok(BooleanArray::from_iter(
                ids.iter().map(|id| id.map(subject)),
            ))
        })
        .await
        .unwrap();
    assert_eq!(report.rows_deleted, 20);
    assert!(report.segments_rewritten >= 1);

    // The subject's rows are gone from reads and from the bytes on disk.
    let kept: Vec<i64> = (0..200).filter(|i| !subject(*i)).collect();
    let mut ids = all_ids(&store);
    ids.sort_unstable();
    assert_eq!(ids, kept);
    assert!(!segment_bytes_contain(dir.path(), b"note 41"));
    assert!(!segment_bytes_contain(dir.path(), b"note 191"));
    assert!(segment_bytes_contain(dir.path(), b"note 43"));

    // Every other row is still at its offset: compare through a scan of single offsets.
    for ((log, offset), id) in &before {
        if subject(*id) {
            continue;
        }
        let log_id = table
            .logs()
            .iter()
            .map(|l| l.id())
            .find(|l| l.to_string() == *log)
            .unwrap();
        let scanned: Vec<i64> = table
            .scan(&ScanRequest {
                logs: Some(vec![log_id]),
                start_offsets: [(log_id, *offset)].into(),
                end_offsets: [(log_id, offset + 1)].into(),
                ..Default::default()
            })
            .unwrap()
            .flat_map(|b| {
                b.unwrap()
                    .batch
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(scanned, [*id], "offset {offset} of {log}");
    }

    // Appends continue after the old end; a restart keeps the deletion.
    let ends = table.end_offsets();
    let appended = table.append(&events(200..210, |i| T0 + i)).await.unwrap();
    for part in &appended.parts {
        assert!(part.start_offset >= ends.get(&part.log).copied().unwrap_or(0));
    }
    store.close().await;
    drop(table);
    drop(store);
    let store = open(dir.path()).await;
    let mut ids = all_ids(&store);
    ids.sort_unstable();
    // Rows appended after the deletion are not touched by it (201 is new).
    let kept: Vec<i64> = (0..210).filter(|i| *i >= 200 || !subject(*i)).collect();
    assert_eq!(ids, kept);

    // A second deletion merges with the first.
    let table = store.table(&events_name()).unwrap();
    let again = table
        .delete_rows(None, &|batch| {
            let ids = batch.column(0).as_primitive::<Int64Type>();
            Ok(BooleanArray::from_iter(
                ids.iter().map(|id| id.map(|i| i % 10 == 2 || subject(i))),
            ))
        })
        .await
        .unwrap();
    // Ids ending in 2 (21 of them) and the new 201; the old subject rows are not counted
    // again.
    assert_eq!(again.rows_deleted, 22);
    let mut ids = all_ids(&store);
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..210)
            .filter(|i| i % 10 != 1 && i % 10 != 2)
            .collect::<Vec<_>>()
    );
}

/// The hot half of a proof scoped to the buckets a predicate fixes: the logs of other
/// buckets are not read, and every file outside the logs is.
#[tokio::test]
async fn a_search_scoped_to_buckets_skips_only_other_buckets_logs() {
    let (dir, _store, table) = store_with(events_spec(4)).await;
    table.append(&events(0..70, |i| T0 + i)).await.unwrap();
    // Row 10 is customer-3's.
    let needle = vec![b"note 10".to_vec()];
    let mine = hotgate_store::bucket::bucket_of_str("customer-3", 4);
    let others: Vec<u32> = table
        .logs()
        .iter()
        .map(|l| l.id().bucket)
        .filter(|b| *b != mine)
        .collect();
    assert!(!others.is_empty());

    let whole = table.search_literals(&needle, None).unwrap();
    let found = whole
        .first_match
        .clone()
        .expect("the row's segment holds it");
    assert!(found.contains(&format!("bucket={mine}/")), "{found}");
    assert_eq!(whole.files_skipped, 0);
    let scoped = table.search_literals(&needle, Some(&[mine])).unwrap();
    assert_eq!(scoped.first_match, Some(found));
    assert!(scoped.files_skipped > 0);
    let elsewhere = table.search_literals(&needle, Some(&others)).unwrap();
    assert_eq!(elsewhere.first_match, None, "{elsewhere:?}");
    assert_eq!(
        elsewhere.files_searched + elsewhere.files_skipped,
        whole.files_searched
    );

    // Planted outside the log directories (beside the table's definition, and in a
    // day directory itself): read whatever the scope.
    let segment = segment_files(dir.path()).pop().unwrap();
    let day_dir = segment.parent().unwrap().parent().unwrap();
    let table_dir = day_dir.parent().unwrap();
    for planted in [table_dir.join("planted"), day_dir.join("planted")] {
        std::fs::write(&planted, b"note 10").unwrap();
        let elsewhere = table.search_literals(&needle, Some(&others)).unwrap();
        let at = elsewhere.first_match.expect("the planted file is read");
        assert!(at.ends_with("planted"), "{at}");
        std::fs::remove_file(&planted).unwrap();
    }
}
