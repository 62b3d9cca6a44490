//! `hotgate-bench lookup`: batched and single-key lookups over a primary-key table of
//! `--keys` keys (default 1,000,000), against the same keys in Redis on
//! loopback (`MGET` and `GET`), interleaved in one run. hotgate runs twice: with its
//! audit on (the default: every lookup's record is synced before its rows leave) and off.
//!
//! `hotgate-bench recovery`: the time a primary-key table takes to open with its
//! RocksDB state intact, and to rebuild it from the changelog alone (the worst case after
//! a kill -9, where RocksDB kept nothing), for 1M and 10M keys (`--keys`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightDescriptor, Ticket};
use futures::TryStreamExt;
use hotgate_testkit::{batch, float64s, free_addr, int64s, strings, timestamps, with_token};
use tonic::transport::Channel;

use crate::gateway::{BenchResult, Gateway, now_us, put_to};
use crate::stats::Latencies;

const LOAD_BATCH: i64 = 50_000;
const BATCH_KEYS: usize = 1_000;
const BATCH_CALLS: usize = 200;
const SINGLE_CALLS: usize = 3_000;
/// Calls per system before the next system's turn, so all share the machine's moods.
const ROUND: usize = 20;

fn kv_spec() -> serde_json::Value {
    serde_json::json!({"namespace": "bench", "name": "kv",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "name", "type": "string"},
            {"name": "balance", "type": "float64"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "primary_key": ["id"], "time_column": "ts", "bucket_key": "id", "buckets": 8})
}

fn kv_batch(ids: std::ops::Range<i64>, ts: i64) -> RecordBatch {
    let n = ids.clone().count();
    batch([
        ("id", int64s(ids.clone())),
        (
            "name",
            strings(ids.clone().map(|i| format!("customer-{i}"))),
        ),
        ("balance", float64s(ids.map(|i| i as f64 * 0.5))),
        ("ts", timestamps(std::iter::repeat_n(ts, n))),
    ])
}

/// The Redis value of a key: the same row, as text.
fn redis_value(id: i64, ts: i64) -> String {
    format!("{id},customer-{id},{},{ts}", id as f64 * 0.5)
}

/// A throwaway `redis-server` on loopback, without persistence.
struct RedisServer {
    child: Child,
    addr: SocketAddr,
}

impl RedisServer {
    fn start() -> BenchResult<Self> {
        let addr = free_addr();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &addr.port().to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!("redis-server could not start ({e}); scripts/bench installs it")
            })?;
        let server = Self { child, addr };
        let start = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("redis-server did not start listening".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn connection(&self) -> BenchResult<redis::Connection> {
        Ok(redis::Client::open(format!("redis://{}/", self.addr))?.get_connection()?)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic pseudo-random keys in `[0, keys)`.
struct Keys {
    state: u64,
    keys: i64,
}

impl Keys {
    fn next(&mut self) -> i64 {
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.state >> 33) % self.keys as u64) as i64
    }

    fn take(&mut self, n: usize) -> Vec<i64> {
        (0..n).map(|_| self.next()).collect()
    }
}

