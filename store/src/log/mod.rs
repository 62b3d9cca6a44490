//! One hot log: the segments of a (day partition, bucket), its group-committing writer,
//! and the durable end offset that readers and subscribers follow.
//!
//! Durability: a single writer per log (a runtime task, or a thread of its own for the
//! `_system` tables; see [`LogOptions::dedicated_writer`]) drains every append queued
//! since its last flush, writes them with one `pwrite` and one `fdatasync`, and only
//! then publishes the frames to readers and acknowledges each appender (group commit).
//! Readers therefore never see bytes that a crash could take back.
//!
//! Preallocation: after a small commit, and after a roll, the writer starts a background
//! job that writes zeroed space ahead of the active segment's end, so the next small
//! commits overwrite blocks the file already has. Their `fdatasync` then flushes data
//! only; an append that grows the file also commits the file system's journal, which on
//! a small VM doubles the sync's median and stretches its tail. An all-zero frame header
//! is where the written part of a segment ends ([`crate::segment::scan_segment`]); a
//! segment is cut to its written part when it is rolled and when the log closes.
//!
//! Recovery reads every segment's frame headers, and checks the active segment's
//! frames against their CRC past its [`recovery_point`], so a torn tail is cut and the
//! rows below it stay.
//!
//! - this file: the log handle (open and recover, plan reads, retention);
//! - [`writer`]: the writer, its group commit and background preallocation;
//! - [`recovery_point`]: how far the active segment is known to be whole;
//! - [`delete_rows`]: row deletion by rewrite, which keeps every other row's offset;
//! - [`sidecar`]: the deleted-offsets sidecar and the blanking of deleted rows.

mod delete_rows;
mod recovery_point;
pub(crate) mod sidecar;
mod writer;

use recovery_point::RecoveryPoint;
use writer::{ActiveSegment, Writer, WriterMsg, create_segment, run_on_runtime, run_on_thread};

use std::fs::{self, File, OpenOptions};
use std::ops::Range;
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
    EncodedFrame, FrameMeta, Verify, parse_segment_file_name, read_marks, scan_segment,
    segment_path,
};
use crate::source_marks::{FLAG_SOURCE_MARKS, SourceMarks};

/// Queue depth per log before appenders wait (backpressure).
const QUEUE_DEPTH: usize = 4096;

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
    /// The writer gets a thread of its own, which writes and syncs in place, instead of
    /// a runtime task that hands each group's I/O to the blocking pool: two thread
    /// handoffs fewer per commit, for a thread per log. The store sets it for its
    /// `_system` tables (the audit log's every record is waited on by a call).
    pub dedicated_writer: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 * 1024 * 1024,
            max_group_bytes: 16 * 1024 * 1024,
            clock: Clock::system(),
            dedicated_writer: false,
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
    task: Mutex<Option<WriterHandle>>,
    /// Held by a row-deleting rewrite and by retention: they both replace or remove
    /// sealed segments.
    rewriting: tokio::sync::Mutex<()>,
    /// The source marks of the durable frames (see [`crate::source_marks`]); the writer
    /// raises them after each group commit.
    marks: RwLock<SourceMarks>,
}

