//! `hotgate-bench`: end-to-end freshness and Flight read throughput, against a bare
//! arrow-flight server serving the same batches from memory, in the same run.
//!
//! Run: `cargo run --release -p hotgate-tests --bin hotgate-bench [reads|lookup|recovery|tiering|deletion]`
//! (`scripts/bench` installs Redis first). Prints JSON lines. `reads` (the default) is
//! described here; `lookup` and `recovery` in [`lookup`]; `tiering` in [`tiering`]; `deletion` in [`deletion`].
//! Freshness: each row carries `produced_at`, set by the producer just before it sends
//! the batch over a long-lived DoPut; a follow-mode changelog DoGet records when each row
//! arrives. Steady rate: `HOTGATE_BENCH_RATE` rows/s (default 2000), 12,000 rows.
//! Governance: the same reads as an analyst under one row filter and two masks, against
//! an admin (no policy applies), in the same run; and the per-call cost of the grant check
//! plus the cached secure view.
//! Audit: the same reads against a second gateway with `audit.enabled = false`, large
//! scans and small point reads (many concurrent callers, and one caller alone),
//! interleaved in one run.

use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{FlightData, FlightDescriptor, Ticket};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use hotgate_gateway::Config;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

mod deletion;
mod lookup;
mod tiering;

// mimalloc: requests make many small allocations (JSON, Arrow arrays, gRPC frames), which
// it serves faster than glibc's allocator, notably across threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const WIDE_COLUMNS: usize = 50;
const WIDE_ROWS_PER_BATCH: usize = 8192;
const WIDE_BATCHES: usize = 30;
const READ_RUNS: usize = 5;
const FRESHNESS_ROWS: usize = 12_000;
const FRESHNESS_BATCH: usize = 10;

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

fn with_token<T>(message: T, token: &str) -> BenchResult<Request<T>> {
    let mut r = Request::new(message);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    Ok(r)
}

fn wide_kind(i: usize) -> (&'static str, DataType) {
    match i % 3 {
        0 => ("int64", DataType::Int64),
        1 => ("float64", DataType::Float64),
        _ => ("string", DataType::Utf8),
    }
}

fn wide_spec() -> serde_json::Value {
    let mut columns = vec![
        serde_json::json!({"name": "ts", "type": "timestamp_us", "nullable": false}),
        serde_json::json!({"name": "key", "type": "int64", "nullable": false}),
    ];
    for i in 2..WIDE_COLUMNS {
        columns.push(serde_json::json!({"name": format!("c{i}"), "type": wide_kind(i).0}));
    }
    serde_json::json!({"namespace": "bench", "name": "wide", "columns": columns,
        "time_column": "ts", "bucket_key": "key", "buckets": 4})
}

fn wide_batch(seed: usize) -> BenchResult<RecordBatch> {
    let n = WIDE_ROWS_PER_BATCH;
    let ts = now_us();
    let mut fields = vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("key", DataType::Int64, false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(TimestampMicrosecondArray::from(vec![ts; n]).with_timezone("UTC")),
        Arc::new(Int64Array::from_iter_values(
            (0..n as i64).map(|r| r + (seed * n) as i64),
        )),
    ];
    for i in 2..WIDE_COLUMNS {
        let (_, dt) = wide_kind(i);
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
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
}

fn fresh_spec() -> serde_json::Value {
    serde_json::json!({"namespace": "bench", "name": "fresh",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "produced_at", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "produced_at", "bucket_key": "id", "buckets": 4})
}

fn fresh_batch(first: i64) -> BenchResult<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "produced_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]));
    let produced = now_us();
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(
                first..first + FRESHNESS_BATCH as i64,
            )),
            Arc::new(
                TimestampMicrosecondArray::from(vec![produced; FRESHNESS_BATCH])
                    .with_timezone("UTC"),
            ),
        ],
    )?)
}

