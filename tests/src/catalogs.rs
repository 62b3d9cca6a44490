//! Real catalog servers for the tests, each on a free loopback port in a temp dir and
//! stopped on drop. Neither is a test double:
//!
//! - [`RestCatalogServer`]: rustberg, an Iceberg REST catalog from crates.io, installed
//!   by `scripts/setup` into the cached tool root (`$HOTGATE_TOOLS/bin`, by default
//!   `~/.cache/hotgate-tools/bin`). It authenticates with a static API key, sent as a
//!   bearer token: the shape of hotgate's `[catalog] token`.
//! - [`PostgresServer`]: Debian's Postgres, set up with `initdb` and `pg_ctl` (as the
//!   `postgres` user when the tests run as root, since `initdb` refuses root).
//!
//! A missing server fails the test with what to run; it is never skipped.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::free_addr;

pub(crate) fn tool(name: &str) -> PathBuf {
    let root = std::env::var_os("HOTGATE_TOOLS").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/hotgate-tools")
        },
        PathBuf::from,
    );
    let bin = root.join("bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run scripts/setup (it installs {name} into the cached tool root)",
        bin.display()
    );
    bin
}

pub(crate) fn wait_listening(addr: std::net::SocketAddr, what: &str, log: &Path) {
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} did not start listening on {addr}; its log: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A rustberg REST catalog whose warehouse is a local directory.
#[derive(Debug)]
pub struct RestCatalogServer {
    child: Child,
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:<port>`: the catalog's base URI, without `/v1`.
    pub uri: String,
    /// The API key it accepts as a bearer token.
    pub token: String,
}

impl RestCatalogServer {
    /// The API key every test catalog accepts (rustberg takes keys of at least 32
    /// characters behind its `rb_` prefix).
    pub const KEY: &'static str = "rb_hotgatetestkey0123456789abcdefghij";

    pub fn start() -> Self {
        Self::start_on(free_addr())
    }

    /// Starts it on `addr`, such as the address a server was told before the catalog
    /// was up.
    pub fn start_on(addr: std::net::SocketAddr) -> Self {
        let bin = tool("rustberg");
        let dir = tempfile::tempdir().unwrap();
        let root = std::path::absolute(dir.path()).unwrap();
        let token = Self::KEY.to_owned();
        let config = root.join("rustberg.toml");
        std::fs::write(
            &config,
            format!(
                r#"[server]
host = "127.0.0.1"
port = {port}

[server.auth]
api_key_enabled = true

[[server.auth.api_keys]]
name = "hotgate"
tenant = "default"
roles = ["admin"]
key_env = "RB_TEST_KEY"
"#,
                port = addr.port()
            ),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("warehouse")).unwrap();
        let log = root.join("rustberg.log");
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .arg("--warehouse")
            .arg(format!("file://{}", root.join("warehouse").display()))
            .arg("--catalog-url")
            .arg(format!("file://{}", root.join("catalog.redb").display()))
            .arg("--insecure-http")
            .env("RB_TEST_KEY", &token)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .expect("rustberg starts");
        wait_listening(addr, "rustberg", &log);
        Self {
            child,
            dir,
            uri: format!("http://{addr}"),
            token,
        }
    }

    /// The local directory the warehouse is in.
    pub fn warehouse_dir(&self) -> PathBuf {
        std::path::absolute(self.dir.path())
            .unwrap()
            .join("warehouse")
    }

    /// The warehouse name hotgate sends (rustberg has one warehouse).
    pub fn warehouse(&self) -> String {
        format!("file://{}", self.warehouse_dir().display())
    }

    /// hotgate's `[catalog]` section for this catalog.
    pub fn catalog_toml(&self) -> String {
        format!(
            "[catalog]\ntype = \"rest\"\nuri = \"{}\"\nwarehouse = \"{}\"\ntoken = \"{}\"\n",
            self.uri,
            self.warehouse(),
            self.token
        )
    }

    /// The same `[catalog]` section as JSON, as hotgate's config deserializes it.
    pub fn catalog_json(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "rest",
            "uri": self.uri,
            "warehouse": self.warehouse(),
            "token": self.token,
        })
    }

    /// What the server logged so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("rustberg.log")).unwrap_or_default()
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Postgres cluster in a temp dir, with a `hotgate` superuser and database, trusting
/// loopback connections.
#[derive(Debug)]
pub struct PostgresServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

fn postgres_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.into_iter()
        .rev()
        .find(|d| d.join("initdb").exists())
        .expect("Postgres is missing: run scripts/setup (it installs Debian's postgresql)")
}

fn as_postgres_user(bin: &Path, program: &str) -> Command {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(bin.join(program));
        command
    } else {
        Command::new(bin.join(program))
    }
}

fn run(mut command: Command, what: &str) {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PostgresServer {
    pub fn start() -> Self {
        let bin = postgres_bin();
        // Not a TempDir: it must belong to the postgres user, and is removed on drop.
        let dir = std::env::temp_dir().join(format!(
            "hotgate-pg-{}-{}",
            std::process::id(),
            free_addr().port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status();
        let data = dir.join("data");
        let mut initdb = as_postgres_user(&bin, "initdb");
        initdb
            .args(["-A", "trust", "-U", "hotgate", "-E", "UTF8", "-D"])
            .arg(&data);
        run(initdb, "initdb");
        let port = free_addr().port();
        let mut start = as_postgres_user(&bin, "pg_ctl");
        start
            .args(["-w", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(dir.join("postgres.log"))
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                dir.display()
            ))
            .arg("start");
        run(start, "pg_ctl start");
        let server = Self { dir, bin, port };
        server.create_database("hotgate");
        server
    }

    /// `postgres://hotgate@127.0.0.1:<port>/hotgate`.
    pub fn uri(&self) -> String {
        self.uri_of("hotgate")
    }

    /// The URI of database `name` of this cluster.
    pub fn uri_of(&self, name: &str) -> String {
        format!("postgres://hotgate@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name`, so that tests sharing the cluster keep apart.
    pub fn create_database(&self, name: &str) {
        let mut createdb = Command::new(self.bin.join("createdb"));
        createdb.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "hotgate",
            name,
        ]);
        run(createdb, "createdb");
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let mut stop = as_postgres_user(&self.bin, "pg_ctl");
        stop.args(["-D"])
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = stop.status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
