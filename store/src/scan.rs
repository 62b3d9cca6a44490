//! Reads of the hot tier: planned scans with projection, time range and offset bounds,
//! and tails that follow a log as it grows.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use tokio::sync::watch;

use crate::bucket::LogId;
use crate::error::{Result, StoreError};
use crate::hot_table::HotTable;
use crate::log::PlannedFrame;
use crate::segment::{FrameMeta, IpcFrame, read_frame, read_frame_ipc};
use crate::table_def::UTC;
use crate::validate::{check_time_bounds, time_mask};

/// What to read from a table's hot tier. The default reads everything.
#[derive(Debug, Clone, Default)]
pub struct ScanRequest {
    /// Columns to return, in this order; `None` returns every stored column.
    pub columns: Option<Vec<String>>,
    /// Only rows with event time `>= since` (µs since epoch).
    pub since: Option<i64>,
    /// Only rows with event time `< until` (µs since epoch).
    pub until: Option<i64>,
    /// Only these logs; `None` reads every log.
    pub logs: Option<Vec<LogId>>,
    /// Only the logs of these buckets (every day's); `None` reads every bucket.
    pub buckets: Option<Vec<u32>>,
    /// Per-log first offset to read (inclusive); absent logs start at their beginning.
    pub start_offsets: HashMap<LogId, u64>,
    /// Per-log end offset (exclusive); absent logs end at their durable end when planned.
    pub end_offsets: HashMap<LogId, u64>,
    /// Append `_bucket`, `_offset` and `_commit_ts` to every row (see [`change_meta_fields`]).
    pub change_meta: bool,
}

/// Rows from one frame of one log.
#[derive(Debug, Clone)]
pub struct ScannedBatch {
    pub log: LogId,
    /// The offsets the scan considered in this frame. With a time range, rows outside it
    /// were removed, so `batch` may hold fewer rows than the range.
    pub offsets: Range<u64>,
    pub batch: RecordBatch,
}

/// The column indices a request projects, and the schema it produces.
pub(crate) fn resolve_projection(
    table: &HotTable,
    columns: Option<&[String]>,
    change_meta: bool,
) -> Result<(Vec<usize>, SchemaRef)> {
    resolve_projection_in(table, &table.log_schema(), columns, change_meta)
}

/// [`resolve_projection`] against a log schema the caller already holds, so indices and
/// schema agree even if a column is added meanwhile.
fn resolve_projection_in(
    table: &HotTable,
    schema: &SchemaRef,
    columns: Option<&[String]>,
    change_meta: bool,
) -> Result<(Vec<usize>, SchemaRef)> {
    let projection: Vec<usize> = match columns {
        None => (0..schema.fields().len()).collect(),
        Some(cols) => cols
            .iter()
            .map(|c| {
                schema.index_of(c).map_err(|_| {
                    let known: Vec<&str> =
                        schema.fields().iter().map(|f| f.name().as_str()).collect();
                    StoreError::InvalidRequest(format!(
                        "unknown column {c:?} in table {}; it has columns {}",
                        table.def().name(),
                        known.join(", ")
                    ))
                })
            })
            .collect::<Result<_>>()?,
    };
    let mut projected = schema.project(&projection)?;
    if change_meta {
        let mut fields: Vec<Field> = projected
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(change_meta_fields());
        projected = Schema::new(fields);
    }
    Ok((projection, Arc::new(projected)))
}

/// The bucket of a changelog row.
pub const BUCKET_COLUMN: &str = "_bucket";
/// The offset of a changelog row in its log.
pub const OFFSET_COLUMN: &str = "_offset";
/// When the row's frame was committed (µs, UTC).
pub const COMMIT_TS_COLUMN: &str = "_commit_ts";

/// The columns [`ScanRequest::change_meta`] appends. `_offset` and `_commit_ts` are
/// nullable so a snapshot's rows, which have no single change behind them, fit the
/// same schema.
pub fn change_meta_fields() -> [Field; 3] {
    [
        Field::new(BUCKET_COLUMN, DataType::UInt32, false),
        Field::new(OFFSET_COLUMN, DataType::Int64, true),
        Field::new(
            COMMIT_TS_COLUMN,
            DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            true,
        ),
    ]
}

/// A planned scan; an iterator over [`ScannedBatch`]es in (log, offset) order.
#[derive(Debug)]
pub struct HotScan {
    table_schema: SchemaRef,
    /// Columns after the stored ones in every frame (`_change` of a primary-key log).
    trailing: usize,
    schema: SchemaRef,
    projection: Vec<usize>,
    time_index: Option<usize>,
    since: Option<i64>,
    until: Option<i64>,
    change_meta: bool,
    frames: VecDeque<PlannedFrame>,
}

