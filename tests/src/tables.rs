//! The tables the tests and benchmarks share, as the JSON users send
//! (`POST /v1/tables`, `TableSpec`), with row builders that match them.

use arrow_array::{ArrayRef, RecordBatch};
use serde_json::{Value, json};

use crate::batches::{self, MINUTE_US, T0};

/// The events table: `id`, `customer` (the bucket key), one `extra` column, `ts`.
pub fn events_spec(extra: Value, buckets: u32) -> Value {
    json!({
        "namespace": "app", "name": "events",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "customer", "type": "string", "nullable": false},
            extra,
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "customer", "buckets": buckets
    })
}

/// A column for [`events_rows`]: its name, and its values for the given ids.
pub type ExtraColumn<'a> = (&'a str, &'a dyn Fn(&[i64]) -> ArrayRef);

/// Rows of [`events_spec`] for the store's and the tierer's tests: ids `ids`,
/// customers cycling over 7 names (`customer-N`), the extra column `extra(id)`, and
/// timestamps `ts_of(id)`.
pub fn events_rows(
    ids: std::ops::Range<i64>,
    extra: ExtraColumn<'_>,
    ts_of: impl Fn(i64) -> i64,
) -> RecordBatch {
    let ids: Vec<i64> = ids.collect();
    batches::batch([
        ("id", batches::int64s(ids.iter().copied())),
        (
            "customer",
            batches::strings(ids.iter().map(|i| format!("customer-{}", i % 7))),
        ),
        (extra.0, (extra.1)(&ids)),
        ("ts", batches::timestamps(ids.iter().map(|i| ts_of(*i)))),
    ])
}

/// The gateway's events table: `amount float64` as the extra column, 4 buckets, one
/// hour of hot retention.
pub fn events_table() -> Value {
    with(
        events_spec(json!({"name": "amount", "type": "float64"}), 4),
        json!({"hot_retention": "1h"}),
    )
}

/// Rows of [`events_table`]: ids `ids`, customers `c0`..`c4`, amount `1.5 × id`, one
/// row a minute from [`T0`].
pub fn events(ids: std::ops::Range<i64>) -> RecordBatch {
    let ids: Vec<i64> = ids.collect();
    batches::batch([
        ("id", batches::int64s(ids.iter().copied())),
        (
            "customer",
            batches::strings(ids.iter().map(|i| format!("c{}", i % 5))),
        ),
        (
            "amount",
            batches::float64s(ids.iter().map(|i| *i as f64 * 1.5)),
        ),
        (
            "ts",
            batches::timestamps(ids.iter().map(|i| T0 + i * MINUTE_US)),
        ),
    ])
}

/// `spec` with the keys of `extra` set (or replaced).
pub fn with(mut spec: Value, extra: Value) -> Value {
    let (Some(spec_map), Value::Object(extra)) = (spec.as_object_mut(), extra) else {
        panic!("with() takes two JSON objects");
    };
    spec_map.extend(extra);
    spec
}

/// The wide table of the scan benchmarks: `ts`, `key` and `columns - 2` more, cycling
/// over int64, float64 and string.
pub fn wide_spec(name: &str, columns: usize, buckets: u32) -> Value {
    let mut fields = vec![
        json!({"name": "ts", "type": "timestamp_us", "nullable": false}),
        json!({"name": "key", "type": "int64", "nullable": false}),
    ];
    for i in 2..columns {
        fields.push(json!({"name": format!("c{i}"), "type": wide_kind(i)}));
    }
    json!({"namespace": "bench", "name": name, "columns": fields,
        "time_column": "ts", "bucket_key": "key", "buckets": buckets})
}

fn wide_kind(i: usize) -> &'static str {
    ["int64", "float64", "string"][i % 3]
}

/// `rows` rows of [`wide_spec`], keys from `first_key`, every row at `ts`.
pub fn wide_batch(columns: usize, rows: usize, first_key: i64, ts: i64) -> RecordBatch {
    let names: Vec<String> = (0..columns).map(|i| format!("c{i}")).collect();
    let mut cols = vec![
        ("ts", batches::timestamps(std::iter::repeat_n(ts, rows))),
        (
            "key",
            batches::int64s((0..rows as i64).map(|r| r + first_key)),
        ),
    ];
    for (i, name) in names.iter().enumerate().skip(2) {
        cols.push((
            name.as_str(),
            match wide_kind(i) {
                "int64" => batches::int64s((0..rows as i64).map(|r| r * i as i64)),
                "float64" => batches::float64s((0..rows).map(|r| r as f64 / 3.0)),
                _ => batches::strings((0..rows).map(|r| format!("s{i}-{r:08}"))),
            },
        ));
    }
    batches::batch(cols)
}
