//! `hotgate-bench deletion`: the cost of a compliance deletion on a large table, from
//! `accepted` to `verified`, through the real gateway (in process).
//!
//! A log table of 16 buckets (bucket key `user_id`) is filled through Flight DoPut
//! until its tiered Parquet reaches `--mb` (default 2048), and
//! tiered. Then, in the same run:
//!
//! 1. a deletion by the bucket key (`user_id = '<one user>'`): the copy-on-write should
//!    read and rewrite only that bucket's files, about 1/16 of the table;
//! 2. a deletion by a column that is not the bucket key (`session = '<one session>'`,
//!    spread over every file): statistics cannot prune, so every file is rewritten.
//!
//! Each prints one JSON line: bytes rewritten in each tier as a share of the tier's
//! bytes, the files read and rewritten, the time of each step and the time from
//! `accepted` to `verified`. Verification reads the whole table (a scan of both tiers
//! and a search of every file), so its time grows with the table, not the deletion.

use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::gateway::{BenchResult, Gateway, put_all};

const USERS: usize = 20_000;
const SESSIONS: usize = 2_000;
const ROWS_PER_BATCH: usize = 8192;
const PAYLOAD: usize = 600;

fn spec() -> serde_json::Value {
    serde_json::json!({
        "namespace": "bench", "name": "erase",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "user_id", "type": "string", "nullable": false},
            {"name": "session", "type": "string", "nullable": false},
            {"name": "payload", "type": "string"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "user_id", "buckets": 16
    })
}

/// A small xorshift generator: the payload must not compress away, and the bench must
/// not depend on a random crate.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Letters only: no payload can contain a `u-`/`s-` literal by chance.
    fn text(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        (0..len)
            .map(|_| ALPHABET[(self.next() % ALPHABET.len() as u64) as usize] as char)
            .collect()
    }
}

fn batch(first: i64, noise: &mut Noise, day_start: i64) -> BenchResult<RecordBatch> {
    let ids: Vec<i64> = (first..first + ROWS_PER_BATCH as i64).collect();
    let users: Vec<String> = ids
        .iter()
        .map(|_| format!("u-{:06}", noise.next() % USERS as u64))
        .collect();
    let sessions: Vec<String> = ids
        .iter()
        .map(|_| format!("s-{:06}", noise.next() % SESSIONS as u64))
        .collect();
    let payload: Vec<String> = ids.iter().map(|_| noise.text(PAYLOAD)).collect();
    let ts: Vec<i64> = ids.iter().map(|i| day_start + i % 80_000_000_000).collect();
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("user_id", DataType::Utf8, false),
        Field::new("session", DataType::Utf8, false),
        Field::new("payload", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            std::sync::Arc::new(Int64Array::from(ids)),
            std::sync::Arc::new(StringArray::from(users)),
            std::sync::Arc::new(StringArray::from(sessions)),
            std::sync::Arc::new(StringArray::from(payload)),
            std::sync::Arc::new(
                TimestampMicrosecondArray::from(ts).with_timezone("+00:00".to_string()),
            ),
        ],
    )?)
}

async fn cold_bytes(gateway: &Gateway) -> BenchResult<u64> {
    let status = gateway
        .http(reqwest::Method::GET, "/v1/tables/bench.erase/tiering", None)
        .await?;
    Ok(status["bytes"].as_u64().unwrap_or(0))
}

