//! One hot log: the segments of a (day partition, bucket), its group-committing writer
//! task, and the durable end offset that readers and subscribers follow.
//!
//! Durability: a single writer task per log drains every append queued since its last
//! flush, writes them with one `pwrite` and one `fdatasync`, and only then publishes the
//! frames to readers and acknowledges each appender (group commit). Readers therefore
//! never see bytes that a crash could take back.
//!
//! Preallocation: after a small commit the writer keeps zeroed space written ahead of the
//! active segment's end, so the next small commit overwrites blocks the file already
//! has. Its `fdatasync` then flushes data only; an append that grows the file also
//! commits the file system's journal, which on a small VM doubles the sync's median and
//! stretches its tail. An all-zero frame header is where the written part of a segment
//! ends ([`crate::segment::scan_segment`]); a segment is cut to its written part when it
//! is rolled and when the log closes.

use std::fs::{self, File, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::bucket::LogId;
use crate::error::{Result, StoreError};
use crate::fs::{create_dir_durable, sync_dir};
use crate::metrics::StoreMetrics;
use crate::segment::{
    EncodedFrame, FrameMeta, parse_segment_file_name, scan_segment, segment_path,
};

/// Queue depth per log before appenders wait (backpressure).
const QUEUE_DEPTH: usize = 4096;

/// Groups smaller than this are latency-bound: the writer preallocates after them.
/// Bigger groups are bandwidth-bound, and zeroing ahead would write their bytes twice.
const SMALL_GROUP_BYTES: u64 = 64 * 1024;
/// Bounds of the zeroed space kept ahead of the active segment's end; within them it
/// grows with the segment, so a quiet log wastes little and a busy one extends rarely.
const PREALLOCATE_MIN: u64 = 64 * 1024;
const PREALLOCATE_MAX: u64 = 4 * 1024 * 1024;

/// The clock that stamps commits, in µs since the epoch: the system clock, except in
/// simulations (the tiering benchmark's simulated day).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    pub fn system() -> Self {
        Self(Arc::new(now_micros))
    }

    /// A clock that reads `f`.
    pub fn from_fn(f: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    pub fn now(&self) -> i64 {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now())
    }
}

/// Tuning of the logs; the defaults suit production.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A segment is rolled once it reaches this size.
    pub segment_bytes: u64,
    /// Upper bound of the bytes one group commit writes.
    pub max_group_bytes: u64,
    /// Stamps each group commit's `commit_ts`.
    pub clock: Clock,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 * 1024 * 1024,
            max_group_bytes: 16 * 1024 * 1024,
            clock: Clock::system(),
        }
    }
}

/// A segment as readers see it: its durable frames and their bounds.
#[derive(Debug, Clone)]
pub(crate) struct SegmentEntry {
    pub base_offset: u64,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub frames: Vec<FrameMeta>,
    pub size: u64,
    pub max_commit_ts: i64,
    pub min_event_ts: i64,
    pub max_event_ts: i64,
    /// Offsets deleted by a rewrite (sorted): their rows are blanks that reads skip.
    pub deleted: Arc<Vec<u64>>,
}

impl SegmentEntry {
    fn new(base_offset: u64, path: PathBuf, file: File) -> Self {
        Self {
            base_offset,
            path,
            file: Arc::new(file),
            frames: Vec::new(),
            size: 0,
            max_commit_ts: i64::MIN,
            min_event_ts: i64::MAX,
            max_event_ts: i64::MIN,
            deleted: Arc::default(),
        }
    }

    fn push(&mut self, meta: FrameMeta) {
        self.size = meta.position + meta.frame_len();
        self.max_commit_ts = self.max_commit_ts.max(meta.commit_ts);
        self.min_event_ts = self.min_event_ts.min(meta.min_event_ts);
        self.max_event_ts = self.max_event_ts.max(meta.max_event_ts);
        self.frames.push(meta);
    }

    pub(crate) fn end_offset(&self) -> u64 {
        self.frames
            .last()
            .map_or(self.base_offset, FrameMeta::end_offset)
    }
}

