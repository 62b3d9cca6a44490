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
//! 20 column_count u24   stored columns when written (schema evolution only appends)
//! 23 flags        u8    bit 0: the payload ends with source marks (crate::source_marks)
//! 24 commit_ts    i64   µs since epoch, when the writer committed the frame
//! 32 min_event_ts i64   µs, smallest time-column value in the frame
//! 40 max_event_ts i64   µs, largest
//! 48 payload: meta_len u32 | Arrow IPC RecordBatch message | pad to 8 | IPC body
//!             [| source marks trailer]
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

use arrow_array::{RecordBatch, make_array, new_null_array};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_ipc::MetadataVersion;
use arrow_ipc::writer::{CompressionContext, DictionaryTracker, IpcDataGenerator, IpcWriteOptions};
use arrow_schema::{DataType, SchemaRef};

use crate::error::{Result, StoreError};
use crate::source_marks::{FLAG_SOURCE_MARKS, SourceDelta, SourceMarks};

pub(crate) const HEADER_LEN: usize = 48;
/// A frame larger than this is treated as corruption rather than allocated.
const MAX_PAYLOAD: u64 = 1 << 31;

/// A batch encoded by the appending task, before the writer gives it offsets.
#[derive(Debug)]
pub(crate) struct EncodedFrame {
    pub payload: Vec<u8>,
    /// Taken only for payloads too large to CRC again behind the header (see
    /// [`RESCAN_PAYLOAD_BYTES`]).
    pub payload_crc: Option<u32>,
    pub record_count: u32,
    pub column_count: u32,
    pub min_event_ts: i64,
    pub max_event_ts: i64,
    /// For a frame written for a source: what its rows add to the log's marks. The
    /// writer turns it into the log's cumulative marks, written behind the payload.
    pub source: Option<SourceDelta>,
}

impl EncodedFrame {
    /// Encodes `batch` (already in the stored schema) as one IPC RecordBatch message.
    pub(crate) fn encode(
        batch: &RecordBatch,
        min_event_ts: i64,
        max_event_ts: i64,
    ) -> Result<Self> {
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
            payload_crc: (payload.len() > RESCAN_PAYLOAD_BYTES).then(|| crc32c::crc32c(&payload)),
            payload,
            record_count: batch.num_rows() as u32,
            column_count: batch.num_columns() as u32,
            min_event_ts,
            max_event_ts,
            source: None,
        })
    }

    pub(crate) fn frame_len(&self) -> u64 {
        (HEADER_LEN + self.payload.len()) as u64
    }

    /// Appends the header and payload to `out`, with `marks` (an encoded marks
    /// trailer) behind the payload when given, returning the frame's index entry.
    pub(crate) fn write_to(
        &self,
        out: &mut Vec<u8>,
        base_offset: u64,
        commit_ts: i64,
        marks: Option<&[u8]>,
    ) -> FrameMeta {
        let trailer = marks.unwrap_or_default();
        let meta = FrameMeta {
            position: 0,
            payload_len: (self.payload.len() + trailer.len()) as u32,
            base_offset,
            record_count: self.record_count,
            column_count: self.column_count,
            flags: if marks.is_some() {
                FLAG_SOURCE_MARKS
            } else {
                0
            },
            commit_ts,
            min_event_ts: self.min_event_ts,
            max_event_ts: self.max_event_ts,
        };
        let mut header = meta.header_bytes();
        let crc =
            crc32c::crc32c_append(frame_crc(&header, &self.payload, self.payload_crc), trailer);
        header[4..8].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.payload);
        out.extend_from_slice(trailer);
        meta
    }
}

/// Payloads up to this size are CRC'd again behind their header rather than combined:
/// `crc32c_combine` costs tens of µs whatever the length (zlib's matrix method), while
/// the hardware CRC takes about that long only for a few hundred KiB. Small frames are
/// the latency-bound ones (an audit record per read), and `write_to` runs on the log's
/// writer, where every commit waits for it.
const RESCAN_PAYLOAD_BYTES: usize = 64 * 1024;

