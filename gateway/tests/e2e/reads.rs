//! Reads: projection, filter, time range, limit, changelog tails, GetFlightInfo,
//! GetSchema, ListFlights, and the errors bad reads get.

use std::time::Duration;

use arrow_flight::FlightDescriptor;
use futures::StreamExt;

use crate::harness::*;

async fn loaded() -> (tempfile::TempDir, Server, Caller) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let token = server.caller("alice", &["analyst"]);
    token.create_table(events_table()).await;
    // ids 0..300, one minute apart from T0.
    token.put_ok("app.events", vec![events(0..300)]).await;
    (dir, server, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_filter_time_range_and_limit() {
    let (_dir, _server, token) = loaded().await;

    let b = token
        .rows(serde_json::json!({"table": "app.events", "columns": ["amount", "id"]}))
        .await;
    let names: Vec<_> = b[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["amount", "id"]);
    assert_eq!(ints(&b, "id").len(), 300);

    let b = token
        .rows(serde_json::json!({
            "table": "app.events", "columns": ["id"], "filter": "id % 7 = 0 AND customer <> 'c0'"
        }))
        .await;
    let expected: Vec<i64> = (0..300).filter(|i| i % 7 == 0 && i % 5 != 0).collect();
    assert_eq!(ints(&b, "id"), expected);

    // [T0+10min, T0+20min): ids 10..20. Time bounds in the filter work too.
    let b = token
        .rows(serde_json::json!({
            "table": "app.events", "columns": ["id"],
            "since": "2026-11-30T00:10:00Z", "until": "2026-11-30T00:20:00Z"
        }))
        .await;
    assert_eq!(ints(&b, "id"), (10..20).collect::<Vec<_>>());
    let b = token
        .rows(serde_json::json!({
            "table": "app.events", "columns": ["id"],
            "filter": "ts >= '2026-11-30T04:00:00Z'"
        }))
        .await;
    assert_eq!(ints(&b, "id"), (240..300).collect::<Vec<_>>());

    let b = token
        .rows(serde_json::json!({"table": "app.events", "limit": 7}))
        .await;
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reads_name_the_problem() {
    let (_dir, server, token) = loaded().await;
    let mut client = server.client().await;
    let cases = [
        (
            serde_json::json!({"table": "app.events", "colums": ["id"]}),
            tonic::Code::InvalidArgument,
            "unknown field `colums`",
        ),
        (
            serde_json::json!({"table": "app.nope"}),
            tonic::Code::NotFound,
            "app.nope",
        ),
        (
            serde_json::json!({"table": "app.events", "columns": ["nope"]}),
            tonic::Code::InvalidArgument,
            "unknown column \"nope\"",
        ),
        (
            serde_json::json!({"table": "app.events", "filter": "id >"}),
            tonic::Code::InvalidArgument,
            "filter:",
        ),
        (
            serde_json::json!({"table": "app.events", "filter": "nope = 1"}),
            tonic::Code::InvalidArgument,
            "nope",
        ),
        (
            serde_json::json!({"table": "app.events", "since": "last tuesday"}),
            tonic::Code::InvalidArgument,
            "since:",
        ),
    ];
    for (ticket, code, needle) in cases {
        let status = token.get(ticket.clone()).await.unwrap_err();
        assert_eq!(status.code(), code, "{ticket}: {status:?}");
        assert!(
            status.message().contains(needle),
            "{ticket}: {:?} lacks {needle:?}",
            status.message()
        );
    }
    let raw = client
        .do_get(with_token(arrow_flight::Ticket::new("not json"), &token))
        .await
        .unwrap_err();
    assert_eq!(raw.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changelog_follow_receives_rows_appended_later() {
    let (_dir, _server, token) = loaded().await;
    let ticket = serde_json::json!({"table": "app.events", "columns": ["id"],
                                    "changelog": {"from": "latest", "follow": true}});
    let mut batches = token.stream(ticket).await.unwrap();
    token.put_ok("app.events", vec![events(1000..1003)]).await;
    let mut ids = Vec::new();
    // Generous: bounds a hang, measures nothing.
    while ids.len() < 3 {
        let b = tokio::time::timeout(Duration::from_secs(60), batches.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        ids.extend(ints(&[b], "id"));
    }
    ids.sort();
    assert_eq!(
        ids,
        vec![1000, 1001, 1002],
        "the tail from `latest` saw old rows or missed new ones"
    );

    // From earliest without follow: everything, then the stream ends.
    let b = token
        .rows(serde_json::json!({
            "table": "app.events", "changelog": {"from": "earliest", "follow": false}
        }))
        .await;
    assert_eq!(ints(&b, "id").len(), 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_info_schema_and_listing() {
    let (_dir, server, token) = loaded().await;
    let mut client = server.client().await;
    let cmd =
        serde_json::json!({"table": "app.events", "columns": ["id", "ts"], "filter": "id < 50"});
    let info = client
        .get_flight_info(with_token(
            FlightDescriptor::new_cmd(cmd.to_string()),
            &token,
        ))
        .await
        .unwrap()
        .into_inner();
    let schema = info.clone().try_decode_schema().unwrap();
    assert_eq!(schema.fields().len(), 2);
    assert!(info.endpoint.len() > 1, "one endpoint per bucket group");
    // Fetching every endpoint returns each row once.
    let mut ids = Vec::new();
    for e in &info.endpoint {
        let t: serde_json::Value =
            serde_json::from_slice(&e.ticket.as_ref().unwrap().ticket).unwrap();
        ids.extend(ints(&token.rows(t).await, "id"));
    }
    ids.sort();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());

    let schema = token.schema_of("app.events").await.unwrap();
    assert_eq!(schema.fields().len(), 4);
    assert_eq!(schema.field(0).metadata()["PARQUET:field_id"], "1");

    let flights = token.list_flights().await;
    assert_eq!(flights.len(), 1);
    let d = flights[0].flight_descriptor.clone().unwrap();
    assert_eq!(d.path, vec!["app", "events"]);
}