async fn connect(addr: SocketAddr) -> BenchResult<FlightServiceClient<Channel>> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    Ok(FlightServiceClient::new(channel).max_decoding_message_size(256 << 20))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// DoPut of `batches` as one stream.
async fn put_all(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    path: [&str; 2],
    batches: Vec<RecordBatch>,
) -> BenchResult<()> {
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    let data: Vec<FlightData> = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(descriptor))
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .try_collect()
        .await?;
    let mut acks = client
        .do_put(with_token(futures::stream::iter(data), token)?)
        .await?
        .into_inner();
    while let Some(a) = acks.next().await {
        a?;
    }
    Ok(())
}

/// Reads a ticket fully; returns the rows received.
async fn read_all(
    client: &mut FlightServiceClient<Channel>,
    token: Option<&str>,
    ticket: &str,
) -> BenchResult<usize> {
    let request = match token {
        Some(t) => with_token(Ticket::new(ticket.to_owned()), t)?,
        None => Request::new(Ticket::new(ticket.to_owned())),
    };
    let stream = client
        .do_get(request)
        .await?
        .into_inner()
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    let mut batches = FlightRecordBatchStream::new_from_flight_data(stream);
    let mut rows = 0;
    while let Some(b) = batches.next().await {
        rows += b?.num_rows();
    }
    Ok(rows)
}

/// A Flight server with no store, no auth and no planner: it serves batches held in
/// memory, projected by the `columns` of the same JSON ticket. The baseline.
#[derive(Debug, Clone)]
struct BareFlight {
    batches: Arc<Vec<RecordBatch>>,
}