/// The CRC32C of `header[8..]` followed by `payload`: combined with the payload's own
/// CRC where one was taken (large payloads), else by scanning the payload.
fn frame_crc(header: &[u8; HEADER_LEN], payload: &[u8], payload_crc: Option<u32>) -> u32 {
    let header_crc = crc32c::crc32c(&header[8..]);
    match payload_crc {
        Some(crc) => crc32c::crc32c_combine(header_crc, crc, payload.len()),
        None => crc32c::crc32c_append(header_crc, payload),
    }
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The index entry of one frame: where it is and what its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameMeta {
    /// Byte position of the header in the segment file.
    pub position: u64,
    pub payload_len: u32,
    pub base_offset: u64,
    pub record_count: u32,
    pub column_count: u32,
    /// Header byte 23; see [`FLAG_SOURCE_MARKS`].
    pub flags: u8,
    pub commit_ts: i64,
    pub min_event_ts: i64,
    pub max_event_ts: i64,
}

impl FrameMeta {
    pub(crate) fn end_offset(&self) -> u64 {
        self.base_offset + self.record_count as u64
    }

    pub(crate) fn frame_len(&self) -> u64 {
        HEADER_LEN as u64 + self.payload_len as u64
    }

    fn header_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&self.payload_len.to_le_bytes());
        h[8..16].copy_from_slice(&self.base_offset.to_le_bytes());
        h[16..20].copy_from_slice(&self.record_count.to_le_bytes());
        h[20..24].copy_from_slice(
            &(self.column_count & 0x00FF_FFFF | u32::from(self.flags) << 24).to_le_bytes(),
        );
        h[24..32].copy_from_slice(&self.commit_ts.to_le_bytes());
        h[32..40].copy_from_slice(&self.min_event_ts.to_le_bytes());
        h[40..48].copy_from_slice(&self.max_event_ts.to_le_bytes());
        h
    }

    pub(crate) fn parse(position: u64, h: &[u8; HEADER_LEN]) -> (Self, u32) {
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
            column_count: u32_at(20) & 0x00FF_FFFF,
            flags: h[23],
            commit_ts: u64_at(24) as i64,
            min_event_ts: u64_at(32) as i64,
            max_event_ts: u64_at(40) as i64,
        };
        (meta, u32_at(4))
    }
}

/// The source marks a frame carries behind its payload, if its header says it has them.
pub(crate) fn read_marks(
    file: &File,
    path: &Path,
    meta: &FrameMeta,
) -> Result<Option<SourceMarks>> {
    if meta.flags & FLAG_SOURCE_MARKS == 0 {
        return Ok(None);
    }
    let corrupt = |detail: String| {
        StoreError::corrupt(path, format!("frame at byte {}: {detail}", meta.position))
    };
    let end = meta.position + meta.frame_len();
    if meta.payload_len < 8 {
        return Err(corrupt("a marked payload shorter than its trailer".into()));
    }
    let mut last8 = [0u8; 8];
    file.read_exact_at(&mut last8, end - 8)
        .map_err(|e| StoreError::io(path, e))?;
    let len = SourceMarks::trailer_len(last8).map_err(corrupt)?;
    if len > meta.payload_len as usize {
        return Err(corrupt(
            "the source marks trailer overruns the payload".into(),
        ));
    }
    let mut trailer = vec![0u8; len];
    file.read_exact_at(&mut trailer, end - len as u64)
        .map_err(|e| StoreError::io(path, e))?;
    SourceMarks::decode_trailer(&trailer)
        .map(Some)
        .map_err(corrupt)
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
    /// Length of the valid prefix; anything after it is a torn or corrupt tail, or
    /// preallocated zeros.
    pub valid_len: u64,
    /// Why scanning stopped early, if it did.
    pub tail_problem: Option<String>,
    /// With [`Verify::After`]: a frame ends at the recovery point with the CRC it
    /// recorded, so the unchecked frames before it are the ones it vouched for.
    pub trusted_prefix_held: bool,
    /// The stored CRC of the last valid frame (0 when there is none).
    pub last_crc: u32,
}

/// Whether a frame header (or what is left of the file where one would start) is all
/// zeros: the space the log writer preallocates after the last frame, never a frame (a
/// frame has at least one row).
pub(crate) fn is_preallocated(header: &[u8]) -> bool {
    header.iter().all(|b| *b == 0)
}

/// Which frames of a segment a scan reads whole and checks against their CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// None: only the headers' structure is checked (a sealed segment, synced whole
    /// before it was sealed).
    Headers,
    /// Every frame (the active segment, whose tail a crash may have torn).
    All,
    /// The frames at and past `position`. Those before it were durable and whole when a
    /// recovery point recorded it; the frame that ends there carries the stored CRC
    /// `crc`. When no frame ends at `position` with that CRC, the scan says so
    /// ([`ScannedSegment::trusted_prefix_held`]) and the caller scans again with `All`.
    After { position: u64, crc: u32 },
}

