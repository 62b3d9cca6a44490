//! `hotgate-bench tiering`: conversion throughput against the raw parquet writer, and a
//! simulated day of tiering at several freshness settings.
//!
//! - **Conversion**: the same batches, appended to a one-bucket hot table, are converted
//!   by hotgate's tiering (segments read back, Parquet through iceberg's writers, files
//!   synced) and written by parquet's `ArrowWriter` from memory (same compression, file
//!   synced). Interleaved rounds; medians; MB/s of Arrow in-memory input.
//! - **Simulated day**: an injected clock drives the hot store's commit times and the
//!   cadence. Every simulated `tick` (10 s, as the scheduler's default order of
//!   magnitude) rows arrive and a tiering cycle runs; maintenance (compaction, expiry,
//!   purge) runs every simulated hour and once at the end of the day. Printed per
//!   freshness setting: commits, files committed, files left after compaction, and the
//!   share of bytes in files of at least half the target size.
//! - **Reader freshness**: append → visible in a scan, in-process, which is what a reader
//!   sees whatever the cold tier's cadence.
//!
//! `--day-secs` shortens the simulated day (default 86400) and `--day-rows` sets its
//! volume (default 4,000,000 rows, spread evenly over
//! the ticks): a shortened day keeps the volume, so file sizes stay comparable.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use hotgate_store::{Clock, LogOptions, ScanRequest, Store, StoreOptions, TableSpec};
use hotgate_tiering::{Catalog, CatalogConfig, MaintenanceOptions, Tierer};

use hotgate_testkit::T0;

use crate::gateway::BenchResult;
use crate::stats::median;
const CONVERT_BATCHES: usize = 40;
const CONVERT_ROWS: usize = 25_000;
const ROUNDS: usize = 5;

pub(crate) fn spec(buckets: u32, target: u64, freshness: &str) -> BenchResult<TableSpec> {
    Ok(serde_json::from_value(serde_json::json!({
        "namespace": "bench", "name": "events",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "user_id", "type": "string", "nullable": false},
            {"name": "page", "type": "string"},
            {"name": "amount", "type": "float64"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "user_id", "buckets": buckets,
        "hot_retention": "30d",
        "tiering": {"target_file_size": target, "max_freshness": freshness}
    }))?)
}

pub(crate) fn batch(first: i64, rows: usize, ts: impl Fn(i64) -> i64) -> BenchResult<RecordBatch> {
    let ids: Vec<i64> = (first..first + rows as i64).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("user_id", DataType::Utf8, false),
        Field::new("page", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.clone())) as ArrayRef,
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("user-{}", (i * 7919) % 5000)),
            )),
            Arc::new(StringArray::from_iter_values(
                ids.iter()
                    .map(|i| format!("/catalog/item/{}", (i * 31) % 997)),
            )),
            Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|i| (*i % 1000) as f64 * 0.25),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(ids.iter().map(|i| ts(*i)))
                    .with_timezone("UTC"),
            ),
        ],
    )?)
}

pub(crate) async fn tiering(day_secs: i64, day_rows: usize) -> BenchResult<()> {
    conversion().await?;
    let mut summary = Vec::new();
    for (freshness, secs) in [("10s", 10), ("1m", 60), ("5m", 300)] {
        summary.push(simulated_day(freshness, secs, day_secs, day_rows).await?);
    }
    let column = |key: &str| -> Vec<u64> {
        summary
            .iter()
            .map(|s| s[key].as_u64().unwrap_or(0))
            .collect()
    };
    let spread = |v: &[u64]| {
        let (min, max) = (
            v.iter().min().copied().unwrap_or(0),
            v.iter().max().copied().unwrap_or(0),
        );
        max as f64 / min.max(1) as f64
    };
    let (after, committed) = (column("files_after_compaction"), column("files_committed"));
    println!(
        "{}",
        serde_json::json!({
            "bench": "tiering_day_summary",
            "freshness": ["10s", "1m", "5m"],
            "files_committed_by_freshness": committed,
            "files_after_compaction_by_freshness": after,
            // How much the table's file count depends on freshness: 1.0 is not at all.
            "files_after_compaction_max_over_min": spread(&after),
            "files_committed_max_over_min": spread(&committed),
        })
    );
    reader_freshness().await
}

/// hotgate's conversion of one hot log against parquet's `ArrowWriter` on the same
/// batches.
async fn conversion() -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("hot"), StoreOptions::default())?;
    let hot = store.create_table(spec(1, 1 << 40, "5m")?).await?;
    let mut batches = Vec::new();
    for b in 0..CONVERT_BATCHES {
        let first = (b * CONVERT_ROWS) as i64;
        let batch = batch(first, CONVERT_ROWS, |i| T0 + i * 1000)?;
        hot.append(&batch).await?;
        batches.push(batch);
    }
    let input_bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
    let catalog = Catalog::open(CatalogConfig::embedded(dir.path())).await?;
    let tierer = Tierer::new(catalog);
    let table = tierer.ensure_table(&hot).await?;
    let log = hot.logs()[0].id();
    let end = hot.logs()[0].end_offset();

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let converter =
            hotgate_tiering::convert::Converter::new(&table, 1 << 40, format!("bench-{round}"))?;
        let start = Instant::now();
        let converted = converter.convert_log(&hot, log, 0..end).await?;
        ours.push(start.elapsed().as_secs_f64());
        assert_eq!(converted.records as usize, CONVERT_BATCHES * CONVERT_ROWS);

        let path = dir.path().join(format!("raw-{round}.parquet"));
        let schema = batches[0].schema();
        let start = Instant::now();
        let batches = batches.clone();
        tokio::task::spawn_blocking(move || -> BenchResult<()> {
            let file = std::fs::File::create(&path)?;
            let props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
                .build();
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(file.try_clone()?, schema, Some(props))?;
            for b in &batches {
                writer.write(b)?;
            }
            writer.close()?;
            file.sync_all()?;
            Ok(())
        })
        .await??;
        raw.push(start.elapsed().as_secs_f64());
    }
    let mb = input_bytes as f64 / 1e6;
    let (ours, raw) = (median(ours), median(raw));
    println!(
        "{}",
        serde_json::json!({
            "bench": "tiering_conversion", "rows": CONVERT_BATCHES * CONVERT_ROWS,
            "input_mb": mb, "rounds": ROUNDS,
            "hotgate_mb_per_s": mb / ours, "raw_parquet_mb_per_s": mb / raw,
            "hotgate_over_raw": raw / ours,
        })
    );
    store.close().await;
    Ok(())
}

