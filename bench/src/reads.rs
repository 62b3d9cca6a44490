//! `hotgate-bench reads` (the default): end-to-end freshness, Flight read throughput
//! against a bare arrow-flight server serving the same batches from memory, governed
//! against admin reads, the per-call cost of authorization, and the audit's cost; and
//! the Flight SQL path against the JSON ticket and the bare server, from Rust and
//! through the ADBC driver from Python (`crate::sql`).
//!
//! - Freshness: each row carries `produced_at`, set by the producer just before it
//!   sends the batch over a long-lived DoPut; a follow-mode changelog DoGet records when
//!   each row arrives. Steady rate: `--rate` rows/s (default 2000), 12,000 rows.
//! - Governance: the same reads as an analyst under one row filter and two masks,
//!   against an admin (no policy applies), in the same run; and the per-call cost of
//!   the grant check plus the cached secure view.
//! - Audit: the same reads against a second gateway with `audit.enabled = false`, large
//!   scans and small point reads (many concurrent callers, and one caller alone),
//!   interleaved in one run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_client::FlightServiceClient;
use futures::StreamExt;
use hotgate_testkit::{batch, free_addr, int64s, timestamps, wide_batch, wide_spec, with_token};
use tonic::transport::Channel;

use crate::bare_flight::BareFlight;
use crate::gateway::{BenchResult, Gateway, connect, do_get, now_us, put_all, read_all};
use crate::stats::median;

const WIDE_COLUMNS: usize = 50;
const WIDE_ROWS_PER_BATCH: usize = 8192;
const WIDE_BATCHES: usize = 30;
const READ_RUNS: usize = 5;
const FRESHNESS_ROWS: usize = 12_000;
const FRESHNESS_BATCH: usize = 10;
const POINT_ROWS: i64 = 256;
const POINT_READS: usize = 400;
const POINT_CALLERS: usize = 16;
const AUDIT_ROUNDS: usize = 5;

fn wide_table() -> serde_json::Value {
    wide_spec("wide", WIDE_COLUMNS, 4)
}

fn wide_batches() -> Vec<RecordBatch> {
    let ts = now_us();
    (0..WIDE_BATCHES)
        .map(|seed| {
            let first = (seed * WIDE_ROWS_PER_BATCH) as i64;
            wide_batch(WIDE_COLUMNS, WIDE_ROWS_PER_BATCH, first, ts)
        })
        .collect()
}

/// A table of `id` and `produced_at`, its time column.
fn id_time_spec(name: &str, buckets: u32) -> serde_json::Value {
    serde_json::json!({"namespace": "bench", "name": name,
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "produced_at", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "produced_at", "bucket_key": "id", "buckets": buckets})
}

/// Rows `ids` of [`id_time_spec`], all produced now.
fn id_time_batch(ids: std::ops::Range<i64>) -> RecordBatch {
    let produced = now_us();
    let n = ids.clone().count();
    batch([
        ("id", int64s(ids)),
        ("produced_at", timestamps(std::iter::repeat_n(produced, n))),
    ])
}

