//! Searching a table's storage for literal values: the proof step of a compliance
//! deletion. Every object under the table location is read whole:
//!
//! - its raw bytes are searched for each literal (manifests, manifest lists and metadata
//!   files are Avro and JSON, where strings appear as they are);
//! - Parquet data files are compressed, so a raw search proves little: their string
//!   columns are also decoded and each value is searched.
//!
//! This reads the whole table, which is the point: nothing under the location, live or
//! orphaned, is taken on trust.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_schema::DataType;
use hotgate_store::contains_any;
use iceberg::table::Table;
use serde::Serialize;

use crate::error::Result;
use crate::maintenance::read_parquet;
use crate::storage::ObjectStoreStorage;

/// What a search of a table location found.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LocationSearch {
    pub files_searched: usize,
    pub bytes_searched: u64,
    /// Parquet files decoded for their string values.
    pub parquet_files_decoded: usize,
    /// Files holding a literal. The literals themselves are not named.
    pub files_with_match: Vec<String>,
}

/// Searches every object under `table`'s location for `needles`.
pub async fn search_location(
    storage: &ObjectStoreStorage,
    table: &Table,
    needles: &[Vec<u8>],
) -> Result<LocationSearch> {
    let mut found = LocationSearch::default();
    let location = table.metadata().location().trim_end_matches('/').to_owned();
    for file in storage.list(&format!("{location}/")).await? {
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
