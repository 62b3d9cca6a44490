//! Row deletion by rewrite: the pieces that remove rows from sealed segments without
//! moving any other row's offset.
//!
//! A row's offset is its position in its frame (`base_offset + i`), so a deleted row
//! keeps its slot: its values are replaced by blanks (null, or zero/empty for
//! non-nullable columns), so none of its bytes survive, and its offset is listed in the
//! segment's sidecar `<base>.del`, which every read skips. Frames keep their header
//! fields (offsets, row count, column count, commit time), so recovery and the frame
//! index see the same log.
//!
//! Sidecar format: `HGDEL001`, a little-endian u64 count, that many u64 offsets in
//! ascending order, and a CRC32C of everything before it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray, new_null_array,
};
use arrow_schema::{DataType, TimeUnit};

use crate::error::{Result, StoreError};

const MAGIC: &[u8; 8] = b"HGDEL001";

/// The sidecar of the segment at `segment`.
pub(crate) fn sidecar_path(segment: &Path) -> PathBuf {
    segment.with_extension("del")
}

/// The deleted offsets a sidecar lists; none when it does not exist.
pub(crate) fn read_deleted(segment: &Path) -> Result<Vec<u64>> {
    let path = sidecar_path(segment);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    let corrupt = |detail: &str| StoreError::corrupt(&path, detail.to_owned());
    if bytes.len() < 20 || &bytes[..8] != MAGIC {
        return Err(corrupt("not a deletion sidecar"));
    }
    let body = &bytes[..bytes.len() - 4];
    let crc = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap_or_default());
    if crc32c::crc32c(body) != crc {
        return Err(corrupt("the deletion sidecar fails its CRC"));
    }
    let count = u64::from_le_bytes(body[8..16].try_into().unwrap_or_default()) as usize;
    if body.len() != 16 + count * 8 {
        return Err(corrupt("the deletion sidecar has a bad length"));
    }
    Ok(body[16..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

/// Writes the sidecar of `segment` durably (temp file, sync, rename, directory sync).
pub(crate) fn write_deleted(segment: &Path, offsets: &[u64]) -> Result<()> {
    let path = sidecar_path(segment);
    let mut bytes = Vec::with_capacity(20 + offsets.len() * 8);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(offsets.len() as u64).to_le_bytes());
    for o in offsets {
        bytes.extend_from_slice(&o.to_le_bytes());
    }
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    crate::fs::write_file_durable(&path, &bytes)
}

/// The keep mask of the rows `rows` (offsets) of a frame: false where `deleted` (sorted)
/// lists the offset. `None` when nothing in the range is deleted.
pub(crate) fn keep_mask(deleted: &[u64], rows: std::ops::Range<u64>) -> Option<BooleanArray> {
    let first = deleted.partition_point(|o| *o < rows.start);
    if deleted.get(first).is_none_or(|o| *o >= rows.end) {
        return None;
    }
    Some(BooleanArray::from_iter(
        rows.map(|o| Some(deleted.binary_search(&o).is_err())),
    ))
}

/// `batch` with the rows where `keep` is false replaced by blanks.
pub(crate) fn blank_rows(batch: &RecordBatch, keep: &BooleanArray) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let columns = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| {
            let blank = blank_array(field.data_type(), field.is_nullable(), n)?;
            Ok(arrow_select::zip::zip(keep, column, &blank)?)
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// `n` blank values: nulls, or for a non-nullable column zero, false or empty.
fn blank_array(data_type: &DataType, nullable: bool, n: usize) -> Result<ArrayRef> {
    if nullable {
        return Ok(new_null_array(data_type, n));
    }
    Ok(match data_type {
        DataType::Utf8 => Arc::new(StringArray::from(vec![""; n])),
        DataType::Binary => Arc::new(BinaryArray::from(vec![&b""[..]; n])),
        DataType::Boolean => Arc::new(BooleanArray::from(vec![false; n])),
        DataType::Int32 => Arc::new(Int32Array::from(vec![0; n])),
        DataType::Int64 => Arc::new(Int64Array::from(vec![0; n])),
        DataType::Float32 => Arc::new(Float32Array::from(vec![0.0; n])),
        DataType::Float64 => Arc::new(Float64Array::from(vec![0.0; n])),
        DataType::Date32 => Arc::new(Date32Array::from(vec![0; n])),
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            Arc::new(TimestampMicrosecondArray::from(vec![0; n]).with_timezone_opt(tz.clone()))
        }
        DataType::Decimal128(p, s) => {
            Arc::new(Decimal128Array::from(vec![0; n]).with_precision_and_scale(*p, *s)?)
        }
        other => {
            return Err(StoreError::InvalidRequest(format!(
                "no blank value for type {other}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_round_trip_and_detect_damage() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("00000000000000000000.log");
        assert!(read_deleted(&segment).unwrap().is_empty());
        write_deleted(&segment, &[3, 7, 9]).unwrap();
        assert_eq!(read_deleted(&segment).unwrap(), [3, 7, 9]);
        let path = sidecar_path(&segment);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[17] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(read_deleted(&segment).is_err());
    }

    #[test]
    fn masks_and_blanks() {
        assert!(keep_mask(&[1, 20], 5..10).is_none());
        let keep = keep_mask(&[1, 6, 8, 20], 5..10).unwrap();
        assert_eq!(
            keep.iter().map(Option::unwrap).collect::<Vec<_>>(),
            [true, false, true, false, true]
        );
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("s", DataType::Utf8, false),
            arrow_schema::Field::new("n", DataType::Int64, true),
            arrow_schema::Field::new(
                "t",
                DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("+00:00".into())),
                false,
            ),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["keep", "secret"])),
                Arc::new(arrow_array::Int64Array::from(vec![1, 2])),
                Arc::new(
                    arrow_array::TimestampMicrosecondArray::from(vec![5, 6])
                        .with_timezone("+00:00"),
                ),
            ],
        )
        .unwrap();
        let blanked = blank_rows(&batch, &BooleanArray::from(vec![true, false])).unwrap();
        let s = blanked
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((s.value(0), s.value(1)), ("keep", ""));
        assert!(arrow_array::Array::is_null(blanked.column(1), 1));
        assert_eq!(blanked.num_rows(), 2);
    }
}
