//! Calls to a running server: Flight (DoPut, DoGet) and HTTP, as a given principal.

use arrow_array::RecordBatch;
use arrow_flight::decode::{DecodedPayload, FlightRecordBatchStream};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
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
    http_at(server.http, method, path, token, body).await
}

async fn http_at(
    addr: std::net::SocketAddr,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("http://{addr}{path}"))
        .bearer_auth(token);
    if let Some(b) = body {
        request = request.json(&b);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// The column names of a table's description (`GET /v1/tables/{table}`).
pub fn described_columns(described: &serde_json::Value) -> Vec<String> {
    described["definition"]["columns"]
        .as_array()
        .expect("a definition with columns")
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The end offset of each log of a table's description (`GET /v1/tables/{table}`),
/// by the log's name (`day=…/bucket=N`).
pub fn described_end_offsets(described: &serde_json::Value) -> Vec<(String, u64)> {
    described["end_offsets"]
        .as_object()
        .expect("a description with end offsets")
        .iter()
        .map(|(log, end)| (log.clone(), end.as_u64().expect("an offset")))
        .collect()
}

/// The rows a table holds by its description: the sum of its logs' end offsets.
pub fn described_rows(described: &serde_json::Value) -> u64 {
    described_end_offsets(described)
        .iter()
        .map(|(_, end)| end)
        .sum()
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
    put_to(client, token, descriptor, batches).await
}

/// DoPut of `batches` with a JSON command descriptor (`{"table": .., "op": ..}`);
/// returns each PutResult's JSON.
pub async fn put_cmd(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    cmd: serde_json::Value,
    batches: Vec<RecordBatch>,
) -> Result<Vec<serde_json::Value>, tonic::Status> {
    put_to(
        client,
        token,
        FlightDescriptor::new_cmd(cmd.to_string()),
        batches,
    )
    .await
}

/// DoPut of `batches` to `descriptor`; returns each PutResult's JSON.
pub async fn put_to(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    descriptor: FlightDescriptor,
    batches: Vec<RecordBatch>,
) -> Result<Vec<serde_json::Value>, tonic::Status> {
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

/// DoGet of a JSON ticket as a stream of batches, read as they come (a follow stream).
pub async fn get_stream(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    ticket: serde_json::Value,
) -> Result<FlightRecordBatchStream, tonic::Status> {
    let response = client
        .do_get(with_token(Ticket::new(ticket.to_string()), token))
        .await?;
    let stream = response
        .into_inner()
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    Ok(FlightRecordBatchStream::new_from_flight_data(stream))
}

/// The status a Flight stream failed with.
fn status_of(e: FlightError) -> tonic::Status {
    match e {
        FlightError::Tonic(s) => *s,
        other => tonic::Status::internal(other.to_string()),
    }
}

/// DoGet of a JSON ticket; returns the batches.
pub async fn get(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    ticket: serde_json::Value,
) -> Result<Vec<RecordBatch>, tonic::Status> {
    let stream = get_stream(client, token, ticket).await?;
    stream.try_collect().await.map_err(status_of)
}

/// DoGet of a JSON ticket; returns the batches and every non-empty `app_metadata`
/// (lookups report what they found there).
pub async fn get_with_metadata(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    ticket: serde_json::Value,
) -> Result<(Vec<RecordBatch>, Vec<serde_json::Value>), tonic::Status> {
    let mut decoder = get_stream(client, token, ticket).await?.into_inner();
    let (mut batches, mut metadata) = (Vec::new(), Vec::new());
    while let Some(item) = decoder.next().await {
        let item = item.map_err(status_of)?;
        if !item.inner.app_metadata.is_empty() {
            metadata.push(serde_json::from_slice(&item.inner.app_metadata).unwrap());
        }
        if let DecodedPayload::RecordBatch(b) = item.payload {
            batches.push(b);
        }
    }
    Ok((batches, metadata))
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

/// A principal's token together with clients of the server that issued it: the calls
/// a test makes as that principal. It reads as the token itself (`&caller` is a
/// `&str`), so it also serves wherever a bare token is wanted.
#[derive(Debug, Clone)]
pub struct Caller {
    token: String,
    flight: FlightServiceClient<Channel>,
    http: std::net::SocketAddr,
}

impl Caller {
    /// `token`'s calls to `server` (the Flight channel connects on first use).
    pub fn new(server: &Server, token: String) -> Self {
        let channel = Channel::from_shared(format!("http://{}", server.flight))
            .unwrap()
            .connect_lazy();
        Self {
            token,
            flight: FlightServiceClient::new(channel)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
            http: server.http,
        }
    }

    /// The same token's calls to `server` (a restarted server on other ports).
    pub fn at(&self, server: &Server) -> Self {
        Self::new(server, self.token.clone())
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// DoGet of a JSON ticket (see [`get`]).
    pub async fn get(&self, ticket: serde_json::Value) -> Result<Vec<RecordBatch>, tonic::Status> {
        get(&mut self.flight.clone(), &self.token, ticket).await
    }

    /// DoGet of a JSON ticket as a stream, read as it comes (see [`get_stream`]).
    pub async fn stream(
        &self,
        ticket: serde_json::Value,
    ) -> Result<FlightRecordBatchStream, tonic::Status> {
        get_stream(&mut self.flight.clone(), &self.token, ticket).await
    }

    /// DoGet of a JSON ticket, which must succeed.
    pub async fn rows(&self, ticket: serde_json::Value) -> Vec<RecordBatch> {
        let what = ticket.to_string();
        self.get(ticket)
            .await
            .unwrap_or_else(|s| panic!("DoGet {what}: {s}"))
    }

    /// DoPut of `batches` to the table `namespace.name` (see [`put`]).
    pub async fn put(
        &self,
        table: &str,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<serde_json::Value>, tonic::Status> {
        let path: Vec<&str> = table.split('.').collect();
        put(&mut self.flight.clone(), &self.token, &path, batches).await
    }

    /// DoPut of `batches` with a JSON command descriptor (see [`put_cmd`]).
    pub async fn put_cmd(
        &self,
        cmd: serde_json::Value,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<serde_json::Value>, tonic::Status> {
        put_cmd(&mut self.flight.clone(), &self.token, cmd, batches).await
    }

    /// DoGet of a JSON ticket with its `app_metadata` (see [`get_with_metadata`]).
    pub async fn get_with_metadata(
        &self,
        ticket: serde_json::Value,
    ) -> Result<(Vec<RecordBatch>, Vec<serde_json::Value>), tonic::Status> {
        get_with_metadata(&mut self.flight.clone(), &self.token, ticket).await
    }

    /// DoPut of `batches` to `table`, which must succeed; returns each PutResult.
    pub async fn put_ok(&self, table: &str, batches: Vec<RecordBatch>) -> Vec<serde_json::Value> {
        self.put(table, batches)
            .await
            .unwrap_or_else(|s| panic!("DoPut to {table}: {s}"))
    }

    /// ListFlights: the flights this caller may list.
    pub async fn list_flights(&self) -> Vec<arrow_flight::FlightInfo> {
        self.client()
            .list_flights(with_token(arrow_flight::Criteria::default(), &self.token))
            .await
            .expect("ListFlights")
            .into_inner()
            .try_collect()
            .await
            .expect("ListFlights stream")
    }

    /// GetSchema of the table `namespace.name`, as this caller sees it.
    pub async fn schema_of(&self, table: &str) -> Result<arrow_schema::Schema, tonic::Status> {
        let path = table.split('.').map(str::to_owned).collect();
        let schema = self
            .client()
            .get_schema(with_token(FlightDescriptor::new_path(path), &self.token))
            .await?
            .into_inner();
        Ok(arrow_schema::Schema::try_from(&schema).expect("an IPC schema"))
    }

    /// A Flight client of the server (for calls the helpers do not cover).
    pub fn client(&self) -> FlightServiceClient<Channel> {
        self.flight.clone()
    }

    /// An HTTP call; returns the status and the JSON body (`null` when not JSON).
    pub async fn http(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        http_at(self.http, method, path, &self.token, body).await
    }

    /// An HTTP call that must succeed (2xx); returns the body.
    pub async fn http_ok(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let what = format!("{method} {path}");
        let (status, body) = self.http(method, path, body).await;
        assert!(status.is_success(), "{what}: {status} {body}");
        body
    }

    /// `GET path`, which must answer 200; returns the body.
    pub async fn http_get(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.http(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// `POST path` with `body`; returns the status and the body.
    pub async fn http_post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        self.http(reqwest::Method::POST, path, Some(body)).await
    }

    /// The audit records matching `query` (newest first, at most 1000), through
    /// `GET /v1/audit`.
    pub async fn audit_records(&self, query: &str) -> Vec<serde_json::Value> {
        let body = self
            .http_get(&format!("/v1/audit?limit=1000&{query}"))
            .await;
        body["records"]
            .as_array()
            .expect("a list of records")
            .clone()
    }

    /// Creates a table (`POST /v1/tables`), which must answer 201.
    pub async fn create_table(&self, spec: serde_json::Value) {
        let (status, body) = self.http_post("/v1/tables", spec).await;
        assert_eq!(status, 201, "create table: {body}");
    }
}

impl std::ops::Deref for Caller {
    type Target = str;

    fn deref(&self) -> &str {
        &self.token
    }
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.token)
    }
}

impl AsRef<std::ffi::OsStr> for Caller {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.token.as_ref()
    }
}
