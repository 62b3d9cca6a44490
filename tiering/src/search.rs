//! Searching a table's storage for literal values: the proof step of a compliance
//! deletion. Every object under the table location is read whole:
//!
//! - its raw bytes are searched for each literal (manifests, manifest lists and metadata
//!   files are Avro and JSON, where strings appear as they are);
//! - Parquet data files are compressed, so a raw search proves little: their string
//!   columns are also decoded and each value is searched.
//!
//! This reads the whole table, which is the point: nothing under the location, live or
//! orphaned, is taken on trust. The one exception is asked for by the caller: with
//! [`ColdBuckets`], a live data file of the current snapshot whose partition holds
//! another bucket is not read, because the bucket a row lands in is a function of its
//! bucket key, so a predicate that fixes the key cannot match a row of another bucket.
//! Metadata (manifests, manifest lists, metadata JSON, which also carry column bounds),
//! files of older snapshots, delete files and orphans are still read, whatever their
//! partition.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_schema::DataType;
use hotgate_store::contains_any;
use iceberg::table::Table;
use serde::Serialize;

use std::collections::HashSet;

use crate::error::Result;
use crate::files::ColdBuckets;
use crate::maintenance::read_parquet;
use crate::storage::ObjectStoreStorage;

/// What a search of a table location found.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LocationSearch {
    pub files_searched: usize,
    pub bytes_searched: u64,
    /// Parquet files decoded for their string values.
    pub parquet_files_decoded: usize,
    /// Live data files of other buckets, not read (a search scoped by [`ColdBuckets`]).
    pub data_files_skipped: usize,
    /// Files holding a literal. The literals themselves are not named.
    pub files_with_match: Vec<String>,
}

/// Searches every object under `table`'s location for `needles`, leaving out the live
/// data files of the buckets `buckets` excludes.
pub async fn search_location(
    storage: &ObjectStoreStorage,
    table: &Table,
    needles: &[Vec<u8>],
    buckets: Option<&ColdBuckets>,
) -> Result<LocationSearch> {
    let mut found = LocationSearch::default();
    let location = table.metadata().location().trim_end_matches('/').to_owned();
    let skipped: HashSet<String> = match (buckets, table.metadata().current_snapshot_id()) {
        (Some(buckets), Some(current)) => buckets.other_buckets_files(table, current).await?,
        _ => HashSet::new(),
    };
    for file in storage.list(&format!("{location}/")).await? {
        if skipped.contains(&file.location) {
            found.data_files_skipped += 1;
            continue;
        }
        let bytes = table.file_io().new_input(&file.location)?.read().await?;
        found.files_searched += 1;
        found.bytes_searched += bytes.len() as u64;
        let mut hit = contains_any(&bytes, needles);
        if !hit && file.location.ends_with(".parquet") {
            found.parquet_files_decoded += 1;
            hit = read_parquet(bytes)
                .await?
                .iter()
                .any(|batch| batch.columns().iter().any(|c| strings_contain(c, needles)));
        }
        if hit {
            found.files_with_match.push(file.location);
        }
    }
    Ok(found)
}

/// Whether a string or binary column holds a value containing one of `needles`.
fn strings_contain(column: &dyn Array, needles: &[Vec<u8>]) -> bool {
    let any = |mut values: Box<dyn Iterator<Item = Option<&[u8]>> + '_>| {
        values.any(|v| v.is_some_and(|v| contains_any(v, needles)))
    };
    match column.data_type() {
        DataType::Utf8 => any(Box::new(
            column
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::as_bytes)),
        )),
        DataType::LargeUtf8 => any(Box::new(
            column
                .as_string::<i64>()
                .iter()
                .map(|v| v.map(str::as_bytes)),
        )),
        DataType::Utf8View => any(Box::new(
            column.as_string_view().iter().map(|v| v.map(str::as_bytes)),
        )),
        DataType::Binary => any(Box::new(column.as_binary::<i32>().iter())),
        DataType::LargeBinary => any(Box::new(column.as_binary::<i64>().iter())),
        DataType::BinaryView => any(Box::new(column.as_binary_view().iter())),
        DataType::Struct(_) => column
            .as_struct()
            .columns()
            .iter()
            .any(|c| strings_contain(c.as_ref(), needles)),
        DataType::List(_) => strings_contain(column.as_list::<i32>().values().as_ref(), needles),
        _ => false,
    }
}
