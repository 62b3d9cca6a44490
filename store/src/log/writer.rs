//! The writer of one log: it drains every append queued since its last flush, writes
//! them with one `pwrite` and one `fdatasync`, publishes and acknowledges them (group
//! commit), rolls segments, and has zeroed space preallocated ahead of the active
//! segment's end in the background (see the parent module for why).
//!
//! A writer runs in one of two ways ([`LogOptions::dedicated_writer`]): as a runtime task
//! that hands each group's I/O to the blocking pool (one handoff per group; a store can
//! hold thousands of logs), or on a thread of its own that writes and syncs in place (no
//! handoff, for the audit log, whose every record a caller waits on).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};

use super::recovery_point::{RECOVERY_POINT_BYTES, RecoveryPoint};
use super::{Clock, Log, LogOptions, SegmentEntry, open_segment_files};
use crate::error::{Result, StoreError};
use crate::fs::sync_dir;
use crate::metrics::StoreMetrics;
use crate::segment::{EncodedFrame, FrameMeta, HEADER_LEN, segment_path};

/// Groups smaller than this are latency-bound: preallocation follows them. Bigger
/// groups are bandwidth-bound, and zeroing ahead would write their bytes twice.
const SMALL_GROUP_BYTES: u64 = 64 * 1024;
/// Bounds of the zeroed space kept ahead of the active segment's end; within them it
/// grows with the segment, so a quiet log wastes little and a busy one extends rarely.
const PREALLOCATE_MIN: u64 = 64 * 1024;
const PREALLOCATE_MAX: u64 = 4 * 1024 * 1024;
/// Zeros are written in chunks of this size, each under the tail's lock, so a commit
/// never waits for more than one chunk.
const ZERO_CHUNK: usize = 64 * 1024;

pub(super) enum WriterMsg {
    Append(EncodedFrame, oneshot::Sender<Result<Range<u64>>>),
    Roll(oneshot::Sender<Result<()>>),
}

impl WriterMsg {
    fn fail(self, error: StoreError) {
        match self {
            WriterMsg::Append(_, ack) => drop(ack.send(Err(error))),
            WriterMsg::Roll(ack) => drop(ack.send(Err(error))),
        }
    }
}

impl std::fmt::Debug for WriterMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriterMsg::Append(..) => "Append",
            WriterMsg::Roll(..) => "Roll",
        })
    }
}

/// The end of the active segment, shared by the writer and the background job that
/// zeroes space ahead of it. Zeros are only ever written at or past `size`, under the
/// lock, and frames only by the writer, also under it: no zero lands on a frame.
#[derive(Debug)]
struct Tail {
    /// Bytes of frames written.
    size: u64,
    /// Where the zeros written ahead end (perhaps not yet synced).
    zeroed: u64,
    /// Where the zeros written ahead and synced end: up to there a commit grows nothing.
    allocated: u64,
    /// A preallocation job is running.
    busy: bool,
    /// Rolled or closed: no more zeros.
    retired: bool,
}

/// The state only the writer touches, but for the tail it shares with preallocation.
pub(super) struct ActiveSegment {
    file: Arc<File>,
    path: PathBuf,
    base_offset: u64,
    /// Bytes of frames written (the writer's copy of `tail.size`).
    size: u64,
    next_offset: u64,
    /// The stored CRC of the last frame (0 when there is none).
    last_crc: u32,
    /// Where the last recovery point written for this segment lies.
    recovery_point: u64,
    tail: Arc<Mutex<Tail>>,
}

impl ActiveSegment {
    /// The active segment `file` at `path`, with `size` bytes of frames in a file of
    /// `len` bytes (what lies past the frames is zeros: recovery ended there), the last
    /// of which has stored CRC `last_crc`.
    pub(super) fn new(
        file: File,
        path: PathBuf,
        base_offset: u64,
        size: u64,
        len: u64,
        next_offset: u64,
        last_crc: u32,
    ) -> Self {
        let ahead = len.max(size);
        Self {
            file: Arc::new(file),
            path,
            base_offset,
            size,
            next_offset,
            last_crc,
            recovery_point: 0,
            tail: Arc::new(Mutex::new(Tail {
                size,
                zeroed: ahead,
                allocated: ahead,
                busy: false,
                retired: false,
            })),
        }
    }

