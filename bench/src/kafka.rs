//! `hotgate-bench kafka`: a Kafka source against a bare consumer, on a real broker
//! (tansu on loopback, started here).
//!
//! - **Ingest throughput.** A topic of 20-column JSON records in 4 partitions, produced
//!   once. Each round, a bare rskafka consumer reads the whole topic (4 partitions
//!   concurrently, the same fetch size as the source), then a new source consumes it
//!   into a new table (decode, write rules, audit, durable append) until its status
//!   counts every row. Records/s of each, their ratio per round, and the median. The
//!   source's start (a new client, metadata, stored positions, a new table's logs) takes
//!   about 200 ms, so the topic is large enough (1M records by default) that a round
//!   measures the rate rather than the start; the time to the first rows and the rate
//!   after them are printed too.
//! - **End-to-end latency.** Records produced one at a time at a steady rate, each
//!   stamped with the time it was produced, read back by an analyst through a governed
//!   changelog follow: receive time minus produce time, p50/p95/p99, next to the
//!   source's fetch wait (the time the broker may hold a fetch while it has nothing).

use std::time::{Duration, Instant};

use futures::StreamExt;
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;

use crate::gateway::{BenchResult, Gateway, connect, do_get, now_us};
use crate::stats::{Latencies, median};

const PARTITIONS: i32 = 4;
const ROUNDS: usize = 3;
const FETCH_MAX_BYTES: i32 = 4 << 20;
const LATENCY_RECORDS: usize = 2_000;
const LATENCY_RATE: f64 = 200.0;
const FETCH_MAX_WAIT_MS: u64 = 100;

/// A 20-column table: an id, a time, a bucket key, and 17 columns of text and numbers.
fn spec(name: &str) -> serde_json::Value {
    let mut columns = vec![
        serde_json::json!({"name": "id", "type": "int64", "nullable": false}),
        serde_json::json!({"name": "ts", "type": "timestamp_us", "nullable": false}),
        serde_json::json!({"name": "account", "type": "string", "nullable": false}),
    ];
    for i in 3..20 {
        let kind = match i % 3 {
            0 => "string",
            1 => "int64",
            _ => "float64",
        };
        columns.push(serde_json::json!({"name": format!("c{i}"), "type": kind}));
    }
    serde_json::json!({
        "namespace": "bench", "name": name, "columns": columns,
        "time_column": "ts", "bucket_key": "account", "buckets": 4,
        "tiering": {"enabled": false}
    })
}

fn record(id: i64, ts_us: i64) -> Vec<u8> {
    let mut value = serde_json::Map::new();
    value.insert("id".into(), id.into());
    let ts = chrono::DateTime::from_timestamp_micros(ts_us).unwrap_or_default();
    value.insert("ts".into(), ts.to_rfc3339().into());
    value.insert("account".into(), format!("acct-{}", id % 1000).into());
    for i in 3..20 {
        let v = match i % 3 {
            0 => serde_json::Value::from(format!("value-{i}-{}", id % 97)),
            1 => serde_json::Value::from(id * i),
            _ => serde_json::Value::from(id as f64 / i as f64),
        };
        value.insert(format!("c{i}"), v);
    }
    serde_json::to_vec(&value).expect("JSON")
}

async fn client(bootstrap: &str) -> BenchResult<Client> {
    Ok(ClientBuilder::new(vec![bootstrap.to_owned()])
        .client_id("hotgate-bench")
        .build()
        .await?)
}

/// Produces `records` records, ids 0.., round-robin over the partitions, in batches.
async fn produce_topic(client: &Client, topic: &str, records: i64) -> BenchResult<u64> {
    let mut bytes = 0u64;
    let now = now_us();
    for partition in 0..PARTITIONS {
        let pc = client
            .partition_client(topic, partition, UnknownTopicHandling::Retry)
            .await?;
        let ids: Vec<i64> = (0..records)
            .filter(|id| id % i64::from(PARTITIONS) == i64::from(partition))
            .collect();
        for chunk in ids.chunks(2_000) {
            let batch: Vec<Record> = chunk
                .iter()
                .map(|id| {
                    let value = record(*id, now);
                    bytes += value.len() as u64;
                    Record {
                        key: Some(id.to_string().into_bytes()),
                        value: Some(value),
                        headers: Default::default(),
                        timestamp: chrono::Utc::now(),
                    }
                })
                .collect();
            pc.produce(batch, Compression::NoCompression).await?;
        }
    }
    Ok(bytes)
}