/// Reads every frame header of a segment, and the payloads that `verify` asks for,
/// which are checked against their CRC. Scanning stops at the first frame that fails,
/// or at preallocated space (an all-zero header), which is a clean end.
pub(crate) fn scan_segment(
    file: &File,
    path: &Path,
    base_offset: u64,
    verify: Verify,
) -> Result<ScannedSegment> {
    let len = file.metadata().map_err(|e| StoreError::io(path, e))?.len();
    let mut frames = Vec::new();
    let mut pos = 0u64;
    let mut expected_offset = base_offset;
    let mut payload = Vec::new();
    let mut trusted_prefix_held = match verify {
        Verify::After { position, .. } => position == 0,
        Verify::Headers | Verify::All => true,
    };
    let mut last_crc = 0;
    let problem = loop {
        if pos == len {
            break None;
        }
        if len - pos < HEADER_LEN as u64 {
            let mut rest = [0u8; HEADER_LEN];
            let rest = &mut rest[..(len - pos) as usize];
            file.read_exact_at(rest, pos)
                .map_err(|e| StoreError::io(path, e))?;
            if is_preallocated(rest) {
                break None;
            }
            break Some(format!(
                "{} trailing bytes are shorter than a header",
                len - pos
            ));
        }
        let mut h = [0u8; HEADER_LEN];
        file.read_exact_at(&mut h, pos)
            .map_err(|e| StoreError::io(path, e))?;
        if is_preallocated(&h) {
            break None;
        }
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
        let verify_crc = match verify {
            Verify::Headers => false,
            Verify::All => true,
            Verify::After {
                position,
                crc: trusted,
            } => {
                if end == position {
                    trusted_prefix_held = crc == trusted;
                }
                pos >= position
            }
        };
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
        last_crc = crc;
        frames.push(meta);
        pos = end;
    };
    Ok(ScannedSegment {
        frames,
        valid_len: pos,
        tail_problem: problem,
        trusted_prefix_held,
        last_crc,
    })
}

/// Decodes a frame's rows for the columns in `projection` (indices into the table's
/// current log schema), reading from disk only the bytes of those columns when the
/// projection is partial. Columns added to the table after the frame was written come
/// back as nulls. The last `trailing` columns of the schema (a primary-key log's
/// `_change`) are the last columns of every frame, however many stored columns the
/// frame has.
pub(crate) fn read_frame(
    file: &File,
    path: &Path,
    meta: &FrameMeta,
    schema: &SchemaRef,
    projection: &[usize],
    trailing: usize,
) -> Result<RecordBatch> {
    let corrupt = |detail: String| StoreError::corrupt(path, detail);
    let column_count = meta.column_count as usize;
    if column_count > schema.fields().len() || column_count < trailing {
        return Err(corrupt(format!(
            "frame at byte {} has {column_count} columns, the table {}",
            meta.position,
            schema.fields().len()
        )));
    }
    if trailing > 0 && column_count < schema.fields().len() {
        let written_schema = older_frame_schema(schema, column_count, trailing);
        let written = read_whole_frame(file, path, meta, written_schema)?;
        return lay_out_older_frame(&written, schema, projection, trailing);
    }
    let full =
        projection.len() == column_count && projection.iter().enumerate().all(|(i, p)| i == *p);
    let out_schema = Arc::new(schema.project(projection)?);
    if full {
        return read_whole_frame(file, path, meta, out_schema);
    }

    // A projected read fetches the IPC metadata, then only the body bytes of the
    // projected columns, each into its own buffer: the other columns are never read.
    let stored = read_stored_layout(file, path, meta, schema, column_count)?;
    let (layout, body_len, body_pos) = (stored.columns, stored.body_len, stored.body_pos);
    let bad_buffers = || stored_bad_buffers(path, meta);
    let rows = stored.rows;
    let mut columns = Vec::with_capacity(projection.len());
    for &p in projection {
        let field = schema.field(p);
        let Some(col) = layout.get(p) else {
            // Added to the table after this frame was written.
            columns.push(new_null_array(field.data_type(), rows));
            continue;
        };
        if col.range.end > body_len || col.rows != rows {
            return Err(bad_buffers());
        }
        let mut bytes = vec![0u8; col.range.len()];
        file.read_exact_at(&mut bytes, body_pos + col.range.start as u64)
            .map_err(|e| StoreError::io(path, e))?;
        let bytes = Buffer::from_vec(bytes);
        let slice = |r: &Range<usize>| bytes.slice_with_length(r.start - col.range.start, r.len());
        let mut data = ArrayData::builder(field.data_type().clone())
            .len(rows)
            .null_count(col.null_count)
            .align_buffers(true);
        if col.null_count > 0 {
            data = data.null_bit_buffer(Some(slice(&col.buffers[0])));
        }
        for b in &col.buffers[1..] {
            data = data.add_buffer(slice(b));
        }
        // `build` validates offsets, UTF-8 and lengths, so bad bytes are an error.
        let data = data.build().map_err(|e| {
            corrupt(format!(
                "column {} of frame at byte {}: {e}",
                field.name(),
                meta.position
            ))
        })?;
        columns.push(make_array(data));
    }
    Ok(RecordBatch::try_new(out_schema, columns)?)
}

/// A frame's stored Arrow IPC, projected: a RecordBatch message (flatbuffer) and its
/// body, ready to be sent as they are (Flight's `data_header` and `data_body`).
#[derive(Debug, Clone)]
pub struct IpcFrame {
    pub rows: usize,
    pub header: bytes::Bytes,
    pub body: bytes::Bytes,
}

/// Where projected column bytes start in a rebuilt body: the writer's alignment, so
/// that every buffer keeps the alignment it was written with.
const IPC_ALIGNMENT: usize = 64;

