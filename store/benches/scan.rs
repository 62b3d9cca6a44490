//! A scan of 5 of 50 columns against all 50 columns over the same data.
//!
//! Prints JSON lines: the median time of each over several runs and their ratio.
//! Run: `cargo bench -p hotgate-store --bench scan`.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use hotgate_store::{ScanRequest, Store, StoreOptions, TableName, TableSpec};

const COLUMNS: usize = 50;
const ROWS_PER_BATCH: usize = 8192;
const BATCHES: usize = 60;
const RUNS: usize = 7;

fn kind(i: usize) -> (&'static str, DataType) {
    match i % 3 {
        0 => ("int64", DataType::Int64),
        1 => ("float64", DataType::Float64),
        _ => ("string", DataType::Utf8),
    }
}

fn spec() -> TableSpec {
    let mut columns = vec![
        serde_json::json!({"name": "ts", "type": "timestamp_us", "nullable": false}),
        serde_json::json!({"name": "key", "type": "int64", "nullable": false}),
    ];
    for i in 2..COLUMNS {
        columns.push(serde_json::json!({"name": format!("c{i}"), "type": kind(i).0}));
    }
    serde_json::from_value(serde_json::json!({
        "namespace": "bench", "name": "wide", "columns": columns,
        "time_column": "ts", "bucket_key": "key", "buckets": 1
    }))
    .expect("spec")
}

fn batch(seed: usize) -> RecordBatch {
    let n = ROWS_PER_BATCH;
    let now = chrono::Utc::now().timestamp_micros();
    let mut fields = vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("key", DataType::Int64, false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(TimestampMicrosecondArray::from(vec![now; n]).with_timezone("UTC")),
        Arc::new(Int64Array::from_iter_values(
            (0..n as i64).map(|r| r + seed as i64),
        )),
    ];
    for i in 2..COLUMNS {
        let (_, dt) = kind(i);
        fields.push(Field::new(format!("c{i}"), dt.clone(), true));
        cols.push(match dt {
            DataType::Int64 => Arc::new(Int64Array::from_iter_values(
                (0..n as i64).map(|r| r * i as i64),
            )),
            DataType::Float64 => Arc::new(Float64Array::from_iter_values(
                (0..n).map(|r| r as f64 / 3.0),
            )),
            _ => Arc::new(StringArray::from_iter_values(
                (0..n).map(|r| format!("s{i}-{r:08}")),
            )),
        });
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("batch")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time_scan(store: &Store, columns: Option<Vec<String>>) -> (f64, usize) {
    let table = store
        .table(&TableName::new("bench", "wide").expect("name"))
        .expect("table");
    let request = ScanRequest {
        columns,
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        rows = 0;
        for b in table.scan(&request).expect("plan") {
            rows += b.expect("read").batch.num_rows();
        }
        times.push(start.elapsed().as_secs_f64());
    }
    (median(times), rows)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("dir");
    let store = rt.block_on(async {
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
        store.create_table(spec()).await.expect("create");
        let name = TableName::new("bench", "wide").expect("name");
        for i in 0..BATCHES {
            store.append(&name, &batch(i)).await.expect("append");
        }
        store
    });
    let _warm = time_scan(&store, None);
    let (all, rows_all) = time_scan(&store, None);
    let five: Vec<String> = ["key", "c5", "c10", "c20", "c41"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (some, rows_some) = time_scan(&store, Some(five));
    assert_eq!(rows_all, rows_some);
    let line = |cols: usize, secs: f64| {
        serde_json::json!({"bench": "hot_scan", "columns": cols, "of": COLUMNS, "rows": rows_all,
            "median_s": secs, "rows_per_s": rows_all as f64 / secs})
    };
    println!("{}", line(COLUMNS, all));
    println!("{}", line(5, some));
    println!(
        "{}",
        serde_json::json!({"bench": "scan_summary", "speedup_5_of_50": all / some})
    );
    rt.block_on(store.close());
}
