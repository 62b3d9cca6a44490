//! Durable append throughput against the raw sequential write + fdatasync bandwidth of
//! the same disk, measured in the same run.
//!
//! Rows have 20 columns and about 200 bytes. Prints one JSON object per measurement and
//! a summary line with the ratios. Run: `cargo bench -p hotgate-store --bench append`.
//! `HOTGATE_BENCH_DIR` chooses the disk (default: the system temp dir); `HOTGATE_BENCH_SECS`
//! the seconds per measurement (default 5).

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use hotgate_store::{Store, StoreOptions, TableName, TableSpec};

const ROWS_PER_APPEND: usize = 500;

fn spec(buckets: u32) -> TableSpec {
    let mut columns = vec![
        serde_json::json!({"name": "ts", "type": "timestamp_us", "nullable": false}),
        serde_json::json!({"name": "key", "type": "int64", "nullable": false}),
    ];
    for i in 0..6 {
        columns.push(serde_json::json!({"name": format!("l{i}"), "type": "int64"}));
    }
    for i in 0..4 {
        columns.push(serde_json::json!({"name": format!("f{i}"), "type": "float64"}));
    }
    for i in 0..4 {
        columns.push(serde_json::json!({"name": format!("i{i}"), "type": "int32"}));
    }
    for i in 0..4 {
        columns.push(serde_json::json!({"name": format!("s{i}"), "type": "string"}));
    }
    serde_json::from_value(serde_json::json!({
        "namespace": "bench", "name": "events", "columns": columns,
        "time_column": "ts", "bucket_key": "key", "buckets": buckets
    }))
    .expect("bench spec")
}

/// 20 columns: 8 + 8 + 6×8 + 4×8 + 4×4 + 4×~19 (string bytes + offsets) ≈ 200 bytes a row.
fn batch(seed: i64) -> RecordBatch {
    let n = ROWS_PER_APPEND;
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
            (0..n as i64).map(|i| seed * 7919 + i),
        )),
    ];
    for i in 0..6 {
        fields.push(Field::new(format!("l{i}"), DataType::Int64, true));
        cols.push(Arc::new(Int64Array::from_iter_values(
            (0..n as i64).map(|r| r * i + seed),
        )));
    }
    for i in 0..4 {
        fields.push(Field::new(format!("f{i}"), DataType::Float64, true));
        cols.push(Arc::new(Float64Array::from_iter_values(
            (0..n).map(|r| r as f64 * 1.5 + i as f64),
        )));
    }
    for i in 0..4 {
        fields.push(Field::new(format!("i{i}"), DataType::Int32, true));
        cols.push(Arc::new(Int32Array::from_iter_values(
            (0..n as i32).map(|r| r ^ i),
        )));
    }
    for i in 0..4 {
        fields.push(Field::new(format!("s{i}"), DataType::Utf8, true));
        cols.push(Arc::new(StringArray::from_iter_values(
            (0..n).map(|r| format!("value-{i}-{r:09}")),
        )));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("bench batch")
}

fn bench_dir() -> std::path::PathBuf {
    std::env::var_os("HOTGATE_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir)
}

fn secs() -> Duration {
    Duration::from_secs_f64(
        std::env::var("HOTGATE_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5.0),
    )
}

/// Sequential writes of `chunk` bytes, each followed by fdatasync.
fn raw_disk(chunk: usize) -> f64 {
    let dir = tempfile::tempdir_in(bench_dir()).expect("temp dir");
    let file = std::fs::File::create(dir.path().join("raw")).expect("raw file");
    let buf = vec![0xA5u8; chunk];
    let start = Instant::now();
    let mut written = 0u64;
    while start.elapsed() < secs() {
        file.write_all_at(&buf, written).expect("raw write");
        file.sync_data().expect("fdatasync");
        written += chunk as u64;
    }
    let mbps = written as f64 / start.elapsed().as_secs_f64() / 1e6;
    println!(
        "{}",
        serde_json::json!({"bench": "raw_write_fdatasync", "chunk_bytes": chunk, "mb_per_s": mbps})
    );
    mbps
}

async fn store_append(writers: usize, buckets: u32) -> (f64, f64) {
    let dir = tempfile::tempdir_in(bench_dir()).expect("temp dir");
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).expect("open"));
    store.create_table(spec(buckets)).await.expect("create");
    let name = TableName::new("bench", "events").expect("name");
    let rows = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + secs();
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, name, rows) = (Arc::clone(&store), name.clone(), Arc::clone(&rows));
            tokio::spawn(async move {
                let b = batch(w as i64);
                while Instant::now() < deadline {
                    let r = store.append(&name, &b).await.expect("append");
                    rows.fetch_add(r.rows, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("writer");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let m = store.metrics().snapshot();
    store.close().await;
    let rows_per_s = rows.load(Ordering::Relaxed) as f64 / elapsed;
    let mbps = m.bytes as f64 / elapsed / 1e6;
    println!(
        "{}",
        serde_json::json!({
            "bench": "store_append", "writers": writers, "buckets": buckets,
            "rows_per_append": ROWS_PER_APPEND, "rows_per_s": rows_per_s, "mb_per_s": mbps,
            "fsyncs": m.fsyncs, "frames": m.appends,
            "mean_group_frames": m.appends as f64 / m.fsyncs.max(1) as f64,
            "bytes_per_row": m.bytes as f64 / m.rows.max(1) as f64,
        })
    );
    (rows_per_s, mbps)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut summary = serde_json::Map::new();
    let raw_1m = raw_disk(1 << 20);
    raw_disk(256 << 10);
    summary.insert("raw_mb_per_s_1mib_chunks".into(), raw_1m.into());
    for buckets in [1u32, 8] {
        for writers in [1usize, 8, 64] {
            let (_, mbps) = rt.block_on(store_append(writers, buckets));
            summary.insert(
                format!("ratio_to_raw_w{writers}_b{buckets}"),
                (mbps / raw_1m).into(),
            );
        }
    }
    summary.insert("bench".into(), "append_summary".into());
    println!("{}", serde_json::Value::Object(summary));
    std::io::stdout().flush().ok();
}
