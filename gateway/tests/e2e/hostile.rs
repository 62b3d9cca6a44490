//! Hostile input through the documented API with a reader's token: expressions of any
//! size and shape never take the server down, errors raised on rows leave no value in
//! the audit, admin routes authorize before they parse, duplicate columns are refused,
//! metadata goes through the caller's view, and admins see who reads what.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_flight::FlightDescriptor;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tonic::Code;

use crate::harness::*;

/// The shapes of expression a test grows: each is a filter over `app.events` that
/// matches the rows whose id is in `ids` (an empty range matches nothing).
fn shapes(ids: std::ops::Range<i64>) -> Vec<(&'static str, String)> {
    let list =
        |sep: &str, f: &dyn Fn(i64) -> String| ids.clone().map(f).collect::<Vec<_>>().join(sep);
    let n = ids.end - ids.start;
    vec![
        ("or", list(" OR ", &|i| format!("id = {i}"))),
        (
            "and",
            format!(
                "id < {} AND {}",
                ids.end,
                list(" AND ", &|_| "id >= 0".into())
            ),
        ),
        ("in", format!("id IN ({})", list(", ", &|i| i.to_string()))),
        (
            "case",
            format!(
                "{}false{}",
                list("", &|i| format!("CASE WHEN id = {i} THEN true ELSE ")),
                " END".repeat(n as usize)
            ),
        ),
        (
            "concat",
            format!(
                "customer {} <> '' AND id >= {} AND id < {}",
                "|| 'x' ".repeat(n as usize),
                ids.start,
                ids.end
            ),
        ),
    ]
}

async fn healthy(server: &Server) {
    let status = reqwest::get(server.http_url("/healthz"))
        .await
        .expect("the server must stay up")
        .status();
    assert_eq!(status, 200);
}