    pub(super) fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Records that every frame written so far is durable, unless that was recorded
    /// already (see [`super::recovery_point`]). Only after a sync.
    fn write_recovery_point(&mut self, dir: &Path) {
        if self.size == self.recovery_point {
            return;
        }
        RecoveryPoint {
            base: self.base_offset,
            position: self.size,
            crc: self.last_crc,
        }
        .write(dir);
        self.recovery_point = self.size;
    }

    /// Where preallocation should extend the file to after a group of `group_bytes`
    /// (0: none yet, a fresh segment), if anywhere.
    fn preallocation_target(tail: &Tail, group_bytes: u64, segment_bytes: u64) -> Option<u64> {
        if tail.busy || group_bytes >= SMALL_GROUP_BYTES || tail.size >= segment_bytes {
            return None;
        }
        let ahead = (tail.size / 2).clamp(PREALLOCATE_MIN, PREALLOCATE_MAX);
        if tail.allocated >= tail.size + ahead / 2 {
            return None;
        }
        let target = (tail.size + ahead).min(segment_bytes);
        (target > tail.allocated.max(tail.size)).then_some(target)
    }

    /// Starts a background job that zeroes the file up to where the next small commits
    /// will write, and syncs the zeros, so that those commits overwrite allocated
    /// blocks. A failure costs only speed: the next commit appends as if nothing was
    /// preallocated.
    fn preallocate(&self, group_bytes: u64, segment_bytes: u64, runtime: &tokio::runtime::Handle) {
        let target = {
            let mut tail = self.tail.lock();
            let Some(target) = Self::preallocation_target(&tail, group_bytes, segment_bytes) else {
                return;
            };
            tail.busy = true;
            target
        };
        let (file, tail, path) = (
            Arc::clone(&self.file),
            Arc::clone(&self.tail),
            self.path.clone(),
        );
        runtime.spawn_blocking(move || zero_ahead(&file, &tail, &path, target));
    }

    /// Stops preallocation and cuts the file back to its frames (before a roll or at
    /// close), so that only the active segment ever has preallocated space. Failing
    /// leaves zeros, which readers take for the end anyway.
    fn retire(&mut self) {
        let mut tail = self.tail.lock();
        tail.retired = true;
        if tail.zeroed <= self.size {
            return;
        }
        match self
            .file
            .set_len(self.size)
            .and_then(|()| self.file.sync_data())
        {
            Ok(()) => (tail.zeroed, tail.allocated) = (self.size, self.size),
            Err(e) => tracing::warn!(path = %self.path.display(), "cannot trim: {e}"),
        }
    }
}

/// The preallocation job: zeros from the tail's end up to `target`, one chunk per lock,
/// then one sync. Zeros come from one static block (a fresh zeroed buffer of up to 4 MiB
/// per preallocation would cost page faults).
fn zero_ahead(file: &File, tail: &Mutex<Tail>, path: &Path, target: u64) {
    static ZEROS: [u8; ZERO_CHUNK] = [0; ZERO_CHUNK];
    loop {
        let mut t = tail.lock();
        let at = t.zeroed.max(t.size);
        if t.retired || at >= target {
            break;
        }
        let n = (target - at).min(ZERO_CHUNK as u64);
        if let Err(e) = file.write_all_at(&ZEROS[..n as usize], at) {
            tracing::warn!(path = %path.display(), "cannot preallocate: {e}");
            // Part of the chunk may be written: retiring must still trim it.
            t.zeroed = at + n;
            t.busy = false;
            return;
        }
        t.zeroed = at + n;
    }
    let synced = file.sync_data();
    let mut t = tail.lock();
    t.busy = false;
    match synced {
        Ok(()) => t.allocated = t.allocated.max(target.min(t.zeroed)),
        Err(e) => tracing::warn!(path = %path.display(), "cannot sync preallocated space: {e}"),
    }
}

