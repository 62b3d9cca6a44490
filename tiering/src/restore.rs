//! Rebuilding the RocksDB state of primary-key buckets the hot tier lost (a new data
//! directory) from the cold tier, which holds each tiered bucket whole: a primary-key
//! table tiers as one state dump per bucket (see [`crate::tierer`]).
//!
//! The rebuild reads the live data files of the bucket's partition in the current
//! snapshot and puts their rows into the state as they are. Until every lost bucket is
//! whole the table's state is refused to readers and writers, and the table is not
//! ready, so no cycle dumps a partial state over the cold rows. A rebuild cut short
//! leaves the bucket without a log, and the next open starts it again.

use futures::{StreamExt, TryStreamExt};
use hotgate_store::HotTable;
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::scan::FileScanTask;
use iceberg::table::Table;

use crate::convert::conform;
use crate::error::Result;
use crate::files::bucket_of;

/// Rebuilds the state of `buckets` of `hot` from `table`'s current snapshot; returns
/// the rows put. The floors must be installed already.
pub(crate) async fn restore_buckets(hot: &HotTable, table: &Table, buckets: &[u32]) -> Result<u64> {
    if buckets.is_empty() {
        return Ok(0);
    }
    let started = std::time::Instant::now();
    hot.begin_restore(buckets)?;
    let files = bucket_files(table, buckets).await?;
    let schema = std::sync::Arc::clone(hot.def().stored_schema());
    let mut total = 0;
    for bucket in buckets {
        let mine: Vec<iceberg::Result<FileScanTask>> = files
            .iter()
            .filter(|(b, _)| b == bucket)
            .map(|(_, task)| Ok(task.clone()))
            .collect();
        let file_count = mine.len();
        let mut rows = 0;
        let mut batches =
            ArrowReaderBuilder::new(table.file_io().clone(), iceberg::Runtime::current())
                .build()
                .read(futures::stream::iter(mine).boxed())?
                .stream()
                .map_err(crate::error::TieringError::from);
        while let Some(batch) = batches.try_next().await? {
            let batch = conform(&batch, &schema)?;
            rows += hot.restore_rows(*bucket, &batch).await?;
        }
        hot.finish_restore(*bucket).await?;
        tracing::info!(
            table = %hot.def().name(), bucket, files = file_count, rows,
            "primary-key bucket rebuilt from the cold tier"
        );
        total += rows;
    }
    tracing::info!(
        table = %hot.def().name(), buckets = buckets.len(), rows = total,
        seconds = started.elapsed().as_secs_f64(),
        "primary-key state rebuilt from the cold tier"
    );
    Ok(total)
}

/// The scan tasks of the current snapshot's files in `buckets`, with each one's bucket
/// (the last partition field: primary-key tables are partitioned by bucket alone).
async fn bucket_files(table: &Table, buckets: &[u32]) -> Result<Vec<(u32, FileScanTask)>> {
    if table.metadata().current_snapshot().is_none() {
        return Ok(Vec::new());
    }
    let tasks: Vec<FileScanTask> = table
        .scan()
        .select_all()
        .build()?
        .plan_files()
        .await?
        .try_collect()
        .await?;
    Ok(tasks
        .into_iter()
        .filter_map(|task| {
            let bucket = task.partition.as_ref().and_then(bucket_of)?;
            buckets.contains(&bucket).then_some((bucket, task))
        })
        .collect())
}
