//! Schema evolution through the real binary: `POST /v1/tables/{id}/columns` adds a
//! nullable column to the hot table and its Iceberg table in one step, or in neither;
//! reads spanning both tiers return old rows with nulls.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field};
use reqwest::Method;

use crate::harness::*;
use crate::tiering::{FAST_TICK, events_in_the_cold_tier, maintain_now, tier};

/// `events(ids)` with a `note` column: `n<id>`.
fn events_with_note(ids: std::ops::Range<i64>) -> RecordBatch {
    let base = events(ids.clone());
    let mut fields = base.schema().fields().to_vec();
    fields.push(Arc::new(Field::new("note", DataType::Utf8, true)));
    let mut columns = base.columns().to_vec();
    columns.push(Arc::new(StringArray::from_iter_values(
        ids.map(|i| format!("n{i}")),
    )));
    RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns).unwrap()
}

/// `(id, note)` of every row, sorted by id.
async fn ids_and_notes(server: &Server, token: &str) -> Vec<(i64, Option<String>)> {
    let mut client = server.client().await;
    let batches = get(
        &mut client,
        token,
        serde_json::json!({"table": "app.events", "columns": ["id", "note"]}),
    )
    .await
    .unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let ids = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        let notes = b
            .column_by_name("note")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        for i in 0..b.num_rows() {
            rows.push((
                ids.value(i),
                notes.is_valid(i).then(|| notes.value(i).to_owned()),
            ));
        }
    }
    rows.sort();
    rows
}

fn expected(
    plain: std::ops::Range<i64>,
    noted: std::ops::Range<i64>,
) -> Vec<(i64, Option<String>)> {
    plain
        .map(|i| (i, None))
        .chain(noted.map(|i| (i, Some(format!("n{i}")))))
        .collect()
}

