//! `hotgate-bench aggregate`: a governed `GROUP BY` through Flight SQL over a table
//! that spans both tiers, against DataFusion reading the same data's files directly in
//! the same process.
//!
//! The table (`bench.agg`: `id`, `account`, `amount`, `ts`; two buckets) gets
//! `--cold-rows` rows, which are tiered; hot retention (one second) then drops the hot
//! segments the cold tier covers, so reads must union the tiers. Then `--hot-rows` more
//! rows are written and left untiered. The statement
//! `SELECT account, sum(amount), count(*) FROM bench.agg GROUP BY account` runs as an
//! analyst (grant checked, secure view, suppression, audit) through `GetFlightInfo` +
//! `DoGet`; the baseline runs the same aggregate in a bare DataFusion session over the
//! table's live Parquet files (from its Iceberg snapshot) and an Arrow IPC file of the
//! untiered rows. hotgate's own segments are framed (header and CRC per frame), so the
//! baseline's IPC file is written by the bench from the same batches. Both answers must
//! agree group by group, and every measured hotgate read must have spanned both tiers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use datafusion::datasource::file_format::options::ArrowReadOptions;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use hotgate_testkit::{batch, int64s, timestamps};

use crate::gateway::{BenchResult, Gateway, now_us, put_all};
use crate::sql::sql_batches;
use crate::stats::median;

const ACCOUNTS: i64 = 1000;
const ROWS_PER_BATCH: usize = 65_536;
const BATCHES_PER_PUT: usize = 16;
const RUNS: usize = 5;
const STATEMENT: &str =
    "SELECT account, sum(amount) AS total, count(*) AS n FROM bench.agg GROUP BY account";
const BASELINE: &str = "SELECT account, sum(amount) AS total, count(*) AS n FROM \
    (SELECT account, amount FROM cold UNION ALL SELECT account, amount FROM hot) \
    GROUP BY account";

fn spec() -> serde_json::Value {
    serde_json::json!({
        "namespace": "bench", "name": "agg",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "account", "type": "int64", "nullable": false},
            {"name": "amount", "type": "int64", "nullable": false},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "id", "buckets": 2,
        "hot_retention": "1s",
        // Only the bench's explicit tier call moves rows to the cold tier.
        "tiering": {"target_file_size": 1u64 << 40, "max_freshness": "24h"}
    })
}

/// Rows `first..first + ROWS_PER_BATCH`; `account` and `amount` vary independently of
/// the bucket key.
fn rows(first: i64, ts: i64) -> RecordBatch {
    let ids = first..first + ROWS_PER_BATCH as i64;
    batch([
        ("id", int64s(ids.clone())),
        (
            "account",
            int64s(ids.clone().map(|i| (i * 7919) % ACCOUNTS)),
        ),
        (
            "amount",
            int64s(ids.clone().map(|i| (i * 31) % 10_007 - 5000)),
        ),
        ("ts", timestamps(ids.map(|_| ts))),
    ])
}

/// Writes `count` rows from id `first`, in puts of [`BATCHES_PER_PUT`] batches; returns
/// the batches written.
async fn fill(
    gateway: &Gateway,
    first: i64,
    count: usize,
    ts: i64,
) -> BenchResult<Vec<RecordBatch>> {
    let mut client = gateway.client().await?;
    let mut written = Vec::new();
    let mut next = first;
    while next < first + count as i64 {
        let mut put = Vec::new();
        while put.len() < BATCHES_PER_PUT && next < first + count as i64 {
            put.push(rows(next, ts));
            next += ROWS_PER_BATCH as i64;
        }
        written.extend(put.iter().cloned());
        put_all(&mut client, &gateway.token, ["bench", "agg"], put).await?;
    }
    Ok(written)
}

/// `(account → (sum, count))` of an answer, whatever its batch layout or order.
fn groups(batches: &[RecordBatch]) -> BenchResult<BTreeMap<i64, (i64, i64)>> {
    let mut out = BTreeMap::new();
    for b in batches {
        let account = b.column(0).as_primitive_opt::<Int64Type>();
        let total = b.column(1).as_primitive_opt::<Int64Type>();
        let n = b.column(2).as_primitive_opt::<Int64Type>();
        let (Some(account), Some(total), Some(n)) = (account, total, n) else {
            return Err(format!("unexpected answer schema: {}", b.schema()).into());
        };
        for i in 0..b.num_rows() {
            out.insert(account.value(i), (total.value(i), n.value(i)));
        }
    }
    Ok(out)
}

/// The table's read counts by tier (`GET /v1/tables/bench.agg/boundary`).
async fn boundary(gateway: &Gateway) -> BenchResult<(u64, u64, u64)> {
    let b = gateway
        .http(reqwest::Method::GET, "/v1/tables/bench.agg/boundary", None)
        .await?;
    let n = |k: &str| b[k].as_u64().unwrap_or(0);
    Ok((n("hot_only"), n("cold_only"), n("spanning")))
}

