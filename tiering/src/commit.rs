//! Snapshot commits that hotgate builds itself: append, overwrite and delete, all with a
//! compare-and-swap on the catalog pointer.
//!
//! iceberg-rust 0.10.1 offers only `fast_append`, and its `Transaction::commit` silently
//! re-applies an append on top of whatever was committed meanwhile. Tiering's
//! exactly-once rests on "these files and these offsets follow exactly that snapshot",
//! so every hotgate commit goes through [`commit`]:
//!
//! 1. read the base snapshot's manifest list; carry untouched manifests over as they are;
//! 2. rewrite each manifest that holds a removed file, marking it deleted and the rest
//!    existing; write one manifest of the added files;
//! 3. write the manifest list, the snapshot (summary with `added-*`, `deleted-*` and
//!    recomputed `total-*`, plus the caller's properties) and the next metadata file;
//! 4. hand the new metadata and its changes to the catalog ([`Catalog::commit`]): the
//!    SQL catalog swaps its pointer from the base metadata file to the next one, a REST
//!    catalog applies the changes if the table's `main` is still the base snapshot. If
//!    another commit came first, nothing is committed: the files written here are
//!    deleted and the caller gets [`TieringError::Conflict`] to reload and decide again.

use std::collections::{HashMap, HashSet};

use hotgate_store::TableName;
use iceberg::spec::{
    DataFile, MAIN_BRANCH, ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation,
    Schema, Snapshot, SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary,
    TableMetadataBuildResult, TableMetadataBuilder,
};
use iceberg::table::Table;

use crate::catalog::Catalog;
use crate::error::{Result, TieringError};

/// What one commit changes.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub operation: Operation,
    /// Data files to add; they must already be written.
    pub add: Vec<DataFile>,
    /// Paths of live data files to remove. Each must be live in the base snapshot.
    pub remove: HashSet<String>,
    /// Extra snapshot summary properties, such as `hotgate.offsets`.
    pub properties: HashMap<String, String>,
    /// When the base snapshot has this many manifests or more, the commit rewrites all
    /// of them into one, so frequent small commits do not grow every later manifest
    /// list (Iceberg's `commit.manifest.min-count-to-merge` defaults to 100 too).
    pub merge_manifests_at: usize,
}

/// The default of [`CommitRequest::merge_manifests_at`].
pub const MERGE_MANIFESTS_AT: usize = 100;

impl CommitRequest {
    pub fn append(add: Vec<DataFile>) -> Self {
        Self {
            operation: Operation::Append,
            add,
            remove: HashSet::new(),
            properties: HashMap::new(),
            merge_manifests_at: MERGE_MANIFESTS_AT,
        }
    }

    pub fn overwrite(remove: HashSet<String>, add: Vec<DataFile>) -> Self {
        Self {
            operation: Operation::Overwrite,
            add,
            remove,
            properties: HashMap::new(),
            merge_manifests_at: MERGE_MANIFESTS_AT,
        }
    }

    /// Rewritten files with the same rows (compaction): iceberg's `replace` operation.
    pub fn replace(remove: HashSet<String>, add: Vec<DataFile>) -> Self {
        Self {
            operation: Operation::Replace,
            ..Self::overwrite(remove, add)
        }
    }

    /// Merges all manifests into one when there are at least `count`; with 1, every
    /// commit rewrites its manifests, which also drops the entries of files deleted by
    /// earlier snapshots (they still carry those files' column bounds).
    pub fn merge_manifests_at(mut self, count: usize) -> Self {
        self.merge_manifests_at = count;
        self
    }

    pub fn with_property(mut self, key: &str, value: String) -> Self {
        self.properties.insert(key.to_owned(), value);
        self
    }

    /// Carries hotgate's bookkeeping of `metadata`'s current snapshot (the tiered
    /// offsets and source positions) into this commit, which moves no hot rows.
    pub fn carrying_bookkeeping(mut self, metadata: &iceberg::spec::TableMetadata) -> Result<Self> {
        self.properties
            .extend(crate::offsets::carried_properties(metadata)?);
        Ok(self)
    }
}

/// The files a commit wrote besides data files; deleted again when the commit surely
/// failed. After an ambiguous swap (the database errored) they stay: the table may now
/// reference them, and the purge removes them if it does not.
#[derive(Default)]
struct Written {
    paths: Vec<String>,
    ambiguous: bool,
}

