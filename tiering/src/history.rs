//! Erasing a table's history, for compliance deletion and cold retention: after a
//! commit that removed rows, nothing older may still reach them.
//!
//! 1. [`expire_history`] commits, when needed:
//!    - a rewrite of the current snapshot's manifests that keeps only live entries: an
//!      entry marking a removed file still carries that file's column bounds, which can
//!      be the very values deleted;
//!    - then, in one metadata commit, the removal of every ref but `main` (tags and
//!      branches pin old snapshots) and of every snapshot but the current one, whatever
//!      the snapshot retention says.
//! 2. The caller publishes the new table, so new reads plan on the current snapshot,
//!    and waits for reads still holding leases on expired snapshots (`leases`).
//! 3. [`delete_unreferenced`] deletes every file under the table location that the
//!    current metadata does not reference: old data files, manifests, manifest lists and
//!    metadata files. The caller holds the table's lock, so no writer of this table has
//!    uncommitted files in flight.
//!
//! The current metadata's `metadata-log` still names the deleted metadata files; they
//! held snapshot lists, never row values.

use hotgate_store::TableName;
use iceberg::spec::MAIN_BRANCH;
use iceberg::table::Table;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::{CommitRequest, commit, commit_metadata};
use crate::error::{Result, TieringError};
use crate::maintenance::referenced_files;
use crate::storage::ObjectStoreStorage;

/// What erasing a table's history did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HistoryReport {
    /// Tags and branches removed because they pinned older snapshots.
    pub refs_removed: Vec<String>,
    pub snapshots_expired: usize,
    /// Whether the current snapshot's manifests were rewritten to drop the entries of
    /// removed files.
    pub manifests_rewritten: bool,
    /// Files deleted from storage, and their size.
    pub files_deleted: usize,
    pub bytes_deleted: u64,
    /// Reads still streaming from expired snapshots when the wait ended: their files
    /// were not deleted, and a later run deletes them.
    pub reads_waited_out: usize,
}

/// The names of the table's refs (iceberg-rust has no accessor for them; the metadata's
/// serde form is public).
fn ref_names(table: &Table) -> Result<Vec<String>> {
    let json = serde_json::to_value(table.metadata())
        .map_err(|e| TieringError::Internal(format!("cannot read the table's refs: {e}")))?;
    Ok(json
        .get("refs")
        .and_then(|r| r.as_object())
        .map(|refs| refs.keys().cloned().collect())
        .unwrap_or_default())
}

/// Steps 1 of the module doc: afterwards the table has one snapshot, reachable only
/// from `main`, whose manifests list only live files.
pub async fn expire_history(
    catalog: &Catalog,
    name: &TableName,
    mut table: Table,
    report: &mut HistoryReport,
) -> Result<Table> {
    let Some(current) = table.metadata().current_snapshot().cloned() else {
        return Ok(table);
    };
    let list = table.manifest_list_reader(&current).load().await?;
    if list
        .entries()
        .iter()
        .any(|m| m.deleted_files_count.is_some_and(|n| n > 0))
    {
        let request = CommitRequest::replace(Default::default(), Vec::new())
            .merge_manifests_at(1)
            .carrying_bookkeeping(table.metadata())?;
        table = commit(catalog, name, &table, request).await?;
        report.manifests_rewritten = true;
    }
    let keep = table.metadata().current_snapshot_id();
    let refs: Vec<String> = ref_names(&table)?
        .into_iter()
        .filter(|r| r != MAIN_BRANCH)
        .collect();
    let expired: Vec<i64> = table
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .filter(|id| Some(*id) != keep)
        .collect();
    if refs.is_empty() && expired.is_empty() {
        return Ok(table);
    }
    table = commit_metadata(catalog, name, &table, |mut builder| {
        for r in &refs {
            builder = builder.remove_ref(r);
        }
        Ok(builder.remove_snapshots(&expired))
    })
    .await?;
    report.refs_removed.extend(refs);
    report.snapshots_expired += expired.len();
    Ok(table)
}

/// Step 3 of the module doc: deletes every file under the table location that the
/// current metadata does not reference. Returns (files, bytes).
pub async fn delete_unreferenced(
    storage: &ObjectStoreStorage,
    table: &Table,
) -> Result<(usize, u64)> {
    let keep = referenced_files(table).await?;
    let location = table.metadata().location().trim_end_matches('/').to_owned();
    let mut deleted = (0, 0);
    for file in storage.list(&format!("{location}/")).await? {
        if keep.contains(&file.location) {
            continue;
        }
        table.file_io().delete(&file.location).await?;
        deleted.0 += 1;
        deleted.1 += file.size;
    }
    Ok(deleted)
}
