//! Part of `hotgate-bench reads`: the Flight SQL path against the JSON-ticket path and
//! the bare Flight server, over the same wide table: `SELECT <columns> FROM bench.wide`
//! through `GetFlightInfo` + `DoGet` (what ADBC and JDBC send, on the wire), against
//! the JSON scan ticket of the same columns, 5 and 50 of 50 columns; and the same
//! fetches through the ADBC driver from Python (`python/adbc_fetch.py`).

use std::net::SocketAddr;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::{FlightDescriptor, Ticket};
use futures::{StreamExt, TryStreamExt};
use hotgate_testkit::with_token;
use prost::Message;
use tonic::transport::Channel;

use crate::gateway::{BenchResult, read_all};
use crate::stats::median;

/// The columns of a read of `columns` of the wide table, as the JSON ticket names them.
fn wide_columns(columns: usize, of: usize) -> Vec<String> {
    std::iter::once("key".to_owned())
        .chain((2..of).map(|i| format!("c{i}")))
        .chain(std::iter::once("ts".to_owned()))
        .step_by((of / columns).max(1))
        .take(columns)
        .collect()
}

/// One Flight SQL statement, planned and fetched whole: (seconds, rows).
async fn sql_once(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    sql: &str,
) -> BenchResult<(f64, usize)> {
    let started = Instant::now();
    let mut rows = 0;
    sql_fetch(client, token, sql, |b| rows += b.num_rows()).await?;
    Ok((started.elapsed().as_secs_f64(), rows))
}

/// One Flight SQL statement's answer.
pub(crate) async fn sql_batches(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    sql: &str,
) -> BenchResult<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    sql_fetch(client, token, sql, |b| batches.push(b)).await?;
    Ok(batches)
}

/// Plans `sql` with `GetFlightInfo` and fetches every endpoint with `DoGet` (what ADBC
/// and JDBC send, on the wire), handing each batch to `on_batch`.
async fn sql_fetch(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    sql: &str,
    mut on_batch: impl FnMut(RecordBatch),
) -> BenchResult<()> {
    let command = CommandStatementQuery {
        query: sql.to_owned(),
        transaction_id: None,
    };
    let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
    let info = client
        .get_flight_info(with_token(descriptor, token))
        .await?
        .into_inner();
    for endpoint in &info.endpoint {
        let ticket: Ticket = endpoint
            .ticket
            .clone()
            .ok_or("an endpoint without a ticket")?;
        let data = client
            .do_get(with_token(ticket, token))
            .await?
            .into_inner()
            .map_err(|s| FlightError::Tonic(Box::new(s)));
        let mut batches = FlightRecordBatchStream::new_from_flight_data(data);
        while let Some(b) = batches.next().await {
            on_batch(b?);
        }
    }
    Ok(())
}

/// Median seconds of `runs` reads through each path, interleaved, and their rows.
pub(crate) async fn sql_against_json(
    client: &mut FlightServiceClient<Channel>,
    bare: &mut FlightServiceClient<Channel>,
    token: &str,
    of: usize,
    runs: usize,
) -> BenchResult<()> {
    let mut summary = serde_json::Map::new();
    for columns in [5usize, of] {
        let names = wide_columns(columns, of);
        let quoted: Vec<String> = names.iter().map(|c| format!("\"{c}\"")).collect();
        let sql = format!("SELECT {} FROM bench.wide", quoted.join(", "));
        let ticket = serde_json::json!({"table": "bench.wide", "columns": names}).to_string();
        let (mut sql_s, mut json_s, mut bare_s) = (Vec::new(), Vec::new(), Vec::new());
        let mut counts = [0usize; 3];
        for _ in 0..runs {
            let (s, r) = sql_once(client, token, &sql).await?;
            sql_s.push(s);
            counts[0] = r;
            let started = Instant::now();
            counts[1] = read_all(client, Some(token), &ticket).await?;
            json_s.push(started.elapsed().as_secs_f64());
            let started = Instant::now();
            counts[2] = read_all(bare, None, &ticket).await?;
            bare_s.push(started.elapsed().as_secs_f64());
        }
        if counts[0] != counts[1] || counts[1] != counts[2] {
            return Err(format!("row counts differ: sql, json, bare = {counts:?}").into());
        }
        let [sql_m, json_m, bare_m] = [sql_s, json_s, bare_s].map(median);
        for (path, secs) in [
            ("flight_sql", sql_m),
            ("json_ticket", json_m),
            ("bare_flight", bare_m),
        ] {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "sql_read", "path": path, "columns": columns, "of": of,
                    "rows": counts[0], "median_s": secs, "rows_per_s": counts[0] as f64 / secs,
                })
            );
        }
        summary.insert(
            format!("sql_over_json_{columns}_of_{of}"),
            (json_m / sql_m).into(),
        );
        summary.insert(
            format!("sql_over_bare_{columns}_of_{of}"),
            (bare_m / sql_m).into(),
        );
    }
    summary.insert("bench".into(), "sql_read_summary".into());
    summary.insert("target_sql_over_json".into(), 0.9.into());
    println!("{}", serde_json::Value::Object(summary));
    Ok(())
}

/// The same fetches from Python through real clients from PyPI (`bench/python/
/// adbc_fetch.py`: the ADBC Flight SQL driver against pyarrow.flight's JSON ticket and
/// the bare server), in the venv `scripts/setup` makes (or `HOTGATE_BENCH_PYTHON`).
/// Its JSON lines are passed through.
pub(crate) async fn adbc_against_json(
    hotgate: SocketAddr,
    bare: SocketAddr,
    token: &str,
    of: usize,
    runs: usize,
) -> BenchResult<()> {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("HOTGATE_BENCH_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate_dir.join("../.venv/bin/python"));
    if !python.exists() {
        return Err(format!(
            "no Python client venv at {} (scripts/setup makes it; or set HOTGATE_BENCH_PYTHON)",
            python.display()
        )
        .into());
    }
    let columns: Vec<Vec<String>> = [5usize, of].iter().map(|&n| wide_columns(n, of)).collect();
    let mut command = std::process::Command::new(python);
    command
        .arg(crate_dir.join("python/adbc_fetch.py"))
        .args([
            "--hotgate",
            &hotgate.to_string(),
            "--bare",
            &bare.to_string(),
        ])
        .args(["--of", &of.to_string(), "--runs", &runs.to_string()])
        .env("HOTGATE_BENCH_TOKEN", token)
        .arg("--columns")
        .arg(serde_json::to_string(&columns)?);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    if !output.status.success() {
        return Err(format!(
            "adbc_fetch.py failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}
