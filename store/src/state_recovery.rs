//! Bringing a primary-key table's RocksDB state up to its changelog when the store
//! opens: each bucket's log is replayed from the offset its state reflects (state
//! writes are not synced; the log is the durable record). Runs before the table serves.

use crate::error::{Result, StoreError};
use crate::hot_table::HotTable;
use crate::scan::ScanRequest;

/// Replays each bucket's changelog into RocksDB from the offset its state reflects.
/// A log table has nothing to replay.
pub(crate) fn catch_up(table: &HotTable) -> Result<()> {
    let Some(pk) = table.primary_key_state() else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let mut replayed = 0u64;
    for log in table.logs() {
        let bucket = log.id().bucket;
        let applied = pk.applied(bucket)?;
        let end = log.end_offset();
        if applied > end {
            return Err(StoreError::corrupt(
                table.dir(),
                format!(
                    "bucket {bucket}: the state reflects offset {applied} but the log ends at {end}"
                ),
            ));
        }
        if applied == end {
            continue;
        }
        let request = ScanRequest {
            logs: Some(vec![log.id()]),
            start_offsets: [(log.id(), applied)].into(),
            end_offsets: [(log.id(), end)].into(),
            ..Default::default()
        };
        for item in table.scan(&request)? {
            let item = item?;
            pk.replay(bucket, &item.batch, item.offsets.end)?;
            replayed += item.batch.num_rows() as u64;
        }
    }
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