impl HotScan {
    pub(crate) fn plan(table: &HotTable, request: &ScanRequest) -> Result<Self> {
        let table_schema = table.log_schema();
        let (projection, schema) = resolve_projection_in(
            table,
            &table_schema,
            request.columns.as_deref(),
            request.change_meta,
        )?;
        if let (Some(s), Some(u)) = (request.since, request.until)
            && s >= u
        {
            return Err(StoreError::InvalidRequest(format!(
                "empty time range: since ({s}) must be before until ({u})"
            )));
        }
        check_time_bounds(&table.def(), request.since, request.until)?;
        let mut frames = Vec::new();
        for log in table.logs() {
            let id = log.id();
            if request.logs.as_ref().is_some_and(|l| !l.contains(&id))
                || request
                    .buckets
                    .as_ref()
                    .is_some_and(|b| !b.contains(&id.bucket))
            {
                continue;
            }
            let start = request.start_offsets.get(&log.id()).copied().unwrap_or(0);
            let end = request
                .end_offsets
                .get(&log.id())
                .copied()
                .unwrap_or_else(|| log.end_offset());
            if start < end {
                log.plan(start..end, request.since, request.until, &mut frames);
            }
        }
        Ok(Self {
            table_schema,
            trailing: usize::from(table.is_primary_key()),
            schema,
            projection,
            time_index: table.def().time_index(),
            since: request.since,
            until: request.until,
            change_meta: request.change_meta,
            frames: frames.into(),
        })
    }

    /// The schema of the batches this scan yields.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// How many frames the plan kept after pruning (for tests and metrics).
    pub fn planned_frames(&self) -> usize {
        self.frames.len()
    }

    /// Whether every row of the frame lies inside the scan's time range, so none needs
    /// filtering by time.
    fn inside(&self, meta: &FrameMeta) -> bool {
        self.time_index.is_none()
            || self.since.is_none_or(|s| meta.min_event_ts >= s)
                && self.until.is_none_or(|u| meta.max_event_ts < u)
    }

    fn read(&self, planned: &PlannedFrame) -> Result<RecordBatch> {
        let meta = &planned.meta;
        // Without a time column there are no time bounds (refused when planned).
        let time_index = self.time_index.unwrap_or_default();
        let inside = self.inside(meta);
        // Rows must be filtered by time: read the time column too, then drop it.
        let extra_time = !inside && !self.projection.contains(&time_index);
        let mut projection = self.projection.clone();
        if extra_time {
            projection.push(time_index);
        }
        let mut batch = read_frame(
            &planned.file,
            &planned.path,
            meta,
            &self.table_schema,
            &projection,
            self.trailing,
        )?;
        let skip = (planned.rows.start - meta.base_offset) as usize;
        let take = (planned.rows.end - planned.rows.start) as usize;
        if skip > 0 || take < batch.num_rows() {
            batch = batch.slice(skip, take);
        }
        let mut meta_columns: Vec<ArrayRef> = Vec::new();
        // Rows a rewrite deleted are blanks in their slots: skip them.
        let keep = crate::log::sidecar::keep_mask(&planned.deleted, planned.rows.clone());
        if self.change_meta {
            let rows = planned.rows.clone();
            meta_columns.push(Arc::new(UInt32Array::from(vec![planned.log.bucket; take])));
            meta_columns.push(Arc::new(Int64Array::from_iter_values(
                rows.map(|o| o as i64),
            )));
            meta_columns.push(Arc::new(
                TimestampMicrosecondArray::from(vec![meta.commit_ts; take]).with_timezone(UTC),
            ));
        }
        if let Some(keep) = &keep {
            batch = arrow_select::filter::filter_record_batch(&batch, keep)?;
            for c in &mut meta_columns {
                *c = arrow_select::filter::filter(c, keep)?;
            }
        }
        if !inside {
            let pos = projection
                .iter()
                .position(|p| *p == time_index)
                .unwrap_or_default();
            let mask = time_mask(
                batch.column(pos).as_primitive::<TimestampMicrosecondType>(),
                self.since,
                self.until,
            )?;
            batch = arrow_select::filter::filter_record_batch(&batch, &mask)?;
            if extra_time {
                batch = batch.project(&(0..self.projection.len()).collect::<Vec<_>>())?;
            }
            for c in &mut meta_columns {
                *c = arrow_select::filter::filter(c, &mask)?;
            }
        }
        if self.change_meta {
            let mut columns = batch.columns().to_vec();
            columns.extend(meta_columns);
            batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        }
        Ok(batch)
    }
}

/// One item of [`HotScan::next_item`]: a frame as stored, or decoded rows.
#[derive(Debug, Clone)]
pub enum ScannedItem {
    /// A whole frame's rows as its stored IPC, projected, not decoded.
    Ipc {
        log: LogId,
        offsets: Range<u64>,
        frame: IpcFrame,
    },
    Batch(ScannedBatch),
}

