//! A table's hot tier at run time: its logs, the append path that routes rows to them,
//! scans, tails and retention.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_array::UInt32Array;
use arrow_schema::SchemaRef;
use serde::Serialize;
use tokio::sync::{oneshot, watch};

use crate::bucket::{LogId, buckets_of, day_of_micros};
use crate::error::{Result, StoreError};
use crate::log::{Log, LogOptions, RecoveredLog};
use crate::metrics::StoreMetrics;
use crate::primary_key::{ChangeOp, PkState, StateDb};
use crate::segment::EncodedFrame;
use crate::source_marks::{SourceMarks, SourceRows};
use crate::table_def::{TableDef, TableKind};
use crate::validate::{
    check_time_bounds, key_columns, normalize, time_range, time_values, within_time,
};

/// What one append wrote: rows, and the offsets they got in each log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AppendResult {
    pub rows: u64,
    pub parts: Vec<AppendedPart>,
}

/// The rows an append wrote into one log, as an offset range `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppendedPart {
    /// `YYYY-MM-DD`, or `none` for tables without time partitions.
    pub partition: String,
    pub bucket: u32,
    #[serde(skip)]
    pub log: LogId,
    pub start_offset: u64,
    pub end_offset: u64,
}

/// An append queued in its logs' writers; see [`HotTable::begin_append`].
#[derive(Debug)]
pub struct PendingAppend {
    rows: u64,
    parts: Vec<(LogId, oneshot::Receiver<Result<Range<u64>>>)>,
}

impl PendingAppend {
    /// Waits until every part is durable and returns where the rows went.
    pub async fn durable(self) -> Result<AppendResult> {
        let mut out = AppendResult {
            rows: self.rows,
            parts: Vec::with_capacity(self.parts.len()),
        };
        for (log, done) in self.parts {
            let range = done.await.map_err(|_| {
                StoreError::Unavailable(format!("log {log} closed before the append was durable"))
            })??;
            out.parts.push(AppendedPart {
                partition: log.partition(),
                bucket: log.bucket,
                log,
                start_offset: range.start,
                end_offset: range.end,
            });
        }
        Ok(out)
    }
}

/// What a write to a primary-key table did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChangeResult {
    /// Rows in the batch.
    pub rows: u64,
    /// Changelog records written (an update writes two).
    pub changes: u64,
    /// Deletes that found no row (they write nothing).
    pub missing: u64,
    /// Their row indices in the batch.
    pub missing_rows: Vec<u64>,
    pub parts: Vec<AppendedPart>,
}

/// The answer to a lookup.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The rows found, in request order (stored schema).
    pub rows: RecordBatch,
    /// Indices (in the request) of the keys without a row.
    pub missing: Vec<u64>,
}

/// Current rows of a primary-key table with their bucket, as a snapshot reader sends them.
pub type StateStream = tokio::sync::mpsc::Receiver<Result<(u32, RecordBatch)>>;

/// A primary-key table's current rows and the log offsets they reflect.
#[derive(Debug)]
pub struct StateSnapshot {
    /// Per bucket log, the end offset the snapshot reflects (absent: nothing written).
    pub offsets: HashMap<LogId, u64>,
    pub batches: StateStream,
}

/// What retention removed from a table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    pub segments_deleted: usize,
    pub bytes_freed: u64,
}

/// The hot tier of one table.
#[derive(Debug)]
pub struct HotTable {
    /// Swapped whole when columns are added; readers take the `Arc` they start with.
    def: RwLock<Arc<TableDef>>,
    /// The RocksDB state of a primary-key table.
    pk: Option<PkState>,
    /// Per-bucket write locks of a primary-key table: reading the before images,
    /// appending the changelog and applying the state are one unit per bucket.
    bucket_locks: Vec<tokio::sync::Mutex<()>>,
    dir: PathBuf,
    logs: RwLock<BTreeMap<LogId, Arc<Log>>>,
    options: LogOptions,
    metrics: Arc<StoreMetrics>,
    commits: Arc<watch::Sender<u64>>,
    create_log: tokio::sync::Mutex<()>,
    /// What the cold tier already holds of each log (see [`LogFloor`]).
    floors: RwLock<HashMap<LogId, LogFloor>>,
    /// Primary-key buckets whose state is being rebuilt from the cold tier: until they
    /// are whole, the state is neither read nor written.
    restoring: RwLock<BTreeSet<u32>>,
}

