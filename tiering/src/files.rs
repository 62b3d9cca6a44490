//! Reading a snapshot's file lists: the live data files, for status, compaction and
//! (later) the purge.

use iceberg::spec::DataFile;
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
