//! Segment files: the on-disk frame format, frame encoding, the in-memory frame index,
//! recovery of a torn tail, and projected frame reads.
//!
//! A segment is named by the offset of its first row (`00000000000000000042.log`) and
//! holds frames back to back. Every frame is 8-byte aligned:
//!
//! ```text
//! 0  payload_len  u32   bytes after the header, a multiple of 8
//! 4  crc32c       u32   over bytes 8..48 of the header, then the payload
//! 8  base_offset  u64   offset of the frame's first row in its log
//! 16 record_count u32
//! 20 column_count u32   stored columns when written (schema evolution only appends)
//! 24 commit_ts    i64   µs since epoch, when the writer committed the frame
//! 32 min_event_ts i64   µs, smallest time-column value in the frame
//! 40 max_event_ts i64   µs, largest
//! 48 payload: meta_len u32 | Arrow IPC RecordBatch message | pad to 8 | IPC body
//! ```
//!
//! The event-time bounds in each header make time pruning possible per frame, not only
//! per segment, without decoding Arrow.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{RecordBatch, new_null_array};
use arrow_buffer::Buffer;
use arrow_ipc::MetadataVersion;
use arrow_ipc::writer::{CompressionContext, DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
use arrow_schema::{DataType, SchemaRef};

use crate::error::{Result, StoreError};

pub(crate) const HEADER_LEN: usize = 48;
/// A frame larger than this is treated as corruption rather than allocated.
const MAX_PAYLOAD: u64 = 1 << 31;

/// A batch encoded by the appending task, before the writer gives it offsets.
#[derive(Debug)]
pub(crate) struct EncodedFrame {
    pub payload: Vec<u8>,
    pub payload_crc: u32,
    pub record_count: u32,
    pub column_count: u32,
    pub min_event_ts: i64,
    pub max_event_ts: i64,
}

impl EncodedFrame {
    /// Encodes `batch` (already in the stored schema) as one IPC RecordBatch message.
    pub fn encode(batch: &RecordBatch, min_event_ts: i64, max_event_ts: i64) -> Result<Self> {
        let generator = IpcDataGenerator::default();
        let mut tracker = DictionaryTracker::new(false);
        let options = IpcWriteOptions::default();
        let (_, encoded) = generator.encode(
            batch,
            &mut tracker,
            &options,
            &mut CompressionContext::default(),
        )?;
        let meta_len = encoded.ipc_message.len();
        let body_start = pad8(4 + meta_len);
        let payload_len = pad8(body_start + encoded.arrow_data.len());
        let mut payload = Vec::with_capacity(payload_len);
        payload.extend_from_slice(&(meta_len as u32).to_le_bytes());
        payload.extend_from_slice(&encoded.ipc_message);
        payload.resize(body_start, 0);
        payload.extend_from_slice(&encoded.arrow_data);
        payload.resize(payload_len, 0);
        Ok(Self {
            payload_crc: crc32c::crc32c(&payload),
            payload,
            record_count: batch.num_rows() as u32,
            column_count: batch.num_columns() as u32,
            min_event_ts,
            max_event_ts,
        })
    }

    pub fn frame_len(&self) -> u64 {
        (HEADER_LEN + self.payload.len()) as u64
    }

    /// Appends the header and payload to `out`, returning the frame's index entry.
    pub fn write_to(&self, out: &mut Vec<u8>, base_offset: u64, commit_ts: i64) -> FrameMeta {
        let meta = FrameMeta {
            position: 0,
            payload_len: self.payload.len() as u32,
            base_offset,
            record_count: self.record_count,
            column_count: self.column_count,
            commit_ts,
            min_event_ts: self.min_event_ts,
            max_event_ts: self.max_event_ts,
        };
        let mut header = meta.header_bytes();
        let crc = crc32c::crc32c_combine(
            crc32c::crc32c(&header[8..]),
            self.payload_crc,
            self.payload.len(),
        );
        header[4..8].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.payload);
        meta
    }
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The index entry of one frame: where it is and what its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMeta {
    /// Byte position of the header in the segment file.
    pub position: u64,
    pub payload_len: u32,
    pub base_offset: u64,
    pub record_count: u32,
    pub column_count: u32,
    pub commit_ts: i64,
    pub min_event_ts: i64,
    pub max_event_ts: i64,
}

impl FrameMeta {
    pub fn end_offset(&self) -> u64 {
        self.base_offset + self.record_count as u64
    }

    pub fn frame_len(&self) -> u64 {
        HEADER_LEN as u64 + self.payload_len as u64
    }

    fn header_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&self.payload_len.to_le_bytes());
        h[8..16].copy_from_slice(&self.base_offset.to_le_bytes());
        h[16..20].copy_from_slice(&self.record_count.to_le_bytes());
        h[20..24].copy_from_slice(&self.column_count.to_le_bytes());
        h[24..32].copy_from_slice(&self.commit_ts.to_le_bytes());
        h[32..40].copy_from_slice(&self.min_event_ts.to_le_bytes());
        h[40..48].copy_from_slice(&self.max_event_ts.to_le_bytes());
        h
    }

    fn parse(position: u64, h: &[u8; HEADER_LEN]) -> (Self, u32) {
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let meta = FrameMeta {
            position,
            payload_len: u32_at(0),
            base_offset: u64_at(8),
            record_count: u32_at(16),
            column_count: u32_at(20),
            commit_ts: u64_at(24) as i64,
            min_event_ts: u64_at(32) as i64,
            max_event_ts: u64_at(40) as i64,
        };
        (meta, u32_at(4))
    }
}

