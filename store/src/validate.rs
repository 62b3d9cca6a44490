//! Validation of incoming batches against a table's stored schema. A batch either comes
//! out in exactly the stored schema or is refused with an error naming the column.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, Scalar, TimestampMicrosecondArray, new_null_array,
};
use arrow_schema::{DataType, TimeUnit};

use crate::error::{Result, StoreError};
use crate::table_def::{TableDef, UTC};

/// Time-zone labels accepted as UTC for `timestamp_us` columns.
const UTC_ALIASES: [&str; 5] = ["+00:00", "UTC", "Z", "Etc/UTC", "+0000"];

/// `array` as the stored type `expected`: unchanged when the types match, relabelled
/// when it is a µs timestamp in another spelling of UTC; `None` otherwise.
fn as_stored(expected: &DataType, array: &ArrayRef) -> Option<ArrayRef> {
    match (expected, array.data_type()) {
        (expected, got) if expected == got => Some(Arc::clone(array)),
        (
            DataType::Timestamp(TimeUnit::Microsecond, Some(_)),
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz)),
        ) if UTC_ALIASES.contains(&tz.as_ref()) => Some(Arc::new(
            array
                .as_primitive::<TimestampMicrosecondType>()
                .clone()
                .with_timezone(UTC),
        )),
        _ => None,
    }
}

/// Refuses a batch with two columns of one name: which copy would be stored is
/// arbitrary, so neither is.
fn unique_columns(batch: &RecordBatch) -> std::result::Result<(), String> {
    let schema = batch.schema();
    let mut seen = std::collections::HashSet::with_capacity(schema.fields().len());
    match schema
        .fields()
        .iter()
        .find(|f| !seen.insert(f.name().as_str()))
    {
        Some(twice) => Err(format!(
            "column {:?} appears twice in the batch; send each column once",
            twice.name()
        )),
        None => Ok(()),
    }
}

/// Checks `batch` against `def` and returns it in the stored schema: columns in table
/// order, field metadata attached, missing nullable columns filled with nulls, and
/// columns the table drops (`write: drop`) left out.
pub(crate) fn normalize(def: &TableDef, batch: &RecordBatch) -> Result<RecordBatch> {
    let bad = |detail: String| StoreError::InvalidBatch {
        table: def.name().to_string(),
        detail,
    };
    let incoming = batch.schema();
    unique_columns(batch).map_err(bad)?;
    for field in incoming.fields() {
        match def.spec().columns.iter().find(|c| &c.name == field.name()) {
            Some(_) => {}
            None => {
                let known: Vec<&str> = def.spec().columns.iter().map(|c| c.name.as_str()).collect();
                return Err(bad(format!(
                    "unknown column {:?}; the table has columns {}",
                    field.name(),
                    known.join(", ")
                )));
            }
        }
    }
    let rows = batch.num_rows();
    let schema = def.stored_schema();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let role = if Some(i) == def.time_index() {
            "time column "
        } else if i == def.bucket_index() {
            "bucket key "
        } else {
            ""
        };
        let Some(array) = batch.column_by_name(field.name()) else {
            if field.is_nullable() {
                columns.push(new_null_array(field.data_type(), rows));
                continue;
            }
            return Err(bad(format!(
                "missing {role}{:?}: it is not nullable and must be sent as {}",
                field.name(),
                field.data_type()
            )));
        };
        let array = match as_stored(field.data_type(), array) {
            Some(a) => a,
            None => {
                let (expected, got) = (field.data_type(), array.data_type());
                let hint = if matches!(expected, DataType::Timestamp(..)) {
                    " (send timestamps in microseconds with time zone UTC)"
                } else {
                    ""
                };
                return Err(bad(format!(
                    "column {:?} has type {got}, expected {expected}{hint}",
                    field.name()
                )));
            }
        };
        if !field.is_nullable() && array.null_count() > 0 {
            let row = (0..rows).find(|r| array.is_null(*r)).unwrap_or_default();
            return Err(bad(format!(
                "{role}{:?} is not nullable but row {row} is null",
                field.name()
            )));
        }
        columns.push(array);
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The time column of a normalized batch, if the table has one.
pub(crate) fn time_values<'a>(
    def: &TableDef,
    batch: &'a RecordBatch,
) -> Option<&'a TimestampMicrosecondArray> {
    def.time_index()
        .map(|i| batch.column(i).as_primitive::<TimestampMicrosecondType>())
}