/// Files a deletion and waits for `verified`; prints its receipt as one JSON line.
async fn delete(gateway: &Gateway, by: &str, predicate: String) -> BenchResult<serde_json::Value> {
    let started = Instant::now();
    let body = serde_json::json!({"tables": ["bench.erase"], "predicate": predicate,
        "subject": format!("bench-{by}"), "reason": "benchmark"});
    let record = gateway
        .http(reqwest::Method::POST, "/v1/deletions", Some(&body))
        .await?;
    let id = record["id"].as_str().ok_or("no request id")?.to_owned();
    let shown = loop {
        let shown = gateway
            .http(reqwest::Method::GET, &format!("/v1/deletions/{id}"), None)
            .await?;
        if shown["state"] == "verified" {
            break shown;
        }
        if started.elapsed() > Duration::from_secs(3600) {
            return Err(format!("deletion by {by} not verified after an hour: {shown}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let r = &shown["receipt"];
    let share = |part: &str, total: &str| {
        r[part].as_f64().unwrap_or(0.0) / r[total].as_f64().unwrap_or(1.0).max(1.0)
    };
    let line = serde_json::json!({
        "bench": "deletion", "by": by,
        "cold_bytes_total": r["cold_bytes_total"],
        "cold_bytes_rewritten": r["cold_bytes_rewritten"],
        "cold_share_rewritten": share("cold_bytes_rewritten", "cold_bytes_total"),
        "target_share": 1.0 / 16.0 + 0.05,
        "cold_files_read": r["cold_files_read"],
        "cold_files_rewritten": r["cold_files_rewritten"],
        "cold_rows_deleted": r["cold_rows_deleted"],
        "hot_rows_deleted": r["hot_rows_deleted"],
        "hot_segments_rewritten": r["hot_segments_rewritten"],
        "hot_bytes_rewritten": r["hot_bytes_rewritten"],
        "snapshots_expired": r["snapshots_expired"],
        "cold_files_deleted": r["cold_files_deleted"],
        "verify_bytes_searched": r["verify_bytes_searched"],
        "hot_ms": r["hot_millis"], "cold_ms": r["cold_millis"],
        "purge_ms": r["purge_millis"], "verify_ms": r["verify_millis"],
        "accepted_to_verified_ms": r["total_millis"],
        "wall_s": started.elapsed().as_secs_f64(),
    });
    println!("{line}");
    Ok(line)
}

pub(crate) async fn deletion(target_mb: u64) -> BenchResult<()> {
    // Tiering runs only when the bench asks: the table's size is then known exactly.
    let gateway = Gateway::start_with(|config| config.tiering.scheduler = false).await?;
    let token = gateway.token.as_str();
    gateway.create_tables(&[spec()]).await?;

    // Fill: one round of 32 batches, tiered, gives the Parquet bytes per row; the
    // rest goes in rounds of 32 batches and is tiered once at the end, so each bucket
    // holds a few large files.
    let mut client = gateway.client().await?;
    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    let day_start = chrono::Utc::now().timestamp_micros() / 86_400_000_000 * 86_400_000_000;
    let (mut next_id, mut rounds) = (0i64, 0);
    let fill_started = Instant::now();
    let tier = || gateway.http(reqwest::Method::POST, "/v1/tables/bench.erase/tier", None);
    let mut wanted_rows = i64::MAX;
    while next_id < wanted_rows {
        let mut batches = Vec::new();
        for _ in 0..32 {
            batches.push(batch(next_id, &mut noise, day_start)?);
            next_id += ROWS_PER_BATCH as i64;
        }
        put_all(&mut client, token, ["bench", "erase"], batches).await?;
        rounds += 1;
        if rounds == 1 {
            tier().await?;
            let per_row = cold_bytes(&gateway).await? as f64 / next_id as f64;
            wanted_rows = ((target_mb << 20) as f64 / per_row.max(1.0)).ceil() as i64;
        }
    }
    tier().await?;
    println!(
        "{}",
        serde_json::json!({"bench": "deletion_fill", "rows": next_id, "rounds": rounds,
            "cold_bytes": cold_bytes(&gateway).await?,
            "fill_s": fill_started.elapsed().as_secs_f64()})
    );

    let by_key = delete(&gateway, "bucket_key", "user_id = 'u-004242'".into()).await?;
    let by_other = delete(&gateway, "other_column", "session = 's-000777'".into()).await?;
    println!(
        "{}",
        serde_json::json!({"bench": "deletion_summary",
            "bucket_key_share": by_key["cold_share_rewritten"],
            "other_column_share": by_other["cold_share_rewritten"],
            "target_share": 1.0 / 16.0 + 0.05,
            "bucket_key_meets_target": by_key["cold_share_rewritten"].as_f64().unwrap_or(1.0) <= 1.0 / 16.0 + 0.05,
            "bucket_key_accepted_to_verified_ms": by_key["accepted_to_verified_ms"],
            "other_column_accepted_to_verified_ms": by_other["accepted_to_verified_ms"]})
    );
    gateway.stop().await
}
