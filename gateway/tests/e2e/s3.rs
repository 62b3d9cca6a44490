//! The exactly-once test again with the warehouse on `s3://`, against a real S3 protocol
//! server on loopback: `moto_server` from PyPI (`moto[server]`, installed into `.venv`
//! by `scripts/setup`), through hotgate's object_store storage. A missing moto fails
//! the test; it is not skipped.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::tiering::{Deployment, Warehouse, killed_during_tiering};

const BUCKET: &str = "hotgate-test";

/// A `moto_server` child on a free loopback port, killed on drop.
struct Moto {
    child: Child,
    addr: SocketAddr,
}

impl Moto {
    fn start() -> Self {
        let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/moto_server");
        assert!(
            bin.exists(),
            "{} is missing: run scripts/setup (it installs moto[server] into .venv)",
            bin.display()
        );
        let addr = free_addr();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &addr.port().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while TcpStream::connect(addr).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "moto_server did not start listening"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, addr }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates `bucket` (moto accepts unsigned requests).
    async fn create_bucket(&self, bucket: &str) {
        let response = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.endpoint()))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{response:?}");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data dir whose catalog (SQLite, local) puts the warehouse in `s3://<bucket>/<prefix>`.
fn s3_deployment(moto: &Moto, prefix: &str) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let abs = std::path::absolute(dir.path()).unwrap();
    let config = abs.join("hotgate.toml");
    let toml = format!(
        r#"[catalog]
type = "sql"
uri = "sqlite://{catalog}"
warehouse = "s3://{BUCKET}/{prefix}"

[catalog.props]
"s3.endpoint" = "{endpoint}"
"s3.access-key-id" = "testing"
"s3.secret-access-key" = "testing"
"s3.region" = "us-east-1"
"s3.path-style-access" = "true"
"#,
        catalog = abs.join("catalog.db").display(),
        endpoint = moto.endpoint(),
    );
    std::fs::write(&config, toml).unwrap();
    Deployment {
        dir,
        config: Some(config),
        warehouse: Warehouse::S3 {
            list_url: format!(
                "{}/{BUCKET}?list-type=2&prefix={prefix}/app/events/",
                moto.endpoint()
            ),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_on_an_s3_warehouse() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    // Both kill points, each on its own prefix of the one bucket.
    for (point, prefix) in [
        ("tier-before-commit", "before"),
        ("tier-after-commit", "after"),
    ] {
        let deployment = s3_deployment(&moto, prefix);
        killed_during_tiering(point, &deployment).await;
        // The table's files went to S3, not to a local warehouse.
        assert!(deployment.warehouse.count(".parquet").await > 0);
        assert!(!deployment.dir.path().join("warehouse").exists());
    }
}
