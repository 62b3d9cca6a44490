//! Starting, stopping and killing a `hotgate serve` process on loopback.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::flight_service_client::FlightServiceClient;
use tonic::transport::Channel;

use crate::client::Caller;
use crate::grants::{content_grants, write_grants};

/// The `hotgate` binary Cargo built for the gateway's integration tests: the path Cargo
/// gives at run time when it does, else the binary beside the test's `deps/` folder.
pub fn hotgate_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_hotgate") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let beside = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("hotgate"))
        .expect("the test binary lives under target/<profile>/deps");
    assert!(
        beside.exists(),
        "{} is missing: the hotgate binary is built for hotgate-gateway's tests",
        beside.display()
    );
    beside
}

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

/// How to start a server: data dir, ports, environment, config file, log.
#[derive(Debug)]
pub struct Launch {
    data_dir: PathBuf,
    flight: SocketAddr,
    http: SocketAddr,
    env: Vec<(String, String)>,
    config: Option<PathBuf>,
    log: Option<PathBuf>,
    test_grants: bool,
}

impl Launch {
    /// A server on `data_dir` with fresh ports. Unless the test wrote its own
    /// `grants.json` first (or the grants come from Polaris), the data dir gets
    /// [`content_grants`], so tests that are not about authorization run as principals
    /// holding every content privilege.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            flight: free_addr(),
            http: free_addr(),
            env: Vec::new(),
            config: None,
            log: None,
            test_grants: true,
        }
    }

    /// The ports to listen on (a restart keeps its predecessor's).
    pub fn addrs(mut self, flight: SocketAddr, http: SocketAddr) -> Self {
        (self.flight, self.http) = (flight, http);
        self
    }

    /// Environment variables for the process.
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// A configuration file (`--config`).
    pub fn config(mut self, path: &Path) -> Self {
        self.config = Some(path.to_path_buf());
        self
    }

    /// The server's log (stderr) goes to `path` instead of the test's stderr.
    pub fn log(mut self, path: &Path) -> Self {
        self.log = Some(path.to_path_buf());
        self
    }

    /// The data dir exactly as it is: on a fresh dir, the embedded default writes its
    /// bootstrap grants.
    pub fn bootstrap(mut self) -> Self {
        self.test_grants = false;
        self
    }

    /// Starts the process and waits until both ports accept connections.
    pub fn start(self) -> Server {
        let polaris = self
            .env
            .iter()
            .any(|(k, v)| k == "HOTGATE_GRANTS_SOURCE" && v == "polaris");
        if self.test_grants && !polaris && !self.data_dir.join("grants.json").exists() {
            write_grants(&self.data_dir, &content_grants());
        }
        let mut command = Command::new(hotgate_binary());
        command.args(["serve", "--data-dir"]).arg(&self.data_dir);
        if let Some(config) = &self.config {
            command.arg("--config").arg(config);
        }
        let stderr = match &self.log {
            Some(path) => std::fs::File::create(path).unwrap().into(),
            None => Stdio::inherit(),
        };
        let child = command
            .args([
                "--flight-addr",
                &self.flight.to_string(),
                "--http-addr",
                &self.http.to_string(),
            ])
            .env("HOTGATE_LOG", "error")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut server = Server {
            child,
            data_dir: self.data_dir,
            flight: self.flight,
            http: self.http,
            _temp_dir: None,
        };
        server.wait_ready();
        server
    }
}

/// A running `hotgate serve`; killed when dropped.
#[derive(Debug)]
pub struct Server {
    pub child: Child,
    pub data_dir: PathBuf,
    pub flight: SocketAddr,
    pub http: SocketAddr,
    /// The data dir of [`Server::fresh`], removed after the process is killed.
    _temp_dir: Option<tempfile::TempDir>,
}

impl Server {
    /// A server on a new temporary data dir that goes with it.
    pub fn fresh() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Self::start(dir.path());
        server._temp_dir = Some(dir);
        server
    }

    /// A server on `data_dir` with fresh ports and the test grants.
    pub fn start(data_dir: &Path) -> Self {
        Launch::new(data_dir).start()
    }

    /// [`Server::start`] on the given ports.
    pub fn start_with(data_dir: &Path, flight: SocketAddr, http: SocketAddr) -> Self {
        Launch::new(data_dir).addrs(flight, http).start()
    }

    /// [`Server::start_with`] with environment variables.
    pub fn start_env(
        data_dir: &Path,
        flight: SocketAddr,
        http: SocketAddr,
        env: &[(&str, &str)],
    ) -> Self {
        Launch::new(data_dir).addrs(flight, http).env(env).start()
    }

    /// [`Server::start`] with environment variables.
    pub fn start_vars(data_dir: &Path, env: &[(&str, &str)]) -> Self {
        Launch::new(data_dir).env(env).start()
    }

    /// The data dir exactly as it is (see [`Launch::bootstrap`]).
    pub fn start_bootstrap(data_dir: &Path) -> Self {
        Launch::new(data_dir).bootstrap().start()
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

    /// A token of the embedded issuer for `sub` with principal roles `roles`, valid 15 min.
    pub fn token(&self, sub: &str, roles: &[&str]) -> String {
        mint(&self.data_dir, sub, roles, "15m")
    }

    /// [`Server::token`] with its calls to this server (see [`Caller`]).
    pub fn caller(&self, sub: &str, roles: &[&str]) -> Caller {
        Caller::new(self, self.token(sub, roles))
    }

    /// A Flight client of this server.
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

    /// The URL of an HTTP path of this server.
    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// The Prometheus text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        let response = reqwest::get(self.http_url("/metrics")).await.unwrap();
        response.text().await.unwrap()
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

/// `hotgate token` against a data dir.
pub fn mint(data_dir: &Path, sub: &str, roles: &[&str], ttl: &str) -> String {
    let mut cmd = Command::new(hotgate_binary());
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