/// The file name of a segment starting at `base_offset`.
pub(crate) fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

/// Parses a segment file name back into its base offset.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 {
        return None;
    }
    digits.parse().ok()
}

/// The result of scanning a segment file's frames.
#[derive(Debug)]
pub(crate) struct ScannedSegment {
    pub frames: Vec<FrameMeta>,
    /// Length of the valid prefix; anything after it is a torn or corrupt tail.
    pub valid_len: u64,
    /// Why scanning stopped early, if it did.
    pub tail_problem: Option<String>,
}

/// Reads every frame header of a segment. With `verify_crc`, each frame's payload is read
/// and checked too (recovery of the active segment); otherwise only the headers' structure
/// is checked. Scanning stops at the first frame that fails.
pub(crate) fn scan_segment(
    file: &File,
    path: &Path,
    base_offset: u64,
    verify_crc: bool,
) -> Result<ScannedSegment> {
    let len = file
        .metadata()
        .map_err(|e| StoreError::io(path, e))?
        .len();
    let mut frames = Vec::new();
    let mut pos = 0u64;
    let mut expected_offset = base_offset;
    let mut payload = Vec::new();
    let problem = loop {
        if pos == len {
            break None;
        }
        if len - pos < HEADER_LEN as u64 {
            break Some(format!("{} trailing bytes are shorter than a header", len - pos));
        }
        let mut h = [0u8; HEADER_LEN];
        file.read_exact_at(&mut h, pos)
            .map_err(|e| StoreError::io(path, e))?;
        let (meta, crc) = FrameMeta::parse(pos, &h);
        let end = pos + meta.frame_len();
        if meta.payload_len as u64 > MAX_PAYLOAD || meta.payload_len % 8 != 0 || end > len {
            break Some(format!("frame at byte {pos} runs past the end of the file"));
        }
        if meta.base_offset != expected_offset || meta.record_count == 0 {
            break Some(format!(
                "frame at byte {pos} has offset {} (expected {expected_offset}) and {} rows",
                meta.base_offset, meta.record_count
            ));
        }
        if verify_crc {
            payload.resize(meta.payload_len as usize, 0);
            file.read_exact_at(&mut payload, pos + HEADER_LEN as u64)
                .map_err(|e| StoreError::io(path, e))?;
            let actual = crc32c::crc32c_append(crc32c::crc32c(&h[8..]), &payload);
            if actual != crc {
                break Some(format!("frame at byte {pos} fails its CRC"));
            }
        }
        expected_offset = meta.end_offset();
        frames.push(meta);
        pos = end;
    };
    Ok(ScannedSegment {
        frames,
        valid_len: pos,
        tail_problem: problem,
    })
}