/// Commits `request` on top of `base`, which must still be the table's current
/// metadata. Returns the table as committed.
pub async fn commit(
    catalog: &Catalog,
    name: &TableName,
    base: &Table,
    request: CommitRequest,
) -> Result<Table> {
    let mut written = Written::default();
    match try_commit(catalog, name, base, &request, &mut written).await {
        Ok(table) => Ok(table),
        Err(e) if written.ambiguous => Err(e),
        Err(e) => {
            for path in &written.paths {
                if let Err(cleanup) = base.file_io().delete(path).await {
                    tracing::warn!(%path, error = %cleanup, "cannot delete a file of a failed commit; the purge will");
                }
            }
            Err(e)
        }
    }
}

async fn try_commit(
    catalog: &Catalog,
    name: &TableName,
    base: &Table,
    request: &CommitRequest,
    written: &mut Written,
) -> Result<Table> {
    let metadata = base.metadata();
    let file_io = base.file_io();
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().clone();
    let parent = metadata.current_snapshot();
    let snapshot_id = new_snapshot_id();
    let sequence_number = metadata.next_sequence_number();
    let commit_uuid = uuid::Uuid::new_v4();
    let meta_dir = format!("{}/metadata", metadata.location());
    let mut manifest_counter = 0;
    let mut next_manifest = |written: &mut Written| {
        manifest_counter += 1;
        let path = format!("{meta_dir}/{commit_uuid}-m{manifest_counter}.avro");
        written.paths.push(path.clone());
        path
    };

    let mut summary = SnapshotSummaryCollector::default();
    let mut manifests: Vec<ManifestFile> = Vec::new();
    let mut removed: HashSet<&str> = HashSet::new();
    // Rewritten manifests: one per touched manifest, or all live entries in one when
    // the snapshot has `merge_manifests_at` manifests or more.
    let mut single = None;
    let mut merged = None;
    if let Some(parent) = parent {
        let list = base.manifest_list_reader(parent).load().await?;
        let merge = list.entries().len() >= request.merge_manifests_at;
        for manifest in list.entries() {
            // A manifest whose entries are all deleted describes nothing live: it is
            // dropped, as Iceberg's own commits do.
            if manifest.added_files_count == Some(0) && manifest.existing_files_count == Some(0) {
                continue;
            }
            let touched = if request.remove.is_empty() && !merge {
                None
            } else {
                let loaded = manifest.load_manifest(file_io).await?;
                let hits = merge
                    || loaded
                        .entries()
                        .iter()
                        .any(|e| e.is_alive() && request.remove.contains(e.file_path()));
                hits.then_some(loaded)
            };
            let Some(loaded) = touched else {
                manifests.push(manifest.clone());
                continue;
            };
            if !merge || merged.is_none() {
                let output = file_io.new_output(next_manifest(written))?;
                let w = ManifestWriterBuilder::new(
                    output,
                    Some(snapshot_id),
                    schema.clone(),
                    (*spec).clone(),
                )
                .build_v2_data();
                if merge {
                    merged = Some(w);
                } else {
                    single = Some(w);
                }
            }
            let writer = if merge {
                merged.as_mut()
            } else {
                single.as_mut()
            }
            .ok_or_else(|| TieringError::Internal("no manifest writer".into()))?;
            for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                let seq = entry.sequence_number().ok_or_else(|| {
                    TieringError::Internal(format!(
                        "{name}: manifest entry without sequence number"
                    ))
                })?;
                let file = entry.data_file().clone();
                if let Some(path) = request.remove.get(entry.file_path()) {
                    removed.insert(path.as_str());
                    summary.remove_file(&file, schema.clone(), spec.clone());
                    writer.add_delete_file(file, seq, entry.file_sequence_number)?;
                } else {
                    let added_by = entry.snapshot_id().unwrap_or(parent.snapshot_id());
                    writer.add_existing_file(file, added_by, seq, entry.file_sequence_number)?;
                }
            }
            if let Some(w) = single.take() {
                manifests.push(w.write_manifest_file().await?);
            }
        }
        if let Some(w) = merged.take() {
            manifests.push(w.write_manifest_file().await?);
        }
    }
    if let Some(missing) = request
        .remove
        .iter()
        .find(|p| !removed.contains(p.as_str()))
    {
        return Err(TieringError::Conflict {
            table: name.to_string(),
            detail: format!("data file {missing} is not live in the base snapshot"),
        });
    }
    if !request.add.is_empty() {
        let output = file_io.new_output(next_manifest(written))?;
        let mut writer =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), (*spec).clone())
                .build_v2_data();
        for file in &request.add {
            summary.add_file(file, schema.clone(), spec.clone());
            writer.add_file(file.clone(), sequence_number)?;
        }
        manifests.push(writer.write_manifest_file().await?);
    }

    let list_path = format!("{meta_dir}/snap-{snapshot_id}-0-{commit_uuid}.avro");
    written.paths.push(list_path.clone());
    let mut list = ManifestListWriter::v2(
        file_io.new_output(&list_path)?.writer().await?,
        snapshot_id,
        parent.map(|p| p.snapshot_id()),
        sequence_number,
    );
    list.add_manifests(manifests.into_iter())?;
    list.close().await?;

    let mut properties = request.properties.clone();
    properties.extend(summary.build());
    add_totals(&mut properties, parent.map(|p| p.summary()));
    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent.map(|p| p.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation: request.operation.clone(),
            additional_properties: properties,
        })
        .with_schema_id(metadata.current_schema_id())
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
        .build();
    let built = metadata
        .clone()
        .into_builder(Some(base_location(name, base)?))
        .add_snapshot(snapshot)?
        .set_ref(
            MAIN_BRANCH,
            SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
        )?
        .build()?;
    publish(catalog, name, base, built, written).await
}

