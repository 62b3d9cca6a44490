//! Tiering through the real binary: `POST /tier`, union reads across both tiers after
//! hot retention has dropped tiered segments, and exactly-once when the server is killed
//! between writing files and committing, or right after committing.

use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::Method;

use crate::harness::*;

/// The events table with a hot retention short enough for a test to outlive.
pub(crate) fn short_lived_events() -> serde_json::Value {
    let mut t = events_table();
    t["hot_retention"] = "1s".into();
    t
}

pub(crate) const FAST_TICK: [(&str, &str); 1] = [("HOTGATE_TIERING_TICK", "200ms")];

pub(crate) async fn tier(server: &Server, token: &str) -> serde_json::Value {
    let path = "/v1/tables/app.events/tier";
    let (status, body) = http_json(server, Method::POST, path, token, None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Maintenance on demand with nothing kept back (every old snapshot expired, every
/// unreferenced file purged at once); compaction must have merged the cycles' files.
pub(crate) async fn maintain_now(token: &Caller) -> serde_json::Value {
    let body = serde_json::json!({"snapshot_retention": "0s", "purge_min_age": "0s"});
    let path = "/v1/tables/app.events/maintenance";
    let report = token.http_ok(Method::POST, path, Some(body)).await;
    let removed = report["compaction"]["files_removed"].as_u64().unwrap();
    assert!(removed >= 2, "{report}");
    report
}

pub(crate) async fn scan_ids(server: &Server, token: &str) -> Vec<i64> {
    let mut client = server.client().await;
    let batches = get(
        &mut client,
        token,
        serde_json::json!({"table": "app.events", "columns": ["id"]}),
    )
    .await
    .unwrap();
    ints(&batches, "id")
}

/// Waits until the hot tier has dropped segments of the table (the scheduler's
/// retention, gated by the tiered watermark), so reads must use the cold tier.
pub(crate) async fn wait_hot_purged(server: &Server) {
    let start = Instant::now();
    let hot_dir = server.data_dir.join("data/app/events");
    loop {
        if segments_purged(&hot_dir) {
            return;
        }
        let segments = count_files(&hot_dir, ".log");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "hot retention never ran ({segments} segment files)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// True once some log's first segment no longer starts at offset 0.
fn segments_purged(hot_dir: &Path) -> bool {
    let mut logs = std::collections::BTreeMap::<std::path::PathBuf, Vec<String>>::new();
    for f in &files_with_extension(hot_dir, "log") {
        logs.entry(f.parent().unwrap().to_path_buf())
            .or_default()
            .push(f.file_stem().unwrap().to_string_lossy().into_owned());
    }
    logs.values()
        .any(|names| names.iter().all(|n| !n.trim_start_matches('0').is_empty()))
}

/// Starts a server on `dir` (fast scheduler tick) whose short-lived events table holds
/// the rows `ids`, tiered and then dropped from the hot tier by retention, so reads of
/// them need the cold tier. Returns the server, alice's token and the cycle's report.
pub(crate) async fn events_in_the_cold_tier(
    dir: &Path,
    flight: std::net::SocketAddr,
    http: std::net::SocketAddr,
    ids: std::ops::Range<i64>,
) -> (Server, Caller, serde_json::Value) {
    events_in_the_cold_tier_env(dir, flight, http, ids, &FAST_TICK).await
}

/// [`events_in_the_cold_tier`] with the server's environment given.
pub(crate) async fn events_in_the_cold_tier_env(
    dir: &Path,
    flight: std::net::SocketAddr,
    http: std::net::SocketAddr,
    ids: std::ops::Range<i64>,
    env: &[(&str, &str)],
) -> (Server, Caller, serde_json::Value) {
    let server = Server::start_env(dir, flight, http, env);
    let token = server.caller("alice", &["analyst"]);
    token.create_table(short_lived_events()).await;
    token.put_ok("app.events", vec![events(ids)]).await;
    let report = tier(&server, &token).await;
    wait_hot_purged(&server).await;
    (server, token, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn union_reads_return_every_row_once_across_both_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let (server, token, report) =
        events_in_the_cold_tier(dir.path(), free_addr(), free_addr(), 0..200).await;
    assert!(report["snapshot_id"].is_i64(), "{report}");
    assert_eq!(report["records"], 200);
    assert!(!report["files"].as_array().unwrap().is_empty());

    // Hot retention dropped the tiered segments; reads union both tiers.
    token.put_ok("app.events", vec![events(200..260)]).await;
    assert_eq!(
        scan_ids(&server, &token).await,
        (0..260).collect::<Vec<_>>()
    );

    // A time range and a filter apply to both tiers.
    let batches = token
        .rows(serde_json::json!({"table": "app.events", "columns": ["id"],
            "since": "2026-11-30T03:00:00Z", "until": "2026-11-30T03:30:00Z",
            "filter": "id % 2 = 0"}))
        .await;
    assert_eq!(
        ints(&batches, "id"),
        (180..210).filter(|i| i % 2 == 0).collect::<Vec<_>>()
    );

    // Comparisons are pushed to the cold scan for pruning; the answer is the same.
    let batches = token
        .rows(serde_json::json!({"table": "app.events", "columns": ["id"],
            "filter": "customer = 'c3' AND id >= 50 AND ts < '2026-11-30T04:00:00Z'"}))
        .await;
    let mut got = ints(&batches, "id");
    got.sort_unstable();
    assert_eq!(got, (50..240).filter(|i| i % 5 == 3).collect::<Vec<_>>());

    // The status shows the watermarks and the files.
    let body = token.http_get("/v1/tables/app.events/tiering").await;
    assert_eq!(body["records"], 200);
    assert!(body["files"].as_u64().unwrap() >= 1);
    assert_eq!(body["snapshot_id"], report["snapshot_id"]);

    // The audit of a spanning read names both tiers.
    let (status, audit) = server
        .caller("root", &["admin"])
        .http(
            Method::GET,
            "/v1/audit?action=scan&table=app.events&limit=1",
            None,
        )
        .await;
    assert_eq!(status, 200, "{audit}");
    assert_eq!(
        audit["records"][0]["tiers"],
        serde_json::json!(["hot", "cold"]),
        "{audit}"
    );

    // The boundary counters saw the spanning reads and the 30-minute range.
    let boundary = token.http_get("/v1/tables/app.events/boundary").await;
    assert_eq!(boundary["hot_only"], 0, "{boundary}");
    assert_eq!(boundary["spanning"], 3, "{boundary}");
    assert_eq!(boundary["range_length"]["<=1h"], 1, "{boundary}");
    assert_eq!(boundary["range_length"]["unbounded"], 2, "{boundary}");

    // A second cycle, then maintenance on demand: compaction, expiry, purge. Reads are
    // unchanged, and the status shows the fewer files.
    tier(&server, &token).await;
    let (status, _) = token
        .http(Method::GET, "/v1/tables/app.events/tiering", None)
        .await;
    assert_eq!(status, 200);
    let report = maintain_now(&token).await;
    assert!(report["files_purged"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(
        scan_ids(&server, &token).await,
        (0..260).collect::<Vec<_>>()
    );
    let (status, bad) = token
        .http(
            Method::POST,
            "/v1/tables/app.events/maintenance",
            Some(serde_json::json!({"purge_min_age": "soon"})),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    server.terminate();
}

/// `POST /v1/tables/app.events/tier` in the background, for a cycle that stops in a
/// fail point while the test acts.
pub(crate) fn spawn_forced_tier(
    server: &Server,
    token: &str,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let request = reqwest::Client::new()
        .post(server.http_url("/v1/tables/app.events/tier"))
        .bearer_auth(token);
    tokio::spawn(request.send())
}

/// Where a test's Iceberg table lives, to count its files there.
pub(crate) enum Warehouse {
    /// The table's directory in a local warehouse.
    Local(std::path::PathBuf),
    /// A ListObjectsV2 URL of the table's prefix in an S3 bucket (moto).
    S3 { list_url: String },
}

impl Warehouse {
    /// Files whose name ends with `suffix`.
    pub(crate) async fn count(&self, suffix: &str) -> usize {
        match self {
            Warehouse::Local(dir) => count_files(dir, suffix),
            Warehouse::S3 { list_url } => {
                let body = reqwest::get(list_url).await.unwrap().text().await.unwrap();
                assert!(
                    !body.contains("<IsTruncated>true"),
                    "more keys than one listing"
                );
                body.split("<Key>")
                    .skip(1)
                    .filter(|k| k.split("</Key>").next().unwrap_or("").ends_with(suffix))
                    .count()
            }
        }
    }
}

/// A data dir, with an optional configuration file (the catalog) and its warehouse.
pub(crate) struct Deployment {
    pub dir: tempfile::TempDir,
    pub config: Option<std::path::PathBuf>,
    pub warehouse: Warehouse,
}

impl Deployment {
    /// The embedded default: SQLite catalog and warehouse in the data dir.
    pub(crate) fn local() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = Warehouse::Local(dir.path().join("warehouse/app/events"));
        Self {
            dir,
            config: None,
            warehouse,
        }
    }

    pub(crate) fn start(
        &self,
        flight: std::net::SocketAddr,
        http: std::net::SocketAddr,
        env: &[(&str, &str)],
    ) -> Server {
        let launch = Launch::new(self.dir.path()).addrs(flight, http).env(env);
        match &self.config {
            Some(config) => launch.config(config).start(),
            None => launch.start(),
        }
    }
}

/// Kills the server while it sits in fail point `point` during a forced cycle, then
/// restarts it and checks that the union read still returns every row exactly once,
/// and that the purge leaves only live data files.
pub(crate) async fn killed_during_tiering(point: &str, deployment: &Deployment) {
    let flight = free_addr();
    let http = free_addr();
    let failpoint = format!("{point}=sleep(60000)");
    let server = deployment.start(
        flight,
        http,
        &[("FAILPOINTS", failpoint.as_str()), FAST_TICK[0]],
    );
    let token = server.caller("alice", &["analyst"]);
    token.create_table(short_lived_events()).await;
    token.put_ok("app.events", vec![events(0..150)]).await;

    // The forced cycle hangs in the fail point; kill -9 the server meanwhile.
    let call = spawn_forced_tier(&server, &token);
    let warehouse = &deployment.warehouse;
    let start = Instant::now();
    let marker = if point == "tier-before-commit" {
        ".parquet"
    } else {
        ".metadata.json"
    };
    let wanted = if point == "tier-before-commit" { 1 } else { 2 };
    while warehouse.count(marker).await < wanted {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the cycle never reached {point}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill9();
    let _ = call.await;

    let server = deployment.start(flight, http, &FAST_TICK);
    let token = token.at(&server);
    token.put_ok("app.events", vec![events(150..180)]).await;
    tier(&server, &token).await;
    wait_hot_purged(&server).await;
    assert_eq!(
        scan_ids(&server, &token).await,
        (0..180).collect::<Vec<_>>()
    );

    // The purge removes what the killed cycle left behind: afterwards every Parquet file
    // in the warehouse is a live data file.
    let (status, report) = token.http(Method::POST, "/v1/tables/app.events/maintenance", Some(serde_json::json!({"compact": false, "snapshot_retention": "0s", "purge_min_age": "0s"})))
    .await;
    assert_eq!(status, 200, "{report}");
    let (_, status_body) = token
        .http(Method::GET, "/v1/tables/app.events/tiering", None)
        .await;
    assert_eq!(
        warehouse.count(".parquet").await as u64,
        status_body["files"].as_u64().unwrap(),
        "{report}"
    );
    assert_eq!(
        scan_ids(&server, &token).await,
        (0..180).collect::<Vec<_>>()
    );
    server.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_writing_files_and_committing_loses_and_duplicates_nothing() {
    killed_during_tiering("tier-before-commit", &Deployment::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_right_after_the_commit_loses_and_duplicates_nothing() {
    killed_during_tiering("tier-after-commit", &Deployment::local()).await;
}