impl HotScan {
    /// The next item, where a frame that needs no row work comes back as its stored
    /// IPC bytes, projected and not decoded: wholly inside the time range,
    /// every row of it in the scan and none deleted, no change metadata asked for, and
    /// its projected body at most `max_body` bytes. Every other frame is decoded as
    /// [`Iterator::next`] does. The items are the same rows, in the same order.
    pub fn next_item(&mut self, max_body: usize) -> Option<Result<ScannedItem>> {
        loop {
            let planned = self.frames.pop_front()?;
            match self.read_ipc(&planned, max_body) {
                Ok(Some(frame)) if frame.rows == 0 => continue,
                Ok(Some(frame)) => {
                    return Some(Ok(ScannedItem::Ipc {
                        log: planned.log,
                        offsets: planned.rows,
                        frame,
                    }));
                }
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            if let Some(decoded) = self.decoded(planned).transpose() {
                return Some(decoded.map(ScannedItem::Batch));
            }
        }
    }

    /// A frame's rows decoded, or `None` when the scan keeps none of them.
    fn decoded(&self, planned: PlannedFrame) -> Result<Option<ScannedBatch>> {
        let batch = self.read(&planned)?;
        Ok((batch.num_rows() > 0).then(|| ScannedBatch {
            log: planned.log,
            offsets: planned.rows,
            batch,
        }))
    }

    fn read_ipc(&self, planned: &PlannedFrame, max_body: usize) -> Result<Option<IpcFrame>> {
        let meta = &planned.meta;
        let inside = self.inside(meta);
        let whole = planned.rows.start == meta.base_offset && planned.rows.end == meta.end_offset();
        let deleted = crate::log::sidecar::keep_mask(&planned.deleted, planned.rows.clone());
        if self.change_meta || !inside || !whole || deleted.is_some() {
            return Ok(None);
        }
        read_frame_ipc(
            &planned.file,
            &planned.path,
            meta,
            &self.table_schema,
            &self.projection,
            max_body,
        )
    }
}

impl Iterator for HotScan {
    type Item = Result<ScannedBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let planned = self.frames.pop_front()?;
            if let Some(decoded) = self.decoded(planned).transpose() {
                return Some(decoded);
            }
        }
    }
}

const TAIL_READ_AHEAD_FRAMES: usize = 64;

/// Follows one log from an offset, returning each newly committed frame. Waits are
/// woken by the log's writer after each group commit: no polling.
#[derive(Debug)]
pub struct Tail {
    table: Arc<HotTable>,
    log: LogId,
    next_offset: u64,
    columns: Option<Vec<String>>,
    commits: watch::Receiver<u64>,
    pending: VecDeque<ScannedBatch>,
}

impl Tail {
    pub(crate) fn new(
        table: Arc<HotTable>,
        log: LogId,
        from_offset: u64,
        columns: Option<Vec<String>>,
    ) -> Result<Self> {
        // Fail now, not at the first row, on a bad column.
        resolve_projection(&table, columns.as_deref(), false)?;
        let commits = table.watch_commits();
        Ok(Self {
            table,
            log,
            next_offset: from_offset,
            columns,
            commits,
            pending: VecDeque::new(),
        })
    }

    /// The offset of the next row this tail will return.
    pub fn position(&self) -> u64 {
        self.next_offset
    }

    /// Waits for and returns the next committed rows at or after the tail's position.
    pub async fn next(&mut self) -> Result<ScannedBatch> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                self.next_offset = b.offsets.end;
                return Ok(b);
            }
            // Mark the current commit count seen before looking, so a commit that lands
            // between the look and the wait still wakes us.
            self.commits.borrow_and_update();
            if let Some(log) = self.table.log(self.log)
                && log.end_offset() > self.next_offset
            {
                let request = ScanRequest {
                    columns: self.columns.clone(),
                    logs: Some(vec![self.log]),
                    start_offsets: HashMap::from([(self.log, self.next_offset)]),
                    ..Default::default()
                };
                let scan = self.table.scan(&request)?;
                // Bounded read-ahead keeps a tail far behind from loading everything.
                let batches = tokio::task::spawn_blocking(move || {
                    scan.take(TAIL_READ_AHEAD_FRAMES)
                        .collect::<Result<Vec<_>>>()
                })
                .await
                .map_err(|e| StoreError::Unavailable(format!("tail read failed: {e}")))??;
                self.pending.extend(batches);
                continue;
            }
            self.commits
                .changed()
                .await
                .map_err(|_| StoreError::Unavailable("table closed".into()))?;
        }
    }
}

/// Reading a table: its scans, tails and projections (here, so that `hot_table` does not
/// depend on the reader of its own files).
impl HotTable {
    /// The schema a read of `columns` yields (`None`: every stored column), or an error
    /// naming the unknown column and the table's columns.
    pub fn projected_schema(&self, columns: Option<&[String]>) -> Result<SchemaRef> {
        resolve_projection(self, columns, false).map(|(_, schema)| schema)
    }

    /// Plans a scan. Reading happens as the returned iterator is consumed; it does
    /// blocking file I/O, so async callers drive it from a blocking task.
    pub fn scan(&self, request: &ScanRequest) -> Result<HotScan> {
        HotScan::plan(self, request)
    }

    /// Follows one log from `from_offset`, waking on each commit.
    pub fn tail(
        self: &Arc<Self>,
        log: LogId,
        from_offset: u64,
        columns: Option<Vec<String>>,
    ) -> Result<Tail> {
        Tail::new(Arc::clone(self), log, from_offset, columns)
    }
}