/// What the cold tier holds of one log, which the hot tier must not write again: the
/// first offset a new log of that id starts at, and the source marks of its tiered
/// rows, below which a source's records are written already.
///
/// The tiering crate reads them from the Iceberg table when it opens it. They matter
/// when the hot tier lost what it tiered: a rebuilt data directory, or a day log whose
/// every segment retention removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFloor {
    pub first_offset: u64,
    pub marks: SourceMarks,
}

impl HotTable {
    pub(crate) fn open(
        def: TableDef,
        dir: PathBuf,
        options: LogOptions,
        metrics: Arc<StoreMetrics>,
        state: Option<Arc<StateDb>>,
    ) -> Result<Arc<Self>> {
        let pk = match (def.kind(), state) {
            (TableKind::Log, _) => None,
            (TableKind::PrimaryKey { .. }, Some(db)) => Some(PkState::new(db, &def)?),
            (TableKind::PrimaryKey { .. }, None) => {
                return Err(StoreError::InvalidDefinition(format!(
                    "{}: a primary-key table needs the store's state database",
                    def.name()
                )));
            }
        };
        let bucket_locks = match pk {
            Some(_) => (0..def.buckets()).map(|_| Default::default()).collect(),
            None => Vec::new(),
        };
        // hotgate's own tables (the audit log) are written on a thread per log, which
        // syncs in place: a call waits on each of their records.
        let options = LogOptions {
            dedicated_writer: options.dedicated_writer || def.name().is_system(),
            ..options
        };
        let (commits, _) = watch::channel(0);
        let commits = Arc::new(commits);
        let mut found = Vec::new();
        for day_entry in std::fs::read_dir(&dir).map_err(|e| StoreError::io(&dir, e))? {
            let day_entry = day_entry.map_err(|e| StoreError::io(&dir, e))?;
            if !day_entry.path().is_dir() {
                continue;
            }
            let day_dir = day_entry.file_name().to_string_lossy().into_owned();
            for bucket_entry in std::fs::read_dir(day_entry.path())
                .map_err(|e| StoreError::io(day_entry.path(), e))?
            {
                let bucket_entry = bucket_entry.map_err(|e| StoreError::io(day_entry.path(), e))?;
                let bucket_dir = bucket_entry.file_name().to_string_lossy().into_owned();
                let Some(id) = LogId::parse_dirs(&day_dir, &bucket_dir) else {
                    tracing::warn!(path = %bucket_entry.path().display(), "ignoring unknown directory");
                    continue;
                };
                found.push((id, bucket_entry.path()));
            }
        }
        let mut logs = BTreeMap::new();
        for recovered in recover_logs(found)? {
            let id = recovered.id();
            let log = Log::start(
                recovered,
                options.clone(),
                Arc::clone(&metrics),
                Arc::clone(&commits),
            )?;
            logs.insert(id, log);
        }
        let table = Arc::new(Self {
            def: RwLock::new(Arc::new(def)),
            pk,
            bucket_locks,
            dir,
            logs: RwLock::new(logs),
            options,
            metrics,
            commits,
            create_log: tokio::sync::Mutex::new(()),
            floors: RwLock::default(),
            restoring: RwLock::default(),
        });
        Ok(table)
    }

    /// The schema of the table's log frames: the stored schema, plus `_change` for a
    /// primary-key table's changelog.
    pub fn log_schema(&self) -> SchemaRef {
        match &self.pk {
            Some(pk) => pk.log_schema(),
            None => Arc::clone(self.def().stored_schema()),
        }
    }

    /// A primary-key table's state; `None` for a log table.
    pub(crate) fn primary_key_state(&self) -> Option<&PkState> {
        self.pk.as_ref()
    }

    fn pk(&self) -> Result<&PkState> {
        self.pk.as_ref().ok_or_else(|| {
            StoreError::InvalidRequest(format!(
                "{} is a log table; upserts, deletes and lookups need a primary-key table",
                self.def().name()
            ))
        })
    }

    /// The state of a primary-key table, unless part of it is being rebuilt from the
    /// cold tier: a read would miss rows, and a write would read wrong before images.
    fn whole_state(&self) -> Result<&PkState> {
        let pk = self.pk()?;
        let restoring = self.restoring.read();
        if !restoring.is_empty() {
            let list: Vec<String> = restoring.iter().map(u32::to_string).collect();
            return Err(StoreError::Unavailable(format!(
                "{}: the state of bucket(s) {} is being rebuilt from the cold tier; try again once its tiering status is ready",
                self.def().name(),
                list.join(", ")
            )));
        }
        Ok(pk)
    }