async fn freshness(addr: SocketAddr, token: &str, rate: f64) -> BenchResult<serde_json::Value> {
    let mut reader = connect(addr).await?;
    let ticket = r#"{"table":"bench.fresh","columns":["id","produced_at"],"changelog":{"from":"latest","follow":true}}"#;
    let tail = do_get(&mut reader, Some(token), ticket.to_owned()).await?;
    let receiver = crate::gateway::follow_latencies(tail, FRESHNESS_ROWS as u64);
    // One long-lived DoPut; each batch is stamped just before it is sent.
    let (tx, rx) = tokio::sync::mpsc::channel::<RecordBatch>(4);
    let descriptor = FlightDescriptor::new_path(vec!["bench".into(), "fresh".into()]);
    let data = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(descriptor))
        .build(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok))
        .filter_map(|d| async move { d.ok() });
    let mut writer = connect(addr).await?;
    let acks = writer.do_put(with_token(data, token));
    let producer = async move {
        let interval = Duration::from_secs_f64(FRESHNESS_BATCH as f64 / rate);
        let mut tick = tokio::time::interval(interval);
        for k in 0..FRESHNESS_ROWS / FRESHNESS_BATCH {
            tick.tick().await;
            let first = (k * FRESHNESS_BATCH) as i64;
            if tx
                .send(id_time_batch(first..first + FRESHNESS_BATCH as i64))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let (acks, ()) = tokio::join!(
        async move {
            let mut acks = acks.await?.into_inner();
            while let Some(a) = acks.next().await {
                a?;
            }
            BenchResult::Ok(())
        },
        producer
    );
    acks?;
    let latencies = tokio::time::timeout(Duration::from_secs(120), receiver).await??;
    Ok(serde_json::json!({
        "bench": "freshness", "rows": latencies.count(), "rate_rows_per_s": rate,
        "rows_per_put_batch": FRESHNESS_BATCH,
        "p50_ms": latencies.quantile_ms(0.50), "p95_ms": latencies.quantile_ms(0.95),
        "p99_ms": latencies.quantile_ms(0.99), "max_ms": latencies.max_ms(),
    }))
}

fn wide_ticket(columns: usize) -> String {
    let cols: Vec<String> = std::iter::once("key".to_owned())
        .chain((2..WIDE_COLUMNS).map(|i| format!("c{i}")))
        .chain(std::iter::once("ts".to_owned()))
        .step_by((WIDE_COLUMNS / columns).max(1))
        .take(columns)
        .collect();
    serde_json::json!({"table": "bench.wide", "columns": cols}).to_string()
}

/// One timed read of `columns` wide-table columns: (seconds, rows).
async fn read_once(
    client: &mut FlightServiceClient<Channel>,
    token: Option<&str>,
    columns: usize,
) -> BenchResult<(f64, usize)> {
    let ticket = wide_ticket(columns);
    let start = Instant::now();
    let rows = read_all(client, token, &ticket).await?;
    Ok((start.elapsed().as_secs_f64(), rows))
}

/// [`READ_RUNS`] reads of `columns` columns by each caller in turn (a token read from
/// hotgate, or `None`: the bare server), so that no caller gets the warmer part of a
/// noisy machine: each caller's median seconds, and the rows every caller received.
async fn interleaved_medians(
    hotgate: &mut FlightServiceClient<Channel>,
    bare: &mut FlightServiceClient<Channel>,
    callers: &[(&str, Option<&str>)],
    columns: usize,
) -> BenchResult<(Vec<f64>, usize)> {
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); callers.len()];
    let mut rows = vec![0; callers.len()];
    for _ in 0..READ_RUNS {
        for (i, (_, token)) in callers.iter().enumerate() {
            let client = if token.is_some() {
                &mut *hotgate
            } else {
                &mut *bare
            };
            let (secs, r) = read_once(client, *token, columns).await?;
            runs[i].push(secs);
            rows[i] = r;
        }
    }
    if rows.iter().any(|r| *r != rows[0]) {
        let counts: Vec<_> = callers.iter().map(|(who, _)| who).zip(&rows).collect();
        return Err(format!("row counts differ between callers: {counts:?}").into());
    }
    Ok((runs.into_iter().map(median).collect(), rows[0]))
}