/// An HTTP call with a raw body.
async fn http_raw(
    server: &Server,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new()
        .request(method, server.http_url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.expect("the server must answer");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expressions_of_any_size_are_answered_and_the_server_stays_up() {
    let server = Server::fresh();
    let root = server.caller("root", &["admin"]);
    let alice = server.caller("alice", &["writer"]);
    let bob = server.caller("bob", &["writer"]);
    alice.create_table(events_table()).await;
    let mut client = server.client().await;
    alice.put_ok("app.events", vec![events(0..20)]).await;

    for size in [10_i64, 1_000, 100_000] {
        for ((shape, filter), (_, nothing)) in shapes(0..size).into_iter().zip(shapes(-size..0)) {
            let what = format!("{shape} of {size} terms");
            // A scan filter.
            let ticket = json!({"table": "app.events", "columns": ["id"], "filter": filter});
            match bob.get(ticket.clone()).await {
                Ok(batches) => {
                    assert!(size <= 1_000, "{what}: answered");
                    assert_eq!(
                        ints(&batches, "id"),
                        (0..size.min(20)).collect::<Vec<_>>(),
                        "{what}"
                    );
                }
                Err(s) => assert_eq!(s.code(), Code::InvalidArgument, "{what}: {}", s.message()),
            }
            healthy(&server).await;
            // The same through GetSchema.
            let descriptor = FlightDescriptor::new_cmd(ticket.to_string());
            if let Err(s) = client.get_schema(with_token(descriptor, &bob)).await {
                assert_eq!(s.code(), Code::InvalidArgument, "{what}: {}", s.message());
            }
            healthy(&server).await;
            // A policy's row filter, applied to bob's reads while it exists.
            let policy = json!({"id": "grow", "scope": {"table": "app.events"},
                "to": ["content"], "kind": "row_filter", "expr": filter});
            let (status, body) = root.http(Method::POST, "/v1/policies", Some(policy)).await;
            assert!(
                status == StatusCode::CREATED || status == StatusCode::BAD_REQUEST,
                "{what}: {status} {body}"
            );
            if status == StatusCode::CREATED {
                let batches = bob.rows(json!({"table": "app.events"})).await;
                assert_eq!(
                    ints(&batches, "id"),
                    (0..size.min(20)).collect::<Vec<_>>(),
                    "{what}"
                );
                let (status, _) = root.http(Method::DELETE, "/v1/policies/grow", None).await;
                assert_eq!(status, 200);
            } else {
                assert!(
                    body["error"].as_str().unwrap().contains("limit"),
                    "{what}: {body}"
                );
            }
            healthy(&server).await;
            // A deletion predicate (matching no row, so that nothing is deleted).
            let deletion = json!({"tables": ["app.events"], "predicate": nothing,
                "subject": format!("grow-{shape}-{size}")});
            let (status, body) = root
                .http(Method::POST, "/v1/deletions", Some(deletion))
                .await;
            assert!(
                status == StatusCode::ACCEPTED || status == StatusCode::BAD_REQUEST,
                "{what}: {status} {body}"
            );
            healthy(&server).await;
        }
    }
    // Every row is still there, for a reader with no policy.
    let batches = alice.rows(json!({"table": "app.events"})).await;
    assert_eq!(ints(&batches, "id"), (0..20).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_raised_on_rows_leave_no_value_or_literal_in_the_audit() {
    const VALUE: &str = "zqVALUE-8841-secret";
    const LITERAL: i64 = 97_531_864_202;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let alice = server.caller("alice", &["writer"]);
    alice.create_table(events_table()).await;
    let batch = events(0..5);
    let customers: ArrayRef = Arc::new(StringArray::from(vec![VALUE; 5]));
    let mut columns = batch.columns().to_vec();
    columns[1] = customers;
    let batch = RecordBatch::try_new(batch.schema(), columns).unwrap();
    alice.put_ok("app.events", vec![batch]).await;

    // The cast fails on the row's value, while the stream runs.
    let ticket = json!({"table": "app.events",
        "filter": format!("CAST(customer AS BIGINT) = {LITERAL}")});
    let err = alice.get(ticket).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    // The caller is told which value failed: it is their own row.
    assert!(err.message().contains("zqVALUE"), "{}", err.message());

    // The end record says how the stream broke, by kind only.
    let root = server.caller("root", &["admin"]);
    let mut records = Vec::new();
    for _ in 0..200 {
        let (_, body) = root
            .http(
                Method::GET,
                "/v1/audit?principal=alice&action=end&limit=100",
                None,
            )
            .await;
        records = body["records"].as_array().unwrap().clone();
        if records
            .iter()
            .any(|r| r["reason"].as_str().unwrap().starts_with("broken"))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let broken = records
        .iter()
        .find(|r| r["reason"].as_str().unwrap().starts_with("broken"))
        .unwrap_or_else(|| panic!("no broken end record in {records:#?}"));
    assert!(
        broken["reason"]
            .as_str()
            .unwrap()
            .starts_with("broken: invalid_argument: "),
        "{broken}"
    );

    // Neither the value nor the literal is anywhere in the audit's files, hot or cold.
    let mut audit_files = all_files(&dir.path().join("data/_system"));
    let warehouse = dir.path().join("warehouse");
    if warehouse.exists() {
        audit_files.extend(
            all_files(&warehouse)
                .into_iter()
                .filter(|p| p.to_string_lossy().contains("_system")),
        );
    }
    assert!(!audit_files.is_empty());
    for needle in [VALUE.as_bytes(), LITERAL.to_string().as_bytes()] {
        let holding: Vec<_> = audit_files
            .iter()
            .filter(|f| file_contains(f, needle))
            .collect();
        assert!(
            holding.is_empty(),
            "{} is in {holding:?}",
            String::from_utf8_lossy(needle)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_authorize_before_they_parse_and_every_refusal_is_recorded() {
    let server = Server::fresh();
    let alice = server.caller("alice", &["writer"]);
    alice.create_table(events_table()).await;
    // ann may read the audit and nothing else; bob manages content, not access.
    let ann = server.caller("ann", &["auditors"]);
    let bob = server.caller("bob", &["writer"]);
    let calls: [(&str, Method, &str); 7] = [
        ("ann", Method::POST, "/v1/tables"),
        ("ann", Method::POST, "/v1/tables/app.events/columns"),
        ("ann", Method::POST, "/v1/tables/app.events/maintenance"),
        ("ann", Method::POST, "/v1/deletions"),
        ("bob", Method::POST, "/v1/policies"),
        ("bob", Method::PUT, "/v1/policies/p1"),
        ("bob", Method::GET, "/v1/tables/app.events/access"),
    ];
    for (who, method, path) in &calls {
        let token = if *who == "ann" { &ann } else { &bob };
        for body in ["{not json", "{\"unknown\": 1}"] {
            let (status, answer) = http_raw(&server, method.clone(), path, Some(token), body).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{who} {method} {path}: {answer}"
            );
        }
    }
    // A caller with the rights gets the parse error, recorded as a denial too.
    let root = server.caller("root", &["admin"]);
    let (status, body) =
        http_raw(&server, Method::POST, "/v1/policies", Some(&root), "{oops").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = http_raw(
        &server,
        Method::POST,
        "/v1/tables/app.events/columns",
        Some(&alice),
        "[1, 2]",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A table definition with a column declared twice names it, and creates nothing.
    let mut twice = events_table();
    twice["name"] = "twice".into();
    twice["columns"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "amount", "type": "string"}));
    let (status, body) = http_raw(
        &server,
        Method::POST,
        "/v1/tables",
        Some(&alice),
        &twice.to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("amount"), "{body}");
    // No token at all: the record's action is `authenticate`.
    let (status, _) = http_raw(&server, Method::POST, "/v1/policies", None, "{").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let denied = root.audit_records("decision=deny").await;
    let count = |principal: &str, action: &str, reason: &str| {
        denied
            .iter()
            .filter(|r| {
                r["principal"] == principal
                    && r["action"] == action
                    && r["reason"].as_str().unwrap().starts_with(reason)
            })
            .count()
    };
    for (principal, action) in [
        ("ann", "create_table"),
        ("ann", "add_columns"),
        ("ann", "maintenance"),
        ("ann", "create_deletion"),
        ("bob", "create_policy"),
        ("bob", "replace_policy"),
        ("bob", "table_access"),
    ] {
        assert_eq!(
            count(principal, action, "permission_denied"),
            2,
            "{principal} {action}: {denied:#?}"
        );
    }
    assert_eq!(count("root", "create_policy", "invalid_argument"), 1);
    assert_eq!(count("alice", "add_columns", "invalid_argument"), 1);
    assert_eq!(count("alice", "create_table", "invalid_argument"), 1);
    assert_eq!(count("", "authenticate", "unauthenticated"), 1);
    // No table was created by any of it.
    let (_, tables) = alice.http(Method::GET, "/v1/tables", None).await;
    assert_eq!(tables["tables"].as_array().unwrap().len(), 1, "{tables}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_a_column_twice_is_refused_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let alice = server.caller("alice", &["writer"]);
    alice.create_table(events_table()).await;
    let good = events(0..3);
    let twice = with_column(&good, "amount", Arc::clone(good.column(2)));
    let err = alice.put("app.events", vec![twice]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("\"amount\" appears twice"),
        "{}",
        err.message()
    );
    let rows = alice.rows(json!({"table": "app.events"})).await;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
}

/// Grants for the view tests: `reader` reads `app.events` (and is row-filtered and
/// denied a column by policy), `full` reads it unfiltered, `etl` writes it, and root
/// administers.
fn view_grants() -> Value {
    let mut doc = grants_document();
    let events = |p: &str| json!([{"type": "table", "namespace": ["app"], "tableName": "events", "privilege": p}]);
    let app = json!([{"type": "namespace", "namespace": ["app"], "privilege": "TABLE_READ_DATA"}]);
    add_role(
        &mut doc,
        "reader",
        events("TABLE_READ_DATA"),
        "readers",
        &["rita"],
    );
    add_role(&mut doc, "full", app, "fulls", &["fred"]);
    add_role(
        &mut doc,
        "etl",
        events("TABLE_WRITE_DATA"),
        "etls",
        &["eve"],
    );
    add_admin(&mut doc);
    doc
}

/// A server with `app.events` holding 10 rows and, for role `reader`, a row filter and
/// a deny of `amount`.
async fn view_server(dir: &std::path::Path) -> Server {
    write_grants(dir, &view_grants());
    let server = Server::start(dir);
    let root = server.caller("root", &["admin"]);
    root.create_table(events_table()).await;
    root.put_ok("app.events", vec![events(0..10)]).await;
    for policy in [
        json!({"id": "c1_only", "scope": {"table": "app.events"}, "to": ["reader"],
               "kind": "row_filter", "expr": "customer = 'c1'"}),
        json!({"id": "no_amount", "scope": {"table": "app.events"}, "to": ["reader"],
               "kind": "column_deny", "column": "amount"}),
    ] {
        let (status, body) = root.http(Method::POST, "/v1/policies", Some(policy)).await;
        assert_eq!(status, 201, "{body}");
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_metadata_goes_through_the_callers_view() {
    let dir = tempfile::tempdir().unwrap();
    let server = view_server(dir.path()).await;
    let rita = server.caller("rita", &["readers"]);
    let fred = server.caller("fred", &["fulls"]);
    let root = server.caller("root", &["admin"]);

    // rita: no denied column, no whole-table counts, in the description and the list.
    let described = rita.http_get("/v1/tables/app.events").await;
    assert_eq!(described_columns(&described), ["id", "customer", "ts"]);
    assert!(described.get("end_offsets").is_none(), "{described}");
    assert_eq!(described["counts_withheld"], true);
    assert!(!described.to_string().contains("amount"), "{described}");
    let (_, listed) = rita.http(Method::GET, "/v1/tables", None).await;
    assert_eq!(listed["tables"][0]["definition"], described["definition"]);
    assert!(listed["tables"][0].get("end_offsets").is_none());
    let tiering = rita.http_get("/v1/tables/app.events/tiering").await;
    for field in ["watermarks", "files", "bytes", "records", "size_histogram"] {
        assert!(tiering[field].is_null(), "{field}: {tiering}");
    }
    assert_eq!(tiering["counts_withheld"], true);

    // fred reads every row: he sees the counts; root manages the table and sees all.
    let (_, described) = fred.http(Method::GET, "/v1/tables/app.events", None).await;
    assert_eq!(
        hotgate_testkit::described_rows(&described),
        10,
        "{described}"
    );
    assert_eq!(
        described_columns(&described),
        ["id", "customer", "amount", "ts"]
    );
    let (_, tiering) = fred
        .http(Method::GET, "/v1/tables/app.events/tiering", None)
        .await;
    assert!(tiering["watermarks"].is_object(), "{tiering}");
    let (_, described) = root.http(Method::GET, "/v1/tables/app.events", None).await;
    assert_eq!(
        described_columns(&described),
        ["id", "customer", "amount", "ts"]
    );
    assert!(described["end_offsets"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_report_flags_a_writer_that_reads_unfiltered() {
    let dir = tempfile::tempdir().unwrap();
    let server = view_server(dir.path()).await;
    let root = server.caller("root", &["admin"]);
    let report = root.http_get("/v1/tables/app.events/access").await;
    let role = |name: &str| {
        report["roles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["catalog_role"] == name)
            .unwrap_or_else(|| panic!("no role {name} in {report:#}"))
            .clone()
    };
    let reader = role("reader");
    assert_eq!(reader["unfiltered_read"], false);
    assert_eq!(reader["writes"], false);
    assert_eq!(reader["row_filters"], json!(["c1_only@1"]));
    assert_eq!(reader["denies"], json!({"amount": "no_amount"}));
    assert_eq!(reader["principal_roles"], json!(["readers"]));
    let etl = role("etl");
    assert_eq!(etl["writes"], true);
    assert_eq!(etl["unfiltered_read"], true, "a writer reads, unfiltered");
    assert_eq!(etl["read_through"][0]["privilege"], "TABLE_WRITE_DATA");
    assert_eq!(role("full")["unfiltered_read"], true);
    let mut unfiltered: Vec<&str> = report["unfiltered_readers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    unfiltered.sort();
    assert_eq!(unfiltered, ["catalog_admin", "etl", "full"]);

    // Only an access administrator may see it.
    let fred = server.caller("fred", &["fulls"]);
    let (status, _) = fred
        .http(Method::GET, "/v1/tables/app.events/access", None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_panics_fails_alone_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    write_grants(dir.path(), &content_grants());
    let server = Server::start_vars(
        dir.path(),
        &[("FAILPOINTS", "open-read=panic;describe-table=panic")],
    );
    let alice = server.caller("alice", &["writer"]);
    alice.create_table(events_table()).await;
    alice.put_ok("app.events", vec![events(0..5)]).await;
    for _ in 0..3 {
        let err = alice.get(json!({"table": "app.events"})).await.unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{}", err.message());
        let (status, _) = alice.http(Method::GET, "/v1/tables/app.events", None).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        healthy(&server).await;
    }
    // Writes and other calls go on.
    alice.put_ok("app.events", vec![events(5..10)]).await;
    let root = server.caller("root", &["admin"]);
    let (_, body) = root
        .http(
            Method::GET,
            "/v1/audit?principal=alice&decision=deny&limit=100",
            None,
        )
        .await;
    let denials = body["records"].as_array().unwrap();
    let internal = |action: &str| {
        denials
            .iter()
            .filter(|r| {
                r["action"] == action && r["reason"].as_str().unwrap().starts_with("internal:")
            })
            .count()
    };
    assert_eq!(internal("read"), 3, "{denials:#?}");
    assert_eq!(internal("GET /v1/tables/{id}"), 3, "{denials:#?}");
}
