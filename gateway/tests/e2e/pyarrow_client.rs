//! Runs the pyarrow.flight client tests (`tests/python/`: the walkthrough, governed
//! reads, the audit trail, primary-key tables) and the pyiceberg test of the tiered
//! Iceberg table against the real binary. The venv
//! comes from `scripts/setup`; a missing venv fails the test.

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
    // The test grants, plus an analyst who may only read namespace `gov`.
    let mut grants = content_grants();
    grants["catalogs"][0]["catalogRoles"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "py_reader", "principalRoles": ["py_analysts"],
            "grants": [{"type": "namespace", "namespace": ["gov"], "privilege": "TABLE_READ_DATA"}]}));
    grants["principalRoles"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "py_analysts", "principals": ["py_analyst"]}));
    write_grants(dir.path(), &grants);
    let server = Server::start(dir.path());
    let token = server.token("py", &["writer"]);
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("tests/python"))
        // While iterating: PYTEST_SELECT=deletion runs the matching tests only.
        .args(
            std::env::var("PYTEST_SELECT")
                .map(|k| vec!["-k".to_owned(), k])
                .unwrap_or_default(),
        )
        .env("HOTGATE_FLIGHT", format!("grpc://{}", server.flight))
        .env("HOTGATE_HTTP", format!("http://{}", server.http))
        .env("HOTGATE_TOKEN", &token)
        .env("HOTGATE_DATA_DIR", std::path::absolute(dir.path()).unwrap())
        .env("HOTGATE_ADMIN_TOKEN", server.token("root", &["admin"]))
        .env(
            "HOTGATE_ANALYST_TOKEN",
            server.token("py_analyst", &["ALL"]),
        )
        .env("HOTGATE_AUDITOR_TOKEN", server.token("ann", &["ALL"]))
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