/// Where a log's writer runs (see [`LogOptions::dedicated_writer`]).
#[derive(Debug)]
enum WriterHandle {
    Task(JoinHandle<()>),
    Thread(std::thread::JoinHandle<()>),
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

/// The marks of the last marked frame, which holds those of every frame before it.
fn last_marks(segments: &[SegmentEntry]) -> Result<SourceMarks> {
    for seg in segments.iter().rev() {
        if let Some(meta) = seg.frames.iter().rev().find(|f| f.flags != 0) {
            return Ok(read_marks(&seg.file, &seg.path, meta)?.unwrap_or_default());
        }
    }
    Ok(SourceMarks::default())
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// A log as read back from its directory, ready for [`Log::start`].
pub(crate) struct RecoveredLog {
    id: LogId,
    dir: PathBuf,
    segments: Vec<SegmentEntry>,
    active: ActiveSegment,
    marks: SourceMarks,
}

impl RecoveredLog {
    pub(crate) fn id(&self) -> LogId {
        self.id
    }
}

impl Log {
    /// Opens (or creates) the log in `dir` ([`Log::recover`]) and starts its writer
    /// ([`Log::start`]).
    pub(crate) fn open(
        id: LogId,
        dir: PathBuf,
        first_offset: u64,
        options: LogOptions,
        metrics: Arc<StoreMetrics>,
        on_commit: Arc<watch::Sender<u64>>,
    ) -> Result<Arc<Self>> {
        let recovered = Self::recover(id, dir, first_offset)?;
        Self::start(recovered, options, metrics, on_commit)
    }

    /// Reads the log in `dir` back (creating it if needed): every segment's frame
    /// headers, and the active segment's frames past its recovery point, whole, so a
    /// torn tail is found and cut. A new log's first row gets offset `first_offset`:
    /// above zero when the cold tier already holds rows of this log that the hot tier
    /// lost (a rebuilt data directory), so no offset means two rows.
    ///
    /// Blocking I/O that needs no runtime: a table recovers its logs on several
    /// threads at once.
    pub(crate) fn recover(id: LogId, dir: PathBuf, first_offset: u64) -> Result<RecoveredLog> {
        create_dir_durable(&dir)?;
        let mut bases: Vec<u64> = fs::read_dir(&dir)
            .map_err(|e| StoreError::io(&dir, e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| parse_segment_file_name(&e.file_name().to_string_lossy()))
            .collect();
        bases.sort_unstable();
        let point = RecoveryPoint::read(&dir);

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
            let verify = match point {
                _ if !last => Verify::Headers,
                Some(p) if p.base == base => Verify::After {
                    position: p.position,
                    crc: p.crc,
                },
                _ => Verify::All,
            };
            let mut scanned = scan_segment(&reader, &path, base, verify)?;
            if !scanned.trusted_prefix_held {
                tracing::warn!(
                    path = %path.display(),
                    "the recovery point does not match the segment; checking every frame"
                );
                scanned = scan_segment(&reader, &path, base, Verify::All)?;
            }
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
            entry.deleted = Arc::new(sidecar::read_deleted(&path)?);
            entry.size = scanned.valid_len;
            if last {
                let allocated = writer
                    .metadata()
                    .map_err(|e| StoreError::io(&path, e))?
                    .len();
                active = Some(ActiveSegment::new(
                    writer,
                    path,
                    base,
                    entry.size,
                    allocated,
                    entry.end_offset(),
                    scanned.last_crc,
                ));
            }
            segments.push(entry);
        }
        let mut active = match active {
            Some(a) => a,
            None => {
                let (a, entry) = create_segment(&dir, first_offset)?;
                segments.push(entry);
                a
            }
        };
        if roll_after_recovery {
            // Recovery cut a torn tail: continue in a fresh segment.
            let (a, entry) = create_segment(&dir, active.next_offset())?;
            segments.push(entry);
            active = a;
        }

        let marks = last_marks(&segments)?;
        Ok(RecoveredLog {
            id,
            dir,
            segments,
            active,
            marks,
        })
    }

    /// Starts the writer of a recovered log. Must be called within a Tokio runtime.
    pub(crate) fn start(
        recovered: RecoveredLog,
        options: LogOptions,
        metrics: Arc<StoreMetrics>,
        on_commit: Arc<watch::Sender<u64>>,
    ) -> Result<Arc<Self>> {
        let RecoveredLog {
            id,
            dir,
            segments,
            active,
            marks,
        } = recovered;
        let (end, _) = watch::channel(active.next_offset());
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let log = Arc::new(Log {
            id,
            dir,
            segments: RwLock::new(segments),
            end,
            tx: Mutex::new(Some(tx)),
            task: Mutex::new(None),
            rewriting: tokio::sync::Mutex::new(()),
            marks: RwLock::new(marks),
        });
        let dedicated = options.dedicated_writer;
        let writer = Writer::new(Arc::clone(&log), active, options, metrics, on_commit);
        let task = if dedicated {
            let thread = std::thread::Builder::new()
                .name(format!("log-writer-{}", log.id))
                .spawn(move || run_on_thread(writer, rx))
                .map_err(|e| {
                    StoreError::Unavailable(format!(
                        "cannot start the writer of log {}: {e}",
                        log.id
                    ))
                })?;
            WriterHandle::Thread(thread)
        } else {
            WriterHandle::Task(tokio::spawn(run_on_runtime(writer, rx)))
        };
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

    /// The source marks of the log's durable rows: per source and source partition,
    /// the highest source offset they came from.
    pub fn source_marks(&self) -> SourceMarks {
        self.marks.read().clone()
    }

    /// The source marks of the rows below `end` (a frame boundary): those of the last
    /// marked frame that ends at or before it. `None` when no segment still held has
    /// one (retention removed them, or no source wrote the log).
    pub fn source_marks_below(&self, end: u64) -> Result<Option<SourceMarks>> {
        let segments = self.segments.read();
        for seg in segments.iter().rev().filter(|s| s.base_offset < end) {
            let marked = seg
                .frames
                .iter()
                .rev()
                .find(|f| f.end_offset() <= end && f.flags & FLAG_SOURCE_MARKS != 0);
            if let Some(meta) = marked {
                return read_marks(&seg.file, &seg.path, meta);
            }
        }
        Ok(None)
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
        match task {
            Some(WriterHandle::Task(task)) => drop(task.await),
            Some(WriterHandle::Thread(thread)) => {
                drop(tokio::task::spawn_blocking(move || thread.join()).await)
            }
            None => {}
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
            let sidecar = sidecar::sidecar_path(&seg.path);
            match fs::remove_file(&sidecar) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&sidecar, e)),
            }
        }
        if !removed.is_empty()
            && let Some(point) = RecoveryPoint::read(&self.dir)
            && removed.iter().any(|s| s.base_offset == point.base)
        {
            // It names a segment that is gone: no file of a removed segment stays.
            RecoveryPoint::remove(&self.dir);
        }
        if !removed.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok((removed.len(), bytes))
    }
}

pub use delete_rows::RewriteReport;