/// The baseline: every partition read from its first offset to its end, concurrently,
/// by a bare rskafka consumer; returns the records read.
async fn bare_consume(client: &Client, topic: &str) -> BenchResult<u64> {
    let mut tasks = Vec::new();
    for partition in 0..PARTITIONS {
        let pc = client
            .partition_client(topic, partition, UnknownTopicHandling::Retry)
            .await?;
        tasks.push(tokio::spawn(async move {
            let end = pc.get_offset(OffsetAt::Latest).await?;
            let mut next = pc.get_offset(OffsetAt::Earliest).await?;
            let mut records = 0u64;
            while next < end {
                let (fetched, _) = pc
                    .fetch_records(next, 1..FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS as i32)
                    .await?;
                for r in &fetched {
                    // The bytes are touched, as a consumer that hands them on would.
                    records += u64::from(r.record.value.as_ref().is_some_and(|v| !v.is_empty()));
                    next = next.max(r.offset + 1);
                }
            }
            BenchResult::Ok(records)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total)
}

/// Rows the source `name` has written, from its status.
async fn source_rows(gateway: &Gateway, name: &str) -> BenchResult<u64> {
    let status = gateway
        .http(reqwest::Method::GET, &format!("/v1/sources/{name}"), None)
        .await?;
    Ok(status["partitions"]
        .as_array()
        .map(|ps| ps.iter().map(|p| p["rows"].as_u64().unwrap_or(0)).sum())
        .unwrap_or(0))
}

async fn create_source(
    gateway: &Gateway,
    name: &str,
    bootstrap: &str,
    topic: &str,
    table: &str,
) -> BenchResult<()> {
    let body = serde_json::json!({
        "name": name, "brokers": [bootstrap], "topic": topic, "table": table,
        "fetch_max_wait": format!("{FETCH_MAX_WAIT_MS}ms"),
        "fetch_max_bytes": FETCH_MAX_BYTES,
    });
    gateway
        .http(reqwest::Method::POST, "/v1/sources", Some(&body))
        .await?;
    Ok(())
}

pub(crate) async fn kafka(records: i64) -> BenchResult<()> {
    let broker = hotgate_testkit::KafkaBroker::start();
    let kafka = client(&broker.bootstrap).await?;
    let controller = kafka.controller_client()?;
    controller
        .create_topic("bulk", PARTITIONS, 1, 10_000)
        .await?;
    controller.create_topic("live", 1, 1, 10_000).await?;
    let bytes = produce_topic(&kafka, "bulk", records).await?;
    eprintln!("kafka: produced {records} records ({bytes} bytes) into 4 partitions");

    let gateway = Gateway::start(true).await?;
    let mut ratios = Vec::new();
    let (mut bare_rates, mut source_rates) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let started = Instant::now();
        let read = bare_consume(&kafka, "bulk").await?;
        let bare = read as f64 / started.elapsed().as_secs_f64();
        if read != records as u64 {
            return Err(format!("the bare consumer read {read} of {records} records").into());
        }

        let table = format!("bulk{round}");
        gateway.create_tables(&[spec(&table)]).await?;
        let started = Instant::now();
        let name = format!("bulk-{round}");
        create_source(
            &gateway,
            &name,
            &broker.bootstrap,
            "bulk",
            &format!("bench.{table}"),
        )
        .await?;
        // When the first rows showed, and how many: what comes before is the source's
        // start (connect, metadata, offsets), reported apart from its steady rate.
        let mut first_rows: Option<(Duration, u64)> = None;
        loop {
            let rows = source_rows(&gateway, &name).await?;
            if rows > 0 && first_rows.is_none() {
                first_rows = Some((started.elapsed(), rows));
            }
            if rows >= records as u64 {
                break;
            }
            if started.elapsed() > Duration::from_secs(1800) {
                return Err(format!("source {name} did not catch up").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();
        let source = records as f64 / elapsed.as_secs_f64();
        let (first_at, first_count) = first_rows.unwrap_or((elapsed, records as u64));
        let steady =
            (records as u64 - first_count) as f64 / (elapsed - first_at).as_secs_f64().max(1e-6);
        println!(
            "{}",
            serde_json::json!({
                "bench": "kafka_ingest", "round": round, "records": records, "columns": 20,
                "bare_rskafka_records_per_s": bare.round(), "source_records_per_s": source.round(),
                "source_over_bare": source / bare,
                "source_first_rows_ms": first_at.as_secs_f64() * 1e3,
                "source_after_first_rows_records_per_s": steady.round(),
            })
        );
        bare_rates.push(bare);
        source_rates.push(source);
        ratios.push(source / bare);
        // The table's rows stay; the next round writes a new one.
        gateway
            .http(
                reqwest::Method::DELETE,
                &format!("/v1/sources/{name}"),
                None,
            )
            .await?;
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "kafka_ingest_summary", "rounds": ROUNDS, "records": records,
            "median_bare_records_per_s": median(bare_rates).round(),
            "median_source_records_per_s": median(source_rates).round(),
            "median_source_over_bare": median(ratios), "target": 0.7,
        })
    );

    // The rounds left gigabytes of dirty pages; their writeback would land in the
    // latency test's syncs. Flush them first, so it measures the source, not them.
    let _ = tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await;
    latency(&gateway, &kafka, &broker.bootstrap).await?;
    gateway.stop().await?;
    Ok(())
}

/// Produce → visible in a governed read, one record at a time.
async fn latency(gateway: &Gateway, kafka: &Client, bootstrap: &str) -> BenchResult<()> {
    gateway.create_tables(&[spec("live")]).await?;
    create_source(gateway, "live", bootstrap, "live", "bench.live").await?;
    let analyst = gateway.mint("analyst", "analysts")?;
    let mut reader = connect(gateway.flight_addr()).await?;
    let ticket = r#"{"table":"bench.live","columns":["id","ts"],"changelog":{"from":"latest","follow":true}}"#;
    let mut tail = do_get(&mut reader, Some(&analyst), ticket.to_owned()).await?;
    // The source is running before the first timed record: one record goes through.
    let pc = kafka
        .partition_client("live", 0, UnknownTopicHandling::Retry)
        .await?;
    let produce = |id: i64| {
        let ts = now_us();
        vec![Record {
            key: None,
            value: Some(record(id, ts)),
            headers: Default::default(),
            timestamp: chrono::Utc::now(),
        }]
    };
    pc.produce(produce(-1), Compression::NoCompression).await?;
    let warm = tokio::time::timeout(Duration::from_secs(60), tail.next()).await;
    if !matches!(warm, Ok(Some(Ok(_)))) {
        return Err("the first record never became visible".into());
    }
    // The baseline: a bare consumer of the same partition, with the same fetch wait,
    // measuring produce → fetched.
    let bare_pc = kafka
        .partition_client("live", 0, UnknownTopicHandling::Retry)
        .await?;
    let mut bare_next = bare_pc.get_offset(OffsetAt::Latest).await?;
    let bare = tokio::spawn(async move {
        let mut latencies = Latencies::new();
        while latencies.count() < LATENCY_RECORDS as u64 {
            let Ok((fetched, _)) = bare_pc
                .fetch_records(bare_next, 1..FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS as i32)
                .await
            else {
                break;
            };
            let received = now_us();
            let from = bare_next;
            for r in fetched.iter().filter(|r| r.offset >= from) {
                let produced = r.record.timestamp.timestamp_micros();
                latencies.record(Duration::from_micros((received - produced).max(0) as u64));
                bare_next = r.offset + 1;
            }
        }
        latencies
    });
    let receiver = crate::gateway::follow_latencies(tail, LATENCY_RECORDS as u64);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / LATENCY_RATE));
    for id in 0..LATENCY_RECORDS as i64 {
        tick.tick().await;
        pc.produce(produce(id), Compression::NoCompression).await?;
    }
    let latencies = tokio::time::timeout(Duration::from_secs(120), receiver).await??;
    let bare = tokio::time::timeout(Duration::from_secs(120), bare).await??;
    println!(
        "{}",
        serde_json::json!({
            "bench": "kafka_latency", "records": latencies.count(), "rate_per_s": LATENCY_RATE,
            "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
            "p50_ms": latencies.quantile_ms(0.50), "p95_ms": latencies.quantile_ms(0.95),
            "p99_ms": latencies.quantile_ms(0.99), "max_ms": latencies.max_ms(),
            "bare_consumer_p50_ms": bare.quantile_ms(0.50),
            "bare_consumer_p99_ms": bare.quantile_ms(0.99),
            "p99_over_bare_p99_ms": latencies.quantile_ms(0.99) - bare.quantile_ms(0.99),
            "target_p99_ms": 100 + FETCH_MAX_WAIT_MS,
        })
    );
    Ok(())
}