/// A frame chosen by a read plan, with the offsets of the rows wanted from it.
#[derive(Debug, Clone)]
pub(crate) struct PlannedFrame {
    pub log: LogId,
    pub path: PathBuf,
    pub file: Arc<File>,
    pub meta: FrameMeta,
    pub rows: Range<u64>,
    /// The segment's deleted offsets, which the read skips.
    pub deleted: Arc<Vec<u64>>,
}

enum WriterMsg {
    Append(EncodedFrame, oneshot::Sender<Result<Range<u64>>>),
    Roll(oneshot::Sender<Result<()>>),
}

/// The state only the writer task touches.
struct ActiveSegment {
    file: File,
    path: PathBuf,
    /// Bytes of frames written.
    size: u64,
    /// The file's length: `size` plus any zeroed space preallocated after it.
    allocated: u64,
    next_offset: u64,
}

impl ActiveSegment {
    /// Where preallocation should extend the file to after a group of `group_bytes`,
    /// if anywhere.
    fn preallocation_target(&self, group_bytes: u64, segment_bytes: u64) -> Option<u64> {
        if group_bytes >= SMALL_GROUP_BYTES || self.size >= segment_bytes {
            return None;
        }
        let ahead = (self.size / 2).clamp(PREALLOCATE_MIN, PREALLOCATE_MAX);
        if self.allocated >= self.size + ahead / 2 {
            return None;
        }
        let target = (self.size + ahead).min(segment_bytes);
        (target > self.allocated.max(self.size)).then_some(target)
    }

    /// Writes zeros from the end of the file (or of the frames) up to `target`, and
    /// syncs them, so that later small commits overwrite allocated blocks. A failure
    /// costs only speed: the next commit appends as if nothing was preallocated.
    fn preallocate(&mut self, target: u64) {
        let from = self.allocated.max(self.size);
        match write_zeros(&self.file, from, target).and_then(|()| self.file.sync_data()) {
            Ok(()) => self.allocated = target,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "cannot preallocate: {e}");
                // Whatever part was written is zeros: still the end of the frames.
                self.allocated = self
                    .file
                    .metadata()
                    .map_or(self.size, |m| m.len().max(self.size));
            }
        }
    }

    /// Cuts the file back to its frames (before a roll or at close), so that only the
    /// active segment ever has preallocated space. Failing leaves zeros, which readers
    /// take for the end anyway.
    fn trim(&mut self) {
        if self.allocated <= self.size {
            return;
        }
        match self
            .file
            .set_len(self.size)
            .and_then(|()| self.file.sync_data())
        {
            Ok(()) => self.allocated = self.size,
            Err(e) => tracing::warn!(path = %self.path.display(), "cannot trim: {e}"),
        }
    }
}

/// Writes zeros over `from..to` of `file`, from one static block (a fresh zeroed
/// buffer of up to 4 MiB per preallocation cost page faults on the writer).
fn write_zeros(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64);
        file.write_all_at(&ZEROS[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// The untiered part of a log, as [`Log::pending`] measures it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub rows: u64,
    pub bytes: u64,
    /// Commit time (µs since the epoch) of the oldest pending frame.
    pub oldest_commit_ts: Option<i64>,
}

/// One (partition, bucket) log.
#[derive(Debug)]
pub struct Log {
    id: LogId,
    dir: PathBuf,
    segments: RwLock<Vec<SegmentEntry>>,
    end: watch::Sender<u64>,
    tx: Mutex<Option<mpsc::Sender<WriterMsg>>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Held by a row-deleting rewrite and by retention: they both replace or remove
    /// sealed segments.
    rewriting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for WriterMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriterMsg::Append(..) => "Append",
            WriterMsg::Roll(..) => "Roll",
        })
    }
}

