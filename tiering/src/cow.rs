//! Copy-on-write deletion in the cold tier: every live data file holding a row a
//! matcher marks is rewritten without those rows, in one `overwrite` commit that keeps
//! `hotgate.offsets`. Files without a match are untouched; a file whose rows all match
//! is removed with nothing written in its place.
//!
//! The matcher sees rows in the hot tier's Arrow types (the caller's predicate was
//! checked against them). Only candidate files are read: with `prune` filters (the
//! comparisons the predicate ANDs), Iceberg's scan planning skips files by partition
//! (a fixed bucket key picks one bucket) and by column statistics; without any, every
//! live file is a candidate.

use std::collections::HashSet;

use arrow_array::{BooleanArray, RecordBatch};
use hotgate_store::TableDef;
use iceberg::spec::PartitionKey;
use iceberg::table::Table;
use serde::Serialize;

use futures::TryStreamExt;

use crate::catalog::Catalog;
use crate::cold_scan::{ColdFilter, filters_predicate};
use crate::commit::{CommitRequest, commit};
use crate::convert::{Converter, conform};
use crate::error::{Result, TieringError};
use crate::files::live_data_files;
use crate::maintenance::read_parquet;

/// Marks the rows to delete (true: delete).
pub type RowMatcher<'a> =
    &'a (dyn Fn(&RecordBatch) -> std::result::Result<BooleanArray, String> + Sync);

/// What a copy-on-write deletion did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CowReport {
    /// Live files read because pruning could not rule them out.
    pub files_read: usize,
    /// Files that held a match and were replaced (or removed).
    pub files_rewritten: usize,
    /// Files written in their place.
    pub files_written: usize,
    pub rows_deleted: u64,
    /// Size of the replaced files.
    pub bytes_rewritten: u64,
    /// Size of the table's live files before.
    pub bytes_total: u64,
    /// The overwrite snapshot; none when nothing matched.
    pub snapshot_id: Option<i64>,
    /// Paths of the replaced files (they stay reachable from older snapshots until
    /// those are expired).
    pub removed: Vec<String>,
}

pub async fn delete_matching(
    catalog: &Catalog,
    def: &TableDef,
    table: Table,
    matches: RowMatcher<'_>,
    prune: &[ColdFilter],
) -> Result<(Table, CowReport)> {
    let candidates = candidate_files(&table, prune).await?;
    let mut report = CowReport::default();
    let spec = table.metadata().default_partition_spec().clone();
    let schema = table.metadata().current_schema().clone();
    let mut remove = HashSet::new();
    let mut add = Vec::new();
    for file in live_data_files(&table).await? {
        report.bytes_total += file.file_size_in_bytes();
        if candidates
            .as_ref()
            .is_some_and(|c| !c.contains(file.file_path()))
        {
            continue;
        }
        report.files_read += 1;
        let bytes = table.file_io().new_input(file.file_path())?.read().await?;
        let mut kept = Vec::new();
        let mut deleted = 0u64;
        for batch in read_parquet(bytes).await? {
            let rows = conform(&batch, def.stored_schema())?;
            let hit = matches(&rows)
                .map_err(|e| TieringError::Internal(format!("deletion predicate: {e}")))?;
            let hits = hit.true_count() as u64;
            if hits == 0 {
                kept.push(rows);
                continue;
            }
            deleted += hits;
            let keep: BooleanArray = hit.iter().map(|h| Some(h != Some(true))).collect();
            kept.push(arrow_select::filter::filter_record_batch(&rows, &keep)?);
        }
        if deleted == 0 {
            continue;
        }
        let key = PartitionKey::new((*spec).clone(), schema.clone(), file.partition().clone());
        // A prefix per replaced file: sinks of one partition number their files from
        // zero, so a shared prefix would make two replacements overwrite each other.
        let prefix = format!("hg-cow-{}", uuid::Uuid::new_v4().simple());
        let converter = Converter::new(&table, def.tiering().target_file_size, prefix)?;
        let mut sink = converter.sink(key);
        for batch in kept {
            sink.push(batch).await?;
        }
        let (written, _) = sink.finish().await?;
        report.files_rewritten += 1;
        report.files_written += written.len();
        report.rows_deleted += deleted;
        report.bytes_rewritten += file.file_size_in_bytes();
        report.removed.push(file.file_path().to_owned());
        remove.insert(file.file_path().to_owned());
        add.extend(written);
    }
    if remove.is_empty() {
        return Ok((table, report));
    }
    let request = CommitRequest::overwrite(remove, add).carrying_bookkeeping(table.metadata())?;
    let table = commit(catalog, def.name(), &table, request).await?;
    report.snapshot_id = table.metadata().current_snapshot_id();
    Ok((table, report))
}

/// The paths of the current snapshot's files that `prune` cannot rule out, by
/// partition and column statistics; `None` when nothing prunes (every file is one).
async fn candidate_files(table: &Table, prune: &[ColdFilter]) -> Result<Option<HashSet<String>>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(None);
    };
    let schema = snapshot.schema(table.metadata())?;
    let Some(predicate) = filters_predicate(prune, &schema) else {
        return Ok(None);
    };
    let tasks = table
        .scan()
        .snapshot_id(snapshot.snapshot_id())
        .with_filter(predicate)
        .build()?
        .plan_files()
        .await?;
    let paths: Vec<String> = tasks
        .map_ok(|task| task.data_file_path.clone())
        .try_collect()
        .await?;
    Ok(Some(paths.into_iter().collect()))
}
