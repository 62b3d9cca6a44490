//! Deletion requests through the real binary: validation (every bad request is a 400
//! that changes nothing), the durable record, the suppression filter that hides
//! matching rows from scans of both tiers, changelogs and tiering from the moment of
//! acceptance (also after a restart and while a cycle is in flight), and a kill -9 in
//! every state. The end-to-end proof with pyiceberg and a byte search is
//! `tests/python/test_pyiceberg_deletion.py`.

use futures::TryStreamExt;
use reqwest::Method;

use crate::harness::*;
use crate::tiering::{FAST_TICK, events_in_the_cold_tier, tier};

async fn scan(server: &Server, token: &str, ticket: serde_json::Value) -> Vec<i64> {
    let mut client = server.client().await;
    let mut ids = ints(&get(&mut client, token, ticket).await.unwrap(), "id");
    ids.sort_unstable();
    ids
}

async fn all_ids(server: &Server, token: &str) -> Vec<i64> {
    scan(
        server,
        token,
        serde_json::json!({"table": "app.events", "columns": ["id"]}),
    )
    .await
}

/// Ids of the rows in the Iceberg table's current snapshot whose customer is `c3`,
/// read with iceberg-rust through hotgate's own catalog code.
async fn cold_c3_ids(dir: &std::path::Path) -> Vec<i64> {
    use hotgate_tiering::{Catalog, CatalogConfig};
    let catalog = Catalog::open(CatalogConfig::embedded(dir)).await.unwrap();
    let table = catalog
        .load(&hotgate_store::TableName::parse("app.events").unwrap())
        .await
        .unwrap();
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["id", "customer"])
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for b in &batches {
        let id = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        use arrow_array::cast::AsArray;
        let customers: Vec<&str> = match b.column(1).data_type() {
            arrow_schema::DataType::LargeUtf8 => {
                b.column(1).as_string::<i64>().iter().flatten().collect()
            }
            _ => b.column(1).as_string::<i32>().iter().flatten().collect(),
        };
        for (i, customer) in customers.iter().enumerate() {
            if *customer == "c3" {
                ids.push(id.value(i));
            }
        }
    }
    ids.sort_unstable();
    ids
}

/// Files a deletion request (`POST /v1/deletions`) and returns the accepted record;
/// anything but a 202 fails the test.
pub(crate) async fn file_deletion(
    server: &Server,
    token: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let (status, record) =
        http_json(server, Method::POST, "/v1/deletions", token, Some(body)).await;
    assert_eq!(status, 202, "{record}");
    record
}

