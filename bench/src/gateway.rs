//! The gateway under test, in process on a fresh data dir, and the Flight and HTTP
//! calls every benchmark makes to it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, FlightDescriptor, Ticket};
use futures::{StreamExt, TryStreamExt};
use hotgate_gateway::Config;
use hotgate_testkit::{free_addr, with_token};
use tonic::Request;
use tonic::transport::Channel;

pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub(crate) fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The bench grants: the bootstrap administrator, and two analysts who may read the
/// `bench` namespace (each under policies of its own, see `reads`).
pub(crate) fn bench_grants() -> serde_json::Value {
    serde_json::json!({
        "catalogs": [{"name": "hotgate", "catalogRoles": [
            {"name": "catalog_admin", "principalRoles": ["admin"], "grants": [
                {"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"},
                {"type": "catalog", "privilege": "CATALOG_MANAGE_ACCESS"}]},
            {"name": "reader", "principalRoles": ["analysts"], "grants": [
                {"type": "namespace", "namespace": ["bench"], "privilege": "TABLE_READ_DATA"}]},
            {"name": "reader_same_size", "principalRoles": ["analysts2"], "grants": [
                {"type": "namespace", "namespace": ["bench"], "privilege": "TABLE_READ_DATA"}]}
        ]}],
        "principalRoles": [
            {"name": "admin", "principals": ["root"]},
            {"name": "analysts", "principals": ["analyst"]},
            {"name": "analysts2", "principals": ["analyst2"]}
        ]
    })
}

/// A gateway of its own, in-process, on a fresh data dir with the bench grants.
#[derive(Debug)]
pub(crate) struct Gateway {
    pub(crate) config: Config,
    /// The administrator's token.
    pub(crate) token: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<hotgate_gateway::error::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// A gateway with its audit on or off.
    pub(crate) async fn start(audit: bool) -> BenchResult<Self> {
        Self::start_with(|config| config.audit.enabled = audit).await
    }

    /// A gateway with the configuration adjusted by `configure` (addresses and the data
    /// dir are set before it runs).
    pub(crate) async fn start_with(configure: impl FnOnce(&mut Config)) -> BenchResult<Self> {
        let dir = tempfile::tempdir()?;
        let mut config = Config {
            data_dir: dir.path().to_path_buf(),
            flight_addr: free_addr(),
            http_addr: free_addr(),
            ..Config::default()
        };
        configure(&mut config);
        std::fs::write(
            dir.path().join("grants.json"),
            serde_json::to_vec(&bench_grants())?,
        )?;
        // The key file exists before the server starts: it and the issuer share it.
        let token = mint(&config, "root", "admin")?;
        Self::launch(config, token, dir).await
    }

    /// Starts the server of `config` and waits until it is healthy.
    async fn launch(config: Config, token: String, dir: tempfile::TempDir) -> BenchResult<Self> {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(hotgate_gateway::server::run(config.clone(), async move {
            let _ = stop_rx.await;
        }));
        let gateway = Self {
            config,
            token,
            stop,
            task,
            _dir: dir,
        };
        gateway.wait_healthy().await?;
        Ok(gateway)
    }

    /// Stops the gateway and starts another with the same configuration on the same data
    /// directory (new ports); `before_start` runs in between. Returns the new gateway and
    /// the time from its start to healthy.
    pub(crate) async fn restart(
        self,
        before_start: impl FnOnce(),
    ) -> BenchResult<(Self, Duration)> {
        let Self {
            mut config,
            token,
            stop,
            task,
            _dir: dir,
        } = self;
        let _ = stop.send(());
        task.await??;
        before_start();
        config.flight_addr = free_addr();
        config.http_addr = free_addr();
        let start = Instant::now();
        let gateway = Self::launch(config, token, dir).await?;
        Ok((gateway, start.elapsed()))
    }

    /// A token of the embedded issuer for `sub` with principal role `role`.
    pub(crate) fn mint(&self, sub: &str, role: &str) -> BenchResult<String> {
        mint(&self.config, sub, role)
    }

    pub(crate) fn data_dir(&self) -> &std::path::Path {
        &self.config.data_dir
    }

    pub(crate) fn flight_addr(&self) -> SocketAddr {
        self.config.flight_addr
    }