/// One row filter that keeps every row (so every caller streams the same rows) and two
/// masks on columns the 5-column read selects (`c11` string, `c31` float64). `reader`
/// gets `redact` and `null`, which also shrink the payload; `reader_same_size` gets
/// expression masks that keep it (`upper`, negation), isolating the cost of evaluation.
fn bench_policies() -> Vec<serde_json::Value> {
    let policy = |id: &str, to: &str, rest: serde_json::Value| {
        let mut p = serde_json::json!({"id": id, "scope": {"table": "bench.wide"}, "to": [to]});
        p.as_object_mut()
            .expect("an object")
            .extend(rest.as_object().expect("an object").clone());
        p
    };
    let same = "reader_same_size";
    vec![
        policy(
            "rows2",
            same,
            serde_json::json!({"kind": "row_filter", "expr": "key >= 0"}),
        ),
        policy(
            "upper_c11",
            same,
            serde_json::json!({"kind": "column_mask", "column": "c11", "mask": {"expr": "upper(c11)"}}),
        ),
        policy(
            "negate_c31",
            same,
            serde_json::json!({"kind": "column_mask", "column": "c31", "mask": {"expr": "c31 * -1.0"}}),
        ),
        policy(
            "rows",
            "reader",
            serde_json::json!({"kind": "row_filter", "expr": "key >= 0"}),
        ),
        policy(
            "redact_c11",
            "reader",
            serde_json::json!({"kind": "column_mask", "column": "c11", "mask": "redact"}),
        ),
        policy(
            "null_c31",
            "reader",
            serde_json::json!({"kind": "column_mask", "column": "c31", "mask": "null"}),
        ),
    ]
}

/// Per-call cost of what each read does before planning: the grant check (casbin over
/// the mirror) and the secure view lookup (cached), measured in-process on the bench's
/// own grants, policies and table definition.
async fn authorization_cost(data_dir: &std::path::Path) -> BenchResult<serde_json::Value> {
    use hotgate_policy::{
        ActivatedRoles, GrantsDocument, GrantsMirror, HashKey, PolicySet, Principal, Privilege,
        Resource, SecureViewCache, ViewTable,
    };
    let doc: GrantsDocument = serde_json::from_value(crate::gateway::bench_grants())?;
    let mirror = GrantsMirror::build(doc, "hotgate", 1).await?;
    let policies: PolicySet =
        serde_json::from_slice(&std::fs::read(data_dir.join("policies.json"))?)?;
    let def = hotgate_store::TableDef::new(serde_json::from_value(wide_table())?)?;
    let analyst = Principal {
        name: "analyst".into(),
        id: None,
        roles: ActivatedRoles::All,
        token_id: None,
    };
    let resource = Resource::table("bench", "wide");
    let cache = SecureViewCache::default();
    let key = HashKey::generate();
    let table = ViewTable {
        namespace: "bench",
        name: "wide",
        schema: def.stored_schema(),
    };
    const CALLS: u32 = 20_000;
    let mut medians = serde_json::Map::new();
    for (what, uncached, with_view) in [
        ("grant_check_casbin", true, false),
        ("grant_check_cached", false, false),
        ("grant_check_cached_and_view", false, true),
    ] {
        let mut runs = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..CALLS {
                if uncached {
                    mirror.check_uncached(&analyst, Privilege::TableReadData, &resource)?;
                } else {
                    mirror.check(&analyst, Privilege::TableReadData, &resource)?;
                }
                if with_view {
                    let roles = mirror.catalog_roles(&analyst);
                    cache.get_or_compile(table, &roles, &policies, &key)?;
                }
            }
            runs.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS));
        }
        medians.insert(format!("{what}_us"), median(runs).into());
    }
    medians.insert("bench".into(), "authorization_cost".into());
    medians.insert("calls_per_run".into(), CALLS.into());
    Ok(serde_json::Value::Object(medians))
}

fn point_ticket(i: usize) -> String {
    let id = (i as i64 * 7919) % POINT_ROWS;
    serde_json::json!({"table": "bench.points", "filter": format!("id = {id}")}).to_string()
}

/// Point reads per second with `callers` concurrent clients, `reads` in all.
async fn point_reads(
    addr: SocketAddr,
    token: &str,
    callers: usize,
    reads: usize,
) -> BenchResult<f64> {
    let mut clients = Vec::with_capacity(callers);
    for _ in 0..callers {
        clients.push(connect(addr).await?);
    }
    let start = Instant::now();
    let per = reads / callers;
    let tasks = clients.into_iter().enumerate().map(|(c, mut client)| {
        let token = token.to_owned();
        async move {
            for j in 0..per {
                let rows = read_all(&mut client, Some(&token), &point_ticket(c * per + j)).await?;
                if rows != 1 {
                    return Err(format!("a point read returned {rows} rows").into());
                }
            }
            BenchResult::Ok(())
        }
    });
    futures::future::try_join_all(tasks).await?;
    Ok((per * callers) as f64 / start.elapsed().as_secs_f64())
}

