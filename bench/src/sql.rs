//! Part of `hotgate-bench reads`: the Flight SQL path against the JSON-ticket path and
//! the bare Flight server, over the same wide table: `SELECT <columns> FROM bench.wide`
//! through `GetFlightInfo` + `DoGet` (what ADBC and JDBC send, on the wire), against
//! the JSON scan ticket of the same columns, 5 and 50 of 50 columns.

use std::time::Instant;

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
    let command = CommandStatementQuery {
        query: sql.to_owned(),
        transaction_id: None,
    };
    let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
    let info = client
        .get_flight_info(with_token(descriptor, token))
        .await?
        .into_inner();
    let mut rows = 0;
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
            rows += b?.num_rows();
        }
    }
    Ok((started.elapsed().as_secs_f64(), rows))
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
