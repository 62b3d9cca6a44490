//! Table maintenance: compaction of small files, snapshot expiry, and the purge of every
//! file no live snapshot or the current metadata references.
//!
//! - **Compaction** works per partition (one hot log's day and bucket). When a partition
//!   holds two or more files under half the target size, they are read back and
//!   rewritten as files of the target size, in one `replace` commit (the hotgate commit
//!   with the compare-and-swap). The snapshot keeps the table's `hotgate.offsets`.
//! - **Expiry** is iceberg-rust's `expire_snapshots`: snapshots older than the retention,
//!   beyond the last `retain_last`, leave the metadata. It deletes no file.
//! - **Purge** lists the table location and deletes every file older than the safety age
//!   that nothing live references: data files, manifests, manifest lists and metadata
//!   JSON other than the current one. The safety age protects files a running commit has
//!   written but not yet committed.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use iceberg::spec::{DataFile, PartitionKey};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::{CommitRequest, commit};
use crate::convert::Converter;
use crate::error::{Result, TieringError};
use crate::files::live_data_files;
use crate::storage::ObjectStoreStorage;
use hotgate_store::TableName;

/// What one maintenance run does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceOptions {
    pub compact: bool,
    /// Snapshots older than this are expired...
    pub snapshot_retention: Duration,
    /// ...except the newest `retain_last` (at least 1).
    pub retain_last: usize,
    /// Unreferenced files younger than this are left alone.
    pub purge_min_age: Duration,
    /// How long file deletions wait for reads of expired snapshots before they are
    /// deferred to the next run.
    pub read_wait: Duration,
}

impl Default for MaintenanceOptions {
    fn default() -> Self {
        Self {
            compact: true,
            snapshot_retention: Duration::from_secs(3600),
            retain_last: 1,
            purge_min_age: Duration::from_secs(3600),
            read_wait: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactionReport {
    pub partitions: usize,
    pub files_removed: usize,
    pub files_added: usize,
    pub bytes_rewritten: u64,
    pub snapshot_id: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct MaintenanceReport {
    /// Present when the table has a `cold_retention`.
    pub cold_retention: Option<crate::retention::ColdRetentionReport>,
    pub compaction: CompactionReport,
    pub snapshots_expired: usize,
    pub files_purged: usize,
    pub bytes_purged: u64,
}

/// Compacts the small files of `table`; returns the table as committed.
pub async fn compact(
    catalog: &Catalog,
    name: &TableName,
    table: Table,
    target_file_size: u64,
) -> Result<(Table, CompactionReport)> {
    let mut report = CompactionReport::default();
    let spec = table.metadata().default_partition_spec().clone();
    let schema = table.metadata().current_schema().clone();
    let mut groups: BTreeMap<String, Vec<DataFile>> = BTreeMap::new();
    for file in live_data_files(&table).await? {
        if file.file_size_in_bytes() * 2 < target_file_size {
            let key = spec.partition_to_path(file.partition(), schema.clone());
            groups.entry(key).or_default().push(file);
        }
    }
    groups.retain(|_, files| files.len() >= 2);
    if groups.is_empty() {
        return Ok((table, report));
    }
    let prefix = format!("hg-compact-{}", uuid::Uuid::new_v4().simple());
    let converter = Converter::new(&table, target_file_size, prefix)?;
    let mut removed = HashSet::new();
    let mut added = Vec::new();
    for files in groups.values() {
        let key = PartitionKey::new(
            (*spec).clone(),
            schema.clone(),
            files[0].partition().clone(),
        );
        let mut sink = converter.sink(key);
        for file in files {
            let bytes = table.file_io().new_input(file.file_path())?.read().await?;
            for batch in read_parquet(bytes).await? {
                sink.push(batch).await?;
            }
            report.bytes_rewritten += file.file_size_in_bytes();
            removed.insert(file.file_path().to_owned());
        }
        let (files_out, _) = sink.finish().await?;
        added.extend(files_out);
        report.partitions += 1;
    }
    report.files_removed = removed.len();
    report.files_added = added.len();
    // Compaction also folds every manifest into one.
    let request = CommitRequest::replace(removed, added)
        .merge_manifests_at(2)
        .carrying_bookkeeping(table.metadata())?;
    let committed = commit(catalog, name, &table, request).await?;
    report.snapshot_id = committed.metadata().current_snapshot_id();
    Ok((committed, report))
}

/// Decodes a whole Parquet file (compaction reads small files only).
pub(crate) async fn read_parquet(bytes: Bytes) -> Result<Vec<arrow_array::RecordBatch>> {
    tokio::task::spawn_blocking(move || -> Result<Vec<arrow_array::RecordBatch>> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .map_err(|e| TieringError::Internal(format!("cannot read a data file: {e}")))?
            .build()
            .map_err(|e| TieringError::Internal(format!("cannot read a data file: {e}")))?;
        Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
    })
    .await
    .map_err(|e| TieringError::Internal(format!("parquet reader failed: {e}")))?
}

/// Expires snapshots older than the retention, keeping the newest `retain_last`.
/// Returns the table after, and how many snapshots left.
pub async fn expire(
    catalog: &Catalog,
    table: Table,
    now_ms: i64,
    options: &MaintenanceOptions,
) -> Result<(Table, usize)> {
    let before = table.metadata().snapshots().len();
    let cutoff = now_ms.saturating_sub(options.snapshot_retention.as_millis() as i64);
    let expirable = table
        .metadata()
        .snapshots()
        .filter(|s| s.timestamp_ms() < cutoff)
        .count();
    if expirable == 0 || before <= options.retain_last.max(1) {
        return Ok((table, 0));
    }
    let tx = Transaction::new(&table);
    let action = tx
        .expire_snapshots()
        .expire_older_than_ms(cutoff)
        .retain_last(options.retain_last.max(1));
    let tx = action.apply(tx)?;
    let after = tx.commit(&*catalog.iceberg().await?).await?;
    let expired = before.saturating_sub(after.metadata().snapshots().len());
    Ok((after, expired))
}

/// Every file a live snapshot or the current metadata references.
pub(crate) async fn referenced_files(table: &Table) -> Result<HashSet<String>> {
    let mut keep = HashSet::new();
    if let Some(location) = table.metadata_location() {
        keep.insert(location.to_owned());
    }
    let mut manifests_seen = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        keep.insert(snapshot.manifest_list().to_owned());
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest in list.entries() {
            keep.insert(manifest.manifest_path.clone());
            if !manifests_seen.insert(manifest.manifest_path.clone()) {
                continue;
            }
            let loaded = manifest.load_manifest(table.file_io()).await?;
            for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                keep.insert(entry.file_path().to_owned());
            }
        }
    }
    Ok(keep)
}

/// Deletes every file under the table location that nothing live references and that
/// is older than the safety age. Returns (files, bytes) deleted.
pub async fn purge(
    storage: &ObjectStoreStorage,
    table: &Table,
    now_ms: i64,
    min_age: Duration,
) -> Result<(usize, u64)> {
    let keep = referenced_files(table).await?;
    let cutoff = now_ms.saturating_sub(min_age.as_millis() as i64);
    let location = table.metadata().location().trim_end_matches('/').to_owned();
    let mut deleted = (0, 0);
    for file in storage.list(&format!("{location}/")).await? {
        if keep.contains(&file.location) || file.last_modified_ms > cutoff {
            continue;
        }
        table.file_io().delete(&file.location).await?;
        deleted.0 += 1;
        deleted.1 += file.size;
    }
    Ok(deleted)
}