    /// Starts rebuilding the state of `buckets` from the cold tier (the hot tier lost
    /// them: a new data directory). Each must have no log yet; its rows are cleared, and
    /// the table's state is refused to readers and writers until every bucket is done.
    /// Set the floors first: a rebuilt bucket's state reflects its log up to the floor.
    pub fn begin_restore(&self, buckets: &[u32]) -> Result<()> {
        let pk = self.pk()?;
        let name = self.def().name().clone();
        for bucket in buckets {
            if *bucket >= self.def().buckets() {
                return Err(StoreError::InvalidRequest(format!(
                    "bucket {bucket} does not exist in {name}"
                )));
            }
            if self
                .log(LogId {
                    day: None,
                    bucket: *bucket,
                })
                .is_some()
            {
                return Err(StoreError::InvalidRequest(format!(
                    "{name}: bucket {bucket} has a hot log; only a bucket the hot tier lost is rebuilt"
                )));
            }
        }
        self.restoring.write().extend(buckets.iter().copied());
        for bucket in buckets {
            pk.clear_bucket(*bucket)?;
        }
        Ok(())
    }

    /// Puts rows of `bucket` read from the cold tier into its state, as they are (no
    /// changelog: the cold tier holds them already). Returns the rows put.
    pub async fn restore_rows(&self, bucket: u32, batch: &RecordBatch) -> Result<u64> {
        let pk = self.pk()?;
        let name = self.def().name().clone();
        if !self.restoring.read().contains(&bucket) {
            return Err(StoreError::InvalidRequest(format!(
                "{name}: bucket {bucket} is not being rebuilt"
            )));
        }
        let input = normalize(&self.def(), batch)?;
        let (buckets, keys) = self.keys_of(pk, &input)?;
        if let Some(other) = buckets.iter().find(|b| **b != bucket) {
            return Err(StoreError::InvalidRequest(format!(
                "{name}: a row of bucket {other} came with the cold rows of bucket {bucket}"
            )));
        }
        let _writing = self.bucket_locks[bucket as usize].lock().await;
        let applied = self
            .floors
            .read()
            .get(&LogId { day: None, bucket })
            .map_or(0, |f| f.first_offset);
        pk.restore(bucket, keys, &input, applied)?;
        Ok(input.num_rows() as u64)
    }

    /// Ends the rebuild of `bucket`: its state goes to disk, then its log is created at
    /// the floor's offset, which is what says the bucket is whole (a rebuild cut short
    /// leaves no log, and starts again).
    pub async fn finish_restore(&self, bucket: u32) -> Result<()> {
        let pk = self.pk()?;
        if !self.restoring.read().contains(&bucket) {
            return Err(StoreError::InvalidRequest(format!(
                "{}: bucket {bucket} is not being rebuilt",
                self.def().name()
            )));
        }
        {
            let _writing = self.bucket_locks[bucket as usize].lock().await;
            pk.flush()?;
        }
        self.log_for(LogId { day: None, bucket }).await?;
        self.restoring.write().remove(&bucket);
        Ok(())
    }

    /// Upserts or deletes the rows of `batch` in a primary-key table and returns once
    /// the changelog of every bucket it touches is durable and applied. A batch that
    /// fails validation writes nothing. Each bucket commits on its own.
    pub async fn write_changes(&self, batch: &RecordBatch, op: ChangeOp) -> Result<ChangeResult> {
        self.write_changes_marked(batch, op, None).await
    }

    /// [`HotTable::write_changes`] for rows that came from a source, as
    /// [`HotTable::append_from_source`] does for appends: rows whose source position
    /// the bucket's changelog holds already are skipped. `rows` in the result counts
    /// the rows not skipped.
    pub async fn write_changes_from_source(
        &self,
        batch: &RecordBatch,
        op: ChangeOp,
        rows: SourceRows<'_>,
    ) -> Result<ChangeResult> {
        if rows.positions.len() != batch.num_rows() {
            return Err(StoreError::InvalidRequest(format!(
                "{} source positions for {} rows",
                rows.positions.len(),
                batch.num_rows()
            )));
        }
        self.write_changes_marked(batch, op, Some(rows)).await
    }

