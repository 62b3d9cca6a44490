//! Governance through the real server: the authorization matrix, data policies, the
//! write path, revocation of live streams, and bad grant and policy documents.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use tonic::Code;

use crate::harness::*;

/// `sales.orders`: a PII column, a region for row filters, and a card number.
fn orders_table(namespace: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "namespace": namespace, "name": name,
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "region", "type": "string", "nullable": false},
            {"name": "email", "type": "string", "tags": ["pii", "subject"]},
            {"name": "card", "type": "string", "tags": ["pii"]},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "id", "buckets": 2, "hot_retention": "1h"
    })
}

fn orders(ids: &[i64]) -> RecordBatch {
    batch([
        ("id", int64s(ids.iter().copied())),
        (
            "region",
            hotgate_testkit::strings(ids.iter().map(|i| if i % 2 == 0 { "eu" } else { "us" })),
        ),
        (
            "email",
            hotgate_testkit::strings(ids.iter().map(|i| format!("user{i}@example.com"))),
        ),
        (
            "card",
            hotgate_testkit::strings(ids.iter().map(|i| format!("4111-0000-0000-{i:04}"))),
        ),
        ("ts", timestamps(ids.iter().map(|i| T0 + i))),
    ])
}

fn strings(batches: &[RecordBatch], column: &str) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(column).unwrap().as_string::<i32>();
            (0..c.len())
                .map(|i| (!c.is_null(i)).then(|| c.value(i).to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The matrix's grant document. Each principal role `r_<name>` holds one kind of grant.
fn matrix_grants() -> serde_json::Value {
    let mut doc = grants_document();
    let on_catalog = |p: &str| serde_json::json!([{"type": "catalog", "privilege": p}]);
    let on_namespace = |ns: &str, p: &str| serde_json::json!([{"type": "namespace", "namespace": [ns], "privilege": p}]);
    let on_orders = |p: &str| {
        serde_json::json!([{"type": "table", "namespace": ["sales"], "tableName": "orders",
                            "privilege": p}])
    };
    for (name, grants, principals) in [
        ("cat", on_catalog("TABLE_READ_DATA"), &["p_cat"][..]),
        ("ns", on_namespace("sales", "TABLE_READ_DATA"), &["p_ns"]),
        (
            "parent",
            on_namespace("corp", "TABLE_READ_DATA"),
            &["p_parent"],
        ),
        ("tbl", on_orders("TABLE_READ_DATA"), &["p_tbl", "p_multi"]),
        (
            "write",
            on_orders("TABLE_WRITE_DATA"),
            &["p_write", "p_multi"],
        ),
        (
            "content",
            on_catalog("CATALOG_MANAGE_CONTENT"),
            &["p_content"],
        ),
        ("list", on_namespace("sales", "TABLE_LIST"), &["p_list"]),
        ("access", on_catalog("CATALOG_MANAGE_ACCESS"), &["p_access"]),
    ] {
        add_role(&mut doc, name, grants, &format!("r_{name}"), principals);
    }
    add_admin(&mut doc);
    doc
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
    List,
}

#[tokio::test]
async fn authorization_matrix_through_flight() {
    let dir = tempfile::tempdir().unwrap();
    write_grants(dir.path(), &matrix_grants());
    let server = Server::start(dir.path());
    let root = server.caller("root", &["admin"]);
    for (ns, t) in [
        ("sales", "orders"),
        ("sales", "other"),
        ("corp.eu", "orders"),
    ] {
        let r = create_table(&server, &root, orders_table(ns, t)).await;
        assert_eq!(r.status(), StatusCode::CREATED, "{:?}", r.text().await);
    }
    let mut client = server.client().await;
    let (so, sx, ce) = ("sales.orders", "sales.other", "corp.eu.orders");
    use Op::*;
    // (principal, requested roles, table, op, allowed)
    let cells: Vec<(&str, &[&str], &str, Op, bool)> = vec![
        // Catalog-level read covers every table, and implies listing.
        ("p_cat", &["ALL"], so, Read, true),
        ("p_cat", &["ALL"], ce, Read, true),
        ("p_cat", &["ALL"], so, List, true),
        ("p_cat", &["ALL"], so, Write, false),
        // Namespace grant: its tables only.
        ("p_ns", &["ALL"], so, Read, true),
        ("p_ns", &["ALL"], sx, Read, true),
        ("p_ns", &["ALL"], ce, Read, false),
        ("p_ns", &["ALL"], ce, List, false),
        ("p_ns", &["ALL"], so, Write, false),
        // Parent namespace `corp` covers `corp.eu.orders`.
        ("p_parent", &["ALL"], ce, Read, true),
        ("p_parent", &["ALL"], ce, List, true),
        ("p_parent", &["ALL"], so, Read, false),
        // Table grant: that table only.
        ("p_tbl", &["ALL"], so, Read, true),
        ("p_tbl", &["ALL"], sx, Read, false),
        ("p_tbl", &["ALL"], so, Write, false),
        // TABLE_WRITE_DATA is a super-privilege of read.
        ("p_write", &["ALL"], so, Write, true),
        ("p_write", &["ALL"], so, Read, true),
        ("p_write", &["ALL"], sx, Write, false),
        // CATALOG_MANAGE_CONTENT satisfies read and write everywhere.
        ("p_content", &["ALL"], ce, Write, true),
        ("p_content", &["ALL"], sx, Read, true),
        // TABLE_LIST lists but does not read.
        ("p_list", &["ALL"], so, List, true),
        ("p_list", &["ALL"], so, Read, false),
        // CATALOG_MANAGE_ACCESS governs grants, not data.
        ("p_access", &["ALL"], so, Read, false),
        ("p_access", &["ALL"], so, List, false),
        // Only activated roles count.
        ("p_multi", &["r_tbl"], so, Read, true),
        ("p_multi", &["r_tbl"], so, Write, false),
        ("p_multi", &["ALL"], so, Write, true),
        ("p_multi", &["r_cat"], so, Read, false),
        // An unknown principal gets nothing.
        ("mallory", &["ALL"], so, Read, false),
        ("mallory", &["ALL"], so, Write, false),
        ("mallory", &["ALL"], so, List, false),
        ("root", &["admin"], ce, Write, true),
    ];
    let mut failures = Vec::new();
    for (sub, roles, table, op, allowed) in &cells {
        let token = server.caller(sub, roles);
        let (ns, name) = table.rsplit_once('.').unwrap();
        let outcome: Result<(), tonic::Status> = match op {
            Read => token
                .get(serde_json::json!({"table": table}))
                .await
                .map(|_| ()),
            Write => {
                let path: Vec<&str> = ns.split('.').chain([name]).collect();
                put(&mut client, &token, &path, vec![orders(&[1])])
                    .await
                    .map(|_| ())
            }
            List => {
                let infos = token.list_flights().await;
                let want: Vec<String> = ns.split('.').chain([name]).map(str::to_owned).collect();
                let listed = infos
                    .iter()
                    .any(|i| i.flight_descriptor.as_ref().map(|d| &d.path) == Some(&want));
                if listed {
                    Ok(())
                } else {
                    Err(tonic::Status::permission_denied("not listed"))
                }
            }
        };
        let ok = match (&outcome, allowed) {
            (Ok(()), true) => true,
            (Err(s), false) => s.code() == Code::PermissionDenied,
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{sub} {roles:?} {op:?} {table}: expected allowed={allowed}, got {outcome:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} cell(s) wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Denials name the missing privilege, and an unknown table is not revealed.
    let e = get(
        &mut client,
        &server.token("p_tbl", &["ALL"]),
        serde_json::json!({"table": sx}),
    )
    .await
    .unwrap_err();
    assert!(e.message().contains("TABLE_READ_DATA"), "{}", e.message());
    let e = get(
        &mut client,
        &server.token("p_tbl", &["ALL"]),
        serde_json::json!({"table": "sales.nope"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    // Creating a table needs TABLE_CREATE on its namespace.
    let r = create_table(
        &server,
        &server.token("p_write", &["ALL"]),
        orders_table("sales", "x"),
    )
    .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Admin routes need CATALOG_MANAGE_ACCESS.
    let (s, _) = server
        .caller("p_content", &["ALL"])
        .http(Method::GET, "/v1/grants", None)
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, body) = server
        .caller("p_access", &["ALL"])
        .http(Method::GET, "/v1/grants", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["status"]["version"], 1);
}

/// ann (principal role `analyst`) and aud (`audit`) read the `sales` namespace through
/// catalog roles `eu_analyst` and `auditor`, the first two roles of the document.
fn policy_grants() -> serde_json::Value {
    let mut doc = grants_document();
    let sales = serde_json::json!([{"type": "namespace", "namespace": ["sales"],
                                    "privilege": "TABLE_READ_DATA"}]);
    add_role(&mut doc, "eu_analyst", sales.clone(), "analyst", &["ann"]);
    add_role(&mut doc, "auditor", sales, "audit", &["aud"]);
    add_admin(&mut doc);
    doc
}

#[tokio::test]
async fn policies_shape_what_each_role_sees() {
    let dir = tempfile::tempdir().unwrap();
    write_grants(dir.path(), &policy_grants());
    let server = Server::start(dir.path());
    let root = server.caller("root", &["admin"]);
    assert_eq!(
        create_table(&server, &root, orders_table("sales", "orders"))
            .await
            .status(),
        StatusCode::CREATED
    );
    root.put_ok("sales.orders", vec![orders(&[1, 2, 3, 4])])
        .await;
    let policy = |body: serde_json::Value| {
        let server = &server;
        let root = root.at(server);
        let root = root.clone();
        async move { root.http(Method::POST, "/v1/policies", Some(body)).await }
    };
    let (s, b) = policy(serde_json::json!({"id":"eu_rows","scope":{"table":"sales.orders"},"to":["eu_analyst"],"kind":"row_filter","expr":"region = 'eu'"})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["policy"]["version"], 1);
    assert_eq!(b["warnings"], serde_json::json!([]), "{b}");
    let (s, b) = policy(serde_json::json!({"id":"hash_pii","scope":{"tag":"pii"},"to":["*"],"except":["catalog_admin"],"kind":"column_mask","tag":"subject","mask":"hash"})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = policy(serde_json::json!({"id":"card_last4","scope":{"table":"sales.orders"},"to":["eu_analyst","auditor"],"kind":"column_mask","column":"card","mask":"show_last_4"})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = policy(serde_json::json!({"id":"no_card_for_analysts","scope":{"namespace":"sales"},"to":["eu_analyst"],"kind":"column_deny","tag":"pii"})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");

    let ann = server.caller("ann", &["ALL"]);
    let aud = server.caller("aud", &["ALL"]);
    let ticket = serde_json::json!({"table": "sales.orders"});

    // The analyst: EU rows only, and the pii-tagged columns denied outright (the deny
    // wins over the masks, so the columns are absent, not masked).
    let a = ann.rows(ticket.clone()).await;
    assert_eq!(ints(&a, "id"), [2, 4]);
    assert_eq!(column_names(&a), ["id", "region", "ts"]);
    // The auditor: every row, email hashed, card reduced to its last four.
    let b = aud.rows(ticket.clone()).await;
    assert_eq!(ints(&b, "id"), [1, 2, 3, 4]);
    assert_eq!(column_names(&b), ["id", "region", "email", "card", "ts"]);
    let emails = strings(&b, "email");
    assert!(
        emails.iter().all(|e| e.as_ref().unwrap().len() == 64),
        "{emails:?}"
    );
    assert!(!emails.iter().flatten().any(|e| e.contains('@')));
    let mut cards: Vec<String> = strings(&b, "card").into_iter().flatten().collect();
    cards.sort();
    assert_eq!(cards, ["****0001", "****0002", "****0003", "****0004"]);
    // The admin is exempt from the mask and not targeted by the rest.
    let c = root.rows(ticket.clone()).await;
    assert!(
        strings(&c, "email")
            .iter()
            .flatten()
            .all(|e| e.contains('@'))
    );

    // Denied columns are absent from schemas too, and asking for one names it.
    let schema = ann.schema_of("sales.orders").await.unwrap();
    assert!(schema.field_with_name("card").is_err() && schema.field_with_name("email").is_err());
    let infos = ann.list_flights().await;
    let listed = infos[0].clone().try_decode_schema().unwrap();
    assert_eq!(listed.fields().len(), 3);
    assert_refused(
        ann.get(serde_json::json!({"table":"sales.orders","columns":["id","card"]}))
            .await,
        Code::PermissionDenied,
        "\"card\"",
    );
    // A filter naming a denied column is refused, naming it (no oracle).
    assert_refused(
        ann.get(serde_json::json!({"table":"sales.orders","filter":"card LIKE '4111%'"}))
            .await,
        Code::PermissionDenied,
        "\"card\"",
    );
    // A filter on a masked column sees masked values: the clear value matches nothing.
    let hits = aud
        .rows(serde_json::json!({"table":"sales.orders","filter":"email = 'user1@example.com'"}))
        .await;
    assert_eq!(ints(&hits, "id"), Vec::<i64>::new());
    let hits = aud
        .rows(serde_json::json!({"table":"sales.orders","filter":"card LIKE '%0003'"}))
        .await;
    assert_eq!(ints(&hits, "id"), [3]);
    // A caller's expression is never evaluated on rows the policy hides: dividing by
    // zero on hidden row 3 would otherwise fail the read and reveal that row exists.
    let hits = ann
        .rows(serde_json::json!({"table":"sales.orders","filter":"10 / (id - 3) > -100"}))
        .await;
    assert_eq!(ints(&hits, "id"), [2, 4]);
    // The changelog goes through the same view.
    let log = ann
        .rows(serde_json::json!({"table":"sales.orders","changelog":{"from":"earliest"}}))
        .await;
    assert_eq!(ints(&log, "id"), [2, 4]);
    assert_eq!(column_names(&log), ["id", "region", "ts"]);

    // Fail closed: a namespace policy naming a column this table lacks denies the
    // analyst's reads, naming the policy; other roles are unaffected.
    let (s, b) = policy(serde_json::json!({"id":"broken","scope":{"namespace":"sales"},"to":["eu_analyst","eu_analsyt"],"kind":"column_mask","column":"nope","mask":"null"})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // A typo in a role name is accepted but pointed out.
    assert_eq!(b["warnings"].as_array().unwrap().len(), 1, "{b}");
    assert!(
        b["warnings"][0].as_str().unwrap().contains("eu_analsyt"),
        "{b}"
    );
    let e = ann.get(ticket.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    // The reader learns which policy blocks them, not why: the reason can quote the
    // policy's text, and goes to the server log.
    assert!(
        e.message().contains("\"broken\"") && !e.message().contains("nope"),
        "{}",
        e.message()
    );
    assert!(aud.get(ticket.clone()).await.is_ok());
    let (s, _) = root.http(Method::DELETE, "/v1/policies/broken", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(ann.get(ticket.clone()).await.is_ok());

    // Bad input: refused with a reason, and the previous version keeps serving.
    let (_, before) = root.http(Method::GET, "/v1/policies", None).await;
    for (body, want) in [
        (
            serde_json::json!({"id":"x","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_deny","column":"nope"}),
            "unknown column",
        ),
        (
            serde_json::json!({"id":"x","scope":{"table":"sales.missing"},"to":["r"],"kind":"column_deny","column":"id"}),
            "does not exist",
        ),
        (
            serde_json::json!({"id":"x","scope":{"table":"sales.orders"},"to":["r"],"kind":"row_filter","expr":"id + 1"}),
            "not boolean",
        ),
        (
            serde_json::json!({"id":"x","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","column":"id","mask":"redact"}),
            "string columns",
        ),
        (
            serde_json::json!({"id":"x","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","column":"id","mask":"blur"}),
            "unknown mask",
        ),
        (
            serde_json::json!({"id":"eu_rows","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_deny","column":"id"}),
            "already exists",
        ),
    ] {
        let (s, b) = policy(body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {b}");
        assert!(b["error"].as_str().unwrap().contains(want), "{body}: {b}");
    }
    let (_, after) = root.http(Method::GET, "/v1/policies", None).await;
    assert_eq!(before, after);
    // Policies survive a restart.
    server.terminate();
    let server = Server::start(dir.path());
    let mut client = server.client().await;
    let a = get(&mut client, &server.token("ann", &["ALL"]), ticket)
        .await
        .unwrap();
    assert_eq!(ints(&a, "id"), [2, 4]);
}

#[tokio::test]
async fn drop_and_hash_columns_never_reach_disk_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let token = server.caller("alice", &["writer"]);
    let table = serde_json::json!({
        "namespace": "app", "name": "signups",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "email", "type": "string", "write": "hash", "tags": ["pii"]},
            {"name": "password", "type": "string", "write": "drop"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "id", "buckets": 2, "hot_retention": "1h"
    });
    assert_eq!(
        create_table(&server, &token, table).await.status(),
        StatusCode::CREATED
    );
    let sentinel = "SENTINEL-drop-7f3a9c1e";
    let email = "clear-email-5b2d@example.com";
    let signups = batch([
        ("id", int64s([1, 2])),
        ("email", opt_strings([Some(email), None])),
        ("password", hotgate_testkit::strings([sentinel, sentinel])),
        ("ts", timestamps([T0, T0 + 1])),
    ]);
    token.put_ok("app.signups", vec![signups]).await;
    // A hash column sent as a non-string is refused and writes nothing.
    let bad = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![3])) as ArrayRef),
        ("email", Arc::new(Int64Array::from(vec![3])) as ArrayRef),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![T0]).with_timezone("UTC")) as ArrayRef,
        ),
    ])
    .unwrap();
    assert_refused(
        token.put("app.signups", vec![bad]).await,
        Code::InvalidArgument,
        "\"email\"",
    );

    let rows = token.rows(serde_json::json!({"table":"app.signups"})).await;
    assert_eq!(column_names(&rows), ["id", "email", "ts"]);
    let key_hex = std::fs::read_to_string(dir.path().join("hash.key")).unwrap();
    let key = hotgate_policy::HashKey::from_hex(&key_hex).unwrap();
    let mut stored: Vec<Option<String>> = strings(&rows, "email");
    stored.sort();
    assert_eq!(stored, [None, Some(key.hmac_hex(email.as_bytes()))]);
    server.terminate();

    // Every byte under the data dir: neither the dropped value nor the clear email.
    let files = all_files(dir.path()).len();
    assert!(files > 3, "searched only {files} files");
    for needle in [sentinel.as_bytes(), email.as_bytes()] {
        let holding = files_containing(dir.path(), needle);
        assert!(
            holding.is_empty(),
            "{holding:?} hold {:?}",
            String::from_utf8_lossy(needle)
        );
    }
}

#[tokio::test]
async fn revoking_a_grant_ends_a_follow_stream_and_denies_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    write_grants(dir.path(), &policy_grants());
    // No periodic refresh: only the forced sync below changes the mirror.
    let server = Server::start_vars(dir.path(), &[("HOTGATE_GRANTS_REFRESH", "0s")]);
    let root = server.caller("root", &["admin"]);
    create_table(&server, &root, orders_table("sales", "orders")).await;
    root.put_ok("sales.orders", vec![orders(&[1, 2])]).await;
    let ann = server.caller("ann", &["ALL"]);
    let mut batches = ann
        .stream(serde_json::json!({"table":"sales.orders","changelog":{"from":"earliest","follow":true}}))
        .await
        .unwrap();
    let first = batches.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);

    // Revoke: ann's principal role loses its grant.
    let mut doc = policy_grants();
    doc["catalogs"][0]["catalogRoles"][0]["grants"] = serde_json::json!([]);
    write_grants(dir.path(), &doc);
    let (s, b) = root.http(Method::GET, "/v1/grants/drift", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["in_sync"], false, "{b}");
    assert_eq!(b["differences"][0]["side"], "only_in_mirror", "{b}");
    let (s, b) = root.http(Method::POST, "/v1/grants/sync", None).await;
    assert_eq!(
        (s, &b["version"], &b["changed"]),
        (
            StatusCode::OK,
            &serde_json::json!(2),
            &serde_json::json!(true)
        ),
        "{b}"
    );
    let revoked = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match batches.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Some(e),
                None => return None,
            }
        }
    })
    .await
    .expect("the follow stream did not end within 10 s of the revoking sync");
    let waited = revoked.elapsed();
    match end {
        Some(arrow_flight::error::FlightError::Tonic(s)) => {
            assert_eq!(s.code(), Code::PermissionDenied, "{s}");
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    assert!(waited <= Duration::from_secs(5), "ended after {waited:?}");
    let e = ann
        .get(serde_json::json!({"table":"sales.orders"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // A malformed document or an unknown privilege is refused; the mirror stays.
    std::fs::write(dir.path().join("grants.json"), b"{\"catalogs\": [").unwrap();
    let (s, b) = root.http(Method::POST, "/v1/grants/sync", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let mut doc = policy_grants();
    doc["catalogs"][0]["catalogRoles"][1]["grants"][0]["privilege"] = "TABLE_READ".into();
    write_grants(dir.path(), &doc);
    let (s, b) = root.http(Method::POST, "/v1/grants/sync", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("unknown privilege \"TABLE_READ\""),
        "{b}"
    );
    let (_, b) = root.http(Method::GET, "/v1/grants", None).await;
    assert_eq!(b["status"]["version"], 2, "{b}");
    assert!(b["status"]["last_error"].as_str().is_some(), "{b}");
    let aud = server.caller("aud", &["ALL"]);
    assert!(
        aud.get(serde_json::json!({"table":"sales.orders"}))
            .await
            .is_ok()
    );
}

/// A **stub** of the Polaris management API (a test double at a boundary hotgate does not
/// own): it serves one grants document in Polaris's documented response shapes, checks
/// the bearer token, and can be told to fail.
mod polaris_stub {
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::get;
    use serde_json::{Value, json};

    pub(super) const TOKEN: &str = "stub-polaris-token";

    #[derive(Clone)]
    pub(super) struct Stub {
        pub doc: Arc<Mutex<Value>>,
        pub failing: Arc<Mutex<bool>>,
        pub addr: SocketAddr,
    }

    type Shared = (Arc<Mutex<Value>>, Arc<Mutex<bool>>);

    fn check(state: &Shared, headers: &HeaderMap) -> Result<Value, StatusCode> {
        if *state.1.lock().unwrap() {
            return Err(StatusCode::INTERNAL_SERVER_ERROR);
        }
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
        if auth != Some(&format!("Bearer {TOKEN}")) {
            return Err(StatusCode::UNAUTHORIZED);
        }
        Ok(state.0.lock().unwrap().clone())
    }

    type Reply = Result<axum::Json<Value>, StatusCode>;

    fn catalog_roles(doc: &Value, catalog: &str) -> Vec<Value> {
        doc["catalogs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == catalog)
            .flat_map(|c| c["catalogRoles"].as_array().unwrap().clone())
            .collect()
    }

    fn catalog_role(doc: &Value, catalog: &str, role: &str) -> Result<Value, StatusCode> {
        catalog_roles(doc, catalog)
            .into_iter()
            .find(|r| r["name"] == role)
            .ok_or(StatusCode::NOT_FOUND)
    }

    /// `[{"name": n, ...extra}]` for each name, as Polaris lists entities.
    fn entities(names: &Value, extra: Value) -> Vec<Value> {
        names
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                let mut e = extra.clone();
                e["name"] = n.clone();
                e
            })
            .collect()
    }

    async fn list_catalog_roles(
        State(s): State<Shared>,
        headers: HeaderMap,
        Path(catalog): Path<String>,
    ) -> Reply {
        let doc = check(&s, &headers)?;
        let names: Value = catalog_roles(&doc, &catalog)
            .iter()
            .map(|r| r["name"].clone())
            .collect();
        Ok(axum::Json(
            json!({"roles": entities(&names, json!({"properties": {}, "entityVersion": 1}))}),
        ))
    }

    async fn role_grants(
        State(s): State<Shared>,
        headers: HeaderMap,
        Path((catalog, role)): Path<(String, String)>,
    ) -> Reply {
        let role = catalog_role(&check(&s, &headers)?, &catalog, &role)?;
        Ok(axum::Json(json!({"grants": role["grants"]})))
    }

    async fn role_assignees(
        State(s): State<Shared>,
        headers: HeaderMap,
        Path((catalog, role)): Path<(String, String)>,
    ) -> Reply {
        let role = catalog_role(&check(&s, &headers)?, &catalog, &role)?;
        Ok(axum::Json(
            json!({"roles": entities(&role["principalRoles"], json!({"properties": {}}))}),
        ))
    }

    async fn principal_roles(State(s): State<Shared>, headers: HeaderMap) -> Reply {
        let doc = check(&s, &headers)?;
        let names: Value = doc["principalRoles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].clone())
            .collect();
        Ok(axum::Json(
            json!({"roles": entities(&names, json!({"federated": false}))}),
        ))
    }

    async fn principals(
        State(s): State<Shared>,
        headers: HeaderMap,
        Path(role): Path<String>,
    ) -> Reply {
        let doc = check(&s, &headers)?;
        let found = doc["principalRoles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == role)
            .cloned()
            .ok_or(StatusCode::NOT_FOUND)?;
        Ok(axum::Json(
            json!({"principals": entities(&found["principals"], json!({"clientId": "x"}))}),
        ))
    }

    pub(super) async fn start(doc: Value) -> Stub {
        let shared: Shared = (Arc::new(Mutex::new(doc)), Arc::new(Mutex::new(false)));
        let app = Router::new()
            .route(
                "/api/management/v1/catalogs/{catalog}/catalog-roles",
                get(list_catalog_roles),
            )
            .route(
                "/api/management/v1/catalogs/{catalog}/catalog-roles/{role}/grants",
                get(role_grants),
            )
            .route(
                "/api/management/v1/catalogs/{catalog}/catalog-roles/{role}/principal-roles",
                get(role_assignees),
            )
            .route("/api/management/v1/principal-roles", get(principal_roles))
            .route(
                "/api/management/v1/principal-roles/{role}/principals",
                get(principals),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Stub {
            doc: shared.0,
            failing: shared.1,
            addr,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn polaris_source_mirrors_syncs_reports_drift_and_fails_closed_when_stale() {
    let stub = polaris_stub::start(policy_grants()).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}", stub.addr);
    let server = Server::start_vars(
        dir.path(),
        &[
            ("HOTGATE_GRANTS_SOURCE", "polaris"),
            ("HOTGATE_GRANTS_POLARIS_URL", &url),
            ("HOTGATE_GRANTS_POLARIS_TOKEN", polaris_stub::TOKEN),
            ("HOTGATE_GRANTS_REFRESH", "500ms"),
            ("HOTGATE_GRANTS_MAX_STALENESS", "3s"),
        ],
    );
    let root = server.caller("root", &["admin"]);
    assert_eq!(
        create_table(&server, &root, orders_table("sales", "orders"))
            .await
            .status(),
        StatusCode::CREATED
    );
    let ann = server.caller("ann", &["ALL"]);
    let scan = serde_json::json!({"table":"sales.orders"});
    ann.rows(scan.clone()).await;

    // Drift: the source changed, the mirror not yet (sync is forced below).
    stub.doc.lock().unwrap()["catalogs"][0]["catalogRoles"][0]["grants"] = serde_json::json!([]);
    let (s, b) = root.http(Method::GET, "/v1/grants/drift", None).await;
    assert_eq!(s, StatusCode::OK);
    // The periodic refresh may already have applied it; either way the report is exact.
    if b["in_sync"] == false {
        assert_eq!(b["differences"][0]["kind"], "grant", "{b}");
        assert_eq!(b["differences"][0]["side"], "only_in_mirror", "{b}");
    }
    let (s, _) = root.http(Method::POST, "/v1/grants/sync", None).await;
    assert_eq!(s, StatusCode::OK);
    let e = ann.get(scan.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let (_, b) = root.http(Method::GET, "/v1/grants/drift", None).await;
    assert_eq!(b["in_sync"], true, "{b}");

    // The source fails: the last good mirror keeps serving until the staleness limit,
    // then every check fails closed with Unavailable.
    *stub.failing.lock().unwrap() = true;
    let (s, b) = root.http(Method::POST, "/v1/grants/sync", None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert!(root.get(scan.clone()).await.is_ok());
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let e = root.get(scan.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(e.message().contains("has not synced"), "{}", e.message());

    // The source is back: the next refresh restores service.
    *stub.failing.lock().unwrap() = false;
    let start = Instant::now();
    while root.get(scan.clone()).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "service did not recover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_embedded_default_grants_root_admin_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_bootstrap(dir.path());
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("grants.json")).unwrap()).unwrap();
    assert_eq!(
        doc["principalRoles"][0]["principals"],
        serde_json::json!(["root"])
    );
    let root = server.caller("root", &["admin"]);
    assert_eq!(
        create_table(&server, &root, orders_table("sales", "orders"))
            .await
            .status(),
        StatusCode::CREATED
    );
    root.put_ok("sales.orders", vec![orders(&[1])]).await;
    assert_eq!(
        ints(
            &root.rows(serde_json::json!({"table":"sales.orders"})).await,
            "id"
        ),
        [1]
    );
    let (s, _) = root.http(Method::GET, "/v1/grants", None).await;
    assert_eq!(s, StatusCode::OK);
    // Not even the administrator creates or writes tables in the reserved namespace.
    let r = create_table(&server, &root, orders_table("_system", "audit")).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("reserved"));
    assert_refused(
        root.put("_system.audit", vec![orders(&[1])]).await,
        Code::PermissionDenied,
        "_system",
    );
    // root without the admin role activated, and anyone else, get nothing.
    for token in [
        server.caller("root", &["reader"]),
        server.caller("alice", &["ALL"]),
        server.caller("alice", &["admin"]),
    ] {
        let e = token
            .get(serde_json::json!({"table":"sales.orders"}))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        let (s, b) = token.http(Method::GET, "/v1/tables", None).await;
        assert_eq!(
            (s, b["tables"].as_array().map(Vec::len)),
            (StatusCode::OK, Some(0))
        );
        assert_eq!(
            create_table(&server, &token, orders_table("sales", "x"))
                .await
                .status(),
            StatusCode::FORBIDDEN
        );
    }
}
