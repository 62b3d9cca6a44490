//! Flight SQL through arrow-flight's client: the schema `GetFlightInfo` promises is the
//! one `DoGet` streams; the memory and time limits and `CancelFlightInfo` end a
//! statement with an error that names them; prepared handles are bound to their
//! principal. (The ADBC driver's tests are in `tests/python`, run by `pyarrow_client`.)

use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandPreparedStatementQuery, CommandStatementQuery, ProstMessageExt};
use arrow_flight::{Action, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus};
use arrow_flight::{FlightDescriptor, FlightInfo};
use arrow_schema::Schema;
use futures::TryStreamExt;
use prost::Message;
use tonic::{Code, Status};

use crate::harness::*;

/// GetFlightInfo of `sql` as `caller`.
async fn info(caller: &Caller, sql: &str) -> Result<FlightInfo, Status> {
    let command = CommandStatementQuery {
        query: sql.to_owned(),
        transaction_id: None,
    };
    let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
    Ok(caller
        .client()
        .get_flight_info(with_token(descriptor, caller.token()))
        .await?
        .into_inner())
}

/// DoGet of the info's one endpoint: the schema streamed and the rows.
async fn fetch(caller: &Caller, info: &FlightInfo) -> Result<(Schema, Vec<RecordBatch>), Status> {
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let data = caller
        .client()
        .do_get(with_token(ticket, caller.token()))
        .await?
        .into_inner();
    let mut stream = FlightRecordBatchStream::new_from_flight_data(data.map_err(FlightError::from));
    let mut batches = Vec::new();
    while let Some(batch) = stream.try_next().await.map_err(status_of)? {
        batches.push(batch);
    }
    let schema = stream
        .schema()
        .map(|s| s.as_ref().clone())
        .unwrap_or_else(Schema::empty);
    Ok((schema, batches))
}

fn status_of(e: FlightError) -> Status {
    match e {
        FlightError::Tonic(status) => *status,
        other => Status::unknown(other.to_string()),
    }
}