    async fn write_changes_marked(
        &self,
        batch: &RecordBatch,
        op: ChangeOp,
        source: Option<SourceRows<'_>>,
    ) -> Result<ChangeResult> {
        let pk = self.whole_state()?;
        let input = match op {
            ChangeOp::Upsert => normalize(&self.def(), batch),
            ChangeOp::Delete => key_columns(&self.def(), batch, "delete"),
        }
        .inspect_err(|_| self.metrics.record_rejected())?;
        let mut result = ChangeResult {
            rows: input.num_rows() as u64,
            ..Default::default()
        };
        if input.num_rows() == 0 {
            return Ok(result);
        }
        let (buckets, keys) = self.keys_of(pk, &input)?;
        let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (row, bucket) in buckets.iter().enumerate() {
            groups.entry(*bucket).or_default().push(row as u32);
        }
        for (bucket, rows) in groups {
            let id = LogId { day: None, bucket };
            let _writing = self.bucket_locks[bucket as usize].lock().await;
            let (rows, delta) = match &source {
                None => (rows, None),
                Some(source) => {
                    let marks = self.written_marks(id);
                    let (kept, delta) = source.unwritten(&rows, marks.as_ref());
                    result.rows -= (rows.len() - kept.len()) as u64;
                    (kept, Some(delta))
                }
            };
            if rows.is_empty() {
                continue;
            }
            let part =
                arrow_select::take::take_record_batch(&input, &UInt32Array::from(rows.clone()))?;
            let part_keys: Vec<Vec<u8>> = rows.iter().map(|r| keys[*r as usize].clone()).collect();
            let changes = pk.changes(&part_keys, &part, op)?;
            result
                .missing_rows
                .extend(changes.missing.iter().map(|i| rows[*i] as u64));
            let Some(changelog) = &changes.changelog else {
                continue;
            };
            let now = chrono::Utc::now().timestamp_micros();
            let (min, max) = time_range(&self.def(), changelog, now);
            let mut frame = EncodedFrame::encode(changelog, min, max)?;
            frame.source = delta;
            let log = self.log_for(id).await?;
            let range = log.enqueue(frame).await?.await.map_err(|_| {
                StoreError::Unavailable(format!("log {id} closed before the change was durable"))
            })??;
            pk.apply_changes(bucket, &changes, range.end)?;
            result.changes += range.end - range.start;
            result.parts.push(AppendedPart {
                partition: id.partition(),
                bucket,
                log: id,
                start_offset: range.start,
                end_offset: range.end,
            });
        }
        result.missing = result.missing_rows.len() as u64;
        Ok(result)
    }

    /// The bucket and the RocksDB key of each row of `input`, which holds (at least) the
    /// key columns by name.
    fn keys_of(&self, pk: &PkState, input: &RecordBatch) -> Result<(Vec<u32>, Vec<Vec<u8>>)> {
        let bucket_key = input
            .column_by_name(&self.def().spec().bucket_key)
            .ok_or_else(|| StoreError::InvalidRequest("the bucket key is missing".into()))?;
        let buckets = buckets_of(bucket_key, self.def().buckets())?;
        let keys = pk.encode_keys(&buckets, input)?;
        Ok((buckets, keys))
    }

    /// The current rows of the keys in `keys` (which holds the key columns), in request
    /// order, with the indices of the keys that have no row.
    pub fn lookup(&self, keys: &RecordBatch) -> Result<Lookup> {
        let pk = self.whole_state()?;
        let input = key_columns(&self.def(), keys, "lookup")?;
        let (buckets, encoded) = self.keys_of(pk, &input)?;
        let (rows, missing) = pk.lookup_rows(&buckets, &encoded)?;
        Ok(Lookup { rows, missing })
    }

    /// The current rows of a primary-key table, bucket by bucket in key order.
    pub fn current_rows(&self, rows_per_batch: usize) -> Result<Vec<RecordBatch>> {
        self.current_rows_of(None, rows_per_batch)
    }