async fn load_hotgate(gateway: &Gateway, keys: i64, ts: i64) -> BenchResult<f64> {
    gateway.create_tables(&[kv_spec()]).await?;
    let mut client = gateway.client().await?;
    let start = Instant::now();
    let mut first = 0;
    while first < keys {
        let end = (first + LOAD_BATCH).min(keys);
        let descriptor = FlightDescriptor::new_cmd(r#"{"table":"bench.kv","op":"upsert"}"#);
        let batches = vec![kv_batch(first..end, ts)];
        put_to(&mut client, &gateway.token, descriptor, batches).await?;
        first = end;
    }
    Ok(start.elapsed().as_secs_f64())
}

fn load_redis(redis: &mut redis::Connection, keys: i64, ts: i64) -> BenchResult<f64> {
    let start = Instant::now();
    let mut first = 0;
    while first < keys {
        let end = (first + 10_000).min(keys);
        let pairs: Vec<(String, String)> = (first..end)
            .map(|i| (format!("kv:{i}"), redis_value(i, ts)))
            .collect();
        redis::cmd("MSET").arg(&pairs).exec(redis)?;
        first = end;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// One lookup call; returns the rows found.
async fn hotgate_lookup(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    ids: &[i64],
) -> BenchResult<usize> {
    // Written directly, as a client that sends many keys would (a JSON tree per key
    // costs more than the lookup).
    let mut ticket = String::with_capacity(40 + ids.len() * 16);
    ticket.push_str(r#"{"table":"bench.kv","lookup":["#);
    for (n, id) in ids.iter().enumerate() {
        if n > 0 {
            ticket.push(',');
        }
        let _ = write!(ticket, r#"{{"id":{id}}}"#);
    }
    ticket.push_str("]}");
    let stream = client
        .do_get(with_token(Ticket::new(ticket), token))
        .await?
        .into_inner()
        .map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s)));
    let batches: Vec<RecordBatch> =
        arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(stream)
            .try_collect()
            .await?;
    Ok(batches.iter().map(RecordBatch::num_rows).sum())
}

fn redis_mget(redis: &mut redis::Connection, ids: &[i64]) -> BenchResult<usize> {
    let keys: Vec<String> = ids.iter().map(|i| format!("kv:{i}")).collect();
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(redis)?;
    Ok(values.iter().flatten().count())
}

fn redis_get(redis: &mut redis::Connection, id: i64) -> BenchResult<usize> {
    let value: Option<String> = redis::cmd("GET").arg(format!("kv:{id}")).query(redis)?;
    Ok(usize::from(value.is_some()))
}

/// Per-call latencies of each system, interleaved `ROUND` calls at a time.
struct Timings {
    hotgate: Latencies,
    hotgate_no_audit: Latencies,
    redis: Latencies,
    /// The store's own lookup, in process: what Flight, JSON, governance and audit add.
    store: Latencies,
}

/// The same table loaded into a store in this process, for the in-process baseline.
async fn load_store(
    dir: &std::path::Path,
    keys: i64,
    ts: i64,
) -> BenchResult<(hotgate_store::Store, Arc<hotgate_store::HotTable>)> {
    let store = hotgate_store::Store::open(dir, Default::default())?;
    let table = store
        .create_table(serde_json::from_value(kv_spec())?)
        .await?;
    let mut first = 0;
    while first < keys {
        let end = (first + LOAD_BATCH).min(keys);
        table
            .write_changes(&kv_batch(first..end, ts), hotgate_store::ChangeOp::Upsert)
            .await?;
        first = end;
    }
    Ok((store, table))
}

fn store_lookup(table: &hotgate_store::HotTable, ids: &[i64]) -> BenchResult<usize> {
    let keys = batch([("id", int64s(ids.iter().copied()))]);
    Ok(table.lookup(&keys)?.rows.num_rows())
}

pub(crate) async fn lookup(keys: i64) -> BenchResult<()> {
    let ts = now_us();
    let redis_server = RedisServer::start()?;
    let mut redis = redis_server.connection()?;
    let audited = Gateway::start(true).await?;
    let unaudited = Gateway::start(false).await?;
    let load = serde_json::json!({
        "bench": "lookup_load", "keys": keys,
        "hotgate_s": load_hotgate(&audited, keys, ts).await?,
        "hotgate_no_audit_s": load_hotgate(&unaudited, keys, ts).await?,
        "redis_s": load_redis(&mut redis, keys, ts)?,
    });
    println!("{load}");
    let store_dir = tempfile::tempdir()?;
    let (store, table) = load_store(store_dir.path(), keys, ts).await?;
    // The loads leave RocksDB flushing and compacting on both cores for a while; Redis
    // has nothing of the kind. Measuring before that settles times the compactions.
    let settled = wait_idle(Duration::from_secs(120)).await;
    println!(
        "{}",
        serde_json::json!({"bench": "lookup_settle", "waited_s": settled.as_secs_f64()})
    );
    let mut on = audited.client().await?;
    let mut off = unaudited.client().await?;

    for (mode, per_call, calls) in [
        ("batched", BATCH_KEYS, BATCH_CALLS),
        ("single", 1, SINGLE_CALLS),
    ] {
        let mut rng = Keys {
            state: 0x5EED ^ per_call as u64,
            keys,
        };
        let mut t = Timings {
            hotgate: Latencies::new(),
            hotgate_no_audit: Latencies::new(),
            redis: Latencies::new(),
            store: Latencies::new(),
        };
        // Warm-up: connections, caches, the secure view.
        for _ in 0..ROUND {
            let ids = rng.take(per_call);
            hotgate_lookup(&mut on, &audited.token, &ids).await?;
            hotgate_lookup(&mut off, &unaudited.token, &ids).await?;
            redis_mget(&mut redis, &ids)?;
        }
        for _ in 0..calls / ROUND {
            let round: Vec<Vec<i64>> = (0..ROUND).map(|_| rng.take(per_call)).collect();
            for ids in &round {
                let start = Instant::now();
                let found = hotgate_lookup(&mut on, &audited.token, ids).await?;
                t.hotgate.record(start.elapsed());
                check(found, ids.len(), "hotgate")?;
            }
            for ids in &round {
                let start = Instant::now();
                let found = hotgate_lookup(&mut off, &unaudited.token, ids).await?;
                t.hotgate_no_audit.record(start.elapsed());
                check(found, ids.len(), "hotgate (audit off)")?;
            }
            for ids in &round {
                let start = Instant::now();
                let found = if per_call == 1 {
                    redis_get(&mut redis, ids[0])?
                } else {
                    redis_mget(&mut redis, ids)?
                };
                t.redis.record(start.elapsed());
                check(found, ids.len(), "redis")?;
            }
            for ids in &round {
                let start = Instant::now();
                let found = store_lookup(&table, ids)?;
                t.store.record(start.elapsed());
                check(found, ids.len(), "the store")?;
            }
        }
        report(mode, per_call, keys, t);
    }
    drop(table);
    store.close().await;
    for g in [audited, unaudited] {
        g.stop().await?;
    }
    Ok(())
}

/// This process's CPU time (user + system) in clock ticks, from `/proc/self/stat`.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesized command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Waits until this process (the gateways' RocksDB threads included) uses less than a
/// tenth of a core over a second, or `limit`; returns the time waited.
async fn wait_idle(limit: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        let Some(before) = cpu_ticks() else {
            break;
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(after) = cpu_ticks() else {
            break;
        };
        // 100 ticks a second is one core.
        if after.saturating_sub(before) < 10 {
            break;
        }
    }
    start.elapsed()
}

fn check(found: usize, asked: usize, who: &str) -> BenchResult<()> {
    if found != asked {
        return Err(format!("{who} found {found} of {asked} keys").into());
    }
    Ok(())
}

fn report(mode: &str, per_call: usize, keys: i64, t: Timings) {
    let mut summary = serde_json::Map::new();
    let mut p50s = Vec::new();
    for (system, latencies) in [
        ("hotgate", t.hotgate),
        ("hotgate_no_audit", t.hotgate_no_audit),
        ("redis", t.redis),
        ("hotgate_store_in_process", t.store),
    ] {
        let p50 = latencies.quantile_ms(0.5);
        p50s.push(p50);
        println!(
            "{}",
            serde_json::json!({
                "bench": "lookup", "mode": mode, "system": system, "table_keys": keys,
                "keys_per_call": per_call, "calls": latencies.count(),
                "keys_per_s": (latencies.count() as usize * per_call) as f64
                    / latencies.total().as_secs_f64(),
                "p50_ms": p50, "p99_ms": latencies.quantile_ms(0.99),
            })
        );
    }
    summary.insert("bench".into(), "lookup_summary".into());
    summary.insert("mode".into(), mode.into());
    // Throughput ratio from medians (a sequential caller: keys/s ∝ 1 / per-call time).
    summary.insert("hotgate_over_redis".into(), (p50s[2] / p50s[0]).into());
    summary.insert(
        "hotgate_no_audit_over_redis".into(),
        (p50s[2] / p50s[1]).into(),
    );
    println!("{}", serde_json::Value::Object(summary));
}

/// Opens a store holding one primary-key table of `keys` keys and reports how long the
/// open takes with the state intact and with the state deleted (rebuilt from the log).
pub(crate) async fn recovery(sizes: Vec<i64>) -> BenchResult<()> {
    for keys in sizes {
        let dir = tempfile::tempdir()?;
        let name = hotgate_store::TableName::new("bench", "kv")?;
        let start = Instant::now();
        let (store, table) = load_store(dir.path(), keys, now_us()).await?;
        let load_s = start.elapsed().as_secs_f64();
        drop(table);
        store.close().await;
        drop(store);

        let start = Instant::now();
        let store = hotgate_store::Store::open(dir.path(), Default::default())?;
        let intact_s = start.elapsed().as_secs_f64();
        count_rows(&store, &name, keys).await?;
        store.close().await;
        drop(store);

        // What a kill -9 can leave at worst: RocksDB without any of the table's state.
        std::fs::remove_dir_all(dir.path().join("state"))?;
        let start = Instant::now();
        let store = hotgate_store::Store::open(dir.path(), Default::default())?;
        let rebuild_s = start.elapsed().as_secs_f64();
        count_rows(&store, &name, keys).await?;
        store.close().await;
        println!(
            "{}",
            serde_json::json!({
                "bench": "pk_recovery", "keys": keys, "load_s": load_s,
                "open_with_state_s": intact_s, "rebuild_from_log_s": rebuild_s,
                "rebuild_keys_per_s": keys as f64 / rebuild_s,
            })
        );
    }
    Ok(())
}

async fn count_rows(
    store: &hotgate_store::Store,
    name: &hotgate_store::TableName,
    keys: i64,
) -> BenchResult<()> {
    let table = store.table(name)?;
    let mut rows = table.read_state(None, None, None, 65_536)?;
    let mut n = 0;
    while let Some(batch) = rows.recv().await {
        n += batch?.1.num_rows() as i64;
    }
    if n != keys {
        return Err(format!("the reopened table holds {n} keys, expected {keys}").into());
    }
    Ok(())
}
