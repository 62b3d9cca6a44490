//! Runs the pyarrow.flight client test (`tests/python/test_pyarrow_flight.py`) against the
//! real binary. The venv comes from `scripts/setup`; a missing venv fails the test.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::*;

#[test]
fn pyarrow_flight_walkthrough() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup (it creates the venv with pyarrow and pytest)",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let token = server.token("py", &["writer"]);
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("tests/python"))
        .env("HOTGATE_FLIGHT", format!("grpc://{}", server.flight))
        .env("HOTGATE_HTTP", format!("http://{}", server.http))
        .env("HOTGATE_TOKEN", &token)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
    assert!(text.contains("passed"), "pytest ran no test:\n{text}");
}
