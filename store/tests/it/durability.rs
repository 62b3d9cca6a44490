//! Crash safety: torn-tail recovery at every byte of the last frame, and kill -9 of a
//! process that is appending.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use hotgate_store::{ScanRequest, Store, TableName, TableSpec};
use rand::Rng;

use crate::common::*;

/// Something done to a copy of the segment before reopening it.
type Damage = Box<dyn Fn(&Path)>;

/// The recovery point of the log whose segment is `segment`.
fn recovery_point_beside(segment: &Path) -> std::path::PathBuf {
    segment.parent().unwrap().join("recovery-point")
}

/// A crash leaves the recovery point behind the last frames (the writer refreshes it
/// every few MiB): those frames are checked and a torn one is cut. A recovery point
/// that lies past what the file holds is not trusted, and every frame is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_tail_is_cut_at_every_byte_of_the_last_frame() {
    let pristine = tempfile::tempdir().unwrap();
    closed_store_with_frames(pristine.path(), 4).await;
    let files = segment_files(pristine.path());
    assert_eq!(files.len(), 1);
    let before_last = std::fs::metadata(&files[0]).unwrap().len();
    // What a crash right after the last frame's commit would have left.
    let lagging_point = std::fs::read(recovery_point_beside(&files[0]))
        .expect("a clean close writes the recovery point");
    let store = open(pristine.path()).await;
    store
        .append(&events_name(), &events(12..15, |i| T0 + i))
        .await
        .unwrap();
    store.close().await;
    drop(store);
    assert_eq!(segment_files(pristine.path()), files, "reopening rolled");
    let full = std::fs::metadata(&files[0]).unwrap().len();
    assert!(full > before_last);
    let rel = files[0]
        .strip_prefix(pristine.path())
        .unwrap()
        .to_path_buf();

    let mut cases: Vec<Damage> = Vec::new();
    let lagging = move |seg: &Path| std::fs::write(recovery_point_beside(seg), &lagging_point);
    for cut in before_last..full {
        let cut_to = move |seg: &Path| {
            let f = std::fs::OpenOptions::new().write(true).open(seg).unwrap();
            f.set_len(cut).unwrap();
        };
        let lagging = lagging.clone();
        cases.push(Box::new(move |seg: &Path| {
            cut_to(seg);
            lagging(seg).unwrap();
        }));
        // The clean close's recovery point, at the end of a frame the cut removed.
        cases.push(Box::new(cut_to));
    }
    // A complete last frame whose bytes were damaged is cut too.
    for at in [
        before_last + 2,
        before_last + 30,
        (before_last + full) / 2,
        full - 1,
    ] {
        let lagging = lagging.clone();
        cases.push(Box::new(move |seg: &Path| {
            let mut bytes = std::fs::read(seg).unwrap();
            bytes[at as usize] ^= 0x40;
            std::fs::write(seg, bytes).unwrap();
            lagging(seg).unwrap();
        }));
    }
    for (i, damage) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        damage(&dir.path().join(&rel));
        let store = open(dir.path()).await;
        let ids = all_ids(&store);
        assert_eq!(
            ids,
            (0..12).collect::<Vec<_>>(),
            "case {i}: half-written frame served or data lost"
        );
        // Appends continue right after the last whole frame.
        let r = store
            .append(&events_name(), &events(100..101, |_| T0))
            .await
            .unwrap();
        assert_eq!(r.parts[0].start_offset, 12, "case {i}");
        store.close().await;
        drop(store);
        let store = open(dir.path()).await;
        let mut ids = all_ids(&store);
        ids.sort();
        assert_eq!(
            ids,
            (0..12).chain(100..101).collect::<Vec<_>>(),
            "case {i} after reopen"
        );
        store.close().await;
    }
}

