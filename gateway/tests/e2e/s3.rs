//! The exactly-once test again with the warehouse on `s3://`, then a deletion run to
//! `verified` there, against a real S3 protocol server on loopback: `moto_server` from PyPI (`moto[server]`, installed into `.venv`
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
    let mut last = None;
    for (point, prefix) in [
        ("tier-before-commit", "before"),
        ("tier-after-commit", "after"),
    ] {
        let deployment = s3_deployment(&moto, prefix);
        killed_during_tiering(point, &deployment).await;
        // The table's files went to S3, not to a local warehouse.
        assert!(deployment.warehouse.count(".parquet").await > 0);
        assert!(!deployment.dir.path().join("warehouse").exists());
        last = Some(deployment);
    }

    // A deletion on the S3 warehouse runs to `verified`: the copy-on-write, the purge
    // (listing and deleting objects) and the search (reading every object) all go
    // through object_store.
    let deployment = last.unwrap();
    let server = deployment.start(free_addr(), free_addr(), &crate::tiering::FAST_TICK);
    let token = server.caller("alice", &["analyst"]);
    let record = crate::deletion::file_deletion(
        &server,
        &token,
        serde_json::json!({"tables": ["app.events"], "predicate": "customer = 'c3'",
            "subject": "case-s3"}),
    )
    .await;
    let shown = crate::deletion::wait_for_state(
        &server,
        &token,
        record["id"].as_str().unwrap(),
        "verified",
    )
    .await;
    let receipt = &shown["receipt"];
    assert!(
        receipt["cold_rows_deleted"].as_u64().unwrap() > 0,
        "{shown}"
    );
    assert!(
        receipt["cold_files_deleted"].as_u64().unwrap() > 0,
        "{shown}"
    );
    assert!(
        receipt["verify_files_searched"].as_u64().unwrap() > 0,
        "{shown}"
    );
    assert_eq!(
        crate::tiering::scan_ids(&server, &token).await,
        (0..180).filter(|i| i % 5 != 3).collect::<Vec<_>>()
    );
    // Only live files are left in the bucket.
    let (_, status_body) = token
        .http(reqwest::Method::GET, "/v1/tables/app.events/tiering", None)
        .await;
    assert_eq!(
        deployment.warehouse.count(".parquet").await as u64,
        status_body["files"].as_u64().unwrap()
    );
    server.terminate();
}
