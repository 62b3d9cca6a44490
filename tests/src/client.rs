//! Calls to a running server: Flight (DoPut, DoGet) and HTTP, as a given principal.

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightDescriptor, Ticket};
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;

use crate::server::Server;

/// `message` with `authorization: Bearer <token>`.
pub fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// An HTTP call with a bearer token; returns the status and the JSON body (`null` when
/// the body is not JSON).
pub async fn http_json(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .request(method, server.http_url(path))
        .bearer_auth(token);
    if let Some(b) = body {
        request = request.json(&b);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// `GET path`, which must answer 200; returns the JSON body.
pub async fn http_get_ok(server: &Server, path: &str, token: &str) -> serde_json::Value {
    let (status, body) = http_json(server, reqwest::Method::GET, path, token, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// `POST path` with a JSON body; returns the status and the JSON body.
pub async fn http_post(
    server: &Server,
    path: &str,
    token: &str,
    body: serde_json::Value,
) -> (reqwest::StatusCode, serde_json::Value) {
    http_json(server, reqwest::Method::POST, path, token, Some(body)).await
}

/// Creates a table over HTTP.
pub async fn create_table(
    server: &Server,
    token: &str,
    body: serde_json::Value,
) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.http_url("/v1/tables"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// Creates a table over HTTP, which must answer 201.
pub async fn create_table_ok(server: &Server, token: &str, body: serde_json::Value) {
    let response = create_table(server, token, body).await;
    let status = response.status();
    assert_eq!(status, 201, "{}", response.text().await.unwrap_or_default());
}

/// DoPut of `batches` to the descriptor path `[namespace..., table]`; returns each
/// PutResult's JSON.
pub async fn put(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    path: &[&str],
    batches: Vec<RecordBatch>,
) -> Result<Vec<serde_json::Value>, tonic::Status> {
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    let data: Vec<_> = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(descriptor))
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .try_collect()
        .await
        .unwrap();
    let response = client
        .do_put(with_token(futures::stream::iter(data), token))
        .await?;
    let mut out = Vec::new();
    let mut stream = response.into_inner();
    while let Some(r) = stream.next().await {
        let r = r?;
        out.push(serde_json::from_slice(&r.app_metadata).unwrap());
    }
    Ok(out)
}

/// DoGet of a JSON ticket; returns the batches.
pub async fn get(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    ticket: serde_json::Value,
) -> Result<Vec<RecordBatch>, tonic::Status> {
    let response = client
        .do_get(with_token(Ticket::new(ticket.to_string()), token))
        .await?;
    let stream = response
        .into_inner()
        .map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s)));
    FlightRecordBatchStream::new_from_flight_data(stream)
        .try_collect()
        .await
        .map_err(|e| match e {
            arrow_flight::error::FlightError::Tonic(s) => *s,
            other => tonic::Status::internal(other.to_string()),
        })
}

/// Asserts that a call failed with `code` and a message containing `needle`; returns
/// the message.
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    needle: &str,
) -> String {
    let status = result.expect_err("the call should have been refused");
    assert_eq!(status.code(), code, "{}", status.message());
    assert!(
        status.message().contains(needle),
        "{needle:?} not in {:?}",
        status.message()
    );
    status.message().to_owned()
}
