//! The audit trail end to end: the records every Flight call leaves, failing closed
//! when the audit cannot be written, and `verify` pinpointing damage on disk.

use std::path::Path;
use std::time::{Duration, Instant};

use arrow_flight::FlightDescriptor;
use hotgate_store::{InspectedFrame, TableName, inspect_table};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::*;

/// A literal that appears only in a filter: it must never reach the audit log.
const LITERAL: &str = "c-secret-4711";

fn audit_table() -> TableName {
    TableName::parse("_system.audit").unwrap()
}

/// Records matching `query` (newest first), read as root through `GET /v1/audit`.
async fn audit_records(server: &Server, query: &str) -> Vec<Value> {
    server.caller("root", &["admin"]).audit_records(query).await
}

/// Waits until `query` matches at least `n` records (completion records are written
/// just after their stream ends).
async fn wait_for(server: &Server, query: &str, n: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let records = audit_records(server, query).await;
        if records.len() >= n || start.elapsed() > Duration::from_secs(20) {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// The allow record and the completion record of one call.
fn pair<'a>(records: &'a [Value], action: &str) -> (&'a Value, &'a Value) {
    let allows: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == action && r["decision"] == "allow")
        .collect();
    assert_eq!(allows.len(), 1, "one {action} record: {records:#?}");
    let allow = allows[0];
    let ends: Vec<&Value> = records
        .iter()
        .filter(|r| r["action"] == "end" && r["query_id"] == allow["query_id"])
        .collect();
    assert_eq!(ends.len(), 1, "one completion of {action}: {records:#?}");
    assert!(ends[0]["seq"].as_u64() > allow["seq"].as_u64());
    (allow, ends[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flight_call_leaves_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let root = server.caller("root", &["admin"]);
    let alice = server.caller("alice", &["analyst"]);
    alice.create_table(events_table()).await;
    let (status, body) = root
        .http(
            Method::POST,
            "/v1/policies",
            Some(
                json!({"id": "redact_customer", "scope": {"table": "app.events"},
            "to": ["content"], "kind": "column_mask", "column": "customer", "mask": "redact"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let mut client = server.client().await;
    alice.put_ok("app.events", vec![events(0..50)]).await;

    let scan = alice
        .rows(json!({"table": "app.events", "columns": ["id", "customer"],
               "filter": format!("customer <> '{LITERAL}' AND id < 20")}))
        .await;
    let scanned: usize = scan.iter().map(|b| b.num_rows()).sum();
    assert_eq!(scanned, 20);
    let changes = alice
        .rows(json!({"table": "app.events", "changelog": {"from": "earliest"}}))
        .await;
    let changed: usize = changes.iter().map(|b| b.num_rows()).sum();
    assert_eq!(changed, 50);
    let descriptor = FlightDescriptor::new_path(vec!["app".into(), "events".into()]);
    client
        .get_flight_info(with_token(descriptor.clone(), &alice))
        .await
        .unwrap();
    client
        .get_schema(with_token(descriptor, &alice))
        .await
        .unwrap();

    // Denied: no grant at all, and no valid token.
    let mallory = server.caller("mallory", &["ALL"]);
    let denied = mallory
        .get(json!({"table": "app.events"}))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    let unauthenticated = get(&mut client, "not-a-token", json!({"table": "app.events"}))
        .await
        .unwrap_err();
    assert_eq!(unauthenticated.code(), tonic::Code::Unauthenticated);

    // Allow + completion per read and per write; a completion may land a moment later.
    let records = wait_for(&server, "principal=alice", 9).await;
    let (s, s_end) = pair(&records, "scan");
    assert_eq!(s["table"], "app.events");
    assert_eq!(strings(&s["columns_requested"]), ["id", "customer"]);
    assert_eq!(strings(&s["columns_returned"]), ["id", "customer"]);
    assert_eq!(strings(&s["policies"]), ["redact_customer@1"]);
    assert_eq!(strings(&s["activated_roles"]), ["analyst"]);
    assert_eq!(strings(&s["tiers"]), ["hot"]);
    assert!(s["mirror_version"].as_u64().unwrap() >= 1);
    let digest = s["query_digest"].as_str().unwrap();
    assert!(
        digest.starts_with("hmac:") && digest.len() == 69,
        "{digest}"
    );
    assert!(s["token_id"].as_str().is_some_and(|t| !t.is_empty()), "{s}");
    assert!(s["client_addr"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(s["hash"].as_str().unwrap().len() == 64);
    assert_eq!(s_end["rows"], 20);
    assert!(s_end["bytes"].as_u64().unwrap() > 0);
    assert_eq!(s_end["reason"], "completed");
    assert!(s_end["duration_ms"].is_u64());

    let (c, c_end) = pair(&records, "changelog");
    assert_eq!(
        strings(&c["columns_returned"]),
        ["id", "customer", "amount", "ts"]
    );
    assert_eq!(c_end["rows"], 50);
    let (w, w_end) = pair(&records, "write");
    assert_eq!(w["table"], "app.events");
    assert_eq!(w_end["rows"], 50);
    for action in ["flight_info", "get_schema", "create_table"] {
        let found: Vec<&Value> = records.iter().filter(|r| r["action"] == action).collect();
        assert_eq!(found.len(), 1, "{action}: {records:#?}");
        assert_eq!(found[0]["decision"], "allow");
    }

    let denials = audit_records(&server, "decision=deny").await;
    let mallory_denial = denials
        .iter()
        .find(|r| r["principal"] == "mallory")
        .expect("mallory's denial is recorded");
    assert_eq!(mallory_denial["action"], "scan");
    assert_eq!(mallory_denial["table"], "app.events");
    assert!(
        mallory_denial["reason"]
            .as_str()
            .unwrap()
            .starts_with("permission_denied:"),
        "{mallory_denial}"
    );
    // A call refused before it has a principal is recorded as it is refused.
    let unauthenticated = wait_for(&server, "action=authenticate&decision=deny", 1).await;
    assert_eq!(unauthenticated.len(), 1, "{denials:#?}");
    assert_eq!(unauthenticated[0]["principal"], "");

    // The literal of the filter is nowhere: not in a record, not in the audit's bytes.
    let all = audit_records(&server, "").await;
    assert!(!serde_json::to_string(&all).unwrap().contains(LITERAL));
    let audit_dir = dir.path().join("data/_system/audit");
    assert!(files_containing(&audit_dir, LITERAL.as_bytes()).is_empty());

    // The reads of the audit itself are audited, and the chain verifies live.
    let report = root.http_get("/v1/audit/verify").await;
    assert_eq!(report["intact"], true, "{report}");
    assert!(report["records"].as_u64().unwrap() >= all.len() as u64);
    let audit_reads = audit_records(&server, "action=audit_query&principal=root").await;
    assert!(!audit_reads.is_empty());

    // The CLI reads the same records from the running server.
    let cli = |args: &[&str]| {
        stdout_of(
            std::process::Command::new(BIN)
                .args(["audit"])
                .args(args)
                .args(["--server", &server.http.to_string()])
                .env("HOTGATE_TOKEN", &root),
        )
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect::<Vec<_>>()
    };
    let queried = cli(&[
        "query",
        "--principal",
        "alice",
        "--action",
        "scan",
        "--limit",
        "5",
    ]);
    assert_eq!(queried.len(), 1, "{queried:#?}");
    assert_eq!(queried[0]["query_id"], s["query_id"]);
    let tailed = cli(&["tail", "-n", "3", "--no-follow", "--principal", "alice"]);
    assert_eq!(tailed.len(), 3);
    assert!(
        tailed[0]["seq"].as_u64() < tailed[2]["seq"].as_u64(),
        "oldest first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_table_is_read_only_and_readable_only_with_a_grant() {
    let server = Server::fresh();
    let alice = server.caller("alice", &["ALL"]);
    let ann = server.caller("ann", &["ALL"]);
    // Catalog-wide content grants do not reach _system.
    let e = alice
        .get(json!({"table": "_system.audit"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    let (status, _) = alice.http(Method::GET, "/v1/audit", None).await;
    assert_eq!(status, 403);
    // The auditor reads it over Flight and HTTP, and finds alice's denied attempt.
    let rows = ann
        .rows(json!({"table": "_system.audit", "filter": "principal = 'alice'"}))
        .await;
    assert!(rows.iter().map(|b| b.num_rows()).sum::<usize>() >= 1);
    let body = ann
        .http_get("/v1/audit?principal=alice&decision=deny")
        .await;
    assert!(!body["records"].as_array().unwrap().is_empty());
    // Nobody writes it, not even with every role.
    let root = server.caller("root", &["ALL"]);
    let e = root
        .put("_system.audit", vec![events(0..1)])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    // Bad filters are refused with 400.
    let (status, body) = ann
        .http(Method::GET, "/v1/audit?decision=maybe", None)
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = ann.http(Method::GET, "/v1/audit?limitt=3", None).await;
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_fail_closed_when_the_audit_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let alice = server.caller("alice", &["analyst"]);
    alice.create_table(events_table()).await;
    alice.put_ok("app.events", vec![events(0..10)]).await;
    server.terminate();

    // The same data dir, with every audit append failing.
    let server = Server::start_vars(dir.path(), &[("FAILPOINTS", "audit-append=return")]);
    let alice = alice.at(&server);
    let mut client = server.client().await;
    let e = alice.get(json!({"table": "app.events"})).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    assert!(e.message().contains("audit"), "{}", e.message());
    let e = alice
        .get(json!({"table": "app.events", "changelog": {"from": "earliest"}}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    let descriptor = FlightDescriptor::new_path(vec!["app".into(), "events".into()]);
    let e = client
        .get_flight_info(with_token(descriptor, &alice))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    // A write that cannot be audited stores nothing.
    let e = alice
        .put("app.events", vec![events(10..20)])
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    let (status, body) = alice.http(Method::GET, "/v1/tables/app.events", None).await;
    assert_eq!(status, 503, "{body}");
    server.terminate();
    let server = Server::start(dir.path());
    let alice = alice.at(&server);
    let rows = alice.rows(json!({"table": "app.events"})).await;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
}

/// `hotgate audit verify` on a data dir: (exit success, the JSON report).
fn verify_cli(data_dir: &Path) -> (bool, Value) {
    let out = std::process::Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no report ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

/// A frame of the audit log on disk: its segment, byte range and first seq.
struct Frame {
    segment: std::path::PathBuf,
    position: u64,
    len: u64,
    first_seq: u64,
    actions: Vec<String>,
}

fn frames(data_dir: &Path) -> Vec<Frame> {
    inspect_table(data_dir, &audit_table(), None)
        .unwrap()
        .into_iter()
        .map(|f| {
            let InspectedFrame::Rows {
                segment,
                position,
                len,
                batch,
                ..
            } = f
            else {
                panic!("damaged frame in an intact log: {f:?}");
            };
            let records = hotgate_gateway::audit::table::from_batch(&batch).unwrap();
            Frame {
                segment,
                position,
                len,
                first_seq: records[0].seq,
                actions: records.iter().map(|r| r.action.clone()).collect(),
            }
        })
        .collect()
}

/// Replaces `from` by `to` (same length) inside a frame and fixes the frame's CRC, as a
/// careful forger would, so only the chain can tell.
fn forge(frame: &Frame, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(&frame.segment).unwrap();
    let range = frame.position as usize..(frame.position + frame.len) as usize;
    let at = bytes[range.clone()]
        .windows(from.len())
        .position(|w| w == from)
        .expect("the text is in the frame")
        + range.start;
    bytes[at..at + to.len()].copy_from_slice(to);
    let crc = crc32c::crc32c(&bytes[range.start + 8..range.end]);
    bytes[range.start + 4..range.start + 8].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&frame.segment, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_pinpoints_damage_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_vars(dir.path(), &[("HOTGATE_AUDIT_CHECKPOINT_EVERY", "4")]);
    let alice = server.caller("alice", &["analyst"]);
    alice.create_table(events_table()).await;
    alice.put_ok("app.events", vec![events(0..10)]).await;
    for _ in 0..8 {
        alice.rows(json!({"table": "app.events"})).await;
    }
    wait_for(&server, "action=end", 9).await;
    assert_eq!(server.terminate().code(), Some(0));

    let (ok, report) = verify_cli(dir.path());
    assert!(ok, "{report}");
    assert_eq!(report["intact"], true);
    assert!(report["checkpoints"].as_u64().unwrap() >= 4, "{report}");
    let all = frames(dir.path());
    assert!(all.len() >= 12);

    let damaged = |name: &str| {
        let copy = dir.path().with_extension(name);
        copy_dir(dir.path(), &copy);
        copy
    };
    let expect = |data_dir: &Path, seq: u64, kind: &str| {
        let (ok, report) = verify_cli(data_dir);
        assert!(!ok, "{report}");
        assert_eq!(report["intact"], false);
        assert_eq!(report["first_damage"]["seq"], seq, "{report}");
        assert_eq!(report["first_damage"]["kind"], kind, "{report}");
        std::fs::remove_dir_all(data_dir).unwrap();
        report
    };
    // A frame in the middle that opens with one of alice's reads (completion records
    // ride along with the next record, so frames may hold several).
    let target = all[all.len() / 2..]
        .iter()
        .find(|f| matches!(f.actions[0].as_str(), "scan" | "end"))
        .expect("a frame opening with a read record");

    // A flipped byte: the frame fails its CRC, and verify names the record's seq.
    let copy = damaged("flipped");
    let frame = frames(&copy)
        .into_iter()
        .find(|f| f.first_seq == target.first_seq)
        .unwrap();
    let mut bytes = std::fs::read(&frame.segment).unwrap();
    bytes[(frame.position + frame.len - 20) as usize] ^= 0x01;
    std::fs::write(&frame.segment, bytes).unwrap();
    let report = expect(&copy, target.first_seq, "modified");
    assert!(
        report["damaged_frame"].as_str().unwrap().contains("CRC"),
        "{report}"
    );

    // A forged edit with a valid CRC: the chain itself catches it at that record.
    let copy = damaged("forged");
    let frame = frames(&copy)
        .into_iter()
        .find(|f| f.first_seq == target.first_seq)
        .unwrap();
    forge(&frame, b"alice", b"alicf");
    expect(&copy, target.first_seq, "modified");

    // A record's frame cut out of the segment: missing at its seq.
    let copy = damaged("removed");
    let frame = frames(&copy)
        .into_iter()
        .find(|f| f.first_seq == target.first_seq)
        .unwrap();
    let mut bytes = std::fs::read(&frame.segment).unwrap();
    bytes.drain(frame.position as usize..(frame.position + frame.len) as usize);
    std::fs::write(&frame.segment, bytes).unwrap();
    expect(&copy, target.first_seq, "missing");

    // A corrupted checkpoint signature (CRC fixed): bad_signature at the checkpoint.
    let copy = damaged("signature");
    let inspected = inspect_table(&copy, &audit_table(), None).unwrap();
    let checkpoint = inspected
        .iter()
        .filter_map(|f| match f {
            InspectedFrame::Rows { batch, .. } => Some(batch),
            _ => None,
        })
        .flat_map(|b| hotgate_gateway::audit::table::from_batch(b).unwrap())
        .find(|r| r.action == "checkpoint")
        .expect("a checkpoint");
    let frame = frames(&copy)
        .into_iter()
        .rfind(|f| f.first_seq <= checkpoint.seq)
        .unwrap();
    let signature = checkpoint.signature.unwrap();
    let mut forged = signature.clone().into_bytes();
    forged[10] = if forged[10] == b'0' { b'1' } else { b'0' };
    forge(&frame, signature.as_bytes(), &forged);
    expect(&copy, checkpoint.seq, "bad_signature");

    // The published key verifies the intact log elsewhere; another key does not.
    let key = std::process::Command::new(BIN)
        .args(["audit", "pubkey", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let key = String::from_utf8(key.stdout).unwrap().trim().to_owned();
    let with_key = |k: &str| {
        std::process::Command::new(BIN)
            .args(["audit", "verify", "--public-key", k, "--data-dir"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    assert!(with_key(&key).status.success());
    let other_key = hotgate_gateway::audit::CheckpointKey::generate().public_hex();
    let other = with_key(&other_key);
    assert!(!other.status.success());
    let report: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert_eq!(report["first_damage"]["kind"], "bad_signature");
}
