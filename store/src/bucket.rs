//! Iceberg-aligned routing: which (day partition, bucket) a row belongs to.
//!
//! The hot bucket of a row must equal Iceberg's `bucket[N]` transform of its bucket key,
//! and the hot partition must equal Iceberg's `day` transform of its time column, so that
//! every hot log converts to Parquet for exactly one Iceberg partition. Both follow the
//! Iceberg spec: murmur3_x86_32 (seed 0) of the value's single-value hash serialization,
//! then `(hash & i32::MAX) % N`.

use std::fmt;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};
use chrono::{DateTime, NaiveDate};

use crate::error::{Result, StoreError};

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// One hot log: a (day partition, bucket) of a table. `day` is `None` for tables that are
/// not partitioned by time (primary-key tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogId {
    /// Days since 1970-01-01 (Iceberg's `day` transform).
    pub day: Option<i32>,
    pub bucket: u32,
}

impl LogId {
    /// The partition value: `YYYY-MM-DD`, or `none` for unpartitioned tables.
    pub fn partition(&self) -> String {
        match self.day {
            Some(day) => day_to_date(day).to_string(),
            None => "none".to_owned(),
        }
    }

    /// The relative directory of the log under its table: `day=YYYY-MM-DD/bucket=N`.
    pub fn dir_name(&self) -> String {
        format!("day={}/bucket={}", self.partition(), self.bucket)
    }

    /// Parses the two directory components written by [`LogId::dir_name`].
    pub fn parse_dirs(day_dir: &str, bucket_dir: &str) -> Option<Self> {
        let day = match day_dir.strip_prefix("day=")? {
            "none" => None,
            d => {
                let date = NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()?;
                Some((date - epoch()).num_days() as i32)
            }
        };
        let bucket = bucket_dir.strip_prefix("bucket=")?.parse().ok()?;
        Some(Self { day, bucket })
    }
}

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dir_name())
    }
}

fn epoch() -> NaiveDate {
    DateTime::UNIX_EPOCH.date_naive()
}

fn day_to_date(day: i32) -> NaiveDate {
    epoch() + chrono::TimeDelta::days(day as i64)
}

/// Iceberg's `day` transform of a microsecond timestamp: days since the epoch, rounding
/// toward negative infinity.
pub fn day_of_micros(ts: i64) -> i32 {
    ts.div_euclid(MICROS_PER_DAY) as i32
}

fn murmur3(bytes: &[u8]) -> i32 {
    let mut cursor = bytes;
    // Reading from a slice cannot fail.
    murmur3::murmur3_32(&mut cursor, 0).unwrap_or_default() as i32
}

/// Minimal two's-complement big-endian bytes of a decimal's unscaled value (Iceberg spec,
/// appendix B).
fn decimal_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    // Drop a leading byte while it is pure sign extension of the next one.
    while start < bytes.len() - 1 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        let redundant = (b == 0x00 && next & 0x80 == 0) || (b == 0xFF && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    bytes[start..].to_vec()
}

fn bucket_of_hash(hash: i32, n: u32) -> u32 {
    ((hash & i32::MAX) % n as i32) as u32
}

/// Iceberg hashes int, long, date and timestamp keys alike: the value widened to a long,
/// as 8 little-endian bytes.
fn bucket_longs<T: ArrowPrimitiveType>(keys: &ArrayRef, n: u32) -> Vec<u32>
where
    T::Native: Into<i64>,
{
    keys.as_primitive::<T>()
        .values()
        .iter()
        .map(|v| bucket_of_long((*v).into(), n))
        .collect()
}

/// The Iceberg bucket of every row of `keys`. Nulls are an error: the bucket key is
/// non-nullable by definition and validated before routing.
pub fn buckets_of(keys: &ArrayRef, n: u32) -> Result<Vec<u32>> {
    if keys.null_count() > 0 {
        return Err(StoreError::InvalidRequest(
            "bucket key contains nulls".into(),
        ));
    }
    let out = match keys.data_type() {
        DataType::Int32 => bucket_longs::<Int32Type>(keys, n),
        DataType::Int64 => bucket_longs::<Int64Type>(keys, n),
        DataType::Date32 => bucket_longs::<Date32Type>(keys, n),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            bucket_longs::<TimestampMicrosecondType>(keys, n)
        }
        DataType::Decimal128(_, _) => keys
            .as_primitive::<Decimal128Type>()
            .values()
            .iter()
            .map(|v| bucket_of_hash(murmur3(&decimal_bytes(*v)), n))
            .collect(),
        DataType::Utf8 => keys
            .as_string::<i32>()
            .iter()
            .map(|v| bucket_of_str(v.unwrap_or_default(), n))
            .collect(),
        DataType::Binary => keys
            .as_binary::<i32>()
            .iter()
            .map(|v| bucket_of_hash(murmur3(v.unwrap_or_default()), n))
            .collect(),
        other => {
            return Err(StoreError::InvalidRequest(format!(
                "type {other} cannot be a bucket key"
            )));
        }
    };
    Ok(out)
}

/// The Iceberg bucket of one string key (what [`buckets_of`] gives a `Utf8` row).
pub fn bucket_of_str(key: &str, n: u32) -> u32 {
    bucket_of_hash(murmur3(key.as_bytes()), n)
}

/// The Iceberg bucket of one integer key (what [`buckets_of`] gives an `Int32`,
/// `Int64`, `Date32` or timestamp row of this value).
pub fn bucket_of_long(key: i64, n: u32) -> u32 {
    bucket_of_hash(murmur3(&key.to_le_bytes()), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_bytes_are_minimal() {
        assert_eq!(decimal_bytes(0), vec![0x00]);
        assert_eq!(decimal_bytes(1), vec![0x01]);
        assert_eq!(decimal_bytes(127), vec![0x7F]);
        assert_eq!(decimal_bytes(128), vec![0x00, 0x80]);
        assert_eq!(decimal_bytes(-1), vec![0xFF]);
        assert_eq!(decimal_bytes(-128), vec![0x80]);
        assert_eq!(decimal_bytes(-129), vec![0xFF, 0x7F]);
    }

    #[test]
    fn spec_examples() {
        // Iceberg spec, appendix B: hash values of sample inputs.
        assert_eq!(murmur3(&34i64.to_le_bytes()), 2017239379);
        assert_eq!(murmur3("iceberg".as_bytes()), 1210000089);
        assert_eq!(murmur3(&decimal_bytes(1420)), -500754589);
    }

    #[test]
    fn days_and_dirs() {
        assert_eq!(day_of_micros(0), 0);
        assert_eq!(day_of_micros(-1), -1);
        assert_eq!(day_of_micros(MICROS_PER_DAY), 1);
        let id = LogId {
            day: Some(day_of_micros(-1)),
            bucket: 3,
        };
        assert_eq!(id.dir_name(), "day=1969-12-31/bucket=3");
        assert_eq!(LogId::parse_dirs("day=1969-12-31", "bucket=3"), Some(id));
        assert_eq!(LogId::parse_dirs("day=x", "bucket=3"), None);
    }
}