/// The segment's bytes once the background preallocation has zeroed space after its
/// frames (it runs after each small commit; this waits for it, it does not time it).
async fn zeroed_ahead(path: &std::path::Path) -> Vec<u8> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let bytes = std::fs::read(path).unwrap();
        let frames_end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
        if bytes.len() >= frames_end + 32 * 1024 {
            return bytes;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "small commits leave zeroed space ahead ({} bytes, frames end near {frames_end})",
            bytes.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A `_system` table's log is written by a thread of its own, with preallocation in
/// the background: many small commits racing the zeroing lose no frame, and rolls
/// and a reopen keep every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_logs_write_on_their_own_thread_and_lose_no_frame_to_preallocation() {
    let dir = tempfile::tempdir().unwrap();
    let spec: TableSpec = serde_json::from_value(hotgate_testkit::with(
        serde_json::to_value(events_spec(1)).unwrap(),
        serde_json::json!({"namespace": "_system", "name": "journal"}),
    ))
    .unwrap();
    let name = TableName::system("journal").unwrap();
    let writer_threads = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
            .filter(|comm| comm.starts_with("log-writer"))
            .count()
    };
    let before = writer_threads();
    // Small segments, so that the appends roll several times.
    let options = || hotgate_store::StoreOptions {
        log: hotgate_store::LogOptions {
            segment_bytes: 96 * 1024,
            ..Default::default()
        },
        ..Default::default()
    };
    let store = Store::open(dir.path(), options()).unwrap();
    let table = store.create_table(spec).await.unwrap();
    let mut expected = Vec::new();
    for round in 0..4i64 {
        // Concurrent appends group into small commits, each followed by zeroing.
        let mut tasks = Vec::new();
        for k in 0..200i64 {
            let table = Arc::clone(&table);
            let id = round * 1000 + k;
            expected.push(id);
            tasks.push(tokio::spawn(async move {
                table.append(&events(id..id + 1, |_| T0)).await.unwrap()
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        if round == 0 {
            assert_eq!(
                writer_threads(),
                before + 1,
                "the system table's log has a writer thread"
            );
        }
    }
    expected.sort_unstable();
    assert!(
        segment_files(dir.path()).len() > 2,
        "the appends rolled the log"
    );
    let ids = |store: &Store| {
        let scan = store
            .table(&name)
            .unwrap()
            .scan(&ScanRequest {
                columns: Some(vec!["id".into()]),
                ..Default::default()
            })
            .unwrap();
        let batches: Vec<RecordBatch> = scan.map(|b| b.unwrap().batch).collect();
        let mut ids = int64_values(&batches, "id");
        ids.sort_unstable();
        ids
    };
    assert_eq!(ids(&store), expected);
    store.close().await;
    drop(table);
    drop(store);
    assert_eq!(writer_threads(), before, "closing ends the writer thread");
    let store = Store::open(dir.path(), options()).unwrap();
    assert_eq!(ids(&store), expected, "every row is back after a reopen");
    store.close().await;
}

/// What a crash leaves of a log with preallocated space after its last frame: the
/// zeros are a clean end, not a torn tail, so nothing is cut, no segment is rolled,
/// and appends continue over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preallocated_space_is_a_clean_end_after_a_crash() {
    let live = tempfile::tempdir().unwrap();
    let store = open(live.path()).await;
    store.create_table(events_spec(1)).await.unwrap();
    for k in 0..5 {
        store
            .append(&events_name(), &events(k * 2..k * 2 + 2, |i| T0 + i))
            .await
            .unwrap();
    }
    let files = segment_files(live.path());
    assert_eq!(files.len(), 1);
    let bytes = zeroed_ahead(&files[0]).await;
    // The crash image: the files as they are while the store runs.
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(live.path(), crashed.path());
    store.close().await;
    drop(store);
    let trimmed = std::fs::metadata(&files[0]).unwrap().len();
    assert!(trimmed < bytes.len() as u64, "closing cuts the zeros");
    assert_eq!(
        std::fs::read(&files[0]).unwrap()[..],
        bytes[..trimmed as usize],
        "closing keeps every frame"
    );

    let frames = hotgate_store::inspect_table(crashed.path(), &events_name(), None).unwrap();
    assert_eq!(frames.len(), 5);
    assert!(
        frames
            .iter()
            .all(|f| matches!(f, hotgate_store::InspectedFrame::Rows { .. })),
        "inspect reads zeros as the end, not a torn frame"
    );
    let store = open(crashed.path()).await;
    assert_eq!(all_ids(&store), (0..10).collect::<Vec<_>>());
    let r = store
        .append(&events_name(), &events(100..101, |_| T0))
        .await
        .unwrap();
    assert_eq!(r.parts[0].start_offset, 10);
    store.close().await;
    drop(store);
    assert_eq!(
        segment_files(crashed.path()).len(),
        1,
        "nothing was cut or rolled"
    );
    let store = open(crashed.path()).await;
    assert_eq!(all_ids(&store), (0..10).chain(100..101).collect::<Vec<_>>());
    store.close().await;
}

const CHILD_DIR_ENV: &str = "HOTGATE_KILL9_DIR";
const CHILD_BASE_ENV: &str = "HOTGATE_KILL9_ID_BASE";

/// The appending child of `kill_9_loses_no_acknowledged_row`. Ignored, so it runs only
/// when the parent starts it with `--ignored` and the environment set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of kill_9_loses_no_acknowledged_row"]
async fn kill9_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let base: i64 = std::env::var(CHILD_BASE_ENV).unwrap().parse().unwrap();
    let store = Arc::new(open(Path::new(&dir)).await);
    store.create_table(events_spec(3)).await.unwrap();
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let tasks: Vec<_> = (0..6i64)
        .map(|t| {
            let (store, out) = (Arc::clone(&store), Arc::clone(&out));
            tokio::spawn(async move {
                let mut next = base + t * 10_000_000;
                let deadline = Instant::now() + Duration::from_secs(120);
                while Instant::now() < deadline {
                    let n = 1 + (next % 37);
                    store
                        .append(&events_name(), &events(next..next + n, |i| T0 + i))
                        .await
                        .unwrap();
                    // Only now is the row acknowledged.
                    let mut o = out.lock().unwrap();
                    writeln!(o, "ACK {next} {n}").unwrap();
                    o.flush().unwrap();
                    next += n;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<i64> = Vec::new();
    let mut rng = rand::rng();
    for round in 0..5i64 {
        let mut child = ChildTest::spawn(
            "durability::kill9_child",
            &[
                (CHILD_DIR_ENV, dir.path().display().to_string()),
                (CHILD_BASE_ENV, (round * 1_000_000_000).to_string()),
            ],
        );
        // Wait until the child is appending, then kill it at a random moment.
        child.wait_for("ACK", 5);
        std::thread::sleep(Duration::from_millis(rng.random_range(0..300)));
        let lines = child.kill9();
        for l in lines {
            let mut parts = l.split_whitespace();
            if parts.next() != Some("ACK") {
                continue;
            }
            let (Some(first), Some(n)) = (parts.next(), parts.next()) else {
                continue;
            };
            let (Ok(first), Ok(n)) = (first.parse::<i64>(), n.parse::<i64>()) else {
                continue;
            };
            acked.extend(first..first + n);
        }

        // Reopen after the crash: every acknowledged row is there exactly once.
        let store = open(dir.path()).await;
        hotgate_testkit::assert_acked_once(&acked, &all_ids(&store), &format!("round {round}"));
        store.close().await;
    }
    assert!(
        acked.len() > 25,
        "the child acknowledged too little to prove anything"
    );
}

/// After a clean close the recovery point vouches for every frame, so opening reads no
/// payload again: damage below it is not found, and not cut, at open, just as in a
/// sealed segment. The frames were synced whole before the point was written, so such
/// damage is the disk's, not a crash's; a read of the whole frame checks its CRC and
/// fails.
/// Without the recovery point, opening checks every frame of the active segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_below_the_recovery_point_are_not_read_again_at_open() {
    let dir = tempfile::tempdir().unwrap();
    closed_store_with_frames(dir.path(), 4).await;
    let frames = hotgate_store::inspect_table(dir.path(), &events_name(), None).unwrap();
    let hotgate_store::InspectedFrame::Rows {
        segment,
        position,
        len,
        ..
    } = &frames[1]
    else {
        unreachable!("an intact frame")
    };
    let mut bytes = std::fs::read(segment).unwrap();
    bytes[(*position + *len - 9) as usize] ^= 0x40;
    std::fs::write(segment, &bytes).unwrap();

    let store = open(dir.path()).await;
    let r = store
        .append(&events_name(), &events(100..101, |_| T0))
        .await
        .unwrap();
    assert_eq!(r.parts[0].start_offset, 12, "nothing was cut at open");
    let scan = store
        .table(&events_name())
        .unwrap()
        .scan(&ScanRequest::default())
        .unwrap();
    let failed = scan
        .filter_map(|b| b.err())
        .next()
        .expect("the damaged frame fails its read");
    assert!(failed.to_string().contains("CRC"), "{failed}");
    store.close().await;
    drop(store);

    std::fs::remove_file(recovery_point_beside(segment)).unwrap();
    let store = open(dir.path()).await;
    assert_eq!(
        all_ids(&store),
        (0..3).collect::<Vec<_>>(),
        "without a recovery point the damaged frame is a torn tail: it and what follows are cut"
    );
    store.close().await;
}
