//! Building Arrow batches column by column, and reading values back out of them.
//!
//! The store checks a column's nulls, not its field's nullable flag, so every field
//! built here is nullable: one builder serves nullable and required columns alike.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};

/// 2026-11-30T00:00:00Z in µs: the first event time of the tests' tables.
pub const T0: i64 = 1_795_996_800_000_000;
/// One day in µs.
pub const DAY_US: i64 = 86_400_000_000;
/// One minute in µs.
pub const MINUTE_US: i64 = 60_000_000;

/// A batch of named columns, in order.
pub fn batch<'a>(columns: impl IntoIterator<Item = (&'a str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("columns of one length")
}

/// An `int64` column.
pub fn int64s(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

/// A `float64` column.
pub fn float64s(values: impl IntoIterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(values))
}

/// A `string` column.
pub fn strings<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// A nullable `string` column.
pub fn opt_strings<S: AsRef<str>>(values: impl IntoIterator<Item = Option<S>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(values))
}

/// A `timestamp_us` column in UTC.
pub fn timestamps(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from_iter_values(values).with_timezone("UTC"))
}

/// The values of an `int64` column across batches, in order.
pub fn int64_values(batches: &[RecordBatch], column: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            b.column_by_name(column)
                .unwrap_or_else(|| panic!("no column {column:?} in {:?}", b.schema()))
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// The values of an `int64` column across batches, sorted.
pub fn ints(batches: &[RecordBatch], column: &str) -> Vec<i64> {
    let mut values = int64_values(batches, column);
    values.sort_unstable();
    values
}

/// The values of a `string` column across batches, in order (`None` for nulls).
pub fn string_values(batches: &[RecordBatch], column: &str) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let array = b
                .column_by_name(column)
                .unwrap_or_else(|| panic!("no column {column:?} in {:?}", b.schema()));
            arrow_cast::cast(array, &arrow_schema::DataType::Utf8)
                .expect("a column castable to text")
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The rows in `batches`.
pub fn row_count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}
