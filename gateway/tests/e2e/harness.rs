//! Starting, stopping and killing the server, and client helpers.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightDescriptor, Ticket};
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;

pub const BIN: &str = env!("CARGO_BIN_EXE_hotgate");

/// A loopback address for a server a test starts. Ports come from below the kernel's
/// ephemeral range (32768 and up), one after another within this process: a port the
/// kernel hands out for a connection or a `:0` bind in the meantime can never be one of
/// them, and two tests never get the same one. Each process starts at its own offset.
pub fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = 20_000 + (std::process::id() % 20) * 600;
    for _ in 0..600 {
        let port = start + NEXT.fetch_add(1, Ordering::Relaxed) % 600;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A running `hotgate serve`.
pub struct Server {
    pub child: Child,
    pub data_dir: PathBuf,
    pub flight: SocketAddr,
    pub http: SocketAddr,
}

impl Server {
    pub fn start(data_dir: &Path) -> Self {
        Self::start_with(data_dir, free_addr(), free_addr())
    }

    pub fn start_with(data_dir: &Path, flight: SocketAddr, http: SocketAddr) -> Self {
        Self::start_env(data_dir, flight, http, &[])
    }

    /// Starts `hotgate serve`. Unless the test wrote its own `grants.json` first, the
    /// data dir gets [`content_grants`], so tests that are not about authorization run
    /// as principals holding every content privilege.
    pub fn start_env(
        data_dir: &Path,
        flight: SocketAddr,
        http: SocketAddr,
        env: &[(&str, &str)],
    ) -> Self {
        let polaris = env
            .iter()
            .any(|(k, v)| *k == "HOTGATE_GRANTS_SOURCE" && *v == "polaris");
        if !polaris && !data_dir.join("grants.json").exists() {
            write_grants(data_dir, &content_grants());
        }
        Self::spawn(data_dir, flight, http, env)
    }

    /// Starts `hotgate serve` on the data dir exactly as it is: on a fresh dir, the
    /// embedded default writes its bootstrap grants.
    pub fn start_bootstrap(data_dir: &Path) -> Self {
        Self::spawn(data_dir, free_addr(), free_addr(), &[])
    }

    /// [`Server::start_env`] with a configuration file.
    pub fn start_config(
        data_dir: &Path,
        flight: SocketAddr,
        http: SocketAddr,
        env: &[(&str, &str)],
        config: &Path,
    ) -> Self {
        if !data_dir.join("grants.json").exists() {
            write_grants(data_dir, &content_grants());
        }
        Self::spawn_with(data_dir, flight, http, env, Some(config))
    }

    fn spawn(data_dir: &Path, flight: SocketAddr, http: SocketAddr, env: &[(&str, &str)]) -> Self {
        Self::spawn_with(data_dir, flight, http, env, None)
    }

    fn spawn_with(
        data_dir: &Path,
        flight: SocketAddr,
        http: SocketAddr,
        env: &[(&str, &str)],
        config: Option<&Path>,
    ) -> Self {
        let mut command = Command::new(BIN);
        command.args(["serve", "--data-dir"]).arg(data_dir);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let child = command
            .args([
                "--flight-addr",
                &flight.to_string(),
                "--http-addr",
                &http.to_string(),
            ])
            .env("HOTGATE_LOG", "error")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut server = Self {
            child,
            data_dir: data_dir.to_path_buf(),
            flight,
            http,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        while TcpStream::connect(self.flight).is_err() || TcpStream::connect(self.http).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("hotgate exited before listening: {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "hotgate did not start listening within 120 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn token(&self, sub: &str, roles: &[&str]) -> String {
        mint(&self.data_dir, sub, roles, "15m")
    }

    pub async fn client(&self) -> FlightServiceClient<Channel> {
        let channel = Channel::from_shared(format!("http://{}", self.flight))
            .unwrap()
            .connect()
            .await
            .unwrap();
        FlightServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// SIGKILL, no cleanup.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "hotgate did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Grants for tests that are not about authorization: principals alice, ingest, py and
/// bob hold CATALOG_MANAGE_CONTENT on the catalog (through principal roles `writer` and
/// `analyst`); root / admin is the bootstrap administrator and may read `_system`;
/// ann / auditors may read `_system.audit` and nothing else.
pub fn content_grants() -> serde_json::Value {
    serde_json::json!({
        "catalogs": [{"name": "hotgate", "catalogRoles": [
            {"name": "content", "principalRoles": ["writer", "analyst"],
             "grants": [{"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"}]},
            {"name": "catalog_admin", "principalRoles": ["admin"],
             "grants": [{"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"},
                        {"type": "catalog", "privilege": "CATALOG_MANAGE_ACCESS"},
                        {"type": "namespace", "namespace": ["_system"], "privilege": "TABLE_READ_DATA"}]},
            {"name": "auditor", "principalRoles": ["auditors"],
             "grants": [{"type": "table", "namespace": ["_system"], "tableName": "audit",
                         "privilege": "TABLE_READ_DATA"}]}
        ]}],
        "principalRoles": [
            {"name": "writer", "principals": ["alice", "ingest", "py", "bob"]},
            {"name": "analyst", "principals": ["alice"]},
            {"name": "admin", "principals": ["root"]},
            {"name": "auditors", "principals": ["ann"]}
        ]
    })
}

/// Writes the grants document the file source reads.
pub fn write_grants(data_dir: &Path, doc: &serde_json::Value) {
    std::fs::create_dir_all(data_dir).unwrap();
    let tmp = data_dir.join("grants.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
    std::fs::rename(tmp, data_dir.join("grants.json")).unwrap();
}

/// An HTTP call with a bearer token; returns the status and the JSON body.
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

/// `hotgate token` against a data dir.
pub fn mint(data_dir: &Path, sub: &str, roles: &[&str], ttl: &str) -> String {
    let mut cmd = Command::new(BIN);
    cmd.args(["token", "--data-dir"])
        .arg(data_dir)
        .args(["--sub", sub, "--ttl", ttl]);
    for r in roles {
        cmd.args(["--role", r]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
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

pub fn events_table() -> serde_json::Value {
    serde_json::json!({
        "namespace": "app", "name": "events",
        "columns": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "customer", "type": "string", "nullable": false},
            {"name": "amount", "type": "float64"},
            {"name": "ts", "type": "timestamp_us", "nullable": false}
        ],
        "time_column": "ts", "bucket_key": "customer", "buckets": 4, "hot_retention": "1h"
    })
}

/// 2026-11-30T00:00:00Z in µs.
pub const T0: i64 = 1_795_996_800_000_000;

pub fn events(ids: std::ops::Range<i64>) -> RecordBatch {
    use std::sync::Arc;

    use arrow_array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    let ids: Vec<i64> = ids.collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("c{}", i % 5)),
            )),
            Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|i| *i as f64 * 1.5),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    ids.iter().map(|i| T0 + i * 60_000_000),
                )
                .with_timezone("UTC"),
            ),
        ],
    )
    .unwrap()
}

/// All values of an int64 column across batches, sorted.
pub fn ints(batches: &[RecordBatch], column: &str) -> Vec<i64> {
    let mut v: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column_by_name(column)
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    v.sort();
    v
}