/// Polls `GET /v1/deletions/{id}` until the request is in `state` or a later one.
pub(crate) async fn wait_for_state(
    server: &Server,
    token: &str,
    id: &str,
    state: &str,
) -> serde_json::Value {
    let start = std::time::Instant::now();
    loop {
        let path = format!("/v1/deletions/{id}");
        let (status, shown) = http_json(server, Method::GET, &path, token, None).await;
        assert_eq!(status, 200, "{shown}");
        let order = [
            "accepted",
            "hot_applied",
            "cold_applied",
            "purged",
            "verified",
        ];
        let at = |s: &serde_json::Value| order.iter().position(|o| s == o);
        if at(&shown["state"]) >= at(&serde_json::Value::from(state)) {
            return shown;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "never reached {state}: {shown}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_deletion_hides_its_rows_from_every_read_and_from_tiering() {
    let dir = tempfile::tempdir().unwrap();
    let flight = free_addr();
    let http = free_addr();
    // The purge is held back by a fail point: the request stays pending (and
    // suppressing) through `cold_applied` until the restart below.
    let (server, token, _) = crate::tiering::events_in_the_cold_tier_env(
        dir.path(),
        flight,
        http,
        0..200,
        &[("FAILPOINTS", "deletion-purge=return"), FAST_TICK[0]],
    )
    .await;
    token.put_ok("app.events", vec![events(200..260)]).await;
    let everything: Vec<i64> = (0..260).collect();
    assert_eq!(all_ids(&server, &token).await, everything);

    // Bad requests: a 400 each, and nothing is hidden.
    let bad = [
        serde_json::json!({"tables": [], "predicate": "customer = 'c3'", "subject": "s"}),
        serde_json::json!({"tables": ["app.nope"], "predicate": "customer = 'c3'", "subject": "s"}),
        serde_json::json!({"tables": ["app.events"], "predicate": "customer = = 'c3'", "subject": "s"}),
        serde_json::json!({"tables": ["app.events"], "predicate": "nope = 'c3'", "subject": "s"}),
        serde_json::json!({"tables": ["app.events"], "predicate": "1 = 1", "subject": "s"}),
        serde_json::json!({"tables": ["app.events"], "subject": "s"}),
        serde_json::json!({"tables": "all", "subject_value": "c3", "subject": "s"}),
    ];
    for body in bad {
        let (status, answer) = token
            .http(Method::POST, "/v1/deletions", Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body} → {answer}");
    }
    assert_eq!(all_ids(&server, &token).await, everything);

    // Accepted: durable, the subject only as an HMAC, and the rows hidden at once in
    // both tiers, whatever the read.
    let record = file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.events"], "predicate": "customer = 'c3'",
            "subject": "case-4711", "reason": "erasure request"}),
    )
    .await;
    assert_eq!(record["state"], "accepted");
    let id = record["id"].as_str().unwrap().to_owned();
    assert_eq!(record["subject_hmac"].as_str().unwrap().len(), 64);
    let stored = std::fs::read_to_string(dir.path().join(format!("deletions/{id}.json"))).unwrap();
    assert!(!stored.contains("case-4711"));
    let kept: Vec<i64> = (0..260).filter(|i| i % 5 != 3).collect();
    assert_eq!(all_ids(&server, &token).await, kept);
    assert_eq!(
        scan(
            &server,
            &token,
            serde_json::json!({"table": "app.events", "columns": ["id"], "filter": "customer = 'c3'"}),
        )
        .await,
        Vec::<i64>::new()
    );
    // The changelog reads the hot tier, where retention may have left some early rows.
    let tail = scan(
        &server,
        &token,
        serde_json::json!({"table": "app.events", "columns": ["id"],
            "changelog": {"from": "earliest", "follow": false}}),
    )
    .await;
    assert!(tail.iter().all(|i| i % 5 != 3), "{tail:?}");
    assert!((200..260).filter(|i| i % 5 != 3).all(|i| tail.contains(&i)));
    let (status, shown) = token
        .http(Method::GET, &format!("/v1/deletions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(shown["id"], record["id"]);
    assert_eq!(shown["targets"], record["targets"]);

    // The background step rewrites the hot segments: the request reaches hot_applied,
    // with the rows it deleted on its receipt (c3 rows 200..260 at least).
    let shown = wait_for_state(&server, &token, &id, "hot_applied").await;
    assert!(
        shown["receipt"]["hot_rows_deleted"].as_u64().unwrap() >= 12,
        "{shown}"
    );
    assert!(shown["receipt"]["hot_segments_rewritten"].as_u64().unwrap() >= 1);
    assert_eq!(all_ids(&server, &token).await, kept);
    let (status, _) = token.http(Method::GET, "/v1/deletions/nope", None).await;
    assert_eq!(status, 404);

    // The cold step rewrites the files that held c3 rows: the current snapshot has none
    // (read with iceberg-rust), and tiering after acceptance converts none either.
    let shown = wait_for_state(&server, &token, &id, "cold_applied").await;
    assert_eq!(shown["receipt"]["cold_rows_deleted"], 40, "{shown}");
    let rewritten = shown["receipt"]["cold_bytes_rewritten"].as_u64().unwrap();
    assert!(rewritten > 0 && rewritten <= shown["receipt"]["cold_bytes_total"].as_u64().unwrap());
    assert_eq!(cold_c3_ids(dir.path()).await, Vec::<i64>::new());

    token.put_ok("app.events", vec![events(260..300)]).await;
    tier(&server, &token).await;
    assert_eq!(cold_c3_ids(dir.path()).await, Vec::<i64>::new());

    // The suppression survives a restart; without the fail point the request goes on
    // to `verified`, deleting the c3 rows written while it was pending too.
    server.terminate();
    let server = Server::start_env(dir.path(), flight, http, &FAST_TICK);
    let kept: Vec<i64> = (0..300).filter(|i| i % 5 != 3).collect();
    assert_eq!(all_ids(&server, &token).await, kept);
    let shown = wait_for_state(&server, &token, &id, "verified").await;
    assert!(
        shown["receipt"]["hot_rows_deleted"].as_u64().unwrap() >= 20,
        "{shown}"
    );
    assert_eq!(all_ids(&server, &token).await, kept);
    assert_eq!(cold_c3_ids(dir.path()).await, Vec::<i64>::new());
    // Verified, the suppression is lifted: new c3 rows are new data.
    token.put_ok("app.events", vec![events(300..310)]).await;
    let ids = all_ids(&server, &token).await;
    assert!(ids.contains(&303) && ids.contains(&308), "{ids:?}");

    // The acceptance is on the audit record, without the subject in clear.
    let root = server.caller("root", &["admin"]);
    let audit = root
        .http_get("/v1/audit?limit=100&action=deletion_accepted")
        .await;
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["table"], "app.events");
    assert!(!audit.to_string().contains("case-4711"));
    server.terminate();
}