fn open_segment_files(path: &Path, create: bool) -> Result<(File, File)> {
    let writer = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| StoreError::io(path, e))?;
    let reader = File::open(path).map_err(|e| StoreError::io(path, e))?;
    Ok((writer, reader))
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering the active segment's tail, and
    /// starts its writer task.
    pub(crate) fn open(
        id: LogId,
        dir: PathBuf,
        options: LogOptions,
        metrics: Arc<StoreMetrics>,
        on_commit: Arc<watch::Sender<u64>>,
    ) -> Result<Arc<Self>> {
        create_dir_durable(&dir)?;
        let mut bases: Vec<u64> = fs::read_dir(&dir)
            .map_err(|e| StoreError::io(&dir, e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| parse_segment_file_name(&e.file_name().to_string_lossy()))
            .collect();
        bases.sort_unstable();

        let mut segments: Vec<SegmentEntry> = Vec::new();
        let mut active: Option<ActiveSegment> = None;
        let mut roll_after_recovery = false;
        for (i, base) in bases.iter().copied().enumerate() {
            let path = segment_path(&dir, base);
            let last = i + 1 == bases.len();
            if let Some(prev) = segments.last()
                && prev.end_offset() != base
            {
                return Err(StoreError::corrupt(
                    &path,
                    format!(
                        "segment starts at offset {base} but the previous one ends at {}",
                        prev.end_offset()
                    ),
                ));
            }
            let (writer, reader) = open_segment_files(&path, false)?;
            let scanned = scan_segment(&reader, &path, base, last)?;
            if let Some(problem) = &scanned.tail_problem {
                if !last {
                    return Err(StoreError::corrupt(&path, problem.clone()));
                }
                tracing::warn!(
                    path = %path.display(),
                    valid_len = scanned.valid_len,
                    "cutting torn tail: {problem}"
                );
                writer
                    .set_len(scanned.valid_len)
                    .and_then(|()| writer.sync_all())
                    .map_err(|e| StoreError::io(&path, e))?;
                roll_after_recovery = !scanned.frames.is_empty();
            }
            let mut entry = SegmentEntry::new(base, path.clone(), reader);
            for f in scanned.frames {
                entry.push(f);
            }
            entry.deleted = Arc::new(crate::rewrite::read_deleted(&path)?);
            entry.size = scanned.valid_len;
            if last {
                let allocated = writer
                    .metadata()
                    .map_err(|e| StoreError::io(&path, e))?
                    .len();
                active = Some(ActiveSegment {
                    file: writer,
                    path,
                    size: entry.size,
                    allocated,
                    next_offset: entry.end_offset(),
                });
            }
            segments.push(entry);
        }
        let mut active = match active {
            Some(a) => a,
            None => {
                let (a, entry) = create_segment(&dir, 0)?;
                segments.push(entry);
                a
            }
        };
        if roll_after_recovery {
            // Recovery cut a torn tail: continue in a fresh segment.
            let (a, entry) = create_segment(&dir, active.next_offset)?;
            segments.push(entry);
            active = a;
        }

        let (end, _) = watch::channel(active.next_offset);
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let log = Arc::new(Log {
            id,
            dir,
            segments: RwLock::new(segments),
            end,
            tx: Mutex::new(Some(tx)),
            task: Mutex::new(None),
            rewriting: tokio::sync::Mutex::new(()),
        });
        let task = tokio::spawn(writer_loop(
            Arc::clone(&log),
            rx,
            active,
            options,
            metrics,
            on_commit,
        ));
        *log.task.lock() = Some(task);
        Ok(log)
    }

    pub fn id(&self) -> LogId {
        self.id
    }

    /// The offset the next appended row will get; every row below it is durable.
    pub fn end_offset(&self) -> u64 {
        *self.end.borrow()
    }

    /// The first offset still held in the hot tier.
    pub fn start_offset(&self) -> u64 {
        self.segments.read().first().map_or(0, |s| s.base_offset)
    }

    /// What lies at and past `from`: the frame bytes (IPC, about what Parquet will hold
    /// before compression), the rows, and the commit time of the oldest such frame.
    /// Tiering's cadence reads it to decide whether a log is due.
    pub fn pending(&self, from: u64) -> Pending {
        let mut pending = Pending::default();
        let segments = self.segments.read();
        for seg in segments.iter().filter(|s| s.end_offset() > from) {
            let first = seg.frames.partition_point(|f| f.end_offset() <= from);
            for f in &seg.frames[first..] {
                let rows = f.end_offset() - f.base_offset.max(from);
                pending.rows += rows;
                // A frame cut by `from` counts in proportion to the rows wanted from it.
                pending.bytes += f.payload_len as u64 * rows / (f.record_count.max(1) as u64);
                pending.oldest_commit_ts = Some(
                    pending
                        .oldest_commit_ts
                        .map_or(f.commit_ts, |t: i64| t.min(f.commit_ts)),
                );
            }
        }
        pending
    }

    /// Follows the durable end offset; it changes after every group commit.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.end.subscribe()
    }

    /// Queues a frame behind every frame queued before it; the returned receiver yields
    /// the offsets of its rows once they are durable.
    pub(crate) async fn enqueue(
        &self,
        frame: EncodedFrame,
    ) -> Result<oneshot::Receiver<Result<Range<u64>>>> {
        let (ack, done) = oneshot::channel();
        self.send(WriterMsg::Append(frame, ack)).await?;
        Ok(done)
    }

    async fn send(&self, msg: WriterMsg) -> Result<()> {
        let tx = self.tx.lock().clone().ok_or_else(|| self.closed())?;
        tx.send(msg).await.map_err(|_| self.closed())
    }

    fn closed(&self) -> StoreError {
        StoreError::Unavailable(format!("log {} is closed", self.id))
    }

    /// Stops accepting appends and waits until everything queued is durable.
    pub(crate) async fn close(&self) {
        self.tx.lock().take();
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Chooses the frames holding rows in `rows` whose event-time bounds overlap
    /// `[since, until)`.
    pub(crate) fn plan(
        &self,
        rows: Range<u64>,
        since: Option<i64>,
        until: Option<i64>,
        out: &mut Vec<PlannedFrame>,
    ) {
        let overlaps =
            |min: i64, max: i64| since.is_none_or(|s| max >= s) && until.is_none_or(|u| min < u);
        let segments = self.segments.read();
        for seg in segments.iter() {
            if seg.frames.is_empty()
                || seg.end_offset() <= rows.start
                || seg.base_offset >= rows.end
                || !overlaps(seg.min_event_ts, seg.max_event_ts)
            {
                continue;
            }
            let first = seg.frames.partition_point(|f| f.end_offset() <= rows.start);
            for f in &seg.frames[first..] {
                if f.base_offset >= rows.end {
                    break;
                }
                if !overlaps(f.min_event_ts, f.max_event_ts) {
                    continue;
                }
                out.push(PlannedFrame {
                    log: self.id,
                    path: seg.path.clone(),
                    file: Arc::clone(&seg.file),
                    meta: *f,
                    rows: f.base_offset.max(rows.start)..f.end_offset().min(rows.end),
                    deleted: Arc::clone(&seg.deleted),
                });
            }
        }
    }

    /// Deletes, oldest first, the segments whose rows were all committed before
    /// `cutoff_commit_ts` and lie below `watermark` (`None`: no watermark gate, for tables
    /// with tiering off). The active segment is rolled first when it qualifies, so the
    /// log keeps an (empty) segment that remembers its next offset.
    pub(crate) async fn retain(
        &self,
        cutoff_commit_ts: i64,
        watermark: Option<u64>,
    ) -> Result<(usize, u64)> {
        // Not while a rewrite runs: it would bring a deleted segment back by renaming.
        let _no_rewrite = self.rewriting.lock().await;
        let qualifies = |s: &SegmentEntry| {
            s.max_commit_ts < cutoff_commit_ts && watermark.is_none_or(|w| s.end_offset() <= w)
        };
        let roll = {
            let segments = self.segments.read();
            segments
                .last()
                .is_some_and(|s| !s.frames.is_empty() && qualifies(s))
        };
        if roll {
            let (ack, done) = oneshot::channel();
            self.send(WriterMsg::Roll(ack)).await?;
            done.await.map_err(|_| self.closed())??;
        }
        let removed: Vec<SegmentEntry> = {
            let mut segments = self.segments.write();
            let keep_from = segments
                .iter()
                .take(segments.len().saturating_sub(1))
                .position(|s| !(s.frames.is_empty() || qualifies(s)))
                .unwrap_or(segments.len().saturating_sub(1));
            segments.drain(..keep_from).collect()
        };
        let mut bytes = 0;
        for seg in &removed {
            bytes += seg.size;
            fs::remove_file(&seg.path).map_err(|e| StoreError::io(&seg.path, e))?;
            let sidecar = crate::rewrite::sidecar_path(&seg.path);
            match fs::remove_file(&sidecar) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&sidecar, e)),
            }
        }
        if !removed.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok((removed.len(), bytes))
    }
}