/// Reads `projection` of a frame as stored IPC without decoding it (zero-copy), or
/// `None` when the frame needs decoding: columns added after it was written (they come
/// back as nulls), a projected body over `max_body` bytes (the caller splits decoded
/// batches to fit a message).
///
/// Nothing is validated here: the frame's arrays were valid when written (they were
/// built, and checked, by arrow-rs before they were encoded), a whole frame is read
/// with its CRC checked, and a projected read checks that every buffer lies inside the
/// body. The reader decodes, and validates, what it receives.
pub(crate) fn read_frame_ipc(
    file: &File,
    path: &Path,
    meta: &FrameMeta,
    schema: &SchemaRef,
    projection: &[usize],
    max_body: usize,
) -> Result<Option<IpcFrame>> {
    let column_count = meta.column_count as usize;
    if column_count > schema.fields().len() || projection.iter().any(|p| *p >= column_count) {
        return Ok(None);
    }
    let rows = meta.record_count as usize;
    let full =
        projection.len() == column_count && projection.iter().enumerate().all(|(i, p)| i == *p);
    if full {
        if meta.payload_len as usize > max_body + 4096 {
            return Ok(None);
        }
        let checked = read_checked_frame(file, path, meta)?;
        let frame = bytes::Bytes::from(checked.frame);
        let header = frame.slice(checked.header);
        let body = frame.slice(checked.body);
        return Ok(Some(IpcFrame { rows, header, body }));
    }

    let stored = read_stored_layout(file, path, meta, schema, column_count)?;
    let (layout, stored_body_len, body_pos) = (stored.columns, stored.body_len, stored.body_pos);
    let bad_buffers = || stored_bad_buffers(path, meta);
    // Runs of adjacent columns are read with one call each; their buffers keep their
    // places relative to the run's first byte.
    let mut runs: Vec<(usize, usize)> = Vec::new(); // (first index into projection, len)
    for (i, p) in projection.iter().enumerate() {
        match runs.last_mut() {
            Some((start, len)) if projection[*start + *len - 1] + 1 == *p => *len += 1,
            _ => runs.push((i, 1)),
        }
    }
    let mut spans = Vec::with_capacity(runs.len());
    let mut body_len = 0usize;
    for &(start, len) in &runs {
        let cols = &projection[start..start + len];
        let mut span: Option<Range<usize>> = None;
        for &p in cols {
            let col = &layout[p];
            if col.range.end > stored_body_len || col.rows != rows {
                return Err(bad_buffers());
            }
            if !col.range.is_empty() {
                span = Some(match span {
                    None => col.range.clone(),
                    Some(s) => s.start.min(col.range.start)..s.end.max(col.range.end),
                });
            }
        }
        let span = span.unwrap_or(0..0);
        body_len = body_len.div_ceil(IPC_ALIGNMENT) * IPC_ALIGNMENT;
        spans.push((body_len, span.clone()));
        body_len += span.len();
    }
    let body_len = pad8(body_len);
    if body_len > max_body {
        return Ok(None);
    }
    let mut body = vec![0u8; body_len];
    let mut nodes = Vec::with_capacity(projection.len());
    let mut buffers = Vec::new();
    for (&(start, len), (at, span)) in runs.iter().zip(&spans) {
        file.read_exact_at(
            &mut body[*at..*at + span.len()],
            body_pos + span.start as u64,
        )
        .map_err(|e| StoreError::io(path, e))?;
        for &p in &projection[start..start + len] {
            let col = &layout[p];
            nodes.push(arrow_ipc::FieldNode::new(
                col.rows as i64,
                col.null_count as i64,
            ));
            for b in &col.buffers {
                let offset = if b.is_empty() {
                    *at
                } else {
                    at + (b.start - span.start)
                };
                buffers.push(arrow_ipc::Buffer::new(offset as i64, b.len() as i64));
            }
        }
    }
    let header = record_batch_message(rows, &nodes, &buffers, body_len);
    Ok(Some(IpcFrame {
        rows,
        header: bytes::Bytes::from(header),
        body: bytes::Bytes::from(body),
    }))
}

/// An IPC RecordBatch message (metadata V5, uncompressed) over a body of `body_len`
/// bytes, as arrow-ipc's writer builds it.
fn record_batch_message(
    rows: usize,
    nodes: &[arrow_ipc::FieldNode],
    buffers: &[arrow_ipc::Buffer],
    body_len: usize,
) -> Vec<u8> {
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let buffers = fbb.create_vector(buffers);
    let nodes = fbb.create_vector(nodes);
    let mut batch = arrow_ipc::RecordBatchBuilder::new(&mut fbb);
    batch.add_length(rows as i64);
    batch.add_nodes(nodes);
    batch.add_buffers(buffers);
    let batch = batch.finish().as_union_value();
    let mut message = arrow_ipc::MessageBuilder::new(&mut fbb);
    message.add_version(MetadataVersion::V5);
    message.add_header_type(arrow_ipc::MessageHeader::RecordBatch);
    message.add_bodyLength(body_len as i64);
    message.add_header(batch);
    let message = message.finish();
    fbb.finish(message, None);
    fbb.finished_data().to_vec()
}