    /// The current rows of a primary-key table's `buckets` (all when `None`), bucket by
    /// bucket in key order.
    pub fn current_rows_of(
        &self,
        buckets: Option<&[u32]>,
        rows_per_batch: usize,
    ) -> Result<Vec<RecordBatch>> {
        let pk = self.whole_state()?;
        let buckets: Vec<u32> = match buckets {
            Some(b) => b.to_vec(),
            None => (0..self.def().buckets()).collect(),
        };
        let mut out = Vec::new();
        pk.scan_snapshot(
            &buckets,
            rows_per_batch,
            || {},
            |_, b| {
                out.push(b);
                true
            },
        )?;
        Ok(out)
    }

    /// Streams the current rows of a primary-key table's `buckets` (all when `None`)
    /// whose event time lies in `[since, until)`, from one RocksDB snapshot, read on a
    /// blocking thread. Each bucket's write is one atomic RocksDB batch, so the stream
    /// never shows half of a bucket's write.
    pub fn read_state(
        self: &Arc<Self>,
        buckets: Option<Vec<u32>>,
        since: Option<i64>,
        until: Option<i64>,
        rows_per_batch: usize,
    ) -> Result<StateStream> {
        self.whole_state()?;
        check_time_bounds(&self.def(), since, until)?;
        Ok(self.spawn_state_reader(buckets, (since, until), rows_per_batch, None))
    }

    /// The snapshot-then-changelog handoff: the current rows of every bucket, and the log
    /// offsets they reflect. See [`HotTable::snapshot_buckets`].
    pub async fn snapshot_state(self: &Arc<Self>, rows_per_batch: usize) -> Result<StateSnapshot> {
        self.snapshot_buckets(None, rows_per_batch).await
    }

    /// The current rows of `buckets` (all when `None`), bucket after bucket, and the log
    /// offsets they reflect. The buckets' write locks are held until the RocksDB snapshot
    /// exists, so no change is half-applied at that point: each bucket's changelog from
    /// its offset on is exactly what happened after the snapshot. Tiering dumps primary-
    /// key buckets this way.
    pub async fn snapshot_buckets(
        self: &Arc<Self>,
        buckets: Option<Vec<u32>>,
        rows_per_batch: usize,
    ) -> Result<StateSnapshot> {
        self.whole_state()?;
        let mut buckets = buckets.unwrap_or_else(|| (0..self.def().buckets()).collect());
        buckets.sort_unstable();
        buckets.dedup();
        if let Some(b) = buckets
            .iter()
            .find(|b| **b as usize >= self.bucket_locks.len())
        {
            return Err(StoreError::InvalidRequest(format!(
                "bucket {b} does not exist in {}",
                self.def().name()
            )));
        }
        let mut guards = Vec::with_capacity(buckets.len());
        for b in &buckets {
            guards.push(self.bucket_locks[*b as usize].lock().await);
        }
        let mut offsets = self.end_offsets();
        offsets.retain(|id, _| buckets.contains(&id.bucket));
        let (taken_tx, taken_rx) = oneshot::channel();
        let batches =
            self.spawn_state_reader(Some(buckets), (None, None), rows_per_batch, Some(taken_tx));
        // Whether or not the reader got its snapshot (it reports failures on `batches`),
        // the locks go once it stops trying.
        let _ = taken_rx.await;
        drop(guards);
        Ok(StateSnapshot { offsets, batches })
    }

    fn spawn_state_reader(
        self: &Arc<Self>,
        buckets: Option<Vec<u32>>,
        (since, until): (Option<i64>, Option<i64>),
        rows_per_batch: usize,
        taken: Option<oneshot::Sender<()>>,
    ) -> StateStream {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let table = Arc::clone(self);
        let buckets = buckets.unwrap_or_else(|| (0..self.def().buckets()).collect());
        tokio::task::spawn_blocking(move || {
            let Some(pk) = &table.pk else { return };
            let sent = tx.clone();
            let read = pk.scan_snapshot(
                &buckets,
                rows_per_batch,
                move || {
                    if let Some(t) = taken {
                        let _ = t.send(());
                    }
                },
                |bucket, batch| {
                    let batch = within_time(&table.def(), batch, since, until);
                    let failed = batch.is_err();
                    sent.blocking_send(batch.map(|b| (bucket, b))).is_ok() && !failed
                },
            );
            if let Err(e) = read {
                let _ = tx.blocking_send(Err(e));
            }
        });
        rx
    }

    /// The table's current definition. Columns may be added at any time, so a caller
    /// that needs one consistent view keeps the `Arc` it got.
    pub fn def(&self) -> Arc<TableDef> {
        Arc::clone(&self.def.read())
    }