/// Reads with the audit on (`on`, the main gateway) against the audit off (a second
/// gateway holding the same data), interleaved round by round.
async fn audit_cost(on: &Gateway) -> BenchResult<()> {
    let off = Gateway::start(false).await?;
    off.create_tables(&[wide_table(), id_time_spec("points", 1)])
        .await?;
    let mut off_client = off.client().await?;
    put_all(
        &mut off_client,
        &off.token,
        ["bench", "wide"],
        wide_batches(),
    )
    .await?;
    on.create_tables(&[id_time_spec("points", 1)]).await?;
    let mut on_client = on.client().await?;
    for (client, token) in [
        (&mut on_client, on.token.as_str()),
        (&mut off_client, off.token.as_str()),
    ] {
        put_all(
            client,
            token,
            ["bench", "points"],
            vec![id_time_batch(0..POINT_ROWS)],
        )
        .await?;
    }
    let sides = [
        ("on", on.flight_addr(), on.token.as_str()),
        ("off", off.flight_addr(), off.token.as_str()),
    ];
    let mut scan_s = [Vec::new(), Vec::new()];
    let mut point_concurrent = [Vec::new(), Vec::new()];
    let mut point_single = [Vec::new(), Vec::new()];
    let mut scan_rows = 0;
    for _ in 0..AUDIT_ROUNDS {
        for (i, (_, addr, token)) in sides.iter().enumerate() {
            let mut client = connect(*addr).await?;
            let (secs, rows) = read_once(&mut client, Some(token), WIDE_COLUMNS).await?;
            scan_s[i].push(secs);
            scan_rows = rows;
            point_concurrent[i].push(point_reads(*addr, token, POINT_CALLERS, POINT_READS).await?);
            point_single[i].push(point_reads(*addr, token, 1, POINT_READS / 4).await?);
        }
    }
    let [scan_on, scan_off] = scan_s.map(median);
    let [pc_on, pc_off] = point_concurrent.map(median);
    let [ps_on, ps_off] = point_single.map(median);
    for (i, (side, _, _)) in sides.iter().enumerate() {
        let (scan, pc, ps) = [(scan_on, pc_on, ps_on), (scan_off, pc_off, ps_off)][i];
        println!(
            "{}",
            serde_json::json!({
                "bench": "audit_read", "audit": side,
                "scan_rows": scan_rows, "scan_columns": WIDE_COLUMNS, "scan_median_s": scan,
                "scan_rows_per_s": scan_rows as f64 / scan,
                "point_reads_per_s_concurrent": pc, "point_callers": POINT_CALLERS,
                "point_reads_per_s_single_caller": ps,
            })
        );
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "audit_read_summary", "rounds": AUDIT_ROUNDS,
            "scan_on_over_off": scan_off / scan_on,
            "point_concurrent_on_over_off": pc_on / pc_off,
            "point_single_caller_on_over_off": ps_on / ps_off,
            "targets": {"scan": 0.95, "small_reads": 0.8},
        })
    );
    off.stop().await
}