/// Decodes a frame's rows for the columns in `projection` (indices into the table's
/// current stored schema), reading from disk only the bytes of those columns when the
/// projection is partial. Columns added to the table after the frame was written come
/// back as nulls.
pub(crate) fn read_frame(
    file: &File,
    path: &Path,
    meta: &FrameMeta,
    schema: &SchemaRef,
    projection: &[usize],
) -> Result<RecordBatch> {
    let corrupt = |detail: String| StoreError::corrupt(path, detail);
    let column_count = meta.column_count as usize;
    if column_count > schema.fields().len() {
        return Err(corrupt(format!(
            "frame at byte {} has {column_count} columns, the table only {}",
            meta.position,
            schema.fields().len()
        )));
    }
    let payload_pos = meta.position + HEADER_LEN as u64;
    let full = projection.len() == column_count
        && projection.iter().enumerate().all(|(i, p)| i == *p);

    // The whole payload is read (and CRC-checked) for full reads; projected reads fetch
    // the IPC metadata, then only the body ranges of the projected columns.
    let (meta_bytes, body): (Buffer, Buffer) = if full {
        let mut frame = vec![0u8; meta.frame_len() as usize];
        file.read_exact_at(&mut frame, meta.position)
            .map_err(|e| StoreError::io(path, e))?;
        let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if crc32c::crc32c(&frame[8..]) != crc {
            // crc32c over header[8..] then payload is the CRC of the contiguous bytes.
            return Err(corrupt(format!("frame at byte {} fails its CRC", meta.position)));
        }
        let buf = Buffer::from_vec(frame);
        let meta_len = read_meta_len(&buf, HEADER_LEN, meta, path)?;
        let body_start = HEADER_LEN + pad8(4 + meta_len);
        (
            buf.slice_with_length(HEADER_LEN + 4, meta_len),
            buf.slice(body_start),
        )
    } else {
        let mut len_bytes = [0u8; 4];
        file.read_exact_at(&mut len_bytes, payload_pos)
            .map_err(|e| StoreError::io(path, e))?;
        let meta_len = u32::from_le_bytes(len_bytes) as usize;
        if 4 + meta_len > meta.payload_len as usize {
            return Err(corrupt(format!("frame at byte {} has a bad metadata length", meta.position)));
        }
        let mut m = vec![0u8; meta_len];
        file.read_exact_at(&mut m, payload_pos + 4)
            .map_err(|e| StoreError::io(path, e))?;
        let body_len = meta.payload_len as usize - pad8(4 + meta_len);
        // Zeroed memory is not touched until written, so unread columns cost nothing.
        let mut body = vec![0u8; body_len];
        let body_pos = payload_pos + pad8(4 + meta_len) as u64;
        let message = arrow_ipc::root_as_message(&m)
            .map_err(|e| corrupt(format!("bad IPC metadata: {e}")))?;
        let ranges = column_ranges(&message, schema, column_count)
            .ok_or_else(|| corrupt(format!("frame at byte {} has bad IPC buffers", meta.position)))?;
        for &p in projection.iter().filter(|p| **p < column_count) {
            let r = ranges[p].clone();
            if r.end > body_len {
                return Err(corrupt(format!("frame at byte {} has a buffer past its end", meta.position)));
            }
            file.read_exact_at(&mut body[r.clone()], body_pos + r.start as u64)
                .map_err(|e| StoreError::io(path, e))?;
        }
        (Buffer::from_vec(m), Buffer::from_vec(body))
    };

    let message = arrow_ipc::root_as_message(&meta_bytes)
        .map_err(|e| corrupt(format!("bad IPC metadata: {e}")))?;
    let ipc_batch = message
        .header_as_record_batch()
        .ok_or_else(|| corrupt("IPC message is not a record batch".into()))?;
    let written: Vec<usize> = projection.iter().copied().filter(|p| *p < column_count).collect();
    let frame_schema = Arc::new(schema.project(&(0..column_count).collect::<Vec<_>>())?);
    let decoded = arrow_ipc::reader::read_record_batch(
        &body,
        ipc_batch,
        frame_schema,
        &HashMap::new(),
        Some(&written),
        &MetadataVersion::V5,
    )?;
    if written.len() == projection.len() {
        return Ok(decoded.with_schema(Arc::new(schema.project(projection)?))?);
    }
    // Some projected columns were added after this frame: fill them with nulls.
    let rows = decoded.num_rows();
    let mut decoded_cols = decoded.columns().iter();
    let columns = projection
        .iter()
        .map(|p| match *p < column_count {
            true => decoded_cols.next().cloned().unwrap_or_else(|| new_null_array(schema.field(*p).data_type(), rows)),
            false => new_null_array(schema.field(*p).data_type(), rows),
        })
        .collect();
    Ok(RecordBatch::try_new(Arc::new(schema.project(projection)?), columns)?)
}

fn read_meta_len(buf: &Buffer, at: usize, meta: &FrameMeta, path: &Path) -> Result<usize> {
    let b = &buf.as_slice()[at..at + 4];
    let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if 4 + len > meta.payload_len as usize {
        return Err(StoreError::corrupt(
            path,
            format!("frame at byte {} has a bad metadata length", meta.position),
        ));
    }
    Ok(len)
}

/// The byte range of the IPC body that each of the first `column_count` columns occupies.
/// Only flat types are stored, so each column owns a fixed number of consecutive buffers.
fn column_ranges(
    message: &arrow_ipc::Message<'_>,
    schema: &SchemaRef,
    column_count: usize,
) -> Option<Vec<Range<usize>>> {
    let batch = message.header_as_record_batch()?;
    let buffers = batch.buffers()?;
    let mut next = 0usize;
    let mut out = Vec::with_capacity(column_count);
    for field in schema.fields().iter().take(column_count) {
        let count = match field.data_type() {
            DataType::Utf8 | DataType::Binary => 3,
            _ => 2,
        };
        if next + count > buffers.len() {
            return None;
        }
        let mut range: Option<Range<usize>> = None;
        for i in next..next + count {
            let b = buffers.get(i);
            if b.length() == 0 {
                continue;
            }
            let (s, e) = (b.offset() as usize, (b.offset() + b.length()) as usize);
            range = Some(match range {
                None => s..e,
                Some(r) => r.start.min(s)..r.end.max(e),
            });
        }
        next += count;
        out.push(range.unwrap_or(0..0));
    }
    Some(out)
}

/// Path of a segment inside its log directory.
pub(crate) fn segment_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(segment_file_name(base_offset))
}
