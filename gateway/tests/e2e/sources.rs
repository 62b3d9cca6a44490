//! Kafka topics into hot tables (`[[sources]]`), against a real Kafka-protocol broker
//! (tansu, [`hotgate_testkit::kafka`]) with records produced by confluent-kafka from
//! PyPI: exactly once across kill -9, write rules applied before disk, bad records in
//! `_system.rejects`, primary-key tables as the fold of the topic, and lag on
//! `/metrics`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;

use crate::harness::*;
use crate::pyarrow_client::venv_python;

fn kafka_tool() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/python/kafka_tool.py")
}

fn create_topic(broker: &KafkaBroker, topic: &str, partitions: u32) {
    let out = Command::new(venv_python())
        .arg(kafka_tool())
        .args([
            "create-topic",
            &broker.bootstrap,
            topic,
            &partitions.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "create-topic: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        broker.log()
    );
}

/// Produces `records` (see `kafka_tool.py` for their shape) and returns how many the
/// broker acknowledged.
fn produce(broker: &KafkaBroker, topic: &str, records: &[serde_json::Value]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.jsonl");
    let mut text = String::new();
    for r in records {
        text.push_str(&r.to_string());
        text.push('\n');
    }
    std::fs::write(&file, text).unwrap();
    let out = Command::new(venv_python())
        .arg(kafka_tool())
        .args(["produce", &broker.bootstrap, topic])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "produce: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        broker.log()
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The event time of every record: now, within the store's event-time bounds.
fn now() -> String {
    chrono::Utc::now().to_rfc3339()
}

const CARD_SENTINEL: &str = "4111-SENTINEL-CARD";

/// Order `id` on partition `id % partitions`, with a card number (a `drop` column) and
/// an email (a `hash` column).
fn order(id: i64, partitions: i64) -> serde_json::Value {
    serde_json::json!({
        "partition": id % partitions,
        "key": id.to_string(),
        "value": {
            "id": id,
            "customer": format!("c{}", id % 13),
            "card": format!("{CARD_SENTINEL}-{id}"),
            "email": format!("user{}@example.com", id % 5),
            "amount": id as f64 / 4.0,
            "ts": now(),
        }
    })
}

fn orders_spec() -> serde_json::Value {
    serde_json::json!({
        "namespace": "app", "name": "orders",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "customer", "type": "string", "nullable": false},
            {"name": "card", "type": "string", "write": "drop"},
            {"name": "email", "type": "string", "write": "hash"},
            {"name": "amount", "type": "float64"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "customer", "buckets": 4,
        "hot_retention": "30d"
    })
}

/// A config file in `dir` with one source from `topic` into `table`.
fn source_config(dir: &Path, broker: &KafkaBroker, topic: &str, table: &str) -> PathBuf {
    let path = std::path::absolute(dir).unwrap().join("hotgate.toml");
    std::fs::write(
        &path,
        format!(
            "[[sources]]\nname = \"{topic}\"\nbrokers = [\"{}\"]\ntopic = \"{topic}\"\n\
             table = \"{table}\"\nfetch_max_bytes = 65536\n",
            broker.bootstrap
        ),
    )
    .unwrap();
    path
}

async fn order_ids(server: &Server, token: &Caller) -> Vec<i64> {
    let batches = token
        .get(serde_json::json!({"table": "app.orders", "columns": ["id"]}))
        .await
        .unwrap_or_else(|s| panic!("scan: {s}"));
    let mut ids = ints(&batches, "id");
    ids.sort_unstable();
    let _ = server;
    ids
}

/// Waits until the source's status says every partition has no lag and its partitions
/// have written at least `expected_rows` rows, and returns it.
async fn caught_up(token: &Caller, name: &str, expected_rows: usize) -> serde_json::Value {
    caught_up_on(token, name, "rows", expected_rows).await
}

/// [`caught_up`] on any per-partition counter of the status (`rows`, or `records`:
/// those taken from the topic, tombstones included).
async fn caught_up_on(
    token: &Caller,
    name: &str,
    counter: &str,
    at_least: usize,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let (status, body) = token
            .http(Method::GET, &format!("/v1/sources/{name}"), None)
            .await;
        if status == 200 {
            let partitions = body["partitions"].as_array().cloned().unwrap_or_default();
            let counted: u64 = partitions
                .iter()
                .map(|p| p[counter].as_u64().unwrap_or(0))
                .sum();
            let done = !partitions.is_empty()
                && partitions.iter().all(|p| p["lag"] == 0)
                && counted as usize >= at_least;
            if done {
                return body;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the source never caught up: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A config file in `dir` with one source from `topic` into `table`, tiering into the
/// REST catalog `rest`.
fn source_config_tiered(
    dir: &Path,
    broker: &KafkaBroker,
    topic: &str,
    table: &str,
    rest: &RestCatalogServer,
) -> PathBuf {
    let config = source_config(dir, broker, topic, table);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&rest.catalog_toml());
    std::fs::write(&config, text).unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_arrives_once_governed_with_bad_records_rejected() {
    let broker = KafkaBroker::start();
    create_topic(&broker, "orders", 4);
    let dir = tempfile::tempdir().unwrap();
    let config = source_config(dir.path(), &broker, "orders", "app.orders");
    let server = Launch::new(dir.path()).config(&config).start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;

    let mut records: Vec<serde_json::Value> = (0..2000).map(|id| order(id, 4)).collect();
    // Bad records between good ones: a wrong type, a missing non-nullable field, not
    // JSON at all.
    records.push(serde_json::json!({"partition": 1, "key": "x", "value": {"id": "seven", "customer": "c", "ts": now()}}));
    records
        .push(serde_json::json!({"partition": 2, "key": "y", "value": {"id": 9001, "ts": now()}}));
    records.push(serde_json::json!({"partition": 3, "key": "z", "raw": "{not json"}));
    records.extend((2000..2100).map(|id| order(id, 4)));
    assert_eq!(produce(&broker, "orders", &records), records.len());

    let status = caught_up(&token, "orders", 2100).await;
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(
        order_ids(&server, &token).await,
        (0..2100).collect::<Vec<_>>()
    );
    let rejected: u64 = status["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rejected"].as_u64().unwrap())
        .sum();
    assert_eq!(rejected, 3, "{status}");

    // The rejects, with their positions and reasons, and no payload bytes.
    let admin = server.caller("root", &["admin"]);
    let rejects = admin
        .get(serde_json::json!({"table": "_system.rejects"}))
        .await
        .unwrap();
    assert_eq!(row_count(&rejects), 3);
    let mut partitions: Vec<i64> = string_values(&rejects, "partition")
        .into_iter()
        .map(|p| p.unwrap().parse().unwrap())
        .collect();
    partitions.sort_unstable();
    assert_eq!(partitions, vec![1, 2, 3]);
    for reason in string_values(&rejects, "reason") {
        let reason = reason.unwrap();
        assert!(!reason.is_empty());
        assert!(
            !reason.contains("seven") && !reason.contains("not json"),
            "{reason}"
        );
    }

    // Governed on the way in: the drop column's sentinel is in no file under the data
    // directory; the hash column holds the HMAC under the gateway's key.
    let leaked = files_containing(dir.path(), CARD_SENTINEL.as_bytes());
    assert!(leaked.is_empty(), "{leaked:?}");
    let key = std::fs::read_to_string(dir.path().join("hash.key")).unwrap();
    let key = hotgate_policy::HashKey::from_hex(&key).unwrap();
    let rows = token
        .get(serde_json::json!({"table": "app.orders", "columns": ["id", "email"], "filter": "id = 7"}))
        .await
        .unwrap();
    assert_eq!(
        string_values(&rows, "email"),
        vec![Some(key.hmac_hex(b"user2@example.com"))]
    );

    // The write is audited as the source, a record per commit group.
    let (status, audit) = admin
        .http(
            Method::GET,
            "/v1/audit?principal=source:orders&limit=1000",
            None,
        )
        .await;
    assert_eq!(status, 200, "{audit}");
    let records = audit["records"].as_array().cloned().unwrap_or_default();
    assert!(!records.is_empty(), "{audit}");
    assert!(
        records.len() < 2100,
        "one record per commit group, not per record"
    );

    // Lag is on /metrics, and 0 once caught up; so is each partition's rate.
    let metrics = server.metrics().await;
    for p in 0..4 {
        assert!(
            metrics.contains(&format!(
                "hotgate_source_lag{{partition=\"{p}\",source=\"orders\"}} 0"
            )),
            "{metrics}"
        );
        assert!(
            metrics.contains(&format!(
                "hotgate_source_records_per_second{{partition=\"{p}\",source=\"orders\"}} "
            )),
            "{metrics}"
        );
    }
    let (_, source) = token.http(Method::GET, "/v1/sources/orders", None).await;
    for p in source["partitions"].as_array().unwrap() {
        assert!(p["records_per_second"].as_f64().unwrap() >= 0.0, "{p}");
    }
    server.terminate();
}

/// 200,000 records across 4 partitions, hotgate killed with kill -9 five times while it
/// consumes: afterwards the table holds every record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_across_kills_while_consuming() {
    const RECORDS: i64 = 200_000;
    let broker = KafkaBroker::start();
    create_topic(&broker, "orders", 4);
    let records: Vec<serde_json::Value> = (0..RECORDS).map(|id| order(id, 4)).collect();
    assert_eq!(produce(&broker, "orders", &records), RECORDS as usize);

    let dir = tempfile::tempdir().unwrap();
    let config = source_config(dir.path(), &broker, "orders", "app.orders");
    let (flight, http) = (free_addr(), free_addr());
    let start = |dir: &Path| Launch::new(dir).config(&config).addrs(flight, http).start();
    let server = start(dir.path());
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;
    let mut server = server;
    let mut rng_state = 0x9e37_79b9_u64;
    let mut tiered = 0;
    for kill in 0..5 {
        // A pseudo-random moment: 300–2500 ms into consuming.
        rng_state = rng_state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = 300 + (rng_state >> 33) % 2200;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if kill == 2 {
            // Part of what has arrived goes to the cold tier while the source consumes,
            // so that the count below spans both tiers.
            tiered += tier_now(&server).await;
        }
        let (_, status) = token
            .at(&server)
            .http(Method::GET, "/v1/sources/orders", None)
            .await;
        eprintln!("kill {kill} after {wait} ms: {status}");
        server.kill9();
        server = start(dir.path());
    }
    let token = token.at(&server);
    let status = caught_up(&token, "orders", 0).await;
    assert!(tiered > 0, "the cycle during consuming tiered nothing");
    tiered += tier_now(&server).await;
    assert_eq!(
        tiered, RECORDS as u64,
        "the cold tier holds each record once"
    );
    let ids = order_ids(&server, &token).await;
    assert_eq!(ids.len(), RECORDS as usize, "{status}");
    assert_eq!(ids, (0..RECORDS).collect::<Vec<_>>());
    server.terminate();
}

/// Forces a tiering cycle of `app.orders` and returns how many records it tiered.
async fn tier_now(server: &Server) -> u64 {
    tier_table(server, "app.orders").await
}

/// Runs a tiering cycle of `table` now; returns the records it tiered.
async fn tier_table(server: &Server, table: &str) -> u64 {
    let admin = server.caller("root", &["admin"]);
    let report = admin
        .http_ok(Method::POST, &format!("/v1/tables/{table}/tier"), None)
        .await;
    report["records"].as_u64().unwrap()
}

/// A primary-key table fed with upserts and tombstones (null values, keyed by the Kafka
/// key) equals the fold of the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_table_is_the_fold_of_its_topic() {
    let broker = KafkaBroker::start();
    create_topic(&broker, "users", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = source_config(dir.path(), &broker, "users", "app.users");
    let server = Launch::new(dir.path()).config(&config).start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(users_spec()).await;
    // 40 keys, three rounds of upserts, a tombstone for every key divisible by 3 between
    // rounds two and three, and for every key divisible by 5 after round three.
    let mut records = Vec::new();
    let mut fold = std::collections::BTreeMap::new();
    for round in 0..3 {
        if round == 2 {
            for id in (0..40).filter(|id| id % 3 == 0) {
                records.push(tombstone(id));
                fold.remove(&id);
            }
        }
        for id in 0..40 {
            records.push(upsert(id, round));
            fold.insert(id, format!("n{id}-r{round}"));
        }
    }
    for id in (0..40).filter(|id| id % 5 == 0) {
        records.push(tombstone(id));
        fold.remove(&id);
    }
    assert_eq!(produce(&broker, "users", &records), records.len());
    // The source catches up on both partitions: wait for the state to settle.
    caught_up_on(&token, "users", "records", records.len()).await;
    let expected: Vec<(i64, String)> = fold.into_iter().collect();
    assert_eq!(users(&token).await, expected);
    server.terminate();
}

fn users_spec() -> serde_json::Value {
    serde_json::json!({
        "namespace": "app", "name": "users",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "name", "type": "string", "nullable": false},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "id", "buckets": 2, "primary_key": ["id"]
    })
}

/// An upsert of user `id` in `round`, keyed by its id, into partition `id % 2`.
fn upsert(id: i64, round: i64) -> serde_json::Value {
    serde_json::json!({"partition": id % 2, "key": format!("{{\"id\":{id}}}"),
        "value": {"id": id, "name": format!("n{id}-r{round}"), "ts": now()}})
}

fn tombstone(id: i64) -> serde_json::Value {
    serde_json::json!({"partition": id % 2, "key": format!("{{\"id\":{id}}}"), "value": null})
}

/// The current (id, name) rows of `app.users`, sorted.
async fn users(token: &Caller) -> Vec<(i64, String)> {
    let rows = token
        .get(serde_json::json!({"table": "app.users", "columns": ["id", "name"]}))
        .await
        .unwrap_or_else(|s| panic!("scan: {s}"));
    let mut current: Vec<(i64, String)> = int64_values(&rows, "id")
        .into_iter()
        .zip(string_values(&rows, "name").into_iter().map(Option::unwrap))
        .collect();
    current.sort();
    current
}

/// A lost data directory under a primary-key table: the state of the tiered buckets is
/// rebuilt from the cold tier, and the source goes on from the offsets the snapshot
/// recorded, so the table is again the fold of the whole topic (changes that reached
/// only the hot tier are fetched again; deletions before the loss stay deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_primary_key_state_is_rebuilt_from_the_cold_tier_and_the_topic() {
    let broker = KafkaBroker::start();
    let rest = RestCatalogServer::start();
    create_topic(&broker, "users", 2);
    let settings = tempfile::tempdir().unwrap();
    let config = source_config_tiered(settings.path(), &broker, "users", "app.users", &rest);
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("data");
    let start = || Launch::new(&data_dir).config(&config).start();
    let mut fold = std::collections::BTreeMap::new();

    let server = start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(users_spec()).await;
    // Tiered: two rounds over 300 keys, every 7th deleted in the second.
    let mut tiered = users_round(&mut fold, 0..300, 0, |_| false);
    tiered.extend(users_round(&mut fold, 0..300, 1, |id| id % 7 == 0));
    produce(&broker, "users", &tiered);
    caught_up_on(&token, "users", "records", tiered.len()).await;
    assert!(tier_table(&server, "app.users").await > 0);
    // Hot only: updates of the first 100 keys, every 11th deleted.
    let hot = users_round(&mut fold, 0..100, 2, |id| id % 11 == 0);
    produce(&broker, "users", &hot);
    caught_up_on(&token, "users", "records", tiered.len() + hot.len()).await;
    server.kill9();
    std::fs::remove_dir_all(&data_dir).unwrap();
    // While it is down: updates of keys 200..400 (100 of them new).
    let later = users_round(&mut fold, 200..400, 3, |_| false);
    produce(&broker, "users", &later);

    let server = start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(users_spec()).await;
    let expected: Vec<(i64, String)> = fold.into_iter().collect();
    let started = Instant::now();
    loop {
        let (status, body) = token.http(Method::GET, "/v1/sources/users", None).await;
        let taken: u64 = body["partitions"]
            .as_array()
            .map(|ps| ps.iter().map(|p| p["records"].as_u64().unwrap_or(0)).sum())
            .unwrap_or(0);
        // The records the cold tier holds are not fetched again.
        assert!(
            taken as usize <= hot.len() + later.len(),
            "fetched again from before the recorded offsets: {status} {body}"
        );
        if taken as usize == hot.len() + later.len() && users(&token).await == expected {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the rebuilt table never became the fold of the topic: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The next cycle replaces the cold buckets with the whole rebuilt state.
    tier_table(&server, "app.users").await;
    server.kill9();
    let server = start();
    let token = server.caller("alice", &["analyst"]);
    assert_eq!(users(&token).await, expected);
    server.terminate();
}

/// Upserts of `ids` in `round`, or tombstones where `deleted`, folded into `fold`.
fn users_round(
    fold: &mut std::collections::BTreeMap<i64, String>,
    ids: std::ops::Range<i64>,
    round: i64,
    deleted: fn(i64) -> bool,
) -> Vec<serde_json::Value> {
    ids.map(|id| {
        if deleted(id) {
            fold.remove(&id);
            tombstone(id)
        } else {
            fold.insert(id, format!("n{id}-r{round}"));
            upsert(id, round)
        }
    })
    .collect()
}

/// Waits until `app.orders` holds at least `n` rows and returns their ids, sorted.
async fn wait_for_orders(server: &Server, token: &Caller, n: usize) -> Vec<i64> {
    let start = Instant::now();
    loop {
        let ids = order_ids(server, token).await;
        if ids.len() >= n {
            return ids;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} of {n} rows arrived",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sources managed through `/v1/sources`: bad bodies and unauthorized callers change
/// nothing, a paused source takes nothing (across a restart, too) and catches up once
/// resumed, exactly once; a deleted source stays deleted; a source of the config file
/// is removed there, not through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_are_created_paused_resumed_and_deleted_through_the_api() {
    let broker = KafkaBroker::start();
    create_topic(&broker, "orders", 2);
    create_topic(&broker, "legacy", 1);
    let dir = tempfile::tempdir().unwrap();
    let config = source_config(dir.path(), &broker, "legacy", "app.orders");
    let (flight, http) = (free_addr(), free_addr());
    let start = |dir: &Path| Launch::new(dir).config(&config).addrs(flight, http).start();
    let server = start(dir.path());
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;
    let managed = dir.path().join("sources/managed.json");
    let source = serde_json::json!({
        "name": "orders", "brokers": [broker.bootstrap], "topic": "orders",
        "table": "app.orders", "fetch_max_bytes": 65536
    });

    // Bad input: an unknown setting, a bad name, no table. Each is a 400 that names the
    // problem, and nothing is written.
    let mut unknown = source.clone();
    unknown["fetch_everything"] = true.into();
    let mut bad_name = source.clone();
    bad_name["name"] = "Orders!".into();
    for (body, says) in [
        (unknown, "fetch_everything"),
        (bad_name, "name"),
        (serde_json::json!({"name": "orders"}), "table"),
    ] {
        let (status, answer) = token.http_post("/v1/sources", body).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains(says), "{answer}");
    }
    assert!(!managed.exists(), "a refused source wrote its settings");
    // A table that does not exist is named.
    let mut elsewhere = source.clone();
    elsewhere["table"] = "app.nothing".into();
    let (status, answer) = token.http_post("/v1/sources", elsewhere).await;
    assert_eq!(status, 404, "{answer}");
    assert!(answer.to_string().contains("app.nothing"), "{answer}");
    // A caller who may not write the table is refused, and the refusal is audited.
    let ann = server.caller("ann", &["auditors"]);
    let (status, answer) = ann.http_post("/v1/sources", source.clone()).await;
    assert!(status == 403 || status == 404, "{status} {answer}");
    assert!(!managed.exists(), "an unauthorized caller wrote settings");
    let admin = server.caller("root", &["admin"]);
    let denials = admin.audit_records("principal=ann").await;
    assert!(
        denials.iter().any(|r| r["action"] == "create_source"),
        "{denials:?}"
    );

    // Created: 201, and a second time 409.
    let (status, created) = token.http_post("/v1/sources", source.clone()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["origin"], "api", "{created}");
    let (status, again) = token.http_post("/v1/sources", source.clone()).await;
    assert_eq!(status, 409, "{again}");
    // Another caller without the grant sees no such source.
    let (status, _) = ann.http(Method::GET, "/v1/sources/orders", None).await;
    assert_eq!(status, 404);
    let (status, _) = ann
        .http(Method::POST, "/v1/sources/orders/pause", None)
        .await;
    assert_eq!(status, 404);

    let records: Vec<serde_json::Value> = (0..500).map(|id| order(id, 2)).collect();
    assert_eq!(produce(&broker, "orders", &records), 500);
    assert_eq!(
        wait_for_orders(&server, &token, 500).await,
        (0..500).collect::<Vec<_>>()
    );

    // Paused: what is produced meanwhile stays in Kafka, across a restart too.
    let paused = token
        .http_ok(Method::POST, "/v1/sources/orders/pause", None)
        .await;
    assert_eq!(paused["state"], "paused", "{paused}");
    let records: Vec<serde_json::Value> = (500..1000).map(|id| order(id, 2)).collect();
    assert_eq!(produce(&broker, "orders", &records), 500);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(order_ids(&server, &token).await.len(), 500);
    server.terminate();
    let server = start(dir.path());
    let token = token.at(&server);
    let status = token.http_get("/v1/sources/orders").await;
    assert_eq!(status["state"], "paused", "{status}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(order_ids(&server, &token).await.len(), 500);

    // Resumed: it catches up, each record once.
    let resumed = token
        .http_ok(Method::POST, "/v1/sources/orders/resume", None)
        .await;
    assert_ne!(resumed["state"], "paused", "{resumed}");
    let ids = wait_for_orders(&server, &token, 1000).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ids, (0..1000).collect::<Vec<_>>());
    assert_eq!(order_ids(&server, &token).await.len(), 1000);

    // The config file's source is not the API's to delete.
    let (status, answer) = token.http(Method::DELETE, "/v1/sources/legacy", None).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("config file"), "{answer}");
    // Deleted, and still deleted after a restart.
    let (status, _) = token.http(Method::DELETE, "/v1/sources/orders", None).await;
    assert_eq!(status, 204);
    let (status, _) = token.http(Method::GET, "/v1/sources/orders", None).await;
    assert_eq!(status, 404);
    server.terminate();
    let server = start(dir.path());
    let token = token.at(&server);
    let (status, _) = token.http(Method::GET, "/v1/sources/orders", None).await;
    assert_eq!(status, 404);
    let list = token.http_get("/v1/sources").await;
    let names: Vec<&str> = list["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["legacy"], "{list}");
    assert_eq!(order_ids(&server, &token).await.len(), 1000);
    server.terminate();
}

/// A subject erased by a verified deletion request stays erased: a replay of the topic
/// from its first offset and new records of the subject write nothing of it, while
/// every other record arrives once; the receipt names the topic's partitions and
/// offsets that may still hold the subject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_never_brings_an_erased_subject_back() {
    let broker = KafkaBroker::start();
    create_topic(&broker, "orders", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = source_config(dir.path(), &broker, "orders", "app.orders");
    let (flight, http) = (free_addr(), free_addr());
    let start = |dir: &Path| Launch::new(dir).config(&config).addrs(flight, http).start();
    let server = start(dir.path());
    let token = server.caller("alice", &["analyst"]);
    let mut spec = orders_spec();
    spec["columns"][1]["tags"] = serde_json::json!(["subject"]);
    token.create_table(spec).await;
    // Customer c3 is ids 3, 16, 29, ... (id % 13 == 3).
    let erased = |id: &i64| id % 13 == 3;
    let records: Vec<serde_json::Value> = (0..600).map(|id| order(id, 2)).collect();
    assert_eq!(produce(&broker, "orders", &records), 600);
    assert_eq!(wait_for_orders(&server, &token, 600).await.len(), 600);

    let (status, accepted) = token
        .http_post(
            "/v1/deletions",
            serde_json::json!({"tables": "all", "subject_value": "c3", "subject": "case-c3"}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["id"].as_str().unwrap().to_owned();
    assert_eq!(
        accepted["ingest_blocks"].as_array().map(Vec::len),
        Some(1),
        "{accepted}"
    );
    // While the request runs, records of c3 keep arriving; they are dropped on ingest.
    let records: Vec<serde_json::Value> = (600..700).map(|id| order(id, 2)).collect();
    assert_eq!(produce(&broker, "orders", &records), 100);
    let began = Instant::now();
    let verified = loop {
        let shown = token.http_get(&format!("/v1/deletions/{id}")).await;
        if shown["state"] == "verified" {
            break shown;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "{shown}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let expected: Vec<i64> = (0..700).filter(|id| !erased(id)).collect();
    assert_eq!(
        wait_for_orders(&server, &token, expected.len()).await,
        expected
    );
    let kafka = verified["receipt"]["kafka"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut partitions: Vec<i64> = kafka
        .iter()
        .inspect(|k| {
            assert_eq!(k["topic"], "orders", "{k}");
            assert!(k["through_offset"].as_i64().unwrap() >= 0, "{k}");
        })
        .map(|k| k["partition"].as_i64().unwrap())
        .collect();
    partitions.sort_unstable();
    assert_eq!(partitions, vec![0, 1], "{verified}");

    // A replay: hotgate forgets its positions and reads the topic from the start, and
    // new records of c3 arrive with others.
    server.terminate();
    std::fs::remove_file(dir.path().join("sources/orders.json")).unwrap();
    let server = start(dir.path());
    let token = token.at(&server);
    let records: Vec<serde_json::Value> = (700..800).map(|id| order(id, 2)).collect();
    assert_eq!(produce(&broker, "orders", &records), 100);
    let expected: Vec<i64> = (0..800).filter(|id| !erased(id)).collect();
    let ids = wait_for_orders(&server, &token, expected.len()).await;
    caught_up(&token, "orders", 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ids, expected);
    assert_eq!(
        order_ids(&server, &token).await,
        expected,
        "each record once, c3 never"
    );
    let status = token.http_get("/v1/sources/orders").await;
    let erased_on_ingest: u64 = status["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["erased"].as_u64().unwrap())
        .sum();
    // c3's records among 700..800, at least, met the block after the restart.
    assert!(
        erased_on_ingest >= (700..800).filter(erased).count() as u64,
        "{status}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hotgate_source_records_total{outcome=\"erased\",source=\"orders\"}"),
        "{metrics}"
    );
    server.terminate();
}

/// The writer schema of the Avro tests: the orders table's fields, `ts` as
/// `timestamp-micros`, `email` optional.
fn orders_avro_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "record", "name": "Order", "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "card", "type": "string"},
            {"name": "email", "type": ["null", "string"], "default": null},
            {"name": "amount", "type": "double"},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}}
        ]
    })
}

fn avro_order(id: i64, schema_id: Option<u32>) -> serde_json::Value {
    let mut record = serde_json::json!({
        "partition": 0, "key": id.to_string(), "avro": orders_avro_schema(),
        "value": {
            "id": id, "customer": format!("c{}", id % 13),
            "card": format!("{CARD_SENTINEL}-{id}"),
            "email": format!("user{}@example.com", id % 5),
            "amount": id as f64 / 4.0, "ts": chrono::Utc::now().timestamp_micros(),
        }
    });
    if let Some(id) = schema_id {
        record["schema_id"] = id.into();
    }
    record
}

/// A test double of a Confluent schema registry (no registry installs from the package
/// registries here): `GET /schemas/ids/{id}` knows id 7, the orders schema, and
/// answers 404 for every other id, as the registry does.
async fn schema_registry_double() -> String {
    use axum::extract::Path as UrlPath;
    let schema = orders_avro_schema().to_string();
    let app = axum::Router::new().route(
        "/schemas/ids/{id}",
        axum::routing::get(move |UrlPath(id): UrlPath<u32>| {
            let schema = schema.clone();
            async move {
                if id == 7 {
                    Ok(axum::Json(serde_json::json!({"schema": schema})))
                } else {
                    Err((
                        axum::http::StatusCode::NOT_FOUND,
                        axum::Json(
                            serde_json::json!({"error_code": 40403, "message": "Schema not found"}),
                        ),
                    ))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// Avro values: bare datums with the writer schema from a file (a `[[sources]]` of the
/// config file), and the Confluent wire format with a schema registry (a source created
/// through the API). Good records arrive governed; a datum that does not fit, an id the
/// registry does not know and a value not in the wire format are bad records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_records_from_a_schema_file_and_a_schema_registry() {
    let broker = KafkaBroker::start();
    create_topic(&broker, "fixed", 1);
    create_topic(&broker, "framed", 1);
    let dir = tempfile::tempdir().unwrap();
    let abs = std::path::absolute(dir.path()).unwrap();
    let schema_file = abs.join("order.avsc");
    std::fs::write(&schema_file, orders_avro_schema().to_string()).unwrap();
    let config = abs.join("hotgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[sources]]\nname = \"fixed\"\nbrokers = [\"{}\"]\ntopic = \"fixed\"\n\
             table = \"app.orders\"\nformat = \"avro\"\navro_schema_file = \"{}\"\n",
            broker.bootstrap,
            schema_file.display()
        ),
    )
    .unwrap();
    let server = Launch::new(dir.path()).config(&config).start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;

    let mut records: Vec<serde_json::Value> = (0..100).map(|id| avro_order(id, None)).collect();
    // A datum cut short: a long, then the end.
    records.push(serde_json::json!({"partition": 0, "key": "cut", "raw": "\u{2}"}));
    records.extend((100..150).map(|id| avro_order(id, None)));
    assert_eq!(produce(&broker, "fixed", &records), 151);

    // Through the API: a path on the server is refused, the registry is taken.
    let registry = schema_registry_double().await;
    let mut source = serde_json::json!({
        "name": "framed", "brokers": [broker.bootstrap], "topic": "framed",
        "table": "app.orders", "format": "avro", "avro_schema_file": schema_file,
    });
    let (status, answer) = token.http_post("/v1/sources", source.clone()).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("inline"), "{answer}");
    source.as_object_mut().unwrap().remove("avro_schema_file");
    let (status, answer) = token.http_post("/v1/sources", source.clone()).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("exactly one"), "{answer}");
    source["schema_registry"] = registry.into();
    let (status, answer) = token.http_post("/v1/sources", source).await;
    assert_eq!(status, 201, "{answer}");
    let mut records: Vec<serde_json::Value> =
        (1000..1100).map(|id| avro_order(id, Some(7))).collect();
    records.push(avro_order(5000, Some(9)));
    records.push(serde_json::json!({"partition": 0, "key": "j", "raw": "{\"id\": 5001}"}));
    records.extend((1100..1150).map(|id| avro_order(id, Some(7))));
    assert_eq!(produce(&broker, "framed", &records), 152);

    let expected: Vec<i64> = (0..150).chain(1000..1150).collect();
    assert_eq!(wait_for_orders(&server, &token, 300).await, expected);
    // Governed on the way in, as for JSON.
    assert!(files_containing(dir.path(), CARD_SENTINEL.as_bytes()).is_empty());
    let key = std::fs::read_to_string(dir.path().join("hash.key")).unwrap();
    let key = hotgate_policy::HashKey::from_hex(&key).unwrap();
    let rows = token
        .get(
            serde_json::json!({"table": "app.orders", "columns": ["email"], "filter": "id = 1007"}),
        )
        .await
        .unwrap();
    assert_eq!(
        string_values(&rows, "email"),
        vec![Some(key.hmac_hex(b"user2@example.com"))]
    );
    // The bad records, each with its reason.
    let admin = server.caller("root", &["admin"]);
    let start = Instant::now();
    let reasons = loop {
        let rejects = admin
            .get(serde_json::json!({"table": "_system.rejects", "columns": ["source", "reason"]}))
            .await
            .unwrap();
        let mut reasons: Vec<String> = string_values(&rejects, "source")
            .into_iter()
            .zip(string_values(&rejects, "reason"))
            .map(|(s, r)| format!("{}: {}", s.unwrap(), r.unwrap()))
            .collect();
        reasons.sort();
        if reasons.len() >= 3 || start.elapsed() > Duration::from_secs(30) {
            break reasons;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].starts_with("fixed: not an Avro datum"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("framed: not in the Confluent wire format"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("schema id 9 is not in the schema registry"),
        "{reasons:?}"
    );
    server.terminate();
}

/// A lost data directory is not lost data: part of the topic is tiered into a REST
/// catalog (outside the data directory), more arrives in the hot tier only, the process
/// dies and its whole data directory is deleted. A new one, with the same catalog and
/// the table created again, holds every record exactly once: the cold tier's, and the
/// rest fetched again from the offsets its snapshot recorded, not from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_data_directory_is_rebuilt_from_the_cold_tier_and_the_topic() {
    let broker = KafkaBroker::start();
    let rest = RestCatalogServer::start();
    create_topic(&broker, "orders", 4);
    let settings = tempfile::tempdir().unwrap();
    let config = source_config_tiered(settings.path(), &broker, "orders", "app.orders", &rest);
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("data");
    let start = || Launch::new(&data_dir).config(&config).start();

    let server = start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;
    let records = |ids: std::ops::Range<i64>| ids.map(|id| order(id, 4)).collect::<Vec<_>>();
    produce(&broker, "orders", &records(0..4000));
    caught_up(&token, "orders", 4000).await;
    assert_eq!(tier_now(&server).await, 4000);
    // These reach the hot tier only.
    produce(&broker, "orders", &records(4000..7000));
    caught_up(&token, "orders", 7000).await;
    server.kill9();
    std::fs::remove_dir_all(&data_dir).unwrap();
    produce(&broker, "orders", &records(7000..9000));

    let server = start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;
    let status = caught_up(&token, "orders", 5000).await;
    let sum = |field: &str| -> u64 {
        status["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[field].as_u64().unwrap_or(0))
            .sum()
    };
    assert_eq!(sum("rows"), 5000, "the lost and the new records: {status}");
    assert_eq!(
        sum("duplicates_skipped"),
        0,
        "nothing the cold tier holds was fetched again: {status}"
    );
    assert_eq!(
        order_ids(&server, &token).await,
        (0..9000).collect::<Vec<_>>(),
        "every record once, across both tiers"
    );
    assert_eq!(tier_now(&server).await, 5000);
    assert_eq!(
        order_ids(&server, &token).await,
        (0..9000).collect::<Vec<_>>()
    );
    server.terminate();
}

/// `on_error = "stop"`: the partition writes the records before its first bad one and
/// halts there, with the reason and the offset in its status, and its position stays
/// at the bad record, so nothing after it is written or skipped. Later fetches that
/// were already under way (the fetch stage runs ahead) write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_stop_halts_at_the_first_bad_record() {
    let broker = KafkaBroker::start();
    create_topic(&broker, "strict", 1);
    let dir = tempfile::tempdir().unwrap();
    let server = Launch::new(dir.path()).start();
    let token = server.caller("alice", &["analyst"]);
    token.create_table(orders_spec()).await;
    // Small fetches, so that several are in flight past the bad record.
    let source = serde_json::json!({
        "name": "strict", "brokers": [broker.bootstrap], "topic": "strict",
        "table": "app.orders", "on_error": "stop", "fetch_max_bytes": 4096
    });
    let (status, answer) = token.http_post("/v1/sources", source).await;
    assert_eq!(status, 201, "{answer}");
    let mut records: Vec<serde_json::Value> = (0..300).map(|id| order(id, 1)).collect();
    records.push(serde_json::json!({"partition": 0, "key": "bad", "raw": "not json"}));
    records.extend((300..600).map(|id| order(id, 1)));
    assert_eq!(produce(&broker, "strict", &records), 601);

    let started = Instant::now();
    let body = loop {
        let (_, body) = token.http(Method::GET, "/v1/sources/strict", None).await;
        if body["state"] == "failed" {
            break body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the source never stopped: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let reason = body["last_error"].as_str().unwrap_or_default();
    assert!(reason.contains("offset 300"), "{body}");
    assert_eq!(body["partitions"][0]["next_offset"], 300, "{body}");
    assert_eq!(body["partitions"][0]["rows"], 300, "{body}");
    // Nothing past the bad record was written, also a while later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        order_ids(&server, &token).await,
        (0..300).collect::<Vec<_>>()
    );
    server.terminate();
}