    /// Replaces the definition with `next`, which must only add nullable columns at the
    /// end (see [`TableDef::with_added_columns`]); the caller has persisted it. A
    /// primary-key table switches its row encoding with every bucket's write lock held,
    /// so no write straddles the change.
    pub(crate) async fn evolve(&self, next: TableDef) -> Result<()> {
        let mut guards = Vec::with_capacity(self.bucket_locks.len());
        for lock in &self.bucket_locks {
            guards.push(lock.lock().await);
        }
        if let Some(pk) = &self.pk {
            pk.set_schema(&next)?;
        }
        *self.def.write() = Arc::new(next);
        Ok(())
    }

    /// True for a primary-key table (current state in RocksDB, a changelog in its logs).
    /// The table's directory: its definition and its logs' segments.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The files of the shared RocksDB directory that can hold a primary-key table's
    /// values (not the live SSTs of other tables); empty for a log table.
    pub(crate) fn state_files(&self) -> Result<Vec<std::path::PathBuf>> {
        match &self.pk {
            Some(pk) => pk.files(),
            None => Ok(Vec::new()),
        }
    }

    pub fn is_primary_key(&self) -> bool {
        self.pk.is_some()
    }

    /// A primary-key table's key columns, in key order (empty for a log table).
    pub fn key_columns(&self) -> Vec<String> {
        match self.def().kind() {
            TableKind::PrimaryKey { columns } => columns.clone(),
            TableKind::Log => Vec::new(),
        }
    }

    /// Validates `batch`, routes each row to its (day, bucket) log, and returns once every
    /// part is durable. A batch that fails validation writes nothing.
    ///
    /// Each log commits its part independently: if an append fails after some parts were
    /// committed, those rows stay (the caller saw an error and may retry, so delivery of
    /// failed appends is at-least-once).
    pub async fn append(&self, batch: &RecordBatch) -> Result<AppendResult> {
        self.begin_append(batch).await?.durable().await
    }

    /// The first half of [`HotTable::append`]: validates, encodes and queues the batch in
    /// its logs' writers, behind everything queued before it, and returns without waiting
    /// for the sync. Awaiting [`PendingAppend::durable`] waits for it. A caller that
    /// begins several appends in order gets them committed in that order in each log, and
    /// they may share group commits.
    pub async fn begin_append(&self, batch: &RecordBatch) -> Result<PendingAppend> {
        self.begin_append_marked(batch, None).await
    }

    /// Appends rows that came from a source (see [`crate::source_marks`]) and returns
    /// once they are durable: rows whose source position the log they route to holds
    /// already are skipped, the rest are written with their positions. One source
    /// writes a table through one appender at a time, each append after the last is
    /// durable. Returns what was written; `rows` counts only the rows not skipped.
    pub async fn append_from_source(
        &self,
        batch: &RecordBatch,
        rows: SourceRows<'_>,
    ) -> Result<AppendResult> {
        if rows.positions.len() != batch.num_rows() {
            return Err(StoreError::InvalidRequest(format!(
                "{} source positions for {} rows",
                rows.positions.len(),
                batch.num_rows()
            )));
        }
        self.begin_append_marked(batch, Some(rows))
            .await?
            .durable()
            .await
    }

