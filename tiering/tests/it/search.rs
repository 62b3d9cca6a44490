//! The cold half of a deletion's proof, scoped to the buckets its predicate fixes: a
//! scoped scan reads exactly the rows of those buckets, and a scoped search leaves out
//! only the live data files of other buckets. Orphans and metadata are still read.

use std::io::Write;

use futures::TryStreamExt;
use hotgate_tiering::{ColdBuckets, ColdScanRequest};
use iceberg::scan::FileScanTask;

use crate::common::{fixture, scanned_ids};

/// Bytes no row holds, planted in files to see which ones a search reads.
const PLANTED: &[u8] = b"planted-subject-7f3a9c";

fn append(location: &str, bytes: &[u8]) {
    let path = location.trim_start_matches("file://");
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(bytes).unwrap();
}

fn bucket_of(customer: &str) -> u32 {
    hotgate_store::bucket::bucket_of_str(customer, 4)
}

#[tokio::test]
async fn a_search_scoped_to_a_bucket_reads_every_file_but_other_buckets_data() {
    let f = fixture(4).await;
    f.cycles(3).await;
    let table = f.table().await;
    let bucket = bucket_of("customer-3");
    let scope = ColdBuckets {
        key: "customer".into(),
        count: 4,
        only: vec![bucket],
    };

    // A scoped scan reads the rows of that bucket, all of them and no other.
    let cold = f.tierer.cold_snapshot(f.def().name()).unwrap().unwrap();
    let request = ColdScanRequest {
        buckets: Some(scope.clone()),
        ..ColdScanRequest::default()
    };
    let mut ids = scanned_ids(&cold, request).await;
    ids.sort_unstable();
    let expected: Vec<i64> = (0..30)
        .filter(|i| bucket_of(&format!("customer-{}", i % 7)) == bucket)
        .collect();
    assert!(!expected.is_empty() && expected.len() < 30);
    assert_eq!(ids, expected);
    // A scope whose bucket count is not the table's says nothing about its files.
    let other_count = ColdScanRequest {
        buckets: Some(ColdBuckets {
            count: 8,
            ..scope.clone()
        }),
        ..ColdScanRequest::default()
    };
    assert_eq!(scanned_ids(&cold, other_count).await.len(), 30);

    let tasks: Vec<FileScanTask> = table
        .scan()
        .select_all()
        .build()
        .unwrap()
        .plan_files()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let current = table.metadata().current_snapshot_id().unwrap();
    let other_buckets = scope.other_buckets_files(&table, current).await.unwrap();
    let (others, mine): (Vec<_>, Vec<_>) = tasks
        .iter()
        .partition(|t| other_buckets.contains(&t.data_file_path));
    assert!(!others.is_empty() && !mine.is_empty());
    let search = |scope: Option<ColdBuckets>| {
        let (def, tierer) = (f.def(), &f.tierer);
        async move {
            tierer
                .search_location(&def, &[PLANTED.to_vec()], scope.as_ref())
                .await
                .unwrap()
        }
    };

    // Planted in a data file of another bucket: the scoped search does not read it,
    // the whole-table search does.
    append(&others[0].data_file_path, PLANTED);
    let scoped = search(Some(scope.clone())).await;
    assert_eq!(scoped.files_with_match, Vec::<String>::new(), "{scoped:?}");
    assert_eq!(scoped.data_files_skipped, others.len());
    let whole = search(None).await;
    assert_eq!(
        whole.files_with_match,
        vec![others[0].data_file_path.clone()]
    );
    assert_eq!(whole.data_files_skipped, 0);
    assert_eq!(
        whole.files_searched,
        scoped.files_searched + scoped.data_files_skipped
    );

    // A file under the location that no snapshot references is read whatever
    // directory it is in: only live data files are known to hold one bucket.
    let orphan = format!(
        "{}.orphan",
        others[0].data_file_path.trim_end_matches(".parquet")
    );
    std::fs::write(orphan.trim_start_matches("file://"), PLANTED).unwrap();
    let scoped = search(Some(scope.clone())).await;
    assert_eq!(scoped.files_with_match, vec![orphan.clone()]);
    std::fs::remove_file(orphan.trim_start_matches("file://")).unwrap();

    // Planted in a data file of the bucket: found.
    append(&mine[0].data_file_path, PLANTED);
    let scoped = search(Some(scope)).await;
    assert_eq!(
        scoped.files_with_match,
        vec![mine[0].data_file_path.clone()]
    );
}
