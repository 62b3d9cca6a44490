//! Bringing a primary-key table's RocksDB state up to its changelog when the store
//! opens: each bucket's log is replayed from the offset its state reflects (state
//! writes are not synced; the log is the durable record), buckets in parallel. Runs
//! before the table serves.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::error::{Result, StoreError};
use crate::hot_table::HotTable;
use crate::log::Log;
use crate::primary_key::PkState;
use crate::scan::ScanRequest;

/// Replays each bucket's changelog into RocksDB from the offset its state reflects,
/// the buckets on as many threads as there are cores (decoding the frames and encoding
/// the rows is CPU work, and buckets share nothing). A log table has nothing to replay.
pub(crate) fn catch_up(table: &HotTable) -> Result<()> {
    let Some(pk) = table.primary_key_state() else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let logs = table.logs();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(logs.len());
    let next = AtomicUsize::new(0);
    let replayed = AtomicU64::new(0);
    let first_error = parking_lot::Mutex::new(None);
    let work = || {
        while let Some(log) = logs.get(next.fetch_add(1, Ordering::Relaxed)) {
            if first_error.lock().is_some() {
                return;
            }
            match replay_log(table, pk, log) {
                Ok(rows) => {
                    replayed.fetch_add(rows, Ordering::Relaxed);
                }
                Err(e) => {
                    first_error.lock().get_or_insert(e);
                    return;
                }
            }
        }
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }
    if let Some(e) = first_error.into_inner() {
        return Err(e);
    }
    let replayed = replayed.into_inner();
    if replayed > 0 {
        tracing::info!(
            table = %table.def().name(),
            rows = replayed,
            seconds = started.elapsed().as_secs_f64(),
            "primary-key state caught up with the changelog"
        );
    }
    Ok(())
}

/// Replays one bucket's log from the offset its state reflects; the rows replayed.
fn replay_log(table: &HotTable, pk: &PkState, log: &Log) -> Result<u64> {
    let bucket = log.id().bucket;
    let applied = pk.applied(bucket)?;
    let end = log.end_offset();
    if applied > end {
        return Err(StoreError::corrupt(
            table.dir(),
            format!("bucket {bucket}: the state reflects offset {applied} but the log ends at {end}"),
        ));
    }
    if applied == end {
        return Ok(0);
    }
    let request = ScanRequest {
        logs: Some(vec![log.id()]),
        start_offsets: [(log.id(), applied)].into(),
        end_offsets: [(log.id(), end)].into(),
        ..Default::default()
    };
    let mut replayed = 0;
    for item in table.scan(&request)? {
        let item = item?;
        pk.replay(bucket, &item.batch, item.offsets.end)?;
        replayed += item.batch.num_rows() as u64;
    }
    Ok(replayed)
}