    async fn begin_append_marked(
        &self,
        batch: &RecordBatch,
        source: Option<SourceRows<'_>>,
    ) -> Result<PendingAppend> {
        if self.pk.is_some() {
            return Err(StoreError::InvalidRequest(format!(
                "{} is a primary-key table: write upserts and deletes, not appends",
                self.def().name()
            )));
        }
        // One definition for the whole append, even if a column is added meanwhile.
        let def = self.def();
        let batch = normalize(&def, batch).inspect_err(|_| self.metrics.record_rejected())?;
        let mut pending = PendingAppend {
            rows: batch.num_rows() as u64,
            parts: Vec::new(),
        };
        if batch.num_rows() == 0 {
            return Ok(pending);
        }
        let times = time_values(&def, &batch).ok_or_else(|| {
            StoreError::InvalidDefinition(format!(
                "{}: a log table needs a time column",
                def.name()
            ))
        })?;
        let buckets = buckets_of(batch.column(def.bucket_index()), def.buckets())?;
        let mut groups: BTreeMap<LogId, Vec<u32>> = BTreeMap::new();
        for (row, (ts, bucket)) in times.values().iter().zip(&buckets).enumerate() {
            let id = LogId {
                day: Some(day_of_micros(*ts)),
                bucket: *bucket,
            };
            groups.entry(id).or_default().push(row as u32);
        }
        let mut frames = Vec::with_capacity(groups.len());
        for (id, rows) in groups {
            let (rows, delta) = match &source {
                None => (rows, None),
                Some(source) => {
                    let marks = self.written_marks(id);
                    let (kept, delta) = source.unwritten(&rows, marks.as_ref());
                    pending.rows -= (rows.len() - kept.len()) as u64;
                    (kept, Some(delta))
                }
            };
            if rows.is_empty() {
                continue;
            }
            let part = if rows.len() == batch.num_rows() {
                batch.clone()
            } else {
                arrow_select::take::take_record_batch(&batch, &UInt32Array::from(rows))?
            };
            let (min, max) = time_range(&def, &part, 0);
            let mut frame = EncodedFrame::encode(&part, min, max)?;
            frame.source = delta;
            frames.push((id, frame));
        }
        // Encoding is done before anything is queued, so a bad batch queues nothing.
        for (id, frame) in frames {
            let log = self.log_for(id).await?;
            pending.parts.push((id, log.enqueue(frame).await?));
        }
        Ok(pending)
    }

    async fn log_for(&self, id: LogId) -> Result<Arc<Log>> {
        if let Some(log) = self.log(id) {
            return Ok(log);
        }
        let _guard = self.create_log.lock().await;
        if let Some(log) = self.log(id) {
            return Ok(log);
        }
        let first_offset = self.floors.read().get(&id).map_or(0, |f| f.first_offset);
        let log = Log::open(
            id,
            self.dir.join(id.dir_name()),
            first_offset,
            self.options.clone(),
            Arc::clone(&self.metrics),
            Arc::clone(&self.commits),
        )?;
        self.logs.write().insert(id, Arc::clone(&log));
        Ok(log)
    }

    /// Installs what the cold tier holds of each log. A log that exists already must
    /// reach its floor's offset: one that ends below it belongs to another history (a
    /// data directory that is not this table's), and the error names it.
    pub fn set_floors(&self, floors: HashMap<LogId, LogFloor>) -> Result<()> {
        for (id, floor) in &floors {
            if let Some(log) = self.log(*id)
                && log.end_offset() < floor.first_offset
            {
                return Err(StoreError::InvalidRequest(format!(
                    "{}: log {id} ends at offset {}, but the cold tier holds its rows up to offset {}: the hot tier is not the one that tiered them",
                    self.def().name(),
                    log.end_offset(),
                    floor.first_offset
                )));
            }
        }
        *self.floors.write() = floors;
        Ok(())
    }

    /// The source marks of what log `id` holds in either tier.
    fn written_marks(&self, id: LogId) -> Option<SourceMarks> {
        let hot = self.log(id).map(|l| l.source_marks());
        let floors = self.floors.read();
        match (hot, floors.get(&id)) {
            (hot, None) => hot,
            (None, Some(floor)) => Some(floor.marks.clone()),
            (Some(mut hot), Some(floor)) => {
                hot.union(&floor.marks);
                Some(hot)
            }
        }
    }

    /// The log of one (partition, bucket), if it exists.
    pub fn log(&self, id: LogId) -> Option<Arc<Log>> {
        self.logs.read().get(&id).cloned()
    }

    /// Every log of the table, in (day, bucket) order.
    pub fn logs(&self) -> Vec<Arc<Log>> {
        self.logs.read().values().cloned().collect()
    }

    /// The highest source offset per partition of `source` among the table's durable
    /// rows, over every log.
    pub fn source_positions(&self, source: &str) -> BTreeMap<i32, i64> {
        let mut all = SourceMarks::default();
        for log in self.logs() {
            all.union(&log.source_marks());
        }
        for floor in self.floors.read().values() {
            all.union(&floor.marks);
        }
        all.of(source)
    }

    /// The durable end offset of every log.
    pub fn end_offsets(&self) -> HashMap<LogId, u64> {
        self.logs()
            .iter()
            .map(|l| (l.id(), l.end_offset()))
            .collect()
    }

    /// Changes after every group commit in any log of the table, including the first
    /// commit of a new log.
    pub fn watch_commits(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }

