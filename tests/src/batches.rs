//! Building Arrow batches column by column, and reading values back out of them.
//!
//! The store checks a column's nulls, not its field's nullable flag, so every field
//! built here is nullable: one builder serves nullable and required columns alike.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
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

/// `batch` with one more column (nullable) at the end; its name may repeat one of
/// `batch`'s, for tests of a column sent twice.
pub fn with_column(batch: &RecordBatch, name: &str, column: ArrayRef) -> RecordBatch {
    let mut fields: Vec<arrow_schema::Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(arrow_schema::Field::new(
        name,
        column.data_type().clone(),
        true,
    ));
    let mut columns = batch.columns().to_vec();
    columns.push(column);
    RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)
        .expect("a column of the batch's length")
}

/// An `int64` column.
pub fn int64s(values: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(values))
}

/// A `float64` column.
pub fn float64s(values: impl IntoIterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(values))
}

/// A nullable `float64` column.
pub fn opt_float64s(values: impl IntoIterator<Item = Option<f64>>) -> ArrayRef {
    Arc::new(Float64Array::from_iter(values))
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
            column_of(b, column)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// The values of an `int64` column across batches, in order (`None` for nulls).
pub fn opt_int64_values(batches: &[RecordBatch], column: &str) -> Vec<Option<i64>> {
    batches
        .iter()
        .flat_map(|b| column_of(b, column).as_primitive::<Int64Type>().iter())
        .collect()
}

/// The values of a `float64` column across batches, in order.
pub fn float64_values(batches: &[RecordBatch], column: &str) -> Vec<f64> {
    batches
        .iter()
        .flat_map(|b| {
            column_of(b, column)
                .as_primitive::<Float64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// The names of a result's columns.
pub fn column_names(batches: &[RecordBatch]) -> Vec<String> {
    batches
        .first()
        .map(|b| {
            b.schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect()
        })
        .unwrap_or_default()
}

fn column_of<'a>(batch: &'a RecordBatch, column: &str) -> &'a ArrayRef {
    batch
        .column_by_name(column)
        .unwrap_or_else(|| panic!("no column {column:?} in {:?}", batch.schema()))
}

/// The values of a `float64` column across batches, in order (`None` for nulls).
pub fn opt_float64_values(batches: &[RecordBatch], column: &str) -> Vec<Option<f64>> {
    batches
        .iter()
        .flat_map(|b| column_of(b, column).as_primitive::<Float64Type>().iter())
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
            arrow_cast::cast(column_of(b, column), &arrow_schema::DataType::Utf8)
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
