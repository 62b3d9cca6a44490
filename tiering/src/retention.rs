//! Cold retention: whole day partitions older than a table's `cold_retention` leave the
//! Iceberg table, and their files leave storage.
//!
//! 1. One `overwrite` commit removes every live data file of a day before the cutoff
//!    (whole files: nothing is rewritten). It keeps `hotgate.offsets`.
//! 2. The history that still reaches them is erased ([`crate::history`]): every
//!    snapshot but the new current one is expired, whatever the snapshot retention
//!    says, refs pinning them are removed, and once no read uses the expired snapshots
//!    their files are deleted.
//!
//! A day partition is older than the limit when the whole day ended before
//! `now - cold_retention`. Primary-key tables have no day partition; retention does not
//! apply to them.

use std::collections::HashSet;

use hotgate_store::TableName;
use iceberg::spec::{Literal, PrimitiveLiteral};
use iceberg::table::Table;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::{CommitRequest, commit};
use crate::error::Result;
use crate::files::live_data_files;

const DAY_US: i64 = 86_400_000_000;

/// What one cold retention run did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ColdRetentionReport {
    /// Days before this one (`YYYY-MM-DD`) were dropped.
    pub cutoff_day: String,
    /// The day partitions dropped.
    pub days_removed: Vec<String>,
    pub files_removed: usize,
    pub bytes_removed: u64,
    pub records_removed: u64,
    /// The overwrite snapshot; none when nothing was old enough.
    pub snapshot_id: Option<i64>,
    pub snapshots_expired: usize,
    /// Files deleted from storage: the removed data files and the manifests, manifest
    /// lists and metadata files only expired snapshots referenced.
    pub files_deleted: usize,
    pub bytes_deleted: u64,
}

/// The date of `days` since the epoch, `YYYY-MM-DD`.
pub(crate) fn day_name(days: i32) -> String {
    chrono::DateTime::from_timestamp(i64::from(days) * 86_400, 0)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| days.to_string())
}

/// The day partition value of a data file of a `day(ts), bucket(N, key)` table.
fn file_day(file: &iceberg::spec::DataFile) -> Option<i32> {
    match file.partition().fields().first()? {
        Some(Literal::Primitive(PrimitiveLiteral::Int(day))) => Some(*day),
        _ => None,
    }
}

/// Drops the day partitions of `table` that ended before `cutoff_micros`. The caller
/// then erases the history that still reaches them ([`crate::history`]).
pub async fn drop_old_days(
    catalog: &Catalog,
    name: &TableName,
    table: Table,
    cutoff_micros: i64,
) -> Result<(Table, ColdRetentionReport)> {
    let cutoff_day = i32::try_from(cutoff_micros.div_euclid(DAY_US)).unwrap_or(i32::MIN);
    let mut report = ColdRetentionReport {
        cutoff_day: day_name(cutoff_day),
        ..ColdRetentionReport::default()
    };
    let mut remove = HashSet::new();
    let mut days = std::collections::BTreeSet::new();
    for file in live_data_files(&table).await? {
        let Some(day) = file_day(&file) else { continue };
        if day < cutoff_day {
            days.insert(day);
            report.bytes_removed += file.file_size_in_bytes();
            report.records_removed += file.record_count();
            remove.insert(file.file_path().to_owned());
        }
    }
    if remove.is_empty() {
        return Ok((table, report));
    }
    report.days_removed = days.into_iter().map(day_name).collect();
    report.files_removed = remove.len();
    let request =
        CommitRequest::overwrite(remove, Vec::new()).carrying_bookkeeping(table.metadata())?;
    let table = commit(catalog, name, &table, request).await?;
    report.snapshot_id = table.metadata().current_snapshot_id();
    Ok((table, report))
}
