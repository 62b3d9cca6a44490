//! A real Kafka-protocol broker for the tests: tansu (crates.io), in-memory storage, on a
//! free loopback port, stopped on drop. `scripts/setup` installs it into the cached tool
//! root. The broker is not a test double; its data lives as long as the process.
//! Topics are created, and records produced, by confluent-kafka from PyPI (see
//! `tests/python/kafka_tool.py`), never by hotgate's own code.

use std::process::{Child, Command, Stdio};

use crate::catalogs::{tool, wait_listening};
use crate::server::free_addr;

#[derive(Debug)]
pub struct KafkaBroker {
    child: Child,
    dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`, what clients bootstrap from.
    pub bootstrap: String,
}

impl KafkaBroker {
    pub fn start() -> Self {
        let bin = tool("tansu");
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let log = dir.path().join("tansu.log");
        let child = Command::new(bin)
            .arg("broker")
            .arg("--listener-url")
            .arg(format!("tcp://{addr}"))
            .arg("--advertised-listener-url")
            .arg(format!("tcp://{addr}"))
            .arg("--storage-engine")
            .arg("memory://tansu/")
            .env("RUST_LOG", "warn")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .expect("tansu starts");
        wait_listening(addr, "tansu", &log);
        Self {
            child,
            dir,
            bootstrap: addr.to_string(),
        }
    }

    /// What the broker printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tansu.log")).unwrap_or_default()
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
