//! Reading a snapshot's file lists: the live data files, for status, compaction and
//! (later) the purge, and the bucket a file's partition holds.

use std::collections::HashSet;

use iceberg::spec::{
    DataContentType, DataFile, Literal, ManifestContentType, PrimitiveLiteral, Struct, Transform,
};
use iceberg::table::Table;

use crate::error::Result;

/// Some buckets of a table, to leave the other buckets' data files out of a scan or a
/// search. Which bucket a file holds is read from its manifest entry: the partition
/// field of the `bucket[count]` transform of `key`, in the spec its manifest was
/// written with. A file with no such field (another spec, another bucket count) is
/// always kept: only a file known to hold another bucket is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdBuckets {
    /// The bucket key column.
    pub key: String,
    /// The table's bucket count, which the bucket numbers in `only` are of.
    pub count: u32,
    pub only: Vec<u32>,
}

impl ColdBuckets {
    /// The paths of the live data files of snapshot `snapshot_id` that are known to
    /// hold only rows of buckets not in `only`.
    pub async fn other_buckets_files(
        &self,
        table: &Table,
        snapshot_id: i64,
    ) -> Result<HashSet<String>> {
        let metadata = table.metadata();
        let Some(snapshot) = metadata.snapshot_by_id(snapshot_id) else {
            return Ok(HashSet::new());
        };
        let schema = snapshot.schema(metadata)?;
        let Some(key) = schema.field_by_name(&self.key).map(|f| f.id) else {
            return Ok(HashSet::new());
        };
        let list = table.manifest_list_reader(snapshot).load().await?;
        let mut files = HashSet::new();
        for manifest in list.entries() {
            if manifest.content != ManifestContentType::Data {
                continue;
            }
            let Some(index) = metadata
                .partition_spec_by_id(manifest.partition_spec_id)
                .and_then(|spec| {
                    spec.fields().iter().position(|f| {
                        f.source_id == key && f.transform == Transform::Bucket(self.count)
                    })
                })
            else {
                continue;
            };
            let loaded = manifest.load_manifest(table.file_io()).await?;
            for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                let file = entry.data_file();
                if file.content_type() != DataContentType::Data {
                    continue;
                }
                if bucket_at(file.partition(), index).is_some_and(|b| !self.only.contains(&b)) {
                    files.insert(file.file_path().to_owned());
                }
            }
        }
        Ok(files)
    }
}

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
    bucket_at(partition, partition.fields().len().checked_sub(1)?)
}

/// The bucket number in field `index` of a file's partition, if it holds one.
fn bucket_at(partition: &Struct, index: usize) -> Option<u32> {
    match partition.fields().get(index) {
        Some(Some(Literal::Primitive(PrimitiveLiteral::Int(b)))) => u32::try_from(*b).ok(),
        _ => None,
    }
}
