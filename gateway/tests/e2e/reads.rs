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

/// A scan that needs no row work is sent as the hot tier's stored frames; the same
/// scan with a limit goes through DataFusion. Both give the same Arrow data, on every
/// column type, whole and projected, and the metrics show which path each took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_frames_and_decoded_rows_read_the_same_on_every_type() {
    use datafusion::arrow::compute::{concat_batches, sort_to_indices, take_record_batch};

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let token = server.caller("alice", &["analyst"]);
    token
        .create_table(serde_json::json!({"namespace": "app", "name": "types",
            "columns": [
                {"name": "id", "type": "int64", "nullable": false},
                {"name": "b", "type": "bool"}, {"name": "i", "type": "int32"},
                {"name": "l", "type": "int64"}, {"name": "f", "type": "float32"},
                {"name": "d", "type": "float64"}, {"name": "s", "type": "string"},
                {"name": "bin", "type": "binary"}, {"name": "day", "type": "date32"},
                {"name": "dec", "type": "decimal(20,3)"},
                {"name": "ts", "type": "timestamp_us", "nullable": false}],
            "time_column": "ts", "bucket_key": "id", "buckets": 2}))
        .await;
    let rows = |ids: std::ops::Range<i64>| {
        use arrow_array::*;
        let ids: Vec<i64> = ids.collect();
        let valid = |i: i64| i % 5 != 2;
        let opt = |i: i64, v| valid(i).then_some(v);
        let columns: Vec<(&str, arrow_array::ArrayRef)> = vec![
            ("id", std::sync::Arc::new(Int64Array::from(ids.clone()))),
            (
                "b",
                std::sync::Arc::new(BooleanArray::from_iter(
                    ids.iter().map(|i| opt(*i, i % 3 == 0)),
                )),
            ),
            (
                "i",
                std::sync::Arc::new(Int32Array::from_iter(
                    ids.iter().map(|i| valid(*i).then_some(*i as i32 - 50)),
                )),
            ),
            (
                "l",
                std::sync::Arc::new(Int64Array::from_iter(
                    ids.iter().map(|i| valid(*i).then_some(i * 1_000_003)),
                )),
            ),
            (
                "f",
                std::sync::Arc::new(Float32Array::from_iter(
                    ids.iter().map(|i| valid(*i).then_some(*i as f32 / 7.0)),
                )),
            ),
            (
                "d",
                std::sync::Arc::new(Float64Array::from_iter(
                    ids.iter().map(|i| valid(*i).then_some(*i as f64 / 3.0)),
                )),
            ),
            (
                "s",
                std::sync::Arc::new(StringArray::from_iter(
                    ids.iter()
                        .map(|i| valid(*i).then(|| "é".repeat((*i % 4) as usize))),
                )),
            ),
            (
                "bin",
                std::sync::Arc::new(BinaryArray::from_iter(
                    ids.iter()
                        .map(|i| valid(*i).then(|| vec![*i as u8; (*i % 6) as usize])),
                )),
            ),
            (
                "day",
                std::sync::Arc::new(Date32Array::from_iter(
                    ids.iter().map(|i| valid(*i).then_some(*i as i32)),
                )),
            ),
            (
                "dec",
                std::sync::Arc::new(
                    Decimal128Array::from_iter(
                        ids.iter().map(|i| valid(*i).then_some(*i as i128 * -12345)),
                    )
                    .with_precision_and_scale(20, 3)
                    .unwrap(),
                ),
            ),
            ("ts", timestamps(ids.iter().map(|i| T0 + i * 1_000_000))),
        ];
        batch(columns)
    };
    for chunk in 0..4 {
        token
            .put_ok("app.types", vec![rows(chunk * 50..(chunk + 1) * 50)])
            .await;
    }
    let frames = |sent: &str, metrics: &str| -> u64 {
        let prefix = format!("hotgate_scan_frames_total{{sent=\"{sent}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.parse().unwrap())
    };
    let sorted = |batches: Vec<arrow_array::RecordBatch>| {
        let all = concat_batches(&batches[0].schema(), &batches).unwrap();
        let order = sort_to_indices(all.column_by_name("id").unwrap(), None, None).unwrap();
        take_record_batch(&all, &order).unwrap()
    };
    let column_sets = [
        None,
        Some(vec!["id", "s", "dec"]),
        Some(vec!["bin", "id"]),
        Some(vec!["ts", "day", "f", "id", "b"]),
    ];
    for columns in column_sets {
        let mut ticket = serde_json::json!({"table": "app.types"});
        if let Some(c) = &columns {
            ticket["columns"] = serde_json::json!(c);
        }
        let before = server.metrics().await;
        let stored = sorted(token.rows(ticket.clone()).await);
        let after = server.metrics().await;
        assert!(
            frames("stored", &after) > frames("stored", &before),
            "{columns:?} was not sent as stored frames"
        );
        ticket["limit"] = serde_json::json!(1_000_000);
        let decoded = sorted(token.rows(ticket).await);
        assert_eq!(
            frames("stored", &server.metrics().await),
            frames("stored", &after)
        );
        assert_eq!(stored.num_rows(), 200);
        assert_eq!(stored, decoded, "{columns:?}");
    }
    // A time range that cuts frames: those are decoded, the rows are the same.
    let ticket = serde_json::json!({"table": "app.types", "columns": ["id", "s"],
        "since": "2026-11-30T00:00:30Z", "until": "2026-11-30T00:02:30Z"});
    let before = server.metrics().await;
    let cut = sorted(token.rows(ticket.clone()).await);
    assert!(frames("decoded", &server.metrics().await) > frames("decoded", &before));
    let mut limited = ticket;
    limited["limit"] = serde_json::json!(1_000_000);
    assert_eq!(cut, sorted(token.rows(limited).await));
    assert_eq!(ints(&[cut], "id"), (30..150).collect::<Vec<_>>());
    server.terminate();
}