pub(crate) async fn aggregate(cold_rows: usize, hot_rows: usize) -> BenchResult<()> {
    let gateway = Gateway::start_with(|config| {
        config.tiering.tick = Duration::from_millis(500);
    })
    .await?;
    gateway.create_tables(&[spec()]).await?;
    let analyst = gateway.mint("analyst", "analysts")?;
    let mut client = gateway.client().await?;
    let ts = now_us();

    let started = Instant::now();
    fill(&gateway, 0, cold_rows, ts).await?;
    gateway
        .http(reqwest::Method::POST, "/v1/tables/bench.agg/tier", None)
        .await?;
    // Hot retention runs on the scheduler's tick: wait until a read is served by the
    // cold tier alone, so the hot tier no longer holds what was tiered.
    let waited = Instant::now();
    loop {
        let before = boundary(&gateway).await?.1;
        sql_batches(&mut client, &analyst, "SELECT count(*) FROM bench.agg").await?;
        if boundary(&gateway).await?.1 > before {
            break;
        }
        if waited.elapsed() > Duration::from_secs(120) {
            return Err("hot retention did not drop the tiered segments in 2 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cold_start = cold_rows.div_ceil(ROWS_PER_BATCH) * ROWS_PER_BATCH;
    let untiered = fill(&gateway, cold_start as i64, hot_rows, ts).await?;
    let total_rows = cold_start + untiered.iter().map(RecordBatch::num_rows).sum::<usize>();
    let fill_s = started.elapsed().as_secs_f64();

    // The baseline's files: the snapshot's live Parquet files, and the untiered rows as
    // one Arrow IPC file.
    let catalog = hotgate_tiering::Catalog::open(gateway.config.catalog_config()).await?;
    let name = hotgate_store::TableName::parse("bench.agg")?;
    let table = catalog.load(&name).await?;
    let parquet: Vec<String> = hotgate_tiering::files::live_data_files(&table)
        .await?
        .iter()
        .map(|f| f.file_path().to_owned())
        .collect();
    let ipc_dir = tempfile::tempdir()?;
    let ipc_path = ipc_dir.path().join("hot.arrow");
    {
        let file = std::fs::File::create(&ipc_path)?;
        let mut writer = arrow_ipc::writer::FileWriter::try_new(file, &untiered[0].schema())?;
        for b in &untiered {
            writer.write(b)?;
        }
        writer.finish()?;
    }
    let ctx = SessionContext::new();
    let cold = ctx
        .read_parquet(parquet.clone(), ParquetReadOptions::default())
        .await?;
    ctx.register_table("cold", cold.into_view())?;
    let hot = ctx
        .read_arrow(
            ipc_path.to_str().ok_or("a temp path that is not UTF-8")?,
            ArrowReadOptions::default(),
        )
        .await?;
    ctx.register_table("hot", hot.into_view())?;

    let spanning_before = boundary(&gateway).await?.2;
    let (mut ours, mut direct) = (Vec::new(), Vec::new());
    let (mut our_answer, mut direct_answer) = (BTreeMap::new(), BTreeMap::new());
    // One unmeasured round of each warms the page cache for both.
    for run in 0..=RUNS {
        let started = Instant::now();
        let answer = sql_batches(&mut client, &analyst, STATEMENT).await?;
        let s = started.elapsed().as_secs_f64();
        our_answer = groups(&answer)?;
        let started = Instant::now();
        let answer = ctx.sql(BASELINE).await?.collect().await?;
        let d = started.elapsed().as_secs_f64();
        direct_answer = groups(&answer)?;
        if run > 0 {
            ours.push(s);
            direct.push(d);
        }
    }
    let spanning = boundary(&gateway).await?.2 - spanning_before;
    if our_answer != direct_answer {
        return Err("hotgate's and DataFusion's aggregates differ".into());
    }
    let counted: i64 = our_answer.values().map(|(_, n)| n).sum();
    if counted != total_rows as i64 || our_answer.len() != ACCOUNTS as usize {
        return Err(format!(
            "the aggregate counted {counted} rows in {} groups, not {total_rows} in {ACCOUNTS}",
            our_answer.len()
        )
        .into());
    }
    if spanning != RUNS as u64 + 1 {
        return Err(format!("{spanning} of {} reads spanned both tiers", RUNS + 1).into());
    }
    let (ours_m, direct_m) = (median(ours), median(direct));
    for (path, secs) in [("flight_sql", ours_m), ("datafusion_direct", direct_m)] {
        println!(
            "{}",
            serde_json::json!({
                "bench": "sql_aggregate", "path": path, "rows": total_rows,
                "cold_rows": cold_start, "hot_rows": total_rows - cold_start,
                "groups": ACCOUNTS, "median_s": secs, "rows_per_s": total_rows as f64 / secs,
            })
        );
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "sql_aggregate_summary", "rows": total_rows,
            "parquet_files": parquet.len(), "fill_and_tier_s": fill_s,
            "reads_spanning_both_tiers": spanning,
            "sql_over_direct": direct_m / ours_m, "target": 0.8,
        })
    );
    gateway.stop().await
}