/// Hands `built` to the catalog. A refused commit is an error the caller may clean up
/// after; one whose outcome is unknown marks `written` ambiguous, so its files stay.
async fn publish(
    catalog: &Catalog,
    name: &TableName,
    base: &Table,
    built: TableMetadataBuildResult,
    written: &mut Written,
) -> Result<Table> {
    match catalog.commit(name, base, built).await {
        Ok(table) => Ok(table),
        Err(failure) => {
            written.ambiguous = failure.state_unknown;
            Err(failure.error)
        }
    }
}

fn base_location(name: &TableName, base: &Table) -> Result<String> {
    Ok(base
        .metadata_location()
        .ok_or_else(|| TieringError::Internal(format!("{name}: table has no metadata location")))?
        .to_owned())
}

/// Makes `schema` the table's current schema, with `properties` set: a metadata-only
/// commit (no snapshot), with the same compare-and-swap as data commits. A schema equal
/// to an earlier one reuses its id, so this also rolls a schema back.
pub async fn commit_schema(
    catalog: &Catalog,
    name: &TableName,
    base: &Table,
    schema: Schema,
    properties: HashMap<String, String>,
) -> Result<Table> {
    commit_metadata(catalog, name, base, |builder| {
        Ok(builder
            .add_current_schema(schema)
            .map_err(|e| {
                TieringError::Invalid(format!(
                    "{name}: the schema change is not valid for Iceberg: {e}"
                ))
            })?
            .set_properties(properties)?)
    })
    .await
}

/// A metadata-only commit (no new snapshot): `edit` changes a builder of `base`'s
/// metadata, then the same compare-and-swap as data commits publishes it.
pub async fn commit_metadata(
    catalog: &Catalog,
    name: &TableName,
    base: &Table,
    edit: impl FnOnce(TableMetadataBuilder) -> Result<TableMetadataBuilder>,
) -> Result<Table> {
    let builder = base
        .metadata()
        .clone()
        .into_builder(Some(base_location(name, base)?));
    let built = edit(builder)?.build()?;
    publish(catalog, name, base, built, &mut Written::default()).await
}

/// A snapshot id: any unique positive i64 (iceberg derives its own from a UUID too).
fn new_snapshot_id() -> i64 {
    let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
    ((hi ^ lo) & i64::MAX as u64) as i64
}

/// The `total-*` values: the parent's totals plus what this snapshot added, minus what
/// it deleted. iceberg-rust's own helper for this is crate-private.
fn add_totals(props: &mut HashMap<String, String>, parent: Option<&Summary>) {
    const TOTALS: [(&str, &str, &str); 6] = [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ];
    let num = |map: &HashMap<String, String>, key: &str| -> i64 {
        map.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    for (total, added, removed) in TOTALS {
        let before = parent.map_or(0, |s| num(&s.additional_properties, total));
        let value = before + num(props, added) - num(props, removed);
        props.insert(total.to_owned(), value.max(0).to_string());
    }
}
