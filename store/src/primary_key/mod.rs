//! Primary-key tables: the current row per key in RocksDB, the changes in the bucket logs.
//!
//! **The log is the source of truth.** A write of one bucket, under that bucket's lock:
//! 1. reads the current rows of its keys (RocksDB, then earlier rows of the same batch);
//! 2. builds the changelog rows (`+I`, `-U`/`+U`, `-D`; before images from step 1);
//! 3. appends them to the bucket's log and waits until they are durable;
//! 4. applies the new rows to RocksDB in one write batch that also records the log offset
//!    it reflects (`applied`), without RocksDB's WAL.
//!
//! After a crash RocksDB holds some consistent earlier state with its `applied` offset
//! (the batch is atomic), and `state_recovery::catch_up` replays the log from there. A change is
//! acknowledged only after step 3, so every acknowledged change reaches both, and a
//! change cut from the log's torn tail never reached RocksDB.
//!
//! Keys: `bucket (u32 BE) | arrow-row encoding of the key columns`, so a bucket's keys
//! are contiguous and ordered. Values: a format byte, the column count (u32 BE), then the
//! arrow-row encoding of every stored column, decodable back into Arrow arrays.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rocksdb::{WriteBatch, WriteOptions};

use crate::error::{Result, StoreError};
use crate::state_cache::{CachedRow, TableCache};
use crate::table_def::{TableDef, TableKind};

mod state_db;

pub use state_db::StateDb;
use state_db::rocks;

/// The changelog column of a primary-key table's log.
pub const CHANGE_COLUMN: &str = "_change";
/// Where each table's applied log offsets are kept: key `<table>/<bucket>`.
const APPLIED_CF: &str = "_applied";
const VALUE_FORMAT: u8 = 1;

/// What a batch written to a primary-key table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    /// Insert or replace each row (last write wins).
    Upsert,
    /// Delete the rows with these keys; only key columns are read.
    Delete,
}

/// A changelog row kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    UpdateBefore,
    UpdateAfter,
    Delete,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Insert => "+I",
            ChangeKind::UpdateBefore => "-U",
            ChangeKind::UpdateAfter => "+U",
            ChangeKind::Delete => "-D",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "+I" => ChangeKind::Insert,
            "-U" => ChangeKind::UpdateBefore,
            "+U" => ChangeKind::UpdateAfter,
            "-D" => ChangeKind::Delete,
            _ => return None,
        })
    }
}

/// How a string value appears in the bytes of primary-key state (keys and rows use
/// the arrow row format, which cuts strings into short blocks with continuation bytes):
/// what a search of RocksDB files must look for besides the plain bytes.
pub fn state_bytes_of_string(value: &str) -> Result<Vec<u8>> {
    let converter = RowConverter::new(vec![SortField::new(arrow_schema::DataType::Utf8)])?;
    let array: arrow_array::ArrayRef = Arc::new(arrow_array::StringArray::from(vec![value]));
    let rows = converter.convert_columns(&[array])?;
    Ok(rows.row(0).as_ref().to_vec())
}

/// One primary-key table's state.
pub struct PkState {
    db: Arc<StateDb>,
    cache: TableCache,
    cf_name: String,
    key_indices: Vec<usize>,
    keys: RowConverter,
    /// Swapped whole when columns are added.
    codec: parking_lot::RwLock<Arc<RowCodec>>,
}

/// How whole rows are encoded as RocksDB values: the stored schema of the current
/// definition. Each value records its column count, so values written before columns
/// were added decode with the shorter schema and read the new columns as null.
struct RowCodec {
    rows: RowConverter,
    stored: SchemaRef,
    log_schema: SchemaRef,
}

impl RowCodec {
    fn new(stored: SchemaRef) -> Result<Self> {
        Ok(Self {
            rows: row_converter(&stored, stored.fields().len())?,
            log_schema: changelog_schema(&stored),
            stored,
        })
    }
}

/// A row converter for the first `count` columns of `stored`.
fn row_converter(stored: &Schema, count: usize) -> Result<RowConverter> {
    Ok(RowConverter::new(
        stored.fields()[..count]
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
}

impl std::fmt::Debug for PkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PkState")
            .field("cf", &self.cf_name)
            .finish()
    }
}