type Bs<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl FlightService for BareFlight {
    type HandshakeStream = Bs<arrow_flight::HandshakeResponse>;
    type ListFlightsStream = Bs<arrow_flight::FlightInfo>;
    type DoGetStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoPutStream = Bs<arrow_flight::PutResult>;
    type DoActionStream = Bs<arrow_flight::Result>;
    type ListActionsStream = Bs<arrow_flight::ActionType>;
    type DoExchangeStream = Bs<FlightData>;

    async fn handshake(
        &self,
        _: Request<Streaming<arrow_flight::HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn list_flights(
        &self,
        _: Request<arrow_flight::Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<arrow_flight::FlightInfo>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<arrow_flight::PollInfo>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<arrow_flight::SchemaResult>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let ticket: serde_json::Value = serde_json::from_slice(&request.get_ref().ticket)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let schema: SchemaRef = self.batches[0].schema();
        let projection: Vec<usize> = match ticket["columns"].as_array() {
            Some(cols) => cols
                .iter()
                .map(|c| {
                    schema
                        .index_of(c.as_str().unwrap_or_default())
                        .map_err(|e| Status::invalid_argument(e.to_string()))
                })
                .collect::<Result<_, _>>()?,
            None => (0..schema.fields().len()).collect(),
        };
        let batches: Vec<Result<RecordBatch, FlightError>> = self
            .batches
            .iter()
            .map(|b| b.project(&projection).map_err(FlightError::from))
            .collect();
        let stream = FlightDataEncoderBuilder::new()
            .build(futures::stream::iter(batches))
            .map_err(|e| Status::internal(e.to_string()));
        Ok(Response::new(stream.boxed()))
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn do_action(
        &self,
        _: Request<arrow_flight::Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn list_actions(
        &self,
        _: Request<arrow_flight::Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
}

async fn freshness(addr: SocketAddr, token: &str, rate: f64) -> BenchResult<serde_json::Value> {
    let mut reader = connect(addr).await?;
    let ticket = r#"{"table":"bench.fresh","columns":["id","produced_at"],"changelog":{"from":"latest","follow":true}}"#;
    let stream = reader
        .do_get(with_token(Ticket::new(ticket), token)?)
        .await?
        .into_inner()
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    let mut tail = FlightRecordBatchStream::new_from_flight_data(stream);
    let receiver = tokio::spawn(async move {
        let mut latencies_ms = Vec::with_capacity(FRESHNESS_ROWS);
        while latencies_ms.len() < FRESHNESS_ROWS {
            let Some(batch) = tail.next().await else {
                break;
            };
            let received = now_us();
            let Ok(batch) = batch else { break };
            let Some(produced) = batch
                .column(1)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
            else {
                break;
            };
            latencies_ms.extend(
                produced
                    .values()
                    .iter()
                    .map(|p| (received - p) as f64 / 1000.0),
            );
        }
        latencies_ms
    });
    // One long-lived DoPut; each batch is stamped just before it is sent.
    let (tx, rx) = tokio::sync::mpsc::channel::<RecordBatch>(4);
    let descriptor = FlightDescriptor::new_path(vec!["bench".into(), "fresh".into()]);
    let data = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(descriptor))
        .build(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok))
        .filter_map(|d| async move { d.ok() });
    let mut writer = connect(addr).await?;
    let acks = writer.do_put(with_token(data, token)?);
    let producer = async move {
        let interval = Duration::from_secs_f64(FRESHNESS_BATCH as f64 / rate);
        let mut tick = tokio::time::interval(interval);
        for k in 0..FRESHNESS_ROWS / FRESHNESS_BATCH {
            tick.tick().await;
            if tx
                .send(fresh_batch((k * FRESHNESS_BATCH) as i64)?)
                .await
                .is_err()
            {
                break;
            }
        }
        BenchResult::Ok(())
    };
    let (acks, produced) = tokio::join!(
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
    produced?;
    let mut latencies = tokio::time::timeout(Duration::from_secs(120), receiver).await??;
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok(serde_json::json!({
        "bench": "freshness", "rows": latencies.len(), "rate_rows_per_s": rate,
        "rows_per_put_batch": FRESHNESS_BATCH,
        "p50_ms": percentile(&latencies, 0.50), "p95_ms": percentile(&latencies, 0.95),
        "p99_ms": percentile(&latencies, 0.99), "max_ms": percentile(&latencies, 1.0),
    }))
}

/// One timed read of `columns` wide-table columns: (seconds, rows).
async fn read_once(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    columns: usize,
) -> BenchResult<(f64, usize)> {
    let ticket = wide_ticket(columns);
    let start = Instant::now();
    let rows = read_all(client, Some(token), &ticket).await?;
    Ok((start.elapsed().as_secs_f64(), rows))
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

async fn read_throughput(
    client: &mut FlightServiceClient<Channel>,
    token: Option<&str>,
    columns: usize,
) -> BenchResult<(f64, usize)> {
    let ticket = wide_ticket(columns);
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..READ_RUNS {
        let start = Instant::now();
        rows = read_all(client, token, &ticket).await?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok((median(times), rows))
}

fn bench_grants() -> serde_json::Value {
    serde_json::json!({
        "catalogs": [{"name": "hotgate", "catalogRoles": [
            {"name": "catalog_admin", "principalRoles": ["admin"], "grants": [
                {"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"},
                {"type": "catalog", "privilege": "CATALOG_MANAGE_ACCESS"}]},
            {"name": "reader", "principalRoles": ["analysts"], "grants": [
                {"type": "namespace", "namespace": ["bench"], "privilege": "TABLE_READ_DATA"}]},
            {"name": "reader_same_size", "principalRoles": ["analysts2"], "grants": [
                {"type": "namespace", "namespace": ["bench"], "privilege": "TABLE_READ_DATA"}]}
        ]}],
        "principalRoles": [
            {"name": "admin", "principals": ["root"]},
            {"name": "analysts", "principals": ["analyst"]},
            {"name": "analysts2", "principals": ["analyst2"]}
        ]
    })
}

/// One row filter that keeps every row (so every caller streams the same rows) and two
/// masks on columns the 5-column read selects (`c11` string, `c31` float64). `reader`
/// gets `redact` and `null`, which also shrink the payload; `reader_same_size` gets
/// expression masks that keep it (`upper`, negation), isolating the cost of evaluation.
fn bench_policies() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({"id": "rows2", "scope": {"table": "bench.wide"}, "to": ["reader_same_size"],
            "kind": "row_filter", "expr": "key >= 0"}),
        serde_json::json!({"id": "upper_c11", "scope": {"table": "bench.wide"}, "to": ["reader_same_size"],
            "kind": "column_mask", "column": "c11", "mask": {"expr": "upper(c11)"}}),
        serde_json::json!({"id": "negate_c31", "scope": {"table": "bench.wide"}, "to": ["reader_same_size"],
            "kind": "column_mask", "column": "c31", "mask": {"expr": "c31 * -1.0"}}),
        serde_json::json!({"id": "rows", "scope": {"table": "bench.wide"}, "to": ["reader"],
            "kind": "row_filter", "expr": "key >= 0"}),
        serde_json::json!({"id": "redact_c11", "scope": {"table": "bench.wide"}, "to": ["reader"],
            "kind": "column_mask", "column": "c11", "mask": "redact"}),
        serde_json::json!({"id": "null_c31", "scope": {"table": "bench.wide"}, "to": ["reader"],
            "kind": "column_mask", "column": "c31", "mask": "null"}),
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
    let doc: GrantsDocument = serde_json::from_value(bench_grants())?;
    let mirror = GrantsMirror::build(doc, "hotgate", 1).await?;
    let policies: PolicySet =
        serde_json::from_slice(&std::fs::read(data_dir.join("policies.json"))?)?;
    let def = hotgate_store::TableDef::new(serde_json::from_value(wide_spec())?)?;
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

const POINT_ROWS: i64 = 256;
const POINT_READS: usize = 400;
const POINT_CALLERS: usize = 16;
const AUDIT_ROUNDS: usize = 5;

fn point_spec() -> serde_json::Value {
    serde_json::json!({"namespace": "bench", "name": "points",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "produced_at", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "produced_at", "bucket_key": "id", "buckets": 1})
}

fn point_ticket(i: usize) -> String {
    let id = (i as i64 * 7919) % POINT_ROWS;
    serde_json::json!({"table": "bench.points", "filter": format!("id = {id}")}).to_string()
}

/// A gateway of its own, in-process, on a fresh data dir with the bench grants.
struct Gateway {
    config: Config,
    token: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<hotgate_gateway::error::Result<()>>,
    _dir: tempfile::TempDir,
}

async fn start_gateway(audit: bool) -> BenchResult<Gateway> {
    start_gateway_with(|config| config.audit.enabled = audit).await
}

/// [`start_gateway`] with the configuration adjusted by `configure` (addresses and the
/// data dir are set before it runs).
async fn start_gateway_with(configure: impl FnOnce(&mut Config)) -> BenchResult<Gateway> {
    let dir = tempfile::tempdir()?;
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        flight_addr: free_addr(),
        http_addr: free_addr(),
        ..Config::default()
    };
    configure(&mut config);
    std::fs::write(
        dir.path().join("grants.json"),
        serde_json::to_vec(&bench_grants())?,
    )?;
    let issuer = hotgate_gateway::server::embedded_issuer(&config)?;
    // Two hours: the longest bench (a large `deletion`) must not outlive its token.
    let token = issuer.mint("root", &["admin".into()], Duration::from_secs(7200))?;
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(hotgate_gateway::server::run(config.clone(), async move {
        let _ = stop_rx.await;
    }));
    wait_healthy(&config).await?;
    Ok(Gateway {
        config,
        token,
        stop,
        task,
        _dir: dir,
    })
}

async fn wait_healthy(config: &Config) -> BenchResult<()> {
    let http = reqwest::Client::new();
    let start = Instant::now();
    loop {
        if let Ok(r) = http
            .get(format!("http://{}/healthz", config.http_addr))
            .send()
            .await
            && r.status().is_success()
        {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err("the gateway did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn create_tables(
    config: &Config,
    token: &str,
    specs: &[serde_json::Value],
) -> BenchResult<()> {
    let http = reqwest::Client::new();
    for spec in specs {
        let r = http
            .post(format!("http://{}/v1/tables", config.http_addr))
            .bearer_auth(token)
            .json(spec)
            .send()
            .await?;
        if !r.status().is_success() {
            return Err(format!("create table: {}", r.text().await?).into());
        }
    }
    Ok(())
}

fn point_batch() -> BenchResult<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "produced_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..POINT_ROWS)),
            Arc::new(
                TimestampMicrosecondArray::from(vec![now_us(); POINT_ROWS as usize])
                    .with_timezone("UTC"),
            ),
        ],
    )?)
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
async fn audit_cost(on: &Config, on_token: &str, wide: Vec<RecordBatch>) -> BenchResult<()> {
    let off = start_gateway(false).await?;
    create_tables(&off.config, &off.token, &[wide_spec(), point_spec()]).await?;
    let mut off_client = connect(off.config.flight_addr).await?;
    put_all(&mut off_client, &off.token, ["bench", "wide"], wide).await?;
    create_tables(on, on_token, &[point_spec()]).await?;
    let mut on_client = connect(on.flight_addr).await?;
    for (client, token) in [
        (&mut on_client, on_token),
        (&mut off_client, off.token.as_str()),
    ] {
        put_all(client, token, ["bench", "points"], vec![point_batch()?]).await?;
    }
    let sides = [
        ("on", on.flight_addr, on_token),
        ("off", off.config.flight_addr, off.token.as_str()),
    ];
    let mut scan_s = [Vec::new(), Vec::new()];
    let mut point_concurrent = [Vec::new(), Vec::new()];
    let mut point_single = [Vec::new(), Vec::new()];
    let mut scan_rows = 0;
    for _ in 0..AUDIT_ROUNDS {
        for (i, (_, addr, token)) in sides.iter().enumerate() {
            let mut client = connect(*addr).await?;
            let (secs, rows) = read_once(&mut client, token, WIDE_COLUMNS).await?;
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
    let _ = off.stop.send(());
    off.task.await??;
    Ok(())
}

async fn bench() -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        flight_addr: free_addr(),
        http_addr: free_addr(),
        ..Config::default()
    };
    // The bootstrap administrator, plus an analyst who may read the bench namespace.
    std::fs::write(
        dir.path().join("grants.json"),
        serde_json::to_vec(&bench_grants())?,
    )?;
    let issuer = hotgate_gateway::server::embedded_issuer(&config)?;
    let token = issuer.mint("root", &["admin".into()], Duration::from_secs(3600))?;
    let analyst = issuer.mint("analyst", &["ALL".into()], Duration::from_secs(3600))?;
    let analyst2 = issuer.mint("analyst2", &["ALL".into()], Duration::from_secs(3600))?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(hotgate_gateway::server::run(config.clone(), async move {
        let _ = stop_rx.await;
    }));
    let http = reqwest::Client::new();
    wait_healthy(&config).await?;
    create_tables(&config, &token, &[fresh_spec(), wide_spec()]).await?;

    let rate: f64 = std::env::var("HOTGATE_BENCH_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000.0);
    println!("{}", freshness(config.flight_addr, &token, rate).await?);

    let wide: Vec<RecordBatch> = (0..WIDE_BATCHES)
        .map(wide_batch)
        .collect::<BenchResult<_>>()?;
    let mut client = connect(config.flight_addr).await?;
    put_all(&mut client, &token, ["bench", "wide"], wide.clone()).await?;

    let bare_addr = free_addr();
    let bare = BareFlight {
        batches: Arc::new(wide),
    };
    let listener = tokio::net::TcpListener::bind(bare_addr).await?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(FlightServiceServer::new(bare).max_encoding_message_size(256 << 20))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut bare_client = connect(bare_addr).await?;
    let mut summary = serde_json::Map::new();
    for columns in [5usize, 50] {
        let (gov, rows) = read_throughput(&mut client, Some(&token), columns).await?;
        let (raw, bare_rows) = read_throughput(&mut bare_client, None, columns).await?;
        if rows != bare_rows {
            return Err(format!("row counts differ: hotgate {rows}, bare {bare_rows}").into());
        }
        for (server, secs) in [("hotgate", gov), ("bare_flight", raw)] {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "flight_read", "server": server, "columns": columns, "of": WIDE_COLUMNS,
                    "rows": rows, "median_s": secs, "rows_per_s": rows as f64 / secs,
                })
            );
        }
        summary.insert(
            format!("governed_over_bare_{columns}_of_{WIDE_COLUMNS}"),
            (raw / gov).into(),
        );
    }
    summary.insert("bench".into(), "flight_read_summary".into());
    println!("{}", serde_json::Value::Object(summary));

    // Governed (one row filter, two masks) against admin (no policy), same data.
    for body in bench_policies() {
        let r = http
            .post(format!("http://{}/v1/policies", config.http_addr))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await?;
        if !r.status().is_success() {
            return Err(format!("create policy: {}", r.text().await?).into());
        }
    }
    let mut summary = serde_json::Map::new();
    for columns in [5usize, 50] {
        // Interleaved runs, so no caller gets the warmer part of a noisy machine.
        let callers = [
            ("admin", &token),
            ("governed", &analyst),
            ("governed_same_size", &analyst2),
        ];
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); callers.len()];
        let mut rows = vec![0; callers.len()];
        for _ in 0..READ_RUNS {
            for (i, (_, t)) in callers.iter().enumerate() {
                let (secs, r) = read_once(&mut client, t, columns).await?;
                runs[i].push(secs);
                rows[i] = r;
            }
        }
        if rows.iter().any(|r| *r != rows[0]) {
            return Err(format!("row counts differ between callers: {rows:?}").into());
        }
        let medians: Vec<f64> = runs.into_iter().map(median).collect();
        for ((who, _), secs) in callers.iter().zip(&medians) {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "governed_read", "caller": who, "columns": columns, "of": WIDE_COLUMNS,
                    "rows": rows[0], "median_s": secs, "rows_per_s": rows[0] as f64 / secs,
                    "policies": if *who == "admin" { 0 } else { 3 },
                })
            );
        }
        summary.insert(
            format!("governed_over_admin_{columns}_of_{WIDE_COLUMNS}"),
            (medians[0] / medians[1]).into(),
        );
        summary.insert(
            format!("governed_same_size_over_admin_{columns}_of_{WIDE_COLUMNS}"),
            (medians[0] / medians[2]).into(),
        );
    }
    summary.insert("bench".into(), "governed_read_summary".into());
    println!("{}", serde_json::Value::Object(summary));
    println!("{}", authorization_cost(dir.path()).await?);
    let wide: Vec<RecordBatch> = (0..WIDE_BATCHES)
        .map(wide_batch)
        .collect::<BenchResult<_>>()?;
    audit_cost(&config, &token, wide).await?;
    let _ = stop_tx.send(());
    server.await??;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hotgate-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let which = std::env::args().nth(1).unwrap_or_else(|| "reads".into());
    let run = match which.as_str() {
        "reads" => runtime.block_on(bench()),
        "lookup" => runtime.block_on(lookup::lookup()),
        "recovery" => runtime.block_on(lookup::recovery()),
        "tiering" => runtime.block_on(tiering::tiering()),
        "deletion" => runtime.block_on(deletion::deletion()),
        other => Err(format!(
            "unknown benchmark {other:?}; use reads, lookup, recovery, tiering or deletion"
        )
        .into()),
    };
    match run {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hotgate-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
