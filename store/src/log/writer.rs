//! The writer task of one log: it drains every append queued since its last flush,
//! writes them with one `pwrite` and one `fdatasync`, publishes and acknowledges them
//! (group commit), rolls segments, and keeps zeroed space preallocated ahead of the
//! active segment's end (see the parent module for why).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::{Clock, Log, LogOptions, SegmentEntry, open_segment_files};
use crate::error::{Result, StoreError};
use crate::fs::sync_dir;
use crate::metrics::StoreMetrics;
use crate::segment::{EncodedFrame, segment_path};

/// Groups smaller than this are latency-bound: the writer preallocates after them.
/// Bigger groups are bandwidth-bound, and zeroing ahead would write their bytes twice.
const SMALL_GROUP_BYTES: u64 = 64 * 1024;
/// Bounds of the zeroed space kept ahead of the active segment's end; within them it
/// grows with the segment, so a quiet log wastes little and a busy one extends rarely.
const PREALLOCATE_MIN: u64 = 64 * 1024;
const PREALLOCATE_MAX: u64 = 4 * 1024 * 1024;

pub(super) enum WriterMsg {
    Append(EncodedFrame, oneshot::Sender<Result<Range<u64>>>),
    Roll(oneshot::Sender<Result<()>>),
}

/// The state only the writer task touches.
pub(super) struct ActiveSegment {
    pub(super) file: File,
    pub(super) path: PathBuf,
    /// Bytes of frames written.
    pub(super) size: u64,
    /// The file's length: `size` plus any zeroed space preallocated after it.
    pub(super) allocated: u64,
    pub(super) next_offset: u64,
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

impl std::fmt::Debug for WriterMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriterMsg::Append(..) => "Append",
            WriterMsg::Roll(..) => "Roll",
        })
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

pub(super) async fn writer_loop(
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
    // Each marked frame carries the log's marks after it: those durable, raised by the
    // marked frames before it in this group. They are published only once durable.
    let mut marks: Option<crate::source_marks::SourceMarks> = None;
    for (frame, ack) in appends {
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