/// What a row-deleting rewrite did to one log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RewriteReport {
    pub segments_rewritten: usize,
    pub rows_deleted: u64,
    /// Size of the segments rewritten, before.
    pub bytes_rewritten: u64,
}

impl std::ops::AddAssign for RewriteReport {
    fn add_assign(&mut self, other: Self) {
        self.segments_rewritten += other.segments_rewritten;
        self.rows_deleted += other.rows_deleted;
        self.bytes_rewritten += other.bytes_rewritten;
    }
}

impl Log {
    /// Deletes the rows `delete` marks from every segment of the log, keeping every other
    /// row's offset (see the `rewrite` module). The active segment is rolled first, so
    /// only sealed segments are rewritten. `schema` is the table's log schema, whose last
    /// `trailing` columns end every frame; `delete` gets each frame's rows in it and
    /// returns true for rows to delete.
    pub(crate) async fn delete_rows(
        &self,
        schema: &arrow_schema::SchemaRef,
        trailing: usize,
        delete: &(dyn Fn(&arrow_array::RecordBatch) -> Result<arrow_array::BooleanArray> + Sync),
    ) -> Result<RewriteReport> {
        let _one = self.rewriting.lock().await;
        let roll = self
            .segments
            .read()
            .last()
            .is_some_and(|s| !s.frames.is_empty());
        if roll {
            let (ack, done) = oneshot::channel();
            self.send(WriterMsg::Roll(ack)).await?;
            done.await.map_err(|_| self.closed())??;
        }
        let sealed: Vec<SegmentEntry> = {
            let segments = self.segments.read();
            segments[..segments.len().saturating_sub(1)]
                .iter()
                .filter(|s| !s.frames.is_empty())
                .cloned()
                .collect()
        };
        let mut report = RewriteReport::default();
        for SegmentEntry {
            base_offset: base,
            path,
            file,
            frames,
            deleted,
            size,
            ..
        } in sealed
        {
            let all: Vec<usize> = (0..schema.fields().len()).collect();
            let mut out: Vec<u8> = Vec::with_capacity(size as usize);
            let mut newly: Vec<u64> = Vec::new();
            for meta in &frames {
                let batch = crate::segment::read_frame(&file, &path, meta, schema, &all, trailing)?;
                let marked = delete(&batch)?;
                let mut keep = Vec::with_capacity(batch.num_rows());
                let mut changed = false;
                for (i, m) in marked.iter().enumerate() {
                    let offset = meta.base_offset + i as u64;
                    let gone = m == Some(true) && deleted.binary_search(&offset).is_err();
                    if gone {
                        newly.push(offset);
                        changed = true;
                    }
                    keep.push(!gone);
                }
                if !changed {
                    let start = out.len();
                    out.resize(start + meta.frame_len() as usize, 0);
                    file.read_exact_at(&mut out[start..], meta.position)
                        .map_err(|e| StoreError::io(&path, e))?;
                    continue;
                }
                // Re-encode with the frame's own columns, its header fields unchanged.
                let column_count = meta.column_count as usize;
                let kept = column_count - trailing;
                let first_trailing = schema.fields().len() - trailing;
                let own: Vec<usize> = (0..kept)
                    .chain(first_trailing..schema.fields().len())
                    .collect();
                let blanked = crate::rewrite::blank_rows(
                    &batch.project(&own)?,
                    &arrow_array::BooleanArray::from(keep),
                )?;
                let frame = EncodedFrame::encode(&blanked, meta.min_event_ts, meta.max_event_ts)?;
                frame.write_to(&mut out, meta.base_offset, meta.commit_ts);
            }
            if newly.is_empty() {
                continue;
            }
            // New bytes first, then the sidecar, then the swap: a crash in between
            // leaves the old segment (rewritten again on retry) with a sidecar that
            // already hides the rows.
            let tmp = path.with_extension("log.rewrite");
            crate::fs::write_synced(&tmp, &out, 0o640)?;
            let mut all_deleted: Vec<u64> = deleted
                .iter()
                .copied()
                .chain(newly.iter().copied())
                .collect();
            all_deleted.sort_unstable();
            all_deleted.dedup();
            crate::rewrite::write_deleted(&path, &all_deleted)?;
            crate::fs::rename_durable(&tmp, &path)?;
            let (_, reader) = open_segment_files(&path, false)?;
            let scanned = scan_segment(&reader, &path, base, true)?;
            if let Some(problem) = scanned.tail_problem {
                return Err(StoreError::corrupt(
                    &path,
                    format!("rewritten segment: {problem}"),
                ));
            }
            let mut entry = SegmentEntry::new(base, path.clone(), reader);
            for f in scanned.frames {
                entry.push(f);
            }
            entry.deleted = Arc::new(all_deleted);
            let mut segments = self.segments.write();
            if let Some(slot) = segments.iter_mut().find(|s| s.base_offset == base) {
                *slot = entry;
            }
            report.segments_rewritten += 1;
            report.rows_deleted += newly.len() as u64;
            report.bytes_rewritten += size;
        }
        Ok(report)
    }
}