    /// The URL of an HTTP path.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.config.http_addr)
    }

    async fn wait_healthy(&self) -> BenchResult<()> {
        let http = reqwest::Client::new();
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(self.url("/healthz")).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err("the gateway did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// An HTTP call as the administrator; a status other than 2xx is an error.
    pub(crate) async fn http(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> BenchResult<serde_json::Value> {
        let mut request = reqwest::Client::new()
            .request(method.clone(), self.url(path))
            .bearer_auth(&self.token)
            // A tiering cycle or a deletion step of a large table can take many minutes.
            .timeout(Duration::from_secs(3600));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            return Err(format!("{method} {path}: {status}: {text}").into());
        }
        Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    }

    /// Creates each table of `specs`.
    pub(crate) async fn create_tables(&self, specs: &[serde_json::Value]) -> BenchResult<()> {
        for spec in specs {
            self.http(reqwest::Method::POST, "/v1/tables", Some(spec))
                .await?;
        }
        Ok(())
    }

    /// A Flight client of this gateway.
    pub(crate) async fn client(&self) -> BenchResult<FlightServiceClient<Channel>> {
        connect(self.flight_addr()).await
    }

    /// Stops the gateway and waits for it to close its store.
    pub(crate) async fn stop(self) -> BenchResult<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

/// A token of the embedded issuer of `config`. Two hours: the longest bench (a large
/// `deletion`) must not outlive its token.
fn mint(config: &Config, sub: &str, role: &str) -> BenchResult<String> {
    let issuer = hotgate_gateway::server::embedded_issuer(config)?;
    Ok(issuer.mint(sub, &[role.into()], Duration::from_secs(7200))?)
}

pub(crate) async fn connect(addr: SocketAddr) -> BenchResult<FlightServiceClient<Channel>> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    Ok(FlightServiceClient::new(channel).max_decoding_message_size(256 << 20))
}

/// DoPut of `batches` to `descriptor` as one stream.
pub(crate) async fn put_to(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    descriptor: FlightDescriptor,
    batches: Vec<RecordBatch>,
) -> BenchResult<()> {
    let data: Vec<FlightData> = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(descriptor))
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .try_collect()
        .await?;
    let mut acks = client
        .do_put(with_token(futures::stream::iter(data), token))
        .await?
        .into_inner();
    while let Some(a) = acks.next().await {
        a?;
    }
    Ok(())
}

/// DoPut of `batches` to table `path` (`[namespace, table]`) as one stream.
pub(crate) async fn put_all(
    client: &mut FlightServiceClient<Channel>,
    token: &str,
    path: [&str; 2],
    batches: Vec<RecordBatch>,
) -> BenchResult<()> {
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    put_to(client, token, descriptor, batches).await
}

/// The DoGet stream of a ticket, decoded.
pub(crate) async fn do_get(
    client: &mut FlightServiceClient<Channel>,
    token: Option<&str>,
    ticket: String,
) -> BenchResult<FlightRecordBatchStream> {
    let request = match token {
        Some(t) => with_token(Ticket::new(ticket), t),
        None => Request::new(Ticket::new(ticket)),
    };
    let stream = client
        .do_get(request)
        .await?
        .into_inner()
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    Ok(FlightRecordBatchStream::new_from_flight_data(stream))
}

/// Reads a ticket fully; returns the rows received.
pub(crate) async fn read_all(
    client: &mut FlightServiceClient<Channel>,
    token: Option<&str>,
    ticket: &str,
) -> BenchResult<usize> {
    let mut batches = do_get(client, token, ticket.to_owned()).await?;
    let mut rows = 0;
    while let Some(b) = batches.next().await {
        rows += b?.num_rows();
    }
    Ok(rows)
}

/// Reads a follow stream whose second column is the time each row was produced, until
/// `rows` rows: receive time minus produce time, per row.
pub(crate) fn follow_latencies(
    mut tail: FlightRecordBatchStream,
    rows: u64,
) -> tokio::task::JoinHandle<crate::stats::Latencies> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::TimestampMicrosecondType;
    tokio::spawn(async move {
        let mut latencies = crate::stats::Latencies::new();
        while latencies.count() < rows {
            let Some(Ok(batch)) = tail.next().await else {
                break;
            };
            let received = now_us();
            let Some(produced) = batch
                .column(1)
                .as_primitive_opt::<TimestampMicrosecondType>()
            else {
                break;
            };
            for p in produced.values() {
                latencies.record(Duration::from_micros((received - p).max(0) as u64));
            }
        }
        latencies
    })
}
