//! hotgate against the organisation's catalog: the exactly-once kill tests, pyiceberg's
//! `RestCatalog` reading what hotgate tiered, compacted and erased, and commits that
//! race another writer, all against rustberg's Iceberg REST catalog; and the
//! exactly-once kill test on a Postgres SQL catalog. Both servers are real
//! ([`hotgate_testkit::catalogs`]); a missing one fails the test.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;

use crate::harness::*;
use crate::pyarrow_client::{pytest, python_grants, venv_python};
use crate::tiering::{
    Deployment, FAST_TICK, Warehouse, killed_during_tiering, scan_ids, spawn_forced_tier,
};

/// A data dir whose config puts the cold tier in `rest`.
fn rest_deployment(rest: &RestCatalogServer) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let config = std::path::absolute(dir.path())
        .unwrap()
        .join("hotgate.toml");
    std::fs::write(&config, rest.catalog_toml()).unwrap();
    Deployment {
        dir,
        config: Some(config),
        warehouse: Warehouse::Local(rest.warehouse_dir().join("app/events")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_through_a_rest_catalog() {
    for point in ["tier-before-commit", "tier-after-commit"] {
        let rest = RestCatalogServer::start();
        let deployment = rest_deployment(&rest);
        killed_during_tiering(point, &deployment).await;
        // The table lives in the REST catalog's warehouse, not in the data dir.
        assert!(deployment.warehouse.count(".parquet").await > 0);
        assert!(!deployment.dir.path().join("warehouse").exists());
        assert!(!deployment.dir.path().join("catalog.db").exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_on_a_postgres_sql_catalog() {
    let pg = PostgresServer::start();
    for (point, database) in [
        ("tier-before-commit", "before"),
        ("tier-after-commit", "after"),
    ] {
        pg.create_database(database);
        let dir = tempfile::tempdir().unwrap();
        let abs = std::path::absolute(dir.path()).unwrap();
        let config = abs.join("hotgate.toml");
        std::fs::write(
            &config,
            format!(
                "[catalog]\ntype = \"sql\"\nuri = \"{}\"\nwarehouse = \"file://{}\"\n",
                pg.uri_of(database),
                abs.join("warehouse").display()
            ),
        )
        .unwrap();
        let deployment = Deployment {
            warehouse: Warehouse::Local(abs.join("warehouse/app/events")),
            dir,
            config: Some(config),
        };
        killed_during_tiering(point, &deployment).await;
        assert!(!deployment.dir.path().join("catalog.db").exists());
    }
}

/// pyiceberg's `RestCatalog`, not hotgate, reads the tables: after tiering, compaction,
/// a column added, a primary-key table, and a deletion run to `verified` (the
/// `test_pyiceberg_*` files of `tests/python`, as against the SQLite catalog).
#[test]
fn pyiceberg_reads_through_the_rest_catalog() {
    let rest = RestCatalogServer::start();
    let dir = tempfile::tempdir().unwrap();
    write_grants(dir.path(), &python_grants());
    let config = std::path::absolute(dir.path())
        .unwrap()
        .join("hotgate.toml");
    std::fs::write(&config, rest.catalog_toml()).unwrap();
    let server = Launch::new(dir.path()).config(&config).start();
    pytest(
        &server,
        dir.path(),
        Some("pyiceberg"),
        &[
            ("HOTGATE_REST_URI", rest.uri.clone()),
            ("HOTGATE_REST_WAREHOUSE", rest.warehouse()),
            ("HOTGATE_REST_TOKEN", rest.token.clone()),
        ],
    );
    assert!(
        !dir.path().join("catalog.db").exists(),
        "the SQLite catalog was used"
    );
}

/// A pyiceberg process that appends to `app.events` through the REST catalog when told:
/// each `append <id>` copies one of the table's rows with id `<id>` (a commit of
/// another writer); `ids` prints every id the table holds.
const OTHER_WRITER: &str = r#"
import json, os, sys
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.rest import RestCatalog

catalog = RestCatalog("other", uri=os.environ["REST_URI"], warehouse=os.environ["REST_WAREHOUSE"], token=os.environ["REST_TOKEN"])
print("ready", flush=True)
for line in sys.stdin:
    words = line.split()
    table = catalog.load_table("app.events")
    if words[0] == "append":
        row = table.scan(limit=1).to_arrow().slice(0, 1)
        index = row.schema.get_field_index("id")
        row = row.set_column(index, row.schema.field(index), pa.array([int(words[1])], pa.int64()))
        table.append(row)
        print("appended", table.current_snapshot().snapshot_id, flush=True)
    elif words[0] == "ids":
        print("ids", json.dumps(sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())), flush=True)
"#;

struct OtherWriter {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl OtherWriter {
    fn start(rest: &RestCatalogServer) -> Self {
        let mut child = Command::new(venv_python())
            .args(["-c", OTHER_WRITER])
            .env("REST_URI", &rest.uri)
            .env("REST_WAREHOUSE", rest.warehouse())
            .env("REST_TOKEN", &rest.token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut writer = Self { child, lines };
        assert_eq!(writer.answer(), "ready");
        writer
    }

    fn answer(&mut self) -> String {
        self.lines
            .next()
            .expect("the pyiceberg writer answers (see its stderr)")
            .unwrap()
    }

    fn call(&mut self, command: &str) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
        self.answer()
    }
}

impl Drop for OtherWriter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Another writer (pyiceberg, through the same REST catalog) commits to the table
/// while hotgate's cycle sits between its load and its commit, cycle after cycle.
/// Each hotgate commit conflicts once and is retried from the other writer's snapshot;
/// afterwards the table holds every row either writer acknowledged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_that_race_another_writer_keep_every_row_exactly_once() {
    let rest = RestCatalogServer::start();
    let deployment = rest_deployment(&rest);
    let (flight, http) = (free_addr(), free_addr());
    // Every attempt waits 2 s between writing its files and committing.
    let server = deployment.start(
        flight,
        http,
        &[("FAILPOINTS", "tier-before-commit=sleep(2000)")],
    );
    let token = server.caller("alice", &["analyst"]);
    token.create_table(events_table()).await;
    token.put_ok("app.events", vec![events(0..50)]).await;
    let first = spawn_forced_tier(&server, &token).await.unwrap().unwrap();
    assert_eq!(first.status(), 200);
    let mut other = OtherWriter::start(&rest);

    // What hotgate acknowledged, and what the other writer committed.
    let mut acknowledged: Vec<i64> = (0..50).collect();
    let mut foreign_ids = Vec::new();
    let warehouse = &deployment.warehouse;
    for round in 0..3i64 {
        let ids = 100 * (round + 1)..100 * (round + 1) + 20;
        token.put_ok("app.events", vec![events(ids.clone())]).await;
        acknowledged.extend(ids);
        let files = warehouse.count(".parquet").await;
        let call = spawn_forced_tier(&server, &token);
        // The cycle has loaded the table and written its files: now it waits.
        let start = Instant::now();
        while warehouse.count(".parquet").await <= files {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the cycle wrote nothing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let foreign = 1_000_000 + round;
        let answer = other.call(&format!("append {foreign}"));
        assert!(answer.starts_with("appended"), "{answer}");
        foreign_ids.push(foreign);
        let response = call.await.unwrap().unwrap();
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["records"], 20, "{body}");
    }
    acknowledged.sort_unstable();
    let foreign = foreign_ids;

    let (status, tiering) = token
        .http(Method::GET, "/v1/tables/app.events/tiering", None)
        .await;
    assert_eq!(status, 200, "{tiering}");
    assert_eq!(tiering["catalog"], "rest");
    assert_eq!(tiering["commits"]["conflicts"], 3, "{tiering}");
    assert_eq!(tiering["commits"]["last_retries"], 1, "{tiering}");
    assert_eq!(tiering["commits"]["last_outcome"], "committed");
    let metrics = server.metrics().await;
    assert!(
        metrics
            .contains("hotgate_catalog_commits_total{outcome=\"conflict\",table=\"app.events\"} 3"),
        "{metrics}"
    );

    // pyiceberg's scan of the table: every id either writer had acknowledged, once.
    let answer = other.call("ids");
    let ids: Vec<i64> = serde_json::from_str(answer.strip_prefix("ids ").unwrap()).unwrap();
    let mut everyone = [acknowledged.clone(), foreign.clone()].concat();
    everyone.sort_unstable();
    assert_eq!(ids, everyone);
    // hotgate's read: its own rows, once. (While the hot tier still holds a range, it
    // serves that range; rows another writer appended show once hot retention moves
    // the read to the cold tier.)
    assert_eq!(scan_ids(&server, &token).await, acknowledged);
    // A restart derives its offsets from the snapshot the other writer built on.
    drop(other);
    server.terminate();
    let server = deployment.start(flight, http, &FAST_TICK);
    let token = token.at(&server);
    token.put_ok("app.events", vec![events(900..905)]).await;
    let (status, report) = token
        .http(Method::POST, "/v1/tables/app.events/tier", None)
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["records"], 5, "{report}");
    acknowledged.extend(900..905);
    assert_eq!(scan_ids(&server, &token).await, acknowledged);
    server.terminate();
}

/// hotgate starts while its REST catalog is down: the hot tier takes writes and serves
/// reads, `/tiering` says why nothing is tiered, hot retention keeps every untiered row;
/// once the catalog is up, the scheduler's retry creates the Iceberg table, and every
/// row is tiered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_down_at_start_delays_tiering_and_loses_nothing() {
    let catalog_addr = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let config = std::path::absolute(dir.path())
        .unwrap()
        .join("hotgate.toml");
    // The catalog's address and key are known before it runs.
    let key = RestCatalogServer::KEY;
    std::fs::write(
        &config,
        format!("[catalog]\ntype = \"rest\"\nuri = \"http://{catalog_addr}\"\ntoken = \"{key}\"\n"),
    )
    .unwrap();
    let server = Launch::new(dir.path())
        .config(&config)
        .env(&FAST_TICK)
        .start();
    let token = server.caller("alice", &["analyst"]);
    token
        .create_table(crate::tiering::short_lived_events())
        .await;
    token.put_ok("app.events", vec![events(0..40)]).await;

    // Past hot_retention (1 s), several ticks: nothing tiered, nothing purged.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(scan_ids(&server, &token).await, (0..40).collect::<Vec<_>>());
    let (status, tiering) = token
        .http(Method::GET, "/v1/tables/app.events/tiering", None)
        .await;
    assert_eq!(status, 200, "{tiering}");
    assert_eq!(tiering["catalog"], "rest");
    assert_eq!(tiering["ready"], false, "{tiering}");
    assert!(tiering["last_error"].is_string(), "{tiering}");
    assert!(
        tiering["consecutive_failures"].as_u64().unwrap() >= 1,
        "{tiering}"
    );
    assert!(!tiering.to_string().contains(key), "{tiering}");
    // A forced cycle says the same, as an error that can be retried.
    let (status, body) = token
        .http(Method::POST, "/v1/tables/app.events/tier", None)
        .await;
    assert_eq!(status, 503, "{body}");

    // The catalog comes up: within the backoff the table is created and tiered.
    let rest = RestCatalogServer::start_on(catalog_addr);
    let start = Instant::now();
    loop {
        let (_, tiering) = token
            .http(Method::GET, "/v1/tables/app.events/tiering", None)
            .await;
        if tiering["ready"] == true {
            assert_eq!(tiering["last_error"], serde_json::Value::Null, "{tiering}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never tiered: {tiering}\n{}",
            rest.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing was tiered or purged meanwhile; now every row goes, once.
    let (status, report) = token
        .http(Method::POST, "/v1/tables/app.events/tier", None)
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["records"], 40, "{report}");
    crate::tiering::wait_hot_purged(&server).await;
    assert_eq!(scan_ids(&server, &token).await, (0..40).collect::<Vec<_>>());
    server.terminate();
}