fn create_segment(dir: &Path, base_offset: u64) -> Result<(ActiveSegment, SegmentEntry)> {
    let path = segment_path(dir, base_offset);
    let (writer, reader) = open_segment_files(&path, true)?;
    writer.sync_all().map_err(|e| StoreError::io(&path, e))?;
    sync_dir(dir)?;
    Ok((
        ActiveSegment {
            file: writer,
            path: path.clone(),
            size: 0,
            allocated: 0,
            next_offset: base_offset,
        },
        SegmentEntry::new(base_offset, path, reader),
    ))
}

async fn writer_loop(
    log: Arc<Log>,
    mut rx: mpsc::Receiver<WriterMsg>,
    active: ActiveSegment,
    options: LogOptions,
    metrics: Arc<StoreMetrics>,
    on_commit: Arc<watch::Sender<u64>>,
) {
    // `None` once a failed write could not be undone: the log refuses everything after.
    let mut active = Some(active);
    let mut poisoned = String::new();
    while let Some(first) = rx.recv().await {
        let mut appends = Vec::new();
        let mut rolls = Vec::new();
        let mut bytes = 0u64;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                WriterMsg::Append(frame, ack) => {
                    bytes += frame.frame_len();
                    appends.push((frame, ack));
                }
                WriterMsg::Roll(ack) => rolls.push(ack),
            }
            if bytes < options.max_group_bytes {
                next = rx.try_recv().ok();
            }
        }
        let fail = |reason: &str| {
            StoreError::Unavailable(format!("log {} failed earlier: {reason}", log.id))
        };
        let Some(mut current) = active.take() else {
            appends
                .into_iter()
                .for_each(|(_, ack)| drop(ack.send(Err(fail(&poisoned)))));
            rolls
                .into_iter()
                .for_each(|ack| drop(ack.send(Err(fail(&poisoned)))));
            continue;
        };
        let mut committed_bytes = None;
        if !appends.is_empty() {
            match commit_group(&log, current, appends, &metrics, &options.clock).await {
                Ok(a) => {
                    current = a;
                    committed_bytes = Some(bytes);
                    on_commit.send_modify(|n| *n += 1);
                }
                Err((Some(a), reason)) => {
                    tracing::error!(log = %log.id, "log write failed and was undone: {reason}");
                    current = a;
                }
                Err((None, reason)) => {
                    tracing::error!(log = %log.id, "log write failed; the log is closed: {reason}");
                    rolls
                        .into_iter()
                        .for_each(|ack| drop(ack.send(Err(fail(&reason)))));
                    poisoned = reason;
                    continue;
                }
            }
        }
        let must_roll =
            current.size >= options.segment_bytes || (!rolls.is_empty() && current.size > 0);
        let mut roll_error = None;
        if must_roll {
            current.trim();
            match create_segment(&log.dir, current.next_offset) {
                Ok((a, entry)) => {
                    log.segments.write().push(entry);
                    current = a;
                }
                Err(e) => roll_error = Some(e.to_string()),
            }
        }
        for ack in rolls {
            let _ = ack.send(match &roll_error {
                None => Ok(()),
                Some(e) => Err(StoreError::Unavailable(format!(
                    "cannot roll log {}: {e}",
                    log.id
                ))),
            });
        }
        if let Some(target) = committed_bytes
            .filter(|_| !must_roll || roll_error.is_some())
            .and_then(|b| current.preallocation_target(b, options.segment_bytes))
        {
            current = match tokio::task::spawn_blocking(move || {
                current.preallocate(target);
                current
            })
            .await
            {
                Ok(c) => c,
                Err(e) => {
                    // The segment's file went with the task: close the log.
                    poisoned = format!("preallocation task failed: {e}");
                    tracing::error!(log = %log.id, "{poisoned}; the log is closed");
                    continue;
                }
            };
        }
        active = Some(current);
    }
    if let Some(mut current) = active {
        current.trim();
    }
}