/// The smallest and largest event time of a normalized batch with rows; a table without
/// a time column counts its rows as happening `now` (µs).
pub(crate) fn time_range(def: &TableDef, batch: &RecordBatch, now: i64) -> (i64, i64) {
    match time_values(def, batch) {
        Some(times) => times
            .values()
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v))),
        None => (now, now),
    }
}

/// Checks the key columns of a primary-key table in `batch` (a delete, or a lookup) and
/// returns them alone, in key order: each present, of the stored type, without nulls.
/// Other columns are ignored.
pub(crate) fn key_columns(def: &TableDef, batch: &RecordBatch, what: &str) -> Result<RecordBatch> {
    let bad = |detail: String| StoreError::InvalidBatch {
        table: def.name().to_string(),
        detail: format!("{what}: {detail}"),
    };
    unique_columns(batch).map_err(bad)?;
    let crate::table_def::TableKind::PrimaryKey { columns: keys } = def.kind() else {
        return Err(bad(format!("{} is not a primary-key table", def.name())));
    };
    let schema = def.stored_schema();
    let mut fields = Vec::with_capacity(keys.len());
    let mut columns = Vec::with_capacity(keys.len());
    for key in keys {
        let field = schema.field_with_name(key)?;
        let array = batch.column_by_name(key).ok_or_else(|| {
            bad(format!(
                "missing key column {key:?}; the key is ({})",
                keys.join(", ")
            ))
        })?;
        let array = as_stored(field.data_type(), array).ok_or_else(|| {
            bad(format!(
                "key column {key:?} has type {}, expected {}",
                array.data_type(),
                field.data_type()
            ))
        })?;
        if array.null_count() > 0 {
            let row = (0..batch.num_rows())
                .find(|r| array.is_null(*r))
                .unwrap_or_default();
            return Err(bad(format!("key column {key:?} is null in row {row}")));
        }
        fields.push(field.clone());
        columns.push(array);
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(fields)),
        columns,
    )?)
}

/// Time bounds need a time column to apply to.
pub(crate) fn check_time_bounds(
    def: &TableDef,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<()> {
    if (since.is_some() || until.is_some()) && def.time_index().is_none() {
        return Err(StoreError::InvalidRequest(format!(
            "{} has no time_column, so it cannot be read by time (since/until)",
            def.name()
        )));
    }
    Ok(())
}

/// The rows of `batch` (the stored columns first) whose event time lies in
/// `[since, until)`; all of them without bounds.
pub(crate) fn within_time(
    def: &TableDef,
    batch: RecordBatch,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<RecordBatch> {
    match time_values(def, &batch) {
        Some(times) if since.is_some() || until.is_some() => {
            let mask = time_mask(times, since, until)?;
            Ok(arrow_select::filter::filter_record_batch(&batch, &mask)?)
        }
        _ => Ok(batch),
    }
}

/// True where `ts` lies in `[since, until)`.
pub(crate) fn time_mask(
    ts: &TimestampMicrosecondArray,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<BooleanArray> {
    let scalar = |v: i64| Scalar::new(TimestampMicrosecondArray::from(vec![v]).with_timezone(UTC));
    let lower = since
        .map(|s| arrow_ord::cmp::gt_eq(ts, &scalar(s)))
        .transpose()?;
    let upper = until
        .map(|u| arrow_ord::cmp::lt(ts, &scalar(u)))
        .transpose()?;
    Ok(match (lower, upper) {
        (Some(l), Some(u)) => arrow_arith_and(&l, &u),
        (Some(m), None) | (None, Some(m)) => m,
        (None, None) => BooleanArray::from(vec![true; ts.len()]),
    })
}

fn arrow_arith_and(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    // Both masks come from non-null timestamps, so a plain bitwise AND is exact.
    BooleanArray::new(a.values() & b.values(), None)
}