/// The schema a frame with trailing columns was written with, before the table's
/// later columns were added: the first columns, then the trailing ones.
fn older_frame_schema(schema: &SchemaRef, column_count: usize, trailing: usize) -> SchemaRef {
    let kept = column_count - trailing;
    let first_trailing = schema.fields().len() - trailing;
    let fields: Vec<_> = schema.fields()[..kept]
        .iter()
        .chain(&schema.fields()[first_trailing..])
        .cloned()
        .collect();
    Arc::new(arrow_schema::Schema::new(fields))
}

/// A frame with trailing columns written before columns were added, decoded whole with
/// the schema it was written with (`written`), laid out as the table's schema: the
/// added columns null.
fn lay_out_older_frame(
    written: &RecordBatch,
    schema: &SchemaRef,
    projection: &[usize],
    trailing: usize,
) -> Result<RecordBatch> {
    let kept = written.num_columns() - trailing;
    let first_trailing = schema.fields().len() - trailing;
    let rows = written.num_rows();
    let columns = projection
        .iter()
        .map(|&p| {
            if p < kept {
                Arc::clone(written.column(p))
            } else if p >= first_trailing {
                Arc::clone(written.column(kept + p - first_trailing))
            } else {
                new_null_array(schema.field(p).data_type(), rows)
            }
        })
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(schema.project(projection)?),
        columns,
    )?)
}

/// Reads a whole frame, checks its CRC, and decodes every column with arrow-ipc.
fn read_whole_frame(
    file: &File,
    path: &Path,
    meta: &FrameMeta,
    schema: SchemaRef,
) -> Result<RecordBatch> {
    let checked = read_checked_frame(file, path, meta)?;
    let buf = Buffer::from_vec(checked.frame);
    let meta_bytes = buf.slice_with_length(checked.header.start, checked.header.len());
    let body = buf.slice_with_length(checked.body.start, checked.body.len());
    let message = arrow_ipc::root_as_message(&meta_bytes)
        .map_err(|e| StoreError::corrupt(path, format!("bad IPC metadata: {e}")))?;
    let ipc_batch = message
        .header_as_record_batch()
        .expect("read_checked_frame checked the message is a record batch");
    Ok(arrow_ipc::reader::read_record_batch(
        &body,
        ipc_batch,
        schema,
        &HashMap::new(),
        None,
        &MetadataVersion::V5,
    )?)
}

/// The IPC metadata length that opens a payload, refused if it overruns the payload.
fn checked_meta_len(bytes: [u8; 4], meta: &FrameMeta, path: &Path) -> Result<usize> {
    let len = u32::from_le_bytes(bytes) as usize;
    if 4 + len > meta.payload_len as usize {
        return Err(StoreError::corrupt(
            path,
            format!("frame at byte {} has a bad metadata length", meta.position),
        ));
    }
    Ok(len)
}

/// A whole frame read from disk with its CRC checked, and where its IPC message
/// header and body lie in it.
struct CheckedFrame {
    frame: Vec<u8>,
    header: Range<usize>,
    body: Range<usize>,
}

/// Reads a whole frame and checks its CRC, and that it holds one IPC record batch
/// whose body lies inside the frame.
fn read_checked_frame(file: &File, path: &Path, meta: &FrameMeta) -> Result<CheckedFrame> {
    let corrupt = |detail: String| StoreError::corrupt(path, detail);
    let mut frame = vec![0u8; meta.frame_len() as usize];
    file.read_exact_at(&mut frame, meta.position)
        .map_err(|e| StoreError::io(path, e))?;
    let crc = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
    // The CRC covers header bytes 8.. and the payload, which are contiguous here.
    if crc32c::crc32c(&frame[8..]) != crc {
        return Err(corrupt(format!(
            "frame at byte {} fails its CRC",
            meta.position
        )));
    }
    let b = &frame[HEADER_LEN..HEADER_LEN + 4];
    let meta_len = checked_meta_len([b[0], b[1], b[2], b[3]], meta, path)?;
    let header = HEADER_LEN + 4..HEADER_LEN + 4 + meta_len;
    let message = arrow_ipc::root_as_message(&frame[header.clone()])
        .map_err(|e| corrupt(format!("bad IPC metadata: {e}")))?;
    if message.header_as_record_batch().is_none() {
        return Err(corrupt("IPC message is not a record batch".into()));
    }
    let body_start = HEADER_LEN + pad8(4 + meta_len);
    let body_len = usize::try_from(message.bodyLength())
        .ok()
        .filter(|l| body_start + l <= frame.len())
        .ok_or_else(|| {
            corrupt(format!(
                "frame at byte {} has a bad body length",
                meta.position
            ))
        })?;
    Ok(CheckedFrame {
        frame,
        header,
        body: body_start..body_start + body_len,
    })
}

/// A frame's column layout, read from its IPC metadata alone, for reading some columns'
/// bytes without the rest.
struct StoredLayout {
    columns: Vec<ColumnLayout>,
    rows: usize,
    /// The stored body's length, and where it starts in the file.
    body_len: usize,
    body_pos: u64,
}