pub(super) fn create_segment(
    dir: &Path,
    base_offset: u64,
) -> Result<(ActiveSegment, SegmentEntry)> {
    let path = segment_path(dir, base_offset);
    let (writer, reader) = open_segment_files(&path, true)?;
    writer.sync_all().map_err(|e| StoreError::io(&path, e))?;
    sync_dir(dir)?;
    Ok((
        ActiveSegment::new(writer, path.clone(), base_offset, 0, 0, base_offset, 0),
        SegmentEntry::new(base_offset, path, reader),
    ))
}

/// A log's writer: its active segment and what it publishes to.
pub(super) struct Writer {
    log: Arc<Log>,
    /// `None` once a failed write could not be undone: the log refuses everything after.
    active: Option<ActiveSegment>,
    poisoned: String,
    options: LogOptions,
    metrics: Arc<StoreMetrics>,
    on_commit: Arc<watch::Sender<u64>>,
    /// Runs the preallocation jobs on its blocking pool.
    runtime: tokio::runtime::Handle,
}

impl Writer {
    /// Must be called within the runtime whose blocking pool preallocates.
    pub(super) fn new(
        log: Arc<Log>,
        active: ActiveSegment,
        options: LogOptions,
        metrics: Arc<StoreMetrics>,
        on_commit: Arc<watch::Sender<u64>>,
    ) -> Self {
        Self {
            log,
            active: Some(active),
            poisoned: String::new(),
            options,
            metrics,
            on_commit,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Takes `first` and whatever else is queued, up to a group's bytes.
    fn drain(&self, first: WriterMsg, rx: &mut mpsc::Receiver<WriterMsg>) -> Vec<WriterMsg> {
        let mut msgs = vec![first];
        let mut bytes = 0u64;
        loop {
            if let Some(WriterMsg::Append(frame, _)) = msgs.last() {
                bytes += frame.frame_len();
            }
            if bytes >= self.options.max_group_bytes {
                break;
            }
            match rx.try_recv() {
                Ok(msg) => msgs.push(msg),
                Err(_) => break,
            }
        }
        msgs
    }

    /// Commits the appends among `msgs` as one group, then rolls if asked or due, and
    /// starts preallocation after a small group. Blocking I/O.
    fn handle(&mut self, msgs: Vec<WriterMsg>) {
        let log = Arc::clone(&self.log);
        let fail = |reason: &str| {
            StoreError::Unavailable(format!("log {} failed earlier: {reason}", log.id))
        };
        let Some(mut current) = self.active.take() else {
            msgs.into_iter().for_each(|m| m.fail(fail(&self.poisoned)));
            return;
        };
        let mut appends = Vec::new();
        let mut rolls = Vec::new();
        let mut bytes = 0u64;
        for msg in msgs {
            match msg {
                WriterMsg::Append(frame, ack) => {
                    bytes += frame.frame_len();
                    appends.push((frame, ack));
                }
                WriterMsg::Roll(ack) => rolls.push(ack),
            }
        }
        let mut committed = false;
        if !appends.is_empty() {
            match commit_group(&log, current, appends, &self.metrics, &self.options.clock) {
                Ok(a) => {
                    current = a;
                    committed = true;
                    if current.size >= current.recovery_point + RECOVERY_POINT_BYTES {
                        current.write_recovery_point(&log.dir);
                    }
                    self.on_commit.send_modify(|n| *n += 1);
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
                    self.poisoned = reason;
                    return;
                }
            }
        }
        let full = current.size >= self.options.segment_bytes;
        let must_roll = full || (!rolls.is_empty() && current.size > 0);
        let mut roll_error = None;
        let mut rolled = false;
        if must_roll {
            current.retire();
            match create_segment(&log.dir, current.next_offset) {
                Ok((a, entry)) => {
                    log.segments.write().push(entry);
                    current = a;
                    rolled = true;
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
        if rolled && full {
            // A busy log's fresh segment: its first small commits should not grow it
            // either. A segment rolled on request (retention, a rewrite) stays empty
            // until written: the log may never be written again (an old day's).
            current.preallocate(0, self.options.segment_bytes, &self.runtime);
        } else if committed && roll_error.is_none() {
            current.preallocate(bytes, self.options.segment_bytes, &self.runtime);
        }
        self.active = Some(current);
    }

    /// Trims the active segment to its frames and records them all in the recovery
    /// point, so the next open checks none of them again.
    fn close(&mut self) {
        if let Some(current) = &mut self.active {
            current.retire();
            current.write_recovery_point(&self.log.dir);
        }
    }
}

/// Runs `writer` as a runtime task: each group's I/O goes to the blocking pool.
pub(super) async fn run_on_runtime(mut writer: Writer, mut rx: mpsc::Receiver<WriterMsg>) {
    while let Some(first) = rx.recv().await {
        let msgs = writer.drain(first, &mut rx);
        writer = match tokio::task::spawn_blocking(move || {
            writer.handle(msgs);
            writer
        })
        .await
        {
            Ok(w) => w,
            Err(e) => {
                // The segment's file went with the task: refuse everything after.
                let reason = format!("log writer task failed: {e}");
                tracing::error!("{reason}; the log is closed");
                while let Some(msg) = rx.recv().await {
                    msg.fail(StoreError::Unavailable(reason.clone()));
                }
                return;
            }
        };
    }
    let _ = tokio::task::spawn_blocking(move || writer.close()).await;
}

/// Runs `writer` on the calling thread, which it keeps until the log closes: it writes
/// and syncs in place.
pub(super) fn run_on_thread(mut writer: Writer, mut rx: mpsc::Receiver<WriterMsg>) {
    while let Some(first) = rx.blocking_recv() {
        let msgs = writer.drain(first, &mut rx);
        writer.handle(msgs);
    }
    writer.close();
}

type Ack = oneshot::Sender<Result<Range<u64>>>;

/// Writes one group with one `pwrite` and one `fdatasync`, then publishes and acks it.
/// On failure the active segment is cut back to its last durable size; if even that
/// fails, the segment is returned as `None` and the log is poisoned.
fn commit_group(
    log: &Arc<Log>,
    mut active: ActiveSegment,
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
    // Each marked frame carries the log's marks after it: those durable, raised by the
    // marked frames before it in this group. They are published only once durable.
    let mut marks: Option<crate::source_marks::SourceMarks> = None;
    let mut last_header_at = 0;
    for (frame, ack) in appends {
        last_header_at = buf.len();
        let trailer = frame.source.as_ref().map(|delta| {
            let running = marks.get_or_insert_with(|| log.marks.read().clone());
            running.merge(delta);
            running.encode_trailer()
        });
        let mut meta = frame.write_to(&mut buf, offset, commit_ts, trailer.as_deref());
        meta.position = position;
        position += meta.frame_len();
        acks.push((ack, offset..meta.end_offset()));
        offset = meta.end_offset();
        metas.push(meta);
    }
    let rows = offset - active.next_offset;
    let group_size = acks.len();
    let start = active.size;
    let res = {
        let mut tail = active.tail.lock();
        let written = active.file.write_all_at(&buf, start);
        // Even a partial write may have put frame bytes there: no zeros over them.
        tail.size = position;
        tail.zeroed = tail.zeroed.max(position);
        written
    }
    .and_then(|()| active.file.sync_data());
    if let Err(e) = res {
        let reason = format!("write to {} failed: {e}", active.path.display());
        for (ack, _) in acks {
            let _ = ack.send(Err(StoreError::io(
                &active.path,
                std::io::Error::new(e.kind(), e.to_string()),
            )));
        }
        let restored = {
            let mut tail = active.tail.lock();
            let cut = active.file.set_len(start);
            if cut.is_ok() {
                (tail.size, tail.zeroed, tail.allocated) = (start, start, start);
            }
            cut
        }
        .and_then(|()| active.file.sync_data());
        return Err((restored.is_ok().then_some(active), reason));
    }
    active.size = position;
    active.next_offset = offset;
    let last_header = buf[last_header_at..last_header_at + HEADER_LEN]
        .try_into()
        .expect("every frame starts with a whole header");
    active.last_crc = FrameMeta::parse(0, last_header).1;
    {
        let mut segments = log.segments.write();
        if let Some(seg) = segments.last_mut() {
            for m in metas {
                seg.push(m);
            }
        }
    }
    if let Some(marks) = marks {
        *log.marks.write() = marks;
    }
    log.end.send_replace(offset);
    metrics.record_group_commit(group_size as u64, rows, total);
    for (ack, range) in acks {
        let _ = ack.send(Ok(range));
    }
    Ok(active)
}