/// One simulated day at `freshness`, with an injected clock.
async fn simulated_day(
    freshness: &str,
    freshness_secs: i64,
    day_secs: i64,
    day_rows: usize,
) -> BenchResult<serde_json::Value> {
    const TICK_SECS: i64 = 10;
    let rows_per_tick = (day_rows / (day_secs / TICK_SECS).max(1) as usize).max(1);
    const TARGET: u64 = 1 << 20;
    const BUCKETS: u32 = 4;
    let dir = tempfile::tempdir()?;
    let clock = Arc::new(AtomicI64::new(T0));
    let read = Arc::clone(&clock);
    let options = StoreOptions {
        log: LogOptions {
            clock: Clock::from_fn(move || read.load(Ordering::Relaxed)),
            ..LogOptions::default()
        },
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path().join("hot"), options)?;
    let hot = store
        .create_table(spec(BUCKETS, TARGET, freshness)?)
        .await?;
    let catalog = Catalog::open(CatalogConfig::embedded(dir.path())).await?;
    let tierer = Tierer::new(catalog);
    tierer.ensure_table(&hot).await?;
    let maintenance = MaintenanceOptions {
        compact: true,
        snapshot_retention: Duration::ZERO,
        retain_last: 1,
        purge_min_age: Duration::ZERO,
        ..MaintenanceOptions::default()
    };
    let (mut commits, mut files_committed, mut next_id) = (0u64, 0u64, 0i64);
    let started = Instant::now();
    let mut sim = 0;
    // Snapshot timestamps are real time: maintenance expires against the real clock.
    let maintain = async || {
        let now = chrono::Utc::now().timestamp_millis() + 1;
        tierer.maintain(&hot.def(), now, &maintenance).await
    };
    while sim < day_secs {
        sim += TICK_SECS;
        let now = T0 + sim * 1_000_000;
        clock.store(now, Ordering::Relaxed);
        hot.append(&batch(next_id, rows_per_tick, |_| now)?).await?;
        next_id += rows_per_tick as i64;
        let report = tierer.cycle(&hot, now, false).await?;
        if report.snapshot_id.is_some() {
            commits += 1;
            files_committed += report.files.len() as u64;
        }
        if sim % 3600 == 0 {
            maintain().await?;
        }
    }
    // End of day: tier what is left, then a last maintenance.
    let end = T0 + (sim + freshness_secs) * 1_000_000;
    clock.store(end, Ordering::Relaxed);
    let last = tierer.cycle(&hot, end, true).await?;
    if last.snapshot_id.is_some() {
        commits += 1;
        files_committed += last.files.len() as u64;
    }
    maintain().await?;
    let status = tierer.status(&hot.def()).await;
    let table = tierer.catalog().load(hot.def().name()).await?;
    let (mut big_bytes, mut all_bytes) = (0u64, 0u64);
    for f in hotgate_tiering::files::live_data_files(&table).await? {
        all_bytes += f.file_size_in_bytes();
        if f.file_size_in_bytes() * 2 >= TARGET {
            big_bytes += f.file_size_in_bytes();
        }
    }
    let result = serde_json::json!({
        "bench": "tiering_day", "freshness": freshness, "simulated_secs": day_secs,
        "buckets": BUCKETS, "target_file_size": TARGET, "rows": next_id,
        "commits": commits, "files_committed": files_committed,
        "files_after_compaction": status.files, "records": status.records,
        "bytes_after_compaction": all_bytes,
        "share_of_bytes_in_files_ge_half_target": big_bytes as f64 / all_bytes.max(1) as f64,
        "size_histogram": status.size_histogram,
        "wall_secs": started.elapsed().as_secs_f64(),
    });
    println!("{result}");
    store.close().await;
    Ok(result)
}

/// What a reader sees: append acknowledged → row visible in a hot scan.
async fn reader_freshness() -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("hot"), StoreOptions::default())?;
    let hot = store.create_table(spec(4, 1 << 27, "5m")?).await?;
    let mut lags = Vec::new();
    for i in 0..200i64 {
        let start = Instant::now();
        hot.append(&batch(i, 1, |_| T0 + i)?).await?;
        let seen = hot
            .scan(&ScanRequest::default())?
            .map(|b| b.map(|b| b.batch.num_rows()))
            .sum::<Result<usize, _>>()?;
        assert_eq!(seen as i64, i + 1);
        lags.push(start.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "tiering_reader_freshness", "appends": lags.len(),
            "append_to_visible_p50_ms": median(lags.clone()),
            "note": "independent of the cold tier's freshness setting: reads union the hot tier",
        })
    );
    store.close().await;
    Ok(())
}
