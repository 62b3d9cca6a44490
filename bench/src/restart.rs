//! `recovery`'s log half: restart to serving with gigabytes of hot log tables.
//!
//! Fills four wide log tables (8 buckets each, so 32 logs) through DoPut until their
//! segments hold `--log-gb`, stops the gateway, and starts another on the same data
//! directory, twice: once with the page cache as the writes left it (a process
//! restart), once with it dropped first (a machine restart; needs root, else skipped).
//! Each start is timed to healthy (store, catalog, policies and audit log open, both
//! listeners bound) and to the first batch of a scan. The baseline is the raw disk:
//! listing every segment file and reading its first 4 KiB, the least that any open of
//! those files must touch, with the same page cache.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hotgate_testkit::{wide_batch, wide_spec};

use crate::gateway::{BenchResult, Gateway, do_get, now_us, put_all};

const TABLES: usize = 4;
const COLUMNS: usize = 20;
const ROWS_PER_BATCH: usize = 16_384;
const BATCHES_PER_PUT: usize = 32;

fn table_name(t: usize) -> String {
    format!("logs{t}")
}

/// Every segment file under `dir`.
fn segment_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "log") {
                found.push(path);
            }
        }
    }
    Ok(found)
}

fn bytes_of(files: &[PathBuf]) -> std::io::Result<u64> {
    files.iter().map(|f| Ok(std::fs::metadata(f)?.len())).sum()
}

/// Drops the page cache (root only); false when this process may not.
fn drop_page_cache() -> bool {
    // Dirty pages are written first: drop_caches drops clean pages only.
    std::process::Command::new("sync").status().is_ok()
        && std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

/// The raw-disk floor: list the segment files and read each one's first 4 KiB.
fn touch_raw(dir: &Path) -> BenchResult<Duration> {
    use std::os::unix::fs::FileExt;
    let start = Instant::now();
    let mut head = vec![0u8; 4096];
    for path in segment_files(dir)? {
        let file = std::fs::File::open(&path)?;
        let _ = file.read_at(&mut head, 0)?;
    }
    Ok(start.elapsed())
}

/// Time from a scan's call to its first batch.
async fn first_batch(gateway: &Gateway) -> BenchResult<Duration> {
    let mut client = gateway.client().await?;
    let ticket = serde_json::json!({"table": format!("bench.{}", table_name(0)),
        "columns": ["key", "c2"]})
    .to_string();
    let start = Instant::now();
    let mut batches = do_get(&mut client, Some(&gateway.token), ticket).await?;
    match batches.next().await {
        Some(batch) => {
            batch?;
            Ok(start.elapsed())
        }
        None => Err("the restarted gateway returned no rows".into()),
    }
}

pub(crate) async fn restart(log_gb: f64) -> BenchResult<()> {
    let gateway = Gateway::start_with(|config| config.tiering.scheduler = false).await?;
    let specs: Vec<_> = (0..TABLES)
        .map(|t| wide_spec(&table_name(t), COLUMNS, 8))
        .collect();
    gateway.create_tables(&specs).await?;
    let ts = now_us();
    let batches: Vec<_> = (0..BATCHES_PER_PUT)
        .map(|i| wide_batch(COLUMNS, ROWS_PER_BATCH, (i * ROWS_PER_BATCH) as i64, ts))
        .collect();
    let wanted = (log_gb * (1u64 << 30) as f64) as u64;
    let data_dir = gateway.data_dir().to_path_buf();
    let fill_started = Instant::now();
    let mut client = gateway.client().await?;
    let (mut puts, mut on_disk) = (0usize, 0u64);
    while on_disk < wanted {
        let name = table_name(puts % TABLES);
        put_all(
            &mut client,
            &gateway.token,
            ["bench", &name],
            batches.clone(),
        )
        .await?;
        puts += 1;
        on_disk = bytes_of(&segment_files(&data_dir)?)?;
    }
    let files = segment_files(&data_dir)?;
    let segments = files.len();
    // Each log is a directory of segments.
    let logs = files
        .iter()
        .filter_map(|f| f.parent())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    println!(
        "{}",
        serde_json::json!({"bench": "log_restart_fill", "tables": TABLES, "logs": logs,
            "segments": segments, "segment_bytes": on_disk,
            "rows": puts * BATCHES_PER_PUT * ROWS_PER_BATCH,
            "fill_s": fill_started.elapsed().as_secs_f64()})
    );

    let mut gateway = gateway;
    for cache in ["warm", "dropped"] {
        let mut dropped = true;
        let (next, healthy) = gateway
            .restart(|| {
                if cache == "dropped" {
                    dropped = drop_page_cache();
                }
            })
            .await?;
        gateway = next;
        let first = first_batch(&gateway).await?;
        if cache == "dropped" && !dropped {
            println!(
                "{}",
                serde_json::json!({"bench": "log_restart", "cache": cache,
                    "skipped": "the page cache cannot be dropped (not root)"})
            );
            continue;
        }
        // The raw floor with the same cache: dropped again when the start was cold.
        if cache == "dropped" {
            drop_page_cache();
        }
        let raw = touch_raw(&data_dir)?;
        let serving = healthy + first;
        println!(
            "{}",
            serde_json::json!({"bench": "log_restart", "cache": cache, "segment_bytes": on_disk,
                "segments": segments, "start_to_healthy_s": healthy.as_secs_f64(),
                "first_batch_s": first.as_secs_f64(),
                "start_to_serving_s": serving.as_secs_f64(),
                "raw_touch_segments_s": raw.as_secs_f64(),
                "serving_over_raw": serving.as_secs_f64() / raw.as_secs_f64().max(1e-9),
                "target_s": 2.0, "meets_target": serving.as_secs_f64() <= 2.0})
        );
    }
    gateway.stop().await
}
