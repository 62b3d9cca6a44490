//! Row deletion by rewrite: a sealed segment's frames are re-encoded with the deleted
//! rows blanked ([`super::sidecar`]), their offsets listed in the sidecar, and the new
//! segment swapped in; every other row keeps its offset.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::writer::WriterMsg;
use super::{Log, SegmentEntry, open_segment_files, sidecar};
use crate::error::{Result, StoreError};
use crate::segment::{EncodedFrame, Verify, scan_segment};

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
                let blanked = sidecar::blank_rows(
                    &batch.project(&own)?,
                    &arrow_array::BooleanArray::from(keep),
                )?;
                let frame = EncodedFrame::encode(&blanked, meta.min_event_ts, meta.max_event_ts)?;
                // The frame's source marks stay: the log's marks may live only here.
                let marks = crate::segment::read_marks(&file, &path, meta)?;
                let trailer = marks.map(|m| m.encode_trailer());
                frame.write_to(
                    &mut out,
                    meta.base_offset,
                    meta.commit_ts,
                    trailer.as_deref(),
                );
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
            sidecar::write_deleted(&path, &all_deleted)?;
            crate::fs::rename_durable(&tmp, &path)?;
            let (_, reader) = open_segment_files(&path, false)?;
            let scanned = scan_segment(&reader, &path, base, Verify::All)?;
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