async fn run(caller: &Caller, sql: &str) -> Result<Vec<RecordBatch>, Status> {
    let info = info(caller, sql).await?;
    Ok(fetch(caller, &info).await?.1)
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

async fn cancel(caller: &Caller, info: &FlightInfo) -> Result<CancelStatus, Status> {
    let request = CancelFlightInfoRequest::new(info.clone());
    let action = Action::new("CancelFlightInfo", request.encode_to_vec());
    let mut results = caller
        .client()
        .do_action(with_token(action, caller.token()))
        .await?
        .into_inner();
    let result = results.message().await?.expect("a result");
    let result = CancelFlightInfoResult::decode(result.body).expect("a CancelFlightInfoResult");
    Ok(result.status())
}

/// A statement that runs for minutes unless stopped.
const ENDLESS: &str = "SELECT count(*) AS n FROM generate_series(1, 100000000000)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flight_info_schema_is_the_streamed_schema() {
    let server = Server::fresh();
    let writer = server.caller("alice", &["writer"]);
    writer.create_table(events_table()).await;
    writer.put_ok("app.events", vec![events(0..50)]).await;
    for sql in [
        "SELECT * FROM app.events",
        "SELECT customer, count(*) AS n, sum(amount) AS total, max(ts) FROM app.events GROUP BY customer",
        "SELECT a.id, b.customer FROM app.events a JOIN app.events b ON a.id = b.id WHERE a.id < 5",
        "SELECT id, amount * 2 AS twice, CASE WHEN id > 3 THEN NULL ELSE id END AS maybe FROM app.events",
        "SELECT 1 AS one, 'x' AS text",
    ] {
        let info = info(&writer, sql).await.unwrap();
        let promised = info.clone().try_decode_schema().unwrap();
        let (streamed, batches) = fetch(&writer, &info).await.unwrap();
        assert_eq!(promised, streamed, "{sql}");
        for b in &batches {
            assert_eq!(b.schema().as_ref(), &promised, "{sql}");
        }
    }
    let all = run(&writer, "SELECT count(*) AS n FROM app.events")
        .await
        .unwrap();
    assert_eq!(
        all[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap()
            .value(0),
        50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_time_limits_end_a_statement_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = Launch::new(dir.path())
        .env(&[
            ("HOTGATE_SQL_MEMORY_LIMIT_MB", "2"),
            ("HOTGATE_SQL_STATEMENT_TIMEOUT", "2s"),
        ])
        .start();
    let writer = server.caller("alice", &["writer"]);
    writer.create_table(events_table()).await;
    writer.put_ok("app.events", vec![events(0..100_000)]).await;
    // 100,000 groups do not fit in 2 MiB, and nothing spills.
    let status = run(
        &writer,
        "SELECT id, customer, count(*) AS n FROM app.events GROUP BY id, customer",
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("memory_limit_mb"), "{status}");
    let started = std::time::Instant::now();
    let status = run(&writer, ENDLESS).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("statement_timeout"), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // A small statement still runs.
    let small = run(
        &writer,
        "SELECT count(*) AS n FROM app.events WHERE id < 10",
    )
    .await;
    assert_eq!(rows(&small.unwrap()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_flight_info_stops_a_statement_before_and_while_it_runs() {
    let server = Server::fresh();
    let alice = server.caller("alice", &["writer"]);
    let bob = server.caller("bob", &["writer"]);

    // Cancelled before DoGet: the DoGet fails as cancelled.
    let info1 = info(&alice, ENDLESS).await.unwrap();
    let status = cancel(&bob, &info1).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status}");
    assert_eq!(
        cancel(&alice, &info1).await.unwrap(),
        CancelStatus::Cancelled
    );
    let status = fetch(&alice, &info1).await.unwrap_err();
    assert_eq!(status.code(), Code::Cancelled, "{status}");

    // Cancelled while streaming.
    let info2 = info(&alice, ENDLESS).await.unwrap();
    let running = {
        let (alice, info2) = (alice.clone(), info2.clone());
        tokio::spawn(async move { fetch(&alice, &info2).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        cancel(&alice, &info2).await.unwrap(),
        CancelStatus::Cancelled
    );
    let ended = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the cancelled statement ends")
        .unwrap();
    assert_eq!(ended.unwrap_err().code(), Code::Cancelled);
    // A finished statement is not cancellable.
    let info3 = info(&alice, "SELECT 1 AS one").await.unwrap();
    fetch(&alice, &info3).await.unwrap();
    assert_eq!(
        cancel(&alice, &info3).await.unwrap(),
        CancelStatus::NotCancellable
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_handle_serves_only_its_principal() {
    let server = Server::fresh();
    let alice = server.caller("alice", &["writer"]);
    let bob = server.caller("bob", &["writer"]);
    alice.create_table(events_table()).await;
    alice.put_ok("app.events", vec![events(0..10)]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.flight))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    client.set_token(alice.token().to_owned());
    let prepared = client
        .prepare("SELECT id FROM app.events WHERE id < 3".into(), None)
        .await
        .unwrap();
    let handle = {
        let descriptor_of = |handle: Vec<u8>| {
            let command = CommandPreparedStatementQuery {
                prepared_statement_handle: handle.into(),
            };
            FlightDescriptor::new_cmd(command.as_any().encode_to_vec())
        };
        let mut prepared = prepared;
        let info = prepared.execute().await.unwrap();
        let descriptor = info.flight_descriptor.clone().unwrap();
        let theirs = bob
            .client()
            .get_flight_info(with_token(descriptor.clone(), bob.token()))
            .await
            .unwrap_err();
        assert_eq!(theirs.code(), Code::PermissionDenied, "{theirs}");
        let forged = alice
            .client()
            .get_flight_info(with_token(descriptor_of(vec![7; 16]), alice.token()))
            .await
            .unwrap_err();
        assert_eq!(forged.code(), Code::InvalidArgument, "{forged}");
        assert!(
            forged.message().contains("unknown, closed or expired"),
            "{forged}"
        );
        let (_, batches) = fetch(&alice, &info).await.unwrap();
        assert_eq!(rows(&batches), 3);
        prepared.close().await.unwrap();
        descriptor
    };
    let closed = alice
        .client()
        .get_flight_info(with_token(handle, alice.token()))
        .await
        .unwrap_err();
    assert_eq!(closed.code(), Code::InvalidArgument, "{closed}");
}