type Ack = oneshot::Sender<Result<Range<u64>>>;

/// Writes one group with one `pwrite` and one `fdatasync`, then publishes and acks it.
/// On failure the active segment is cut back to its last durable size; if even that
/// fails, the segment is returned as `None` and the log is poisoned.
async fn commit_group(
    log: &Arc<Log>,
    active: ActiveSegment,
    appends: Vec<(EncodedFrame, Ack)>,
    metrics: &StoreMetrics,
    clock: &Clock,
) -> std::result::Result<ActiveSegment, (Option<ActiveSegment>, String)> {
    let commit_ts = clock.now();
    let total: u64 = appends.iter().map(|(f, _)| f.frame_len()).sum();
    let mut buf = Vec::with_capacity(total as usize);
    let mut metas = Vec::with_capacity(appends.len());
    let mut acks = Vec::with_capacity(appends.len());
    let mut offset = active.next_offset;
    let mut position = active.size;
    for (frame, ack) in appends {
        let mut meta = frame.write_to(&mut buf, offset, commit_ts);
        meta.position = position;
        position += meta.frame_len();
        acks.push((ack, offset..meta.end_offset()));
        offset = meta.end_offset();
        metas.push(meta);
    }
    let rows = offset - active.next_offset;
    let group_size = acks.len();
    let start = active.size;
    let joined = tokio::task::spawn_blocking(move || {
        let res = active
            .file
            .write_all_at(&buf, start)
            .and_then(|()| active.file.sync_data());
        (active, res)
    })
    .await;
    let (mut active, res) = match joined {
        Ok(pair) => pair,
        Err(e) => {
            let reason = format!("writer task failed: {e}");
            for (ack, _) in acks {
                let _ = ack.send(Err(StoreError::Unavailable(reason.clone())));
            }
            return Err((None, reason));
        }
    };
    if let Err(e) = res {
        let reason = format!("write to {} failed: {e}", active.path.display());
        for (ack, _) in acks {
            let _ = ack.send(Err(StoreError::io(
                &active.path,
                std::io::Error::new(e.kind(), e.to_string()),
            )));
        }
        let restored = active
            .file
            .set_len(start)
            .and_then(|()| active.file.sync_data());
        active.allocated = start;
        return Err((restored.is_ok().then_some(active), reason));
    }
    active.size = position;
    active.next_offset = offset;
    {
        let mut segments = log.segments.write();
        if let Some(seg) = segments.last_mut() {
            for m in metas {
                seg.push(m);
            }
        }
    }
    log.end.send_replace(offset);
    metrics.record_group_commit(group_size as u64, rows, total);
    for (ack, range) in acks {
        let _ = ack.send(Ok(range));
    }
    Ok(active)
}