fn stored_bad_buffers(path: &Path, meta: &FrameMeta) -> StoreError {
    StoreError::corrupt(
        path,
        format!("frame at byte {} has bad IPC buffers", meta.position),
    )
}

/// Reads a frame's IPC metadata (not its body) and lays out its first `column_count`
/// columns.
fn read_stored_layout(
    file: &File,
    path: &Path,
    meta: &FrameMeta,
    schema: &SchemaRef,
    column_count: usize,
) -> Result<StoredLayout> {
    let corrupt = |detail: String| StoreError::corrupt(path, detail);
    let payload_pos = meta.position + HEADER_LEN as u64;
    let mut len_bytes = [0u8; 4];
    file.read_exact_at(&mut len_bytes, payload_pos)
        .map_err(|e| StoreError::io(path, e))?;
    let meta_len = checked_meta_len(len_bytes, meta, path)?;
    let mut m = vec![0u8; meta_len];
    file.read_exact_at(&mut m, payload_pos + 4)
        .map_err(|e| StoreError::io(path, e))?;
    let message =
        arrow_ipc::root_as_message(&m).map_err(|e| corrupt(format!("bad IPC metadata: {e}")))?;
    let ipc_batch = message
        .header_as_record_batch()
        .ok_or_else(|| stored_bad_buffers(path, meta))?;
    if ipc_batch.compression().is_some() {
        return Err(corrupt(
            "compressed IPC bodies are not written by hotgate".into(),
        ));
    }
    let columns = column_layout(&ipc_batch, schema, column_count)
        .ok_or_else(|| stored_bad_buffers(path, meta))?;
    Ok(StoredLayout {
        columns,
        rows: ipc_batch.length() as usize,
        body_len: meta.payload_len as usize - pad8(4 + meta_len),
        body_pos: payload_pos + pad8(4 + meta_len) as u64,
    })
}

/// Where one column's buffers sit in an IPC body.
struct ColumnLayout {
    rows: usize,
    null_count: usize,
    /// Validity, then offsets (variable-width types only), then values.
    buffers: Vec<Range<usize>>,
    /// The smallest range covering every non-empty buffer of the column.
    range: Range<usize>,
}

/// The layout of each of the first `column_count` columns. Only flat types are stored,
/// so each column owns one field node and a fixed number of consecutive buffers.
fn column_layout(
    batch: &arrow_ipc::RecordBatch<'_>,
    schema: &SchemaRef,
    column_count: usize,
) -> Option<Vec<ColumnLayout>> {
    let buffers = batch.buffers()?;
    let nodes = batch.nodes()?;
    if nodes.len() < column_count {
        return None;
    }
    let mut next = 0usize;
    let mut out = Vec::with_capacity(column_count);
    for (i, field) in schema.fields().iter().take(column_count).enumerate() {
        let count = match field.data_type() {
            DataType::Utf8 | DataType::Binary => 3,
            _ => 2,
        };
        if next + count > buffers.len() {
            return None;
        }
        let mut ranges = Vec::with_capacity(count);
        let mut range: Option<Range<usize>> = None;
        for j in next..next + count {
            let b = buffers.get(j);
            let (s, e) = (
                usize::try_from(b.offset()).ok()?,
                usize::try_from(b.offset().checked_add(b.length())?).ok()?,
            );
            ranges.push(s..e);
            if s < e {
                range = Some(match range {
                    None => s..e,
                    Some(r) => r.start.min(s)..r.end.max(e),
                });
            }
        }
        next += count;
        let range = range.unwrap_or(0..0);
        // Empty buffers may point anywhere; anchor them inside the column's range.
        for r in &mut ranges {
            if r.start >= r.end {
                *r = range.start..range.start;
            }
        }
        let node = nodes.get(i);
        out.push(ColumnLayout {
            rows: usize::try_from(node.length()).ok()?,
            null_count: usize::try_from(node.null_count()).ok()?,
            buffers: ranges,
            range,
        });
    }
    Some(out)
}

/// Path of a segment inside its log directory.
pub(crate) fn segment_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(segment_file_name(base_offset))
}

#[cfg(test)]
mod tests {
    use arrow_array::{
        ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array,
        Float64Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
    };
    use arrow_schema::{Field, Schema};

    use super::*;
    use crate::table_def::ColumnType;