/// The race: a deletion accepted while a tiering cycle has read the subject's rows but
/// not committed them. The rows land in the cold tier, and no read ever shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_running_cycle_read_before_acceptance_never_reappear() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_vars(
        dir.path(),
        &[
            ("FAILPOINTS", "tier-before-commit=sleep(3000)"),
            FAST_TICK[0],
        ],
    );
    let token = server.caller("alice", &["analyst"]);
    token
        .create_table(crate::tiering::short_lived_events())
        .await;
    token.put_ok("app.events", vec![events(0..100)]).await;

    // The forced cycle writes its files, then waits 3 s before committing.
    let cycle = crate::tiering::spawn_forced_tier(&server, &token);
    let warehouse = crate::tiering::Warehouse::Local(dir.path().join("warehouse/app/events"));
    let start = std::time::Instant::now();
    while warehouse.count(".parquet").await == 0 {
        assert!(start.elapsed() < std::time::Duration::from_secs(30));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let record = file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.events"], "predicate": "customer = 'c3'",
            "subject": "case-race"}),
    )
    .await;

    // Read again and again through the rest of the cycle and after its commit.
    let kept: Vec<i64> = (0..100).filter(|i| i % 5 != 3).collect();
    let mut reads = 0;
    while !cycle.is_finished() {
        assert_eq!(all_ids(&server, &token).await, kept);
        reads += 1;
    }
    let report: serde_json::Value = cycle.await.unwrap().unwrap().json().await.unwrap();
    assert!(reads > 1, "the cycle did not overlap the reads");
    // The cycle committed every row it had read, the subject's included.
    assert_eq!(report["records"], 100, "{report}");
    assert_eq!(all_ids(&server, &token).await, kept);
    // The cold step then rewrites them away.
    let id = record["id"].as_str().unwrap();
    wait_for_state(&server, &token, id, "cold_applied").await;
    assert_eq!(cold_c3_ids(dir.path()).await, Vec::<i64>::new());
    assert_eq!(all_ids(&server, &token).await, kept);
    server.terminate();
}

/// A kill -9 in each state of the machine: the request is held in the state by a fail
/// point on its next step, the server is killed, and after a restart (without the fail
/// point) the request goes on to `verified`, with the rows gone from both tiers and
/// every other row still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_killed_in_each_state_resumes_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let (flight, http) = (free_addr(), free_addr());
    let (server, token, _) = events_in_the_cold_tier(dir.path(), flight, http, 0..200).await;
    token.put_ok("app.events", vec![events(200..260)]).await;
    server.terminate();

    let steps = [
        ("deletion-apply-hot", "accepted", 0),
        ("deletion-apply-cold", "hot_applied", 1),
        ("deletion-purge", "cold_applied", 2),
        ("deletion-verify", "purged", 3),
    ];
    let mut deleted = Vec::new();
    for (failpoint, state, customer) in steps {
        let held = format!("{failpoint}=return");
        let server = Server::start_env(
            dir.path(),
            flight,
            http,
            &[("FAILPOINTS", held.as_str()), FAST_TICK[0]],
        );
        let record = file_deletion(
            &server,
            &token,
            serde_json::json!({"tables": ["app.events"],
                "predicate": format!("customer = 'c{customer}'"), "subject": "case-crash"}),
        )
        .await;
        let id = record["id"].as_str().unwrap().to_owned();
        let shown = wait_for_state(&server, &token, &id, state).await;
        // Held there: the next step keeps failing at its fail point.
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        let (_, shown_again) = token
            .http(Method::GET, &format!("/v1/deletions/{id}"), None)
            .await;
        assert_eq!(shown_again["state"], state, "{shown} then {shown_again}");
        server.kill9();

        let server = Server::start_env(dir.path(), flight, http, &FAST_TICK);
        let shown = wait_for_state(&server, &token, &id, "verified").await;
        let states: Vec<&str> = shown["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["state"].as_str().unwrap())
            .collect();
        assert_eq!(
            states,
            [
                "accepted",
                "hot_applied",
                "cold_applied",
                "purged",
                "verified"
            ],
            "{shown}"
        );
        deleted.push(customer);
        let kept: Vec<i64> = (0..260).filter(|i| !deleted.contains(&(i % 5))).collect();
        assert_eq!(all_ids(&server, &token).await, kept, "after {state}");
        server.terminate();
    }
    // The last request (c3) was killed in `purged`: its rows are gone from the cold
    // tier too.
    assert_eq!(cold_c3_ids(dir.path()).await, Vec::<i64>::new());
}