/// The column names of the current schema in the table's newest Iceberg metadata file.
fn iceberg_columns(warehouse_table: &Path) -> Vec<String> {
    let mut newest: Option<(u64, std::path::PathBuf)> = None;
    for entry in std::fs::read_dir(warehouse_table.join("metadata")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(version) = name
            .strip_suffix(".metadata.json")
            .and_then(|n| n.split('-').next())
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        if newest.as_ref().is_none_or(|(v, _)| version > *v) {
            newest = Some((version, path));
        }
    }
    let (_, path) = newest.expect("no metadata file");
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let current = &metadata["current-schema-id"];
    let schema = metadata["schemas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| &s["schema-id"] == current)
        .unwrap();
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn add_column(
    server: &Server,
    token: &str,
    column: serde_json::Value,
) -> (u16, serde_json::Value) {
    let path = "/v1/tables/app.events/columns";
    let body = Some(serde_json::json!({"columns": [column]}));
    let (status, body) = http_json(server, Method::POST, path, token, body).await;
    (status.as_u16(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_column_reads_as_null_for_old_rows_in_both_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let (server, token, _) =
        events_in_the_cold_tier(dir.path(), free_addr(), free_addr(), 0..100).await;
    // Untiered old-schema rows stay in the hot tier.
    token.put_ok("app.events", vec![events(100..120)]).await;

    // Bad changes are refused with a 400 and change nothing.
    let bad = [
        (
            serde_json::json!({"name": "note", "type": "string", "nullable": false}),
            "must be nullable",
        ),
        (
            serde_json::json!({"name": "amount", "type": "float64"}),
            "declared twice",
        ),
        (
            serde_json::json!({"name": "note", "type": "varchar"}),
            "unknown type",
        ),
        (
            serde_json::json!({"name": "note", "type": "string", "field_id": 99}),
            "assigns the field ids",
        ),
    ];
    let warehouse = dir.path().join("warehouse/app/events");
    let before = iceberg_columns(&warehouse);
    for (column, message) in bad {
        let (status, body) = add_column(&server, &token, column).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body.to_string().contains(message),
            "{body} should say {message}"
        );
    }
    let (status, body) = token
        .http(
            Method::POST,
            "/v1/tables/app.events/columns",
            Some(serde_json::json!({"columns": []})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = token
        .http(
            Method::POST,
            "/v1/tables/app.nope/columns",
            Some(serde_json::json!({"columns": [{"name": "note", "type": "string"}]})),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(iceberg_columns(&warehouse), before);

    // The change: both tiers get the column.
    let (status, described) = add_column(
        &server,
        &token,
        serde_json::json!({"name": "note", "type": "string", "tags": ["pii"]}),
    )
    .await;
    assert_eq!(status, 200, "{described}");
    assert_eq!(
        described_columns(&described),
        ["id", "customer", "amount", "ts", "note"]
    );
    assert_eq!(described["definition"]["columns"][4]["field_id"], 5);
    assert_eq!(
        iceberg_columns(&warehouse),
        ["id", "customer", "amount", "ts", "note"]
    );

    // Old writers (without the column) and new writers both work.
    token.put_ok("app.events", vec![events(120..130)]).await;
    token
        .put_ok("app.events", vec![events_with_note(130..160)])
        .await;
    let want = expected(0..130, 130..160);
    assert_eq!(ids_and_notes(&server, &token).await, want);

    // Tier the mixed rows, drop them from the hot tier, read again; then compaction
    // rewrites old-schema files under the new schema, and the rows are unchanged.
    tier(&server, &token).await;
    token
        .put_ok("app.events", vec![events_with_note(160..170)])
        .await;
    let want = expected(0..130, 130..170);
    assert_eq!(ids_and_notes(&server, &token).await, want);
    maintain_now(&token).await;
    assert_eq!(ids_and_notes(&server, &token).await, want);

    // The change survives a restart.
    let flight = server.flight;
    let http = server.http;
    server.terminate();
    let server = Server::start_env(dir.path(), flight, http, &FAST_TICK);
    assert_eq!(ids_and_notes(&server, &token).await, want);
    server.terminate();
}

/// Starts a server whose schema changes stop in fail point `add-columns-before-hot`
/// (between the Iceberg commit and the hot definition) with `action`.
fn server_failing(dir: &Path, action: &str) -> Server {
    let failpoint = format!("add-columns-before-hot={action}");
    Server::start_vars(dir, &[("FAILPOINTS", failpoint.as_str()), FAST_TICK[0]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_that_fails_halfway_changes_neither_tier() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse/app/events");
    let original = ["id", "customer", "amount", "ts"];

    // The hot step fails: the Iceberg schema is set back at once.
    let server = server_failing(dir.path(), "return");
    let token = server.caller("alice", &["analyst"]);
    token.create_table(events_table()).await;
    let (status, body) = add_column(
        &server,
        &token,
        serde_json::json!({"name": "note", "type": "string"}),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(iceberg_columns(&warehouse), original);
    let (_, described) = token.http(Method::GET, "/v1/tables/app.events", None).await;
    assert_eq!(described_columns(&described), original);
    server.terminate();

    // The process dies between the two steps: the next start sets Iceberg back.
    let server = server_failing(dir.path(), "sleep(60000)");
    let token = token.at(&server);
    let url = server.http_url("/v1/tables/app.events/columns");
    let call = tokio::spawn({
        let token = token.clone();
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&serde_json::json!({"columns": [{"name": "note", "type": "string"}]}))
                .send()
                .await
        }
    });
    let start = Instant::now();
    while iceberg_columns(&warehouse).len() == original.len() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the change never reached Iceberg"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill9();
    let _ = call.await;
    let server = Server::start_vars(dir.path(), &FAST_TICK);
    let token = token.at(&server);
    let (_, described) = token.http(Method::GET, "/v1/tables/app.events", None).await;
    assert_eq!(described_columns(&described), original);
    assert_eq!(iceberg_columns(&warehouse), original);

    // A later change works, and never reuses the field id of the rolled-back column.
    let (status, described) = add_column(
        &server,
        &token,
        serde_json::json!({"name": "note", "type": "string"}),
    )
    .await;
    assert_eq!(status, 200, "{described}");
    assert!(
        described["definition"]["columns"][4]["field_id"]
            .as_i64()
            .unwrap()
            > 5
    );
    assert_eq!(
        iceberg_columns(&warehouse),
        ["id", "customer", "amount", "ts", "note"]
    );
    server.terminate();
}