    /// Deletes the segments committed before `now - hot_retention` that lie wholly below
    /// the tiered watermark of their log (`watermarks` holds the first untiered offset of
    /// each log; a log without an entry has nothing tiered). With tiering off, the
    /// watermark is not consulted.
    pub async fn apply_retention(
        &self,
        now_micros: i64,
        watermarks: &HashMap<LogId, u64>,
    ) -> Result<RetentionReport> {
        let cutoff = now_micros.saturating_sub(micros(self.def().hot_retention()));
        let mut report = RetentionReport::default();
        for log in self.logs() {
            let gate = if self.def().tiering().enabled {
                Some(watermarks.get(&log.id()).copied().unwrap_or(0))
            } else {
                None
            };
            let (segments, bytes) = log.retain(cutoff, gate).await?;
            report.segments_deleted += segments;
            report.bytes_freed += bytes;
        }
        Ok(report)
    }

    /// Deletes, from every log of the table, the rows `delete` marks (true: delete),
    /// rewriting only the segments that hold one. Every other row keeps its offset; a
    /// deleted row's slot holds blanks that reads skip. `delete` sees whole rows in the
    /// log schema (a primary-key changelog's include `_change`).
    /// With `buckets`, only the logs of those buckets are read: the caller knows no
    /// other bucket can hold a match (its predicate fixes the bucket key).
    pub async fn delete_rows(
        &self,
        buckets: Option<&[u32]>,
        delete: &(dyn Fn(&RecordBatch) -> Result<arrow_array::BooleanArray> + Sync),
    ) -> Result<crate::log::RewriteReport> {
        let schema = self.log_schema();
        let trailing = usize::from(self.is_primary_key());
        let mut total = crate::log::RewriteReport::default();
        for log in self.logs() {
            if buckets.is_some_and(|b| !b.contains(&log.id().bucket)) {
                continue;
            }
            total += log.delete_rows(&schema, trailing, delete).await?;
        }
        Ok(total)
    }

    /// Erases the keys in `keys` (a batch holding the key columns) from a primary-key
    /// table: deletes them with `-D` records, then removes every changelog record of
    /// those keys (their whole history, the `-D` included) by rewrite, then compacts
    /// RocksDB so their old values leave the SST files. Replaying the changelog after
    /// this yields the same state: the keys never appear.
    pub async fn erase_keys(
        &self,
        keys: &RecordBatch,
    ) -> Result<(ChangeResult, crate::log::RewriteReport)> {
        let pk = self.pk()?;
        let deleted = self.write_changes(keys, ChangeOp::Delete).await?;
        let input = key_columns(&self.def(), keys, "erase")?;
        let (mut buckets, encoded) = self.keys_of(pk, &input)?;
        buckets.sort_unstable();
        buckets.dedup();
        let doomed: std::collections::HashSet<Vec<u8>> = encoded.into_iter().collect();
        let rewrite = self
            .delete_rows(Some(&buckets), &|batch| {
                let (_, found) = self.keys_of(pk, batch)?;
                Ok(arrow_array::BooleanArray::from_iter(
                    found.iter().map(|k| Some(doomed.contains(k))),
                ))
            })
            .await?;
        pk.compact()?;
        Ok((deleted, rewrite))
    }

    /// Stops every log's writer after its queued appends are durable.
    pub(crate) async fn close(&self) {
        for log in self.logs() {
            log.close().await;
        }
    }
}

/// Logs recovered at once when a table opens. Recovery is mostly reads of frame
/// headers spread over many files; after a machine restart they come from the disk,
/// which serves several at once about as fast as one.
const RECOVERY_THREADS: usize = 8;

/// Recovers the logs `found` (id and directory) on up to [`RECOVERY_THREADS`] threads,
/// in order; the first failure fails the table.
fn recover_logs(found: Vec<(LogId, PathBuf)>) -> Result<Vec<RecoveredLog>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<parking_lot::Mutex<Option<Result<RecoveredLog>>>> = found
        .iter()
        .map(|_| parking_lot::Mutex::new(None))
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..RECOVERY_THREADS.min(found.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((id, dir)) = found.get(i) else {
                        break;
                    };
                    *slots[i].lock() = Some(Log::recover(*id, dir.clone(), 0));
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("every log was recovered by one of the threads")
        })
        .collect()
}

/// A duration in microseconds, saturating.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