/// Primary-key tables share one RocksDB, whose SST files are searched when a deletion
/// verifies: the erased row's bytes are gone from them, while another table's SST
/// holding the same value (its own data, not targeted) neither blocks verification nor
/// loses its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_searches_the_shared_state_for_its_own_table_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_vars(dir.path(), &FAST_TICK);
    let token = server.caller("alice", &["analyst"]);
    let batch = |users: Vec<String>, notes: Vec<String>| {
        batch([("user_id", strings(users)), ("note", strings(notes))])
    };
    for table in ["people", "contacts"] {
        let spec = serde_json::json!({"namespace": "app", "name": table,
            "columns": [{"name": "user_id", "type": "string", "nullable": false},
                        {"name": "note", "type": "string"}],
            "primary_key": ["user_id"], "bucket_key": "user_id", "buckets": 2});
        token.create_table(spec).await;
        let users = vec!["subject-alpha".to_owned(), format!("other-of-{table}")];
        let notes = users.iter().map(|u| format!("{table} of {u}")).collect();
        token
            .put_ok(&format!("app.{table}"), vec![batch(users, notes)])
            .await;
    }
    // Fill both memtables (8 MiB each) so RocksDB flushes them, the subject's rows
    // included, into SST files.
    let mut noise = 0x2545_F491_4F6C_DD1Du64;
    let mut letters = |n: usize| -> String {
        (0..n)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
                (b'a' + (noise % 26) as u8) as char
            })
            .collect()
    };
    for table in ["people", "contacts"] {
        for round in 0..10 {
            let users: Vec<String> = (0..16).map(|i| format!("filler-{round}-{i}")).collect();
            let notes = users.iter().map(|_| letters(64 << 10)).collect();
            token
                .put(&format!("app.{table}"), vec![batch(users, notes)])
                .await
                .unwrap();
        }
    }
    // Rows are stored in the arrow row format, which cuts strings into blocks: the
    // bytes to look for are the value's encoding.
    let state_holds = |literal: &str| {
        let encoded = hotgate_store::state_bytes_of_string(literal).unwrap();
        !files_containing(&dir.path().join("state"), &encoded).is_empty()
    };
    let start = std::time::Instant::now();
    while !(state_holds("contacts of subject-alpha") && state_holds("people of subject-alpha")) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the memtables were never flushed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let record = file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.people"],
            "predicate": "user_id = 'subject-alpha'", "subject": "case-pk"}),
    )
    .await;
    let shown = wait_for_state(&server, &token, record["id"].as_str().unwrap(), "verified").await;
    assert_eq!(shown["receipt"]["keys_erased"], 1, "{shown}");
    assert!(!state_holds("people of subject-alpha"));
    // The other table's row, and its bytes, are untouched.
    assert!(state_holds("contacts of subject-alpha"));
    let rows = |batches: Vec<arrow_array::RecordBatch>| -> usize {
        batches.iter().map(|b| b.num_rows()).sum()
    };
    let contacts = token
        .rows(
            serde_json::json!({"table": "app.contacts", "lookup": [{"user_id": "subject-alpha"}]}),
        )
        .await;
    assert_eq!(rows(contacts), 1);
    let people = token
        .rows(serde_json::json!({"table": "app.people",
            "lookup": [{"user_id": "subject-alpha"}, {"user_id": "other-of-people"}]}))
        .await;
    assert_eq!(rows(people), 1);
    server.terminate();
}