/// The schema of a primary-key table's log: the stored columns, then `_change`.
pub fn changelog_schema(stored: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = stored.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(CHANGE_COLUMN, DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// The changes one bucket's write makes: changelog rows and the final state per key.
#[derive(Debug)]
pub(crate) struct BucketChanges {
    /// In the log schema; `None` when nothing changed.
    pub changelog: Option<RecordBatch>,
    /// Final value per key (`None`: deleted), to apply once the changelog is durable.
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Rows of the input whose delete found no current row.
    pub missing: Vec<usize>,
}

impl PkState {
    pub(crate) fn new(db: Arc<StateDb>, def: &TableDef) -> Result<Self> {
        let TableKind::PrimaryKey { columns } = def.kind() else {
            return Err(StoreError::InvalidDefinition(format!(
                "{} is not a primary-key table",
                def.name()
            )));
        };
        let stored = Arc::clone(def.stored_schema());
        let key_indices = columns
            .iter()
            .map(|c| stored.index_of(c))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let sort = |i: &usize| SortField::new(stored.field(*i).data_type().clone());
        let keys = RowConverter::new(key_indices.iter().map(sort).collect())?;
        let cf_name = def.name().to_string();
        db.cf(&cf_name)?;
        Ok(Self {
            cache: db.cache.table(def.buckets()),
            db,
            cf_name,
            key_indices,
            keys,
            codec: parking_lot::RwLock::new(Arc::new(RowCodec::new(stored)?)),
        })
    }

    fn codec(&self) -> Arc<RowCodec> {
        Arc::clone(&self.codec.read())
    }

    /// Switches to `def`'s stored schema, which adds columns at the end of the current
    /// one (the caller holds every bucket's write lock).
    pub(crate) fn set_schema(&self, def: &TableDef) -> Result<()> {
        let codec = RowCodec::new(Arc::clone(def.stored_schema()))?;
        *self.codec.write() = Arc::new(codec);
        Ok(())
    }

    pub fn log_schema(&self) -> SchemaRef {
        Arc::clone(&self.codec().log_schema)
    }

    /// The stored schema rows are encoded in.
    pub fn stored_schema(&self) -> SchemaRef {
        Arc::clone(&self.codec().stored)
    }

    pub fn key_indices(&self) -> &[usize] {
        &self.key_indices
    }

    fn applied_key(&self, bucket: u32) -> Vec<u8> {
        format!("{}/{bucket}", self.cf_name).into_bytes()
    }

    /// The files of the shared RocksDB directory that can hold this table's values:
    /// every file there except the live SST files of other tables' column families and
    /// the MANIFEST. Obsolete SSTs not yet deleted are included, whatever their column
    /// family. The MANIFEST is rewritten at every version edit, so it holds only the
    /// key bounds of live SSTs: this table's are searched with its SSTs (a bound is a
    /// key in the file), other tables' are theirs to keep.
    pub(crate) fn files(&self) -> Result<Vec<std::path::PathBuf>> {
        let dir = self.db.db.path().to_path_buf();
        let others: std::collections::HashSet<std::path::PathBuf> = self
            .db
            .db
            .live_files()
            .map_err(|e| rocks("list live files", e))?
            .into_iter()
            .filter(|f| f.column_family_name != self.cf_name)
            .map(|f| dir.join(f.name.trim_start_matches('/')))
            .collect();
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| StoreError::io(&dir, e))? {
            let path = entry.map_err(|e| StoreError::io(&dir, e))?.path();
            let manifest = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST-"));
            if path.is_file() && !manifest && !others.contains(&path) {
                files.push(path);
            }
        }
        Ok(files)
    }

    /// Compacts the table's whole key range, so deleted values leave the SST files.
    pub(crate) fn compact(&self) -> Result<()> {
        let cf = self.db.cf(&self.cf_name)?;
        self.db
            .db
            .compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
        Ok(())
    }

    /// The log offset the bucket's state reflects (rows `[0, applied)` are applied).
    pub fn applied(&self, bucket: u32) -> Result<u64> {
        let cf = self.db.cf(APPLIED_CF)?;
        let v = self
            .db
            .db
            .get_cf(&cf, self.applied_key(bucket))
            .map_err(|e| rocks("read applied offset", e))?;
        Ok(v.and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// The RocksDB keys of `batch`'s rows (which hold the key columns by name).
    pub(crate) fn encode_keys(&self, bucket: &[u32], batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let codec = self.codec();
        let columns = self
            .key_indices
            .iter()
            .map(|i| {
                let name = codec.stored.field(*i).name();
                batch.column_by_name(name).cloned().ok_or_else(|| {
                    StoreError::InvalidRequest(format!("key column {name} is missing"))
                })
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let rows = self.keys.convert_columns(&columns)?;
        Ok((0..batch.num_rows())
            .map(|i| {
                let mut k = Vec::with_capacity(4 + rows.row(i).as_ref().len());
                k.extend_from_slice(&bucket[i].to_be_bytes());
                k.extend_from_slice(rows.row(i).as_ref());
                k
            })
            .collect())
    }

    /// Encodes whole rows; a batch of fewer columns than the stored schema (normalized
    /// before a column was added) gets nulls for the rest.
    fn encode_rows(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let codec = self.codec();
        let mut columns = batch.columns().to_vec();
        for field in &codec.stored.fields()[columns.len().min(codec.stored.fields().len())..] {
            columns.push(arrow_array::new_null_array(
                field.data_type(),
                batch.num_rows(),
            ));
        }
        let rows = codec.rows.convert_columns(&columns)?;
        let count = (columns.len() as u32).to_be_bytes();
        Ok((0..batch.num_rows())
            .map(|i| {
                let r = rows.row(i);
                let mut v = Vec::with_capacity(5 + r.as_ref().len());
                v.push(VALUE_FORMAT);
                v.extend_from_slice(&count);
                v.extend_from_slice(r.as_ref());
                v
            })
            .collect())
    }

    /// Decodes stored values into a batch of the current stored schema. Values written
    /// with fewer columns (before columns were added) get nulls for the others.
    pub(crate) fn decode_rows<'a>(
        &self,
        values: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RecordBatch> {
        let codec = self.codec();
        let width = codec.stored.fields().len();
        let corrupt = |detail: String| StoreError::corrupt(Path::new(&self.cf_name), detail);
        // Runs of values with the same column count decode together, in order.
        let mut runs: Vec<(usize, Vec<&[u8]>)> = Vec::new();
        for v in values {
            if v.len() < 5 || v[0] != VALUE_FORMAT {
                return Err(corrupt("a stored row has an unknown format".into()));
            }
            let count = u32::from_be_bytes([v[1], v[2], v[3], v[4]]) as usize;
            if count == 0 || count > width {
                return Err(corrupt(format!(
                    "a stored row has {count} columns, the table {width}"
                )));
            }
            match runs.last_mut() {
                Some((c, run)) if *c == count => run.push(&v[5..]),
                _ => runs.push((count, vec![&v[5..]])),
            }
        }
        let mut batches = Vec::with_capacity(runs.len());
        for (count, run) in runs {
            let older;
            let converter = if count == width {
                &codec.rows
            } else {
                older = row_converter(&codec.stored, count)?;
                &older
            };
            let parser = converter.parser();
            let rows: Vec<_> = run.iter().map(|r| parser.parse(r)).collect();
            // The row format trusts its input and may panic on bytes it did not write; a
            // damaged value must fail this read as corrupt, not take the process down.
            let converted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                converter.convert_rows(rows)
            }))
            .map_err(|_| corrupt("a stored row could not be decoded".into()))?;
            let mut columns = converted
                .map_err(|e| corrupt(format!("a stored row could not be decoded: {e}")))?;
            let n = run.len();
            for field in &codec.stored.fields()[count..] {
                columns.push(arrow_array::new_null_array(field.data_type(), n));
            }
            batches.push(RecordBatch::try_new(Arc::clone(&codec.stored), columns)?);
        }
        match batches.len() {
            0 => Ok(RecordBatch::new_empty(Arc::clone(&codec.stored))),
            1 => Ok(batches.remove(0)),
            _ => Ok(arrow_select::concat::concat_batches(
                &codec.stored,
                &batches,
            )?),
        }
    }

    /// The current rows of `keys` (of `buckets[i]` each), in order, with the indices of
    /// the keys that have no row. Rows come from the state cache where it has them, the
    /// rest from one batched RocksDB `MultiGet`; see [`crate::state_cache`] for why a
    /// lookup never shows half of a bucket's write.
    pub(crate) fn lookup_rows(
        &self,
        buckets: &[u32],
        keys: &[Vec<u8>],
    ) -> Result<(RecordBatch, Vec<u64>)> {
        let cf = self.db.cf(&self.cf_name)?;
        if !self.cache.enabled() {
            let values = self.db.db.batched_multi_get_cf(&cf, keys, false);
            let values = values
                .iter()
                .map(|v| match v {
                    Ok(v) => Ok(v.as_deref()),
                    Err(e) => Err(rocks("multi_get", e.clone())),
                })
                .collect::<Result<Vec<_>>>()?;
            return self.decode_found(values);
        }
        // Request indices per bucket, buckets in first-seen order.
        let mut by_bucket: Vec<(u32, Vec<usize>)> = Vec::new();
        for (i, b) in buckets.iter().enumerate() {
            match by_bucket.iter_mut().find(|(bucket, _)| bucket == b) {
                Some((_, idx)) => idx.push(i),
                None => by_bucket.push((*b, vec![i])),
            }
        }
        let mut cached: Vec<Option<CachedRow>> = vec![None; keys.len()];
        let mut probes = Vec::with_capacity(by_bucket.len());
        let mut misses: Vec<usize> = Vec::new();
        for (bucket, idx) in &by_bucket {
            let mut hits = 0;
            let mut slots = idx.iter();
            let probe = self
                .cache
                .probe(*bucket, idx.iter().map(|i| keys[*i].as_slice()), |v| {
                    if let Some(&i) = slots.next() {
                        hits += usize::from(v.is_some());
                        match v {
                            Some(v) => cached[i] = Some(v),
                            None => misses.push(i),
                        }
                    }
                });
            probes.push((probe, hits));
        }
        misses.sort_unstable();
        let fetched = self
            .db
            .db
            .batched_multi_get_cf(&cf, misses.iter().map(|i| &keys[*i]), false);
        let mut fetched_at: Vec<Option<usize>> = vec![None; keys.len()];
        for (n, i) in misses.iter().enumerate() {
            fetched_at[*i] = Some(n);
        }
        // Buckets whose cached rows and fetched rows may straddle a write: read again,
        // whole, from RocksDB alone.
        let mut reread: Vec<usize> = Vec::new();
        for ((bucket, idx), (probe, hits)) in by_bucket.iter().zip(&probes) {
            let rows = idx.iter().filter_map(|i| {
                let v = fetched[fetched_at[*i]?].as_ref().ok()?.as_deref()?;
                Some((keys[*i].as_slice(), v))
            });
            if !self.cache.settle(*bucket, probe, rows) && *hits > 0 {
                reread.extend(idx);
            }
        }
        reread.sort_unstable();
        let again = self
            .db
            .db
            .batched_multi_get_cf(&cf, reread.iter().map(|i| &keys[*i]), false);
        let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(keys.len());
        let mut again_at = reread.iter().zip(&again).peekable();
        for (i, hit) in cached.iter().enumerate() {
            let slot = match again_at.peek() {
                Some((j, v)) if **j == i => {
                    let v = *v;
                    again_at.next();
                    v
                }
                _ => match (hit, fetched_at[i]) {
                    (Some(v), _) => {
                        values.push(Some(v));
                        continue;
                    }
                    (None, Some(n)) => &fetched[n],
                    (None, None) => {
                        values.push(None);
                        continue;
                    }
                },
            };
            match slot {
                Ok(v) => values.push(v.as_deref()),
                Err(e) => return Err(rocks("multi_get", e.clone())),
            }
        }
        self.decode_found(values)
    }

    /// Decodes the rows of a lookup, noting the indices of keys without one.
    fn decode_found(&self, values: Vec<Option<&[u8]>>) -> Result<(RecordBatch, Vec<u64>)> {
        let mut missing = Vec::new();
        let mut found = Vec::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            match v {
                Some(v) => found.push(v),
                None => missing.push(i as u64),
            }
        }
        Ok((self.decode_rows(found)?, missing))
    }

    /// The current values of `keys`, in order (one batched RocksDB `MultiGet`).
    pub(crate) fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let cf = self.db.cf(&self.cf_name)?;
        self.db
            .db
            .batched_multi_get_cf(&cf, keys, false)
            .into_iter()
            .map(|r| {
                r.map(|v| v.map(|v| v.to_vec()))
                    .map_err(|e| rocks("multi_get", e))
            })
            .collect()
    }

    /// Works out what `batch` (rows of one bucket, in the stored schema for upserts, or
    /// holding the key columns for deletes) changes, reading the current rows. The
    /// caller holds the bucket's lock from here until [`PkState::apply`].
    pub(crate) fn changes(
        &self,
        keys: &[Vec<u8>],
        batch: &RecordBatch,
        op: ChangeOp,
    ) -> Result<BucketChanges> {
        let mut unique: Vec<Vec<u8>> = keys.to_vec();
        unique.sort();
        unique.dedup();
        let current = self.get_many(&unique)?;
        let mut state: HashMap<&[u8], Option<Vec<u8>>> =
            unique.iter().map(Vec::as_slice).zip(current).collect();
        let new_values = match op {
            ChangeOp::Upsert => Some(self.encode_rows(batch)?),
            ChangeOp::Delete => None,
        };
        let mut log_rows: Vec<(ChangeKind, Vec<u8>)> = Vec::new();
        let mut missing = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let slot = state
                .get_mut(key.as_slice())
                .ok_or_else(|| StoreError::Unavailable("a key vanished mid-write".into()))?;
            match (&new_values, slot.take()) {
                (Some(values), None) => {
                    log_rows.push((ChangeKind::Insert, values[i].clone()));
                    *slot = Some(values[i].clone());
                }
                (Some(values), Some(old)) => {
                    log_rows.push((ChangeKind::UpdateBefore, old));
                    log_rows.push((ChangeKind::UpdateAfter, values[i].clone()));
                    *slot = Some(values[i].clone());
                }
                (None, Some(old)) => log_rows.push((ChangeKind::Delete, old)),
                (None, None) => missing.push(i),
            }
        }
        let changelog = if log_rows.is_empty() {
            None
        } else {
            let rows = self.decode_rows(log_rows.iter().map(|(_, v)| v.as_slice()))?;
            let kinds = StringArray::from_iter_values(log_rows.iter().map(|(k, _)| k.as_str()));
            let mut columns = rows.columns().to_vec();
            columns.push(Arc::new(kinds));
            Some(RecordBatch::try_new(self.log_schema(), columns)?)
        };
        let writes = state.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
        Ok(BucketChanges {
            changelog,
            writes,
            missing,
        })
    }

    /// Applies a bucket's final values and records that the state reflects its log up to
    /// `applied`, in one atomic RocksDB write (no WAL: the log is the WAL).
    pub(crate) fn apply(
        &self,
        bucket: u32,
        writes: &[(Vec<u8>, Option<Vec<u8>>)],
        applied: u64,
    ) -> Result<()> {
        let cf = self.db.cf(&self.cf_name)?;
        let meta = self.db.cf(APPLIED_CF)?;
        let mut batch = WriteBatch::default();
        for (k, v) in writes {
            match v {
                Some(v) => batch.put_cf(&cf, k, v),
                None => batch.delete_cf(&cf, k),
            }
        }
        batch.put_cf(&meta, self.applied_key(bucket), applied.to_be_bytes());
        let mut options = WriteOptions::default();
        options.disable_wal(true);
        self.cache.write_through(bucket, writes, || {
            self.db
                .db
                .write_opt(batch, &options)
                .map_err(|e| rocks("write", e))
        })
    }

    pub(crate) fn apply_changes(
        &self,
        bucket: u32,
        changes: &BucketChanges,
        applied: u64,
    ) -> Result<()> {
        self.apply(bucket, &changes.writes, applied)
    }

    /// Removes every row of `bucket` from the state, before the bucket is rebuilt from
    /// the cold tier (a rebuild cut short leaves rows that the next one must not keep).
    pub(crate) fn clear_bucket(&self, bucket: u32) -> Result<()> {
        let cf = self.db.cf(&self.cf_name)?;
        let mut batch = WriteBatch::default();
        let end = u64::from(bucket) + 1;
        let end = match u32::try_from(end) {
            Ok(next) => next.to_be_bytes().to_vec(),
            // The last bucket: every key starts with its four bytes.
            Err(_) => vec![0xff; 5],
        };
        batch.delete_range_cf(&cf, bucket.to_be_bytes().to_vec(), end);
        self.db
            .db
            .write(batch)
            .map_err(|e| rocks("clear a bucket", e))
    }

    /// Puts the rows of `batch` (the stored schema, every row of `bucket`, keys
    /// encoded in `keys`) into the state as they are, and records `applied`: a rebuild
    /// from the cold tier, which holds no changelog.
    pub(crate) fn restore(
        &self,
        bucket: u32,
        keys: Vec<Vec<u8>>,
        batch: &RecordBatch,
        applied: u64,
    ) -> Result<()> {
        let values = self.encode_rows(batch)?;
        let writes: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            keys.into_iter().zip(values.into_iter().map(Some)).collect();
        self.apply(bucket, &writes, applied)
    }

    /// Flushes the table's rows, then the applied offsets, to SST files. State writes
    /// skip RocksDB's WAL because the log can replay them; rows rebuilt from the cold
    /// tier have no log to replay them from, so they must be on disk before anything
    /// says the bucket is whole.
    pub(crate) fn flush(&self) -> Result<()> {
        let cf = self.db.cf(&self.cf_name)?;
        self.db
            .db
            .flush_cf(&cf)
            .map_err(|e| rocks("flush the state", e))?;
        let meta = self.db.cf(APPLIED_CF)?;
        self.db
            .db
            .flush_cf(&meta)
            .map_err(|e| rocks("flush the applied offsets", e))
    }

    /// Replays changelog rows (log schema) read from offset `applied` on: `+I`/`+U` put
    /// the row, `-D` deletes it, `-U` changes nothing.
    pub(crate) fn replay(&self, bucket: u32, batch: &RecordBatch, applied: u64) -> Result<()> {
        let kinds = batch
            .column_by_name(CHANGE_COLUMN)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| {
                StoreError::corrupt(Path::new(&self.cf_name), "changelog without _change")
            })?;
        let width = self.codec().stored.fields().len();
        let stored = batch.project(&(0..width).collect::<Vec<_>>())?;
        let keys = self.encode_keys(&vec![bucket; batch.num_rows()], &stored)?;
        let values = self.encode_rows(&stored)?;
        let mut writes = Vec::with_capacity(batch.num_rows());
        for (i, key) in keys.into_iter().enumerate() {
            match ChangeKind::parse(kinds.value(i)) {
                Some(ChangeKind::Insert | ChangeKind::UpdateAfter) => {
                    writes.push((key, Some(values[i].clone())))
                }
                Some(ChangeKind::Delete) => writes.push((key, None)),
                Some(ChangeKind::UpdateBefore) => {}
                None => {
                    return Err(StoreError::corrupt(
                        Path::new(&self.cf_name),
                        format!("unknown change kind {:?}", kinds.value(i)),
                    ));
                }
            }
        }
        self.apply(bucket, &writes, applied)
    }

    /// Streams the current rows of `buckets`, each bucket in key order, `chunk` rows per
    /// batch, all read from one RocksDB snapshot. `taken` runs once the snapshot exists
    /// (a caller holding write locks releases them there); `emit` returning false stops.
    pub(crate) fn scan_snapshot(
        &self,
        buckets: &[u32],
        chunk: usize,
        taken: impl FnOnce(),
        mut emit: impl FnMut(u32, RecordBatch) -> bool,
    ) -> Result<()> {
        let cf = self.db.cf(&self.cf_name)?;
        let snapshot = self.db.db.snapshot();
        taken();
        let chunk = chunk.max(1);
        for &bucket in buckets {
            let prefix = bucket.to_be_bytes();
            let mut options = rocksdb::ReadOptions::default();
            options.set_iterate_range(rocksdb::PrefixRange(&prefix[..]));
            let mut values: Vec<Box<[u8]>> = Vec::with_capacity(chunk);
            for item in snapshot.iterator_cf_opt(&cf, options, rocksdb::IteratorMode::Start) {
                let (_, v) = item.map_err(|e| rocks("scan", e))?;
                values.push(v);
                if values.len() == chunk {
                    let batch = self.decode_rows(values.iter().map(|v| v.as_ref()))?;
                    values.clear();
                    if !emit(bucket, batch) {
                        return Ok(());
                    }
                }
            }
            if !values.is_empty()
                && !emit(bucket, self.decode_rows(values.iter().map(|v| v.as_ref()))?)
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table_def::TableSpec;

    #[test]
    fn a_damaged_value_is_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), 1 << 20).unwrap();
        let spec: TableSpec = serde_json::from_value(serde_json::json!({
            "namespace": "app", "name": "kv",
            "columns": [
                {"name": "k", "type": "int64", "nullable": false},
                {"name": "v", "type": "string"}
            ],
            "bucket_key": "k", "buckets": 1, "primary_key": ["k"]
        }))
        .unwrap();
        let state = PkState::new(db, &TableDef::new(spec).unwrap()).unwrap();
        // The right header, then bytes the row format never wrote.
        let mut value = vec![VALUE_FORMAT, 0, 0, 0, 2];
        value.extend_from_slice(&[0xff; 7]);
        let err = state.decode_rows([value.as_slice()]).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{err}");
        let err = state.decode_rows([&[9u8, 0, 0][..]]).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{err}");
    }
}