    /// Both ways of taking a frame's CRC give the CRC of its bytes, on either side of
    /// the size where one gives way to the other.
    #[test]
    fn frame_crc_is_the_crc_of_header_and_payload() {
        let header: [u8; HEADER_LEN] = std::array::from_fn(|i| (i * 7 + 3) as u8);
        for len in [
            0,
            8,
            RESCAN_PAYLOAD_BYTES,
            RESCAN_PAYLOAD_BYTES + 8,
            300_000,
        ] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let whole: Vec<u8> = header[8..].iter().chain(&payload).copied().collect();
            for payload_crc in [None, Some(crc32c::crc32c(&payload))] {
                assert_eq!(
                    frame_crc(&header, &payload, payload_crc),
                    crc32c::crc32c(&whole),
                    "payload of {len} bytes, combined: {}",
                    payload_crc.is_some()
                );
            }
        }
    }

    /// Every column type, with nulls, survives a frame round trip through both the whole
    /// and the projected read paths, and columns added later read as nulls.
    /// A frame with a source marks trailer reads back the same rows, whole and
    /// projected, passes recovery's CRC check, and gives its marks; one without gives
    /// none. Large payloads (whose CRC is combined) too.
    #[test]
    fn marked_frames_read_like_any_frame_and_give_their_marks() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let mut marks = SourceMarks::default();
        marks.merge(&SourceDelta {
            source: "orders".into(),
            max: [(0, 99), (2, 5)].into(),
        });
        let trailer = marks.encode_trailer();
        for rows in [3usize, 20_000] {
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(0..rows as i64)),
                    Arc::new(StringArray::from_iter_values(
                        (0..rows).map(|i| format!("n{i}")),
                    )),
                ],
            )
            .unwrap();
            let encoded = EncodedFrame::encode(&batch, 0, 0).unwrap();
            let mut bytes = Vec::new();
            let plain = encoded.write_to(&mut bytes, 0, 1, None);
            let mut marked = encoded.write_to(&mut bytes, plain.end_offset(), 1, Some(&trailer));
            marked.position = plain.frame_len();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("seg.log");
            std::fs::write(&path, &bytes).unwrap();
            let file = File::open(&path).unwrap();
            let scanned = scan_segment(&file, &path, 0, Verify::All).unwrap();
            assert_eq!(scanned.tail_problem, None);
            assert_eq!(scanned.frames, vec![plain, marked]);
            assert_eq!(read_marks(&file, &path, &plain).unwrap(), None);
            assert_eq!(
                read_marks(&file, &path, &marked).unwrap(),
                Some(marks.clone())
            );
            assert_eq!(
                read_frame(&file, &path, &marked, &schema, &[0, 1], 0).unwrap(),
                batch
            );
            assert_eq!(
                read_frame(&file, &path, &marked, &schema, &[1], 0)
                    .unwrap()
                    .column(0),
                batch.column(1)
            );
        }
    }

    /// A frame of one column of every stored type, with nulls, in a segment file at
    /// byte 16; the table's schema has since gained a column.
    struct EveryType {
        _dir: tempfile::TempDir,
        path: PathBuf,
        file: File,
        meta: FrameMeta,
        batch: RecordBatch,
        table_schema: SchemaRef,
        bytes: Vec<u8>,
    }

    fn every_type_frame() -> EveryType {
        let types = [
            ColumnType::Bool,
            ColumnType::Int32,
            ColumnType::Int64,
            ColumnType::Float32,
            ColumnType::Float64,
            ColumnType::String,
            ColumnType::Binary,
            ColumnType::Date32,
            ColumnType::TimestampUs,
            ColumnType::Decimal {
                precision: 20,
                scale: 3,
            },
        ];
        let fields: Vec<Field> = types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t.to_arrow(), true))
            .collect();
        let n = 37;
        let valid = |i: usize| i % 5 != 2;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| valid(i).then_some(i % 3 == 0)),
            )),
            Arc::new(Int32Array::from_iter(
                (0..n).map(|i| valid(i).then_some(i as i32 - 9)),
            )),
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| valid(i).then_some(i as i64 * 1_000_003)),
            )),
            Arc::new(Float32Array::from_iter(
                (0..n).map(|i| valid(i).then_some(i as f32 / 7.0)),
            )),
            Arc::new(Float64Array::from_iter(
                (0..n).map(|i| valid(i).then_some(i as f64 / 3.0)),
            )),
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| valid(i).then(|| "é".repeat(i % 4))),
            )),
            Arc::new(BinaryArray::from_iter(
                (0..n).map(|i| valid(i).then(|| vec![i as u8; i % 6])),
            )),
            Arc::new(Date32Array::from_iter(
                (0..n).map(|i| valid(i).then_some(i as i32)),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter((0..n).map(|i| valid(i).then_some(i as i64)))
                    .with_timezone(crate::table_def::UTC),
            ),
            Arc::new(
                Decimal128Array::from_iter((0..n).map(|i| valid(i).then_some(i as i128 * -12345)))
                    .with_precision_and_scale(20, 3)
                    .unwrap(),
            ),
        ];
        let frame_schema = Arc::new(Schema::new(fields.clone()));
        let batch = RecordBatch::try_new(Arc::clone(&frame_schema), columns).unwrap();
        let encoded = EncodedFrame::encode(&batch, 0, 0).unwrap();
        let mut bytes = vec![0u8; 16]; // the frame need not start at byte 0
        let mut meta = encoded.write_to(&mut bytes, 100, 1, None);
        meta.position = 16;
        let mut out = Vec::new();
        out.extend_from_slice(&bytes);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg.log");
        std::fs::write(&path, &out).unwrap();
        let file = File::open(&path).unwrap();
        let mut table_fields = fields;
        table_fields.push(Field::new("added", DataType::Int64, true));
        EveryType {
            _dir: dir,
            path,
            file,
            meta,
            batch,
            table_schema: Arc::new(Schema::new(table_fields)),
            bytes: out,
        }
    }

    #[test]
    fn every_type_round_trips_whole_and_projected() {
        let EveryType {
            _dir,
            path,
            file,
            meta,
            batch,
            table_schema,
            bytes: out,
        } = every_type_frame();
        let types = batch.num_columns();
        let n = batch.num_rows();
        let all: Vec<usize> = (0..types).collect();
        let whole = read_frame(&file, &path, &meta, &table_schema, &all, 0).unwrap();
        assert_eq!(whole, batch);
        for i in 0..types {
            let one = read_frame(&file, &path, &meta, &table_schema, &[i, types], 0).unwrap();
            assert_eq!(one.column(0), batch.column(i), "column {i}");
            assert_eq!(one.column(1).null_count(), n, "added column reads as nulls");
        }
        let reversed: Vec<usize> = all.iter().rev().copied().collect();
        let r = read_frame(&file, &path, &meta, &table_schema, &reversed, 0).unwrap();
        assert_eq!(r.column(0), batch.column(types - 1));

        // A damaged byte fails the whole-frame CRC.
        let mut damaged = out.clone();
        damaged[16 + HEADER_LEN + 40] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        let file = File::open(&path).unwrap();
        let err = read_frame(&file, &path, &meta, &table_schema, &all, 0).unwrap_err();
        assert!(err.to_string().contains("fails its CRC"), "{err}");
    }

    /// The rows of a zero-copy read, decoded as a client would.
    fn decode_ipc(frame: &IpcFrame, schema: SchemaRef) -> RecordBatch {
        let message = arrow_ipc::root_as_message(&frame.header).unwrap();
        assert_eq!(message.bodyLength() as usize, frame.body.len());
        let ipc = message.header_as_record_batch().unwrap();
        for b in ipc.buffers().unwrap() {
            assert_eq!(b.offset() % 8, 0, "buffers stay 8-byte aligned");
            assert!((b.offset() + b.length()) as usize <= frame.body.len());
        }
        arrow_ipc::reader::read_record_batch(
            &Buffer::from_vec(frame.body.to_vec()),
            ipc,
            schema,
            &HashMap::new(),
            None,
            &message.version(),
        )
        .unwrap()
    }

    /// The zero-copy path and the decoding path give the same Arrow data, column by
    /// column, on every stored type: whole, projected in runs and out of order.
    #[test]
    fn zero_copy_reads_equal_decoded_reads_on_every_type() {
        let f = every_type_frame();
        let types = f.batch.num_columns();
        let mut projections: Vec<Vec<usize>> = vec![(0..types).collect()];
        projections.extend((0..types).map(|i| vec![i]));
        projections.extend((0..types - 1).map(|i| vec![i, i + 1]));
        projections.push((0..types).rev().collect());
        projections.push(vec![0, 1, 2, 5, 6, 9]);
        projections.push(vec![9, 3, 4, 5, 0]);
        projections.push(vec![5, 5]);
        for projection in projections {
            let decoded =
                read_frame(&f.file, &f.path, &f.meta, &f.table_schema, &projection, 0).unwrap();
            let frame = read_frame_ipc(
                &f.file,
                &f.path,
                &f.meta,
                &f.table_schema,
                &projection,
                1 << 20,
            )
            .unwrap()
            .expect("a frame with every projected column is sent as stored");
            assert_eq!(frame.rows, f.batch.num_rows());
            let sent = decode_ipc(&frame, decoded.schema());
            assert_eq!(sent, decoded, "projection {projection:?}");
            for (i, p) in projection.iter().enumerate() {
                assert_eq!(sent.column(i), f.batch.column(*p), "column {p}");
            }
        }
        // A column added after the frame, or a body over the limit: decoded instead.
        let added = [0, types];
        let none = |projection: &[usize], max: usize| {
            read_frame_ipc(&f.file, &f.path, &f.meta, &f.table_schema, projection, max)
                .unwrap()
                .is_none()
        };
        assert!(none(&added, 1 << 20));
        assert!(none(&[0, 5], 8));
        assert!(none(&(0..types).collect::<Vec<_>>(), 8));

        // The whole frame is sent only if it passes its CRC.
        let mut damaged = f.bytes.clone();
        damaged[16 + HEADER_LEN + 40] ^= 1;
        std::fs::write(&f.path, &damaged).unwrap();
        let file = File::open(&f.path).unwrap();
        let all: Vec<usize> = (0..types).collect();
        let err =
            read_frame_ipc(&file, &f.path, &f.meta, &f.table_schema, &all, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("fails its CRC"), "{err}");
    }
}