/// A deletion whose predicate fixes the bucket key proves itself on that bucket's files
/// only, but on all of them: bytes of the subject planted in a file of its bucket keep
/// it from `verified`, bytes planted in another bucket's log do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_by_bucket_key_verifies_only_when_no_file_of_its_bucket_holds_the_subject() {
    const SUBJECT: &str = "subject-zq81";
    let subject_rows = |ids: std::ops::Range<i64>| {
        let rows = events(ids.clone());
        let mut columns = rows.columns().to_vec();
        columns[rows.schema().index_of("customer").unwrap()] =
            strings(ids.map(|_| SUBJECT.to_owned()));
        arrow_array::RecordBatch::try_new(rows.schema(), columns).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let (server, token, _) =
        crate::tiering::events_in_the_cold_tier(dir.path(), free_addr(), free_addr(), 0..200).await;
    // The subject's rows in both tiers, and in the hot tier only.
    token
        .put_ok(
            "app.events",
            vec![subject_rows(1000..1010), events(200..240)],
        )
        .await;
    tier(&server, &token).await;
    token
        .put_ok(
            "app.events",
            vec![subject_rows(1010..1020), events(240..260)],
        )
        .await;

    let bucket = hotgate_store::bucket::bucket_of_str(SUBJECT, 4);
    // The hot logs' directories, `data/app/events/day=*/bucket=N`.
    let log_dirs = |of: &dyn Fn(u32) -> bool| -> Vec<std::path::PathBuf> {
        let table = dir.path().join("data/app/events");
        let mut found = Vec::new();
        for day in std::fs::read_dir(&table).unwrap() {
            let day = day.unwrap().path();
            if !day.is_dir() {
                continue;
            }
            for log in std::fs::read_dir(&day).unwrap() {
                let log = log.unwrap().path();
                let name = log.file_name().unwrap().to_str().unwrap().to_owned();
                if let Some(n) = name.strip_prefix("bucket=")
                    && of(n.parse().unwrap())
                {
                    found.push(log);
                }
            }
        }
        found
    };
    let others = log_dirs(&|b| b != bucket);
    let mine = log_dirs(&|b| b == bucket);
    assert!(!others.is_empty() && !mine.is_empty());
    let in_other = others[0].join("planted");
    let in_mine = mine[0].join("planted");
    std::fs::write(&in_other, format!("a note about {SUBJECT}")).unwrap();
    std::fs::write(&in_mine, format!("a note about {SUBJECT}")).unwrap();

    let record = file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.events"],
            "predicate": format!("customer = '{SUBJECT}'"), "subject": "case-bucket"}),
    )
    .await;
    let id = record["id"].as_str().unwrap().to_owned();
    wait_for_state(&server, &token, &id, "purged").await;
    // The proof fails on the file of the subject's bucket, and is retried.
    let path = format!("/v1/deletions/{id}");
    let start = std::time::Instant::now();
    let failing = loop {
        let shown = token.http_ok(Method::GET, &path, None).await;
        assert_ne!(shown["state"], "verified", "{shown}");
        if shown["attempts"].as_u64().unwrap_or(0) >= 2 {
            break shown;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{shown}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(failing["state"], "purged", "{failing}");
    let error = failing["last_error"].as_str().unwrap();
    assert!(error.contains("retried"), "{error}");

    // Without it the request verifies, the other bucket's planted file still there:
    // no row of that bucket can match the predicate.
    std::fs::remove_file(&in_mine).unwrap();
    let shown = wait_for_state(&server, &token, &id, "verified").await;
    assert!(in_other.exists());
    let receipt = &shown["receipt"];
    assert!(
        receipt["verify_files_skipped"].as_u64().unwrap() > 0,
        "{shown}"
    );
    let scope = receipt["verify_scope"][0].as_str().unwrap();
    assert!(
        scope.contains(&format!("buckets [{bucket}] of 4")),
        "{scope}"
    );
    // Only the rows of the subject's bucket were scanned: in the cold tier, exactly
    // those of 0..240; in the hot tier, those of 240..260 at least (never tiered) and
    // of 200..260 at most (retention drops tiered segments).
    let in_bucket = |ids: std::ops::Range<i64>| -> u64 {
        let customers: arrow_array::ArrayRef = std::sync::Arc::new(
            arrow_array::StringArray::from_iter_values(ids.map(|i| format!("c{}", i % 5))),
        );
        let buckets = hotgate_store::bucket::buckets_of(&customers, 4).unwrap();
        buckets.iter().filter(|b| **b == bucket).count() as u64
    };
    assert_eq!(
        receipt["verify_cold_rows_scanned"].as_u64().unwrap(),
        in_bucket(0..240),
        "{shown}"
    );
    let hot = receipt["verify_hot_rows_scanned"].as_u64().unwrap();
    assert!(
        (in_bucket(240..260)..=in_bucket(200..260)).contains(&hot),
        "{shown}"
    );
    let ids = all_ids(&server, &token).await;
    assert!(ids.iter().all(|i| *i < 1000), "{ids:?}");
    assert_eq!(ids.len(), 260);
    server.terminate();
}
