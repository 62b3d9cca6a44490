//! Read-only, damage-tolerant reading of one table's files, for auditors.
//!
//! [`Store::open`](crate::Store::open) repairs what it finds (it cuts a torn tail) and
//! refuses a damaged sealed segment. An auditor checking a log for tampering needs the
//! opposite: touch nothing, and report every frame's fate, so that a frame whose bytes
//! were changed or that was cut out is named rather than repaired or fatal. `hotgate
//! audit verify` reads `_system.audit` this way, on a stopped server's data directory or
//! beside a running one (bounded by the durable end offsets it is given).

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;

use crate::bucket::LogId;
use crate::error::{Result, StoreError};
use crate::segment::{FrameMeta, HEADER_LEN, is_preallocated, parse_segment_file_name, read_frame};
use crate::table_def::{TableDef, TableName, TableSpec};

/// One frame of a log, in storage order, as found on disk.
#[derive(Debug)]
pub enum InspectedFrame {
    /// An intact frame: its CRC holds and its rows decode.
    Rows {
        log: LogId,
        segment: PathBuf,
        /// Where the frame starts in the segment, and its length with the header.
        position: u64,
        len: u64,
        offsets: Range<u64>,
        batch: RecordBatch,
    },
    /// A whole frame whose CRC fails or whose rows do not decode. Its header's offsets
    /// are given as found, and may themselves be damaged.
    Damaged {
        log: LogId,
        segment: PathBuf,
        position: u64,
        offsets: Range<u64>,
        problem: String,
    },
    /// The last bytes of a log's last segment do not hold a whole frame: a write cut
    /// short by a crash, which was never acknowledged. Reading of that log stops here.
    TornTail {
        log: LogId,
        segment: PathBuf,
        position: u64,
    },
}

/// Every frame of table `name` under store root `root`, log by log in (day, bucket)
/// order, then in offset order. With `end_offsets`, a log is read only below its entry
/// (frames at or past it are not durable yet); logs without an entry are read whole.
pub fn inspect_table(
    root: &Path,
    name: &TableName,
    end_offsets: Option<&HashMap<LogId, u64>>,
) -> Result<Vec<InspectedFrame>> {
    let dir = root.join("data").join(name.namespace()).join(name.name());
    let def_path = dir.join("table.json");
    let text = std::fs::read_to_string(&def_path).map_err(|e| StoreError::io(&def_path, e))?;
    let spec: TableSpec = serde_json::from_str(&text)
        .map_err(|e| StoreError::corrupt(&def_path, format!("unreadable table definition: {e}")))?;
    let def = TableDef::new(spec).map_err(|e| StoreError::corrupt(&def_path, e.to_string()))?;
    let mut logs = Vec::new();
    for day in sorted_entries(&dir)? {
        if !day.is_dir() {
            continue;
        }
        for bucket in sorted_entries(&day)? {
            let names = (day.file_name(), bucket.file_name());
            if let (Some(d), Some(b)) = names
                && let Some(id) = LogId::parse_dirs(&d.to_string_lossy(), &b.to_string_lossy())
            {
                logs.push((id, bucket));
            }
        }
    }
    logs.sort_by_key(|(id, _)| *id);
    let mut out = Vec::new();
    for (id, log_dir) in logs {
        let limit = end_offsets.map(|e| e.get(&id).copied().unwrap_or(u64::MAX));
        inspect_log(&def, id, &log_dir, limit, &mut out)?;
    }
    Ok(out)
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| StoreError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    out.sort();
    Ok(out)
}

fn inspect_log(
    def: &TableDef,
    id: LogId,
    dir: &Path,
    limit: Option<u64>,
    out: &mut Vec<InspectedFrame>,
) -> Result<()> {
    let mut segments: Vec<(u64, PathBuf)> = sorted_entries(dir)?
        .into_iter()
        .filter_map(|p| {
            let base = parse_segment_file_name(&p.file_name()?.to_string_lossy())?;
            Some((base, p))
        })
        .collect();
    segments.sort();
    let schema = def.stored_schema();
    let all: Vec<usize> = (0..schema.fields().len()).collect();
    let last_segment = segments.len().saturating_sub(1);
    for (i, (_, path)) in segments.iter().enumerate() {
        let file = File::open(path).map_err(|e| StoreError::io(path, e))?;
        let len = file.metadata().map_err(|e| StoreError::io(path, e))?.len();
        let mut pos = 0u64;
        while pos < len {
            let mut h = [0u8; HEADER_LEN];
            let whole_header = len - pos >= HEADER_LEN as u64;
            let present = &mut h[..(len - pos).min(HEADER_LEN as u64) as usize];
            file.read_exact_at(present, pos)
                .map_err(|e| StoreError::io(path, e))?;
            // The writer's preallocated space (even less than a header of it, as
            // recovery reads it): the frames end here.
            if is_preallocated(present) {
                break;
            }
            if !whole_header {
                // A torn header: its bytes say nothing.
                h = [0u8; HEADER_LEN];
            }
            let (meta, _) = FrameMeta::parse(pos, &h);
            // Past the durable end a writer may be mid-frame: not ours to judge.
            if whole_header && limit.is_some_and(|l| meta.base_offset >= l) {
                return Ok(());
            }
            if !whole_header || pos + meta.frame_len() > len || meta.payload_len % 8 != 0 {
                // Only the end of the last segment may be an unfinished write; anywhere
                // else a frame that does not fit is damage.
                if i == last_segment {
                    out.push(InspectedFrame::TornTail {
                        log: id,
                        segment: path.clone(),
                        position: pos,
                    });
                } else {
                    out.push(InspectedFrame::Damaged {
                        log: id,
                        segment: path.clone(),
                        position: pos,
                        offsets: meta.base_offset..meta.end_offset(),
                        problem: format!("frame at byte {pos} runs past the end of its segment"),
                    });
                }
                break;
            }
            let offsets = meta.base_offset..meta.end_offset();
            // A full read checks the frame's CRC before decoding anything.
            match read_frame(&file, path, &meta, schema, &all, 0) {
                Ok(batch) if batch.num_rows() == meta.record_count as usize => {
                    out.push(InspectedFrame::Rows {
                        log: id,
                        segment: path.clone(),
                        position: pos,
                        len: meta.frame_len(),
                        offsets,
                        batch,
                    })
                }
                Ok(batch) => out.push(InspectedFrame::Damaged {
                    log: id,
                    segment: path.clone(),
                    position: pos,
                    offsets,
                    problem: format!(
                        "frame at byte {pos} holds {} rows, its header says {}",
                        batch.num_rows(),
                        meta.record_count
                    ),
                }),
                Err(e) => out.push(InspectedFrame::Damaged {
                    log: id,
                    segment: path.clone(),
                    position: pos,
                    offsets,
                    problem: e.to_string(),
                }),
            }
            pos += meta.frame_len();
        }
    }
    Ok(())
}