/// hotgate against the bare Flight server, 5 and 50 of 50 columns.
async fn against_bare_flight(
    gateway: &Gateway,
    client: &mut FlightServiceClient<Channel>,
    token: &str,
) -> BenchResult<FlightServiceClient<Channel>> {
    let bare_addr = free_addr();
    BareFlight::serve(wide_batches(), bare_addr).await?;
    let mut bare_client = connect(bare_addr).await?;
    let mut summary = serde_json::Map::new();
    let mut medians = Vec::new();
    for columns in [5usize, 50] {
        let callers = [("hotgate", Some(token)), ("bare_flight", None)];
        let (medians_of, rows) =
            interleaved_medians(client, &mut bare_client, &callers, columns).await?;
        let (hot, raw) = (medians_of[0], medians_of[1]);
        for (server, secs) in [("hotgate", hot), ("bare_flight", raw)] {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "flight_read", "server": server, "columns": columns, "of": WIDE_COLUMNS,
                    "rows": rows, "median_s": secs, "rows_per_s": rows as f64 / secs,
                })
            );
        }
        summary.insert(
            format!("hotgate_over_bare_{columns}_of_{WIDE_COLUMNS}"),
            (raw / hot).into(),
        );
        medians.push((hot, raw));
    }
    // How much cheaper 5 columns are than all 50 (the target is 8×).
    summary.insert(
        "hotgate_50_over_5_columns".into(),
        (medians[1].0 / medians[0].0).into(),
    );
    summary.insert(
        "bare_50_over_5_columns".into(),
        (medians[1].1 / medians[0].1).into(),
    );
    summary.insert("bench".into(), "flight_read_summary".into());
    println!("{}", serde_json::Value::Object(summary));
    crate::sql::sql_against_json(client, &mut bare_client, token, WIDE_COLUMNS, READ_RUNS).await?;
    let hotgate = gateway.flight_addr();
    crate::sql::adbc_against_json(hotgate, bare_addr, token, WIDE_COLUMNS, READ_RUNS).await?;
    Ok(bare_client)
}

/// Governed (one row filter, two masks) against admin (no policy) and the bare Flight
/// server, same data.
async fn governed_against_admin(
    gateway: &Gateway,
    client: &mut FlightServiceClient<Channel>,
    bare_client: &mut FlightServiceClient<Channel>,
) -> BenchResult<()> {
    for body in bench_policies() {
        gateway
            .http(reqwest::Method::POST, "/v1/policies", Some(&body))
            .await?;
    }
    let analyst = gateway.mint("analyst", "ALL")?;
    let analyst2 = gateway.mint("analyst2", "ALL")?;
    let mut summary = serde_json::Map::new();
    for columns in [5usize, 50] {
        let callers = [
            ("admin", Some(gateway.token.as_str())),
            ("governed", Some(analyst.as_str())),
            ("governed_same_size", Some(analyst2.as_str())),
            ("bare_flight", None),
        ];
        let (medians, rows) = interleaved_medians(client, bare_client, &callers, columns).await?;
        for ((who, _), secs) in callers.iter().zip(&medians) {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "governed_read", "caller": who, "columns": columns, "of": WIDE_COLUMNS,
                    "rows": rows, "median_s": secs, "rows_per_s": rows as f64 / secs,
                    "policies": if matches!(*who, "admin" | "bare_flight") { 0 } else { 3 },
                })
            );
        }
        // Each ratio is the baseline's median over the caller's (callers' indices).
        for (ratio, caller, baseline) in [
            ("governed_over_admin", 1, 0),
            ("governed_same_size_over_admin", 2, 0),
            ("governed_over_bare", 1, 3),
            ("admin_over_bare", 0, 3),
        ] {
            summary.insert(
                format!("{ratio}_{columns}_of_{WIDE_COLUMNS}"),
                (medians[baseline] / medians[caller]).into(),
            );
        }
    }
    summary.insert("bench".into(), "governed_read_summary".into());
    println!("{}", serde_json::Value::Object(summary));
    Ok(())
}

pub(crate) async fn reads(rate: f64) -> BenchResult<()> {
    let gateway = Gateway::start(true).await?;
    gateway
        .create_tables(&[id_time_spec("fresh", 4), wide_table()])
        .await?;
    println!(
        "{}",
        freshness(gateway.flight_addr(), &gateway.token, rate).await?
    );

    let mut client = gateway.client().await?;
    put_all(
        &mut client,
        &gateway.token,
        ["bench", "wide"],
        wide_batches(),
    )
    .await?;
    let mut bare_client = against_bare_flight(&gateway, &mut client, &gateway.token).await?;
    governed_against_admin(&gateway, &mut client, &mut bare_client).await?;
    println!("{}", authorization_cost(gateway.data_dir()).await?);
    audit_cost(&gateway).await?;
    gateway.stop().await
}
