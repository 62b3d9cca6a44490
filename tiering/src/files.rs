//! Reading a snapshot's file lists: the live data files, for status, compaction and
//! (later) the purge, and the bucket a file's partition holds.

use iceberg::spec::{DataFile, Literal, PrimitiveLiteral, Struct};
use iceberg::table::Table;

use crate::error::Result;

/// The data files live in the table's current snapshot.
pub async fn live_data_files(table: &Table) -> Result<Vec<DataFile>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Vec::new());
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        let loaded = manifest.load_manifest(table.file_io()).await?;
        files.extend(
            loaded
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| e.data_file().clone()),
        );
    }
    Ok(files)
}

/// The bucket a data file's partition holds: its last field, which is `bucket(N, key)`
/// in both of hotgate's specs (`day(time), bucket` and `bucket` alone).
pub(crate) fn bucket_of(partition: &Struct) -> Option<u32> {
    match partition.fields().last() {
        Some(Some(Literal::Primitive(PrimitiveLiteral::Int(b)))) => u32::try_from(*b).ok(),
        _ => None,
    }
}
