//! Runs the pyarrow.flight client tests (`tests/python/`: the walkthrough, governed
//! reads, the audit trail, primary-key tables), the ADBC Flight SQL tests and the pyiceberg test of the tiered
//! Iceberg table against the real binary. The venv
//! comes from `scripts/setup`; a missing venv fails the test.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::*;

/// The venv's Python; a missing venv fails the test.
pub(crate) fn venv_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup (it creates the venv with pyarrow and pytest)",
        python.display()
    );
    python
}

/// The grants of the Python tests: the test grants, plus an analyst who may only read
/// namespace `gov` and a Flight SQL analyst who may list and read namespace `sq`.
pub(crate) fn python_grants() -> serde_json::Value {
    let mut grants = content_grants();
    add_role(
        &mut grants,
        "py_reader",
        serde_json::json!([{"type": "namespace", "namespace": ["gov"], "privilege": "TABLE_READ_DATA"}]),
        "py_analysts",
        &["py_analyst"],
    );
    add_role(
        &mut grants,
        "sql_reader",
        serde_json::json!([
            {"type": "namespace", "namespace": ["sq"], "privilege": "TABLE_READ_DATA"},
            {"type": "namespace", "namespace": ["sq"], "privilege": "TABLE_LIST"}
        ]),
        "sql_analysts",
        &["sql_analyst"],
    );
    grants
}

/// Runs pytest over `tests/python` against `server` (data dir `dir`), with `select` as
/// its `-k` expression (or `PYTEST_SELECT`) and `env` added; panics unless tests ran
/// and passed.
pub(crate) fn pytest(
    server: &Server,
    dir: &std::path::Path,
    select: Option<&str>,
    env: &[(&str, String)],
) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // While iterating: PYTEST_SELECT=deletion runs the matching tests only.
    let select = std::env::var("PYTEST_SELECT")
        .ok()
        .or(select.map(str::to_owned));
    let out = Command::new(venv_python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("tests/python"))
        .args(select.map(|k| vec!["-k".to_owned(), k]).unwrap_or_default())
        .env("HOTGATE_FLIGHT", format!("grpc://{}", server.flight))
        .env("HOTGATE_HTTP", format!("http://{}", server.http))
        .env("HOTGATE_TOKEN", server.token("py", &["writer"]))
        .env("HOTGATE_DATA_DIR", std::path::absolute(dir).unwrap())
        .env("HOTGATE_ADMIN_TOKEN", server.token("root", &["admin"]))
        .env(
            "HOTGATE_ANALYST_TOKEN",
            server.token("py_analyst", &["ALL"]),
        )
        .env("HOTGATE_AUDITOR_TOKEN", server.token("ann", &["ALL"]))
        .env(
            "HOTGATE_SQL_ANALYST_TOKEN",
            server.token("sql_analyst", &["ALL"]),
        )
        .envs(env.iter().map(|(k, v)| (k, v)))
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

#[test]
fn pyarrow_flight_walkthrough() {
    let dir = tempfile::tempdir().unwrap();
    write_grants(dir.path(), &python_grants());
    let server = Server::start(dir.path());
    pytest(&server, dir.path(), None, &[]);
}

/// A pyarrow client that meets a server bug (a read that panics, through a fail point)
/// gets `FlightInternalError` with an error id and a short message: no server path, no
/// cause. The server log holds the same id with the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_shows_the_client_an_id_that_the_server_log_explains() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let data = dir.path().join("data");
    let server = Launch::new(&data)
        .env(&[("FAILPOINTS", "open-read=panic")])
        .log(&log)
        .start();
    let token = server.caller("py", &["writer"]);
    token.create_table(events_table()).await;
    token.put_ok("app.events", vec![events(0..5)]).await;

    let script = r#"
import json, os, sys
import pyarrow.flight as flight
client = flight.connect(os.environ["HOTGATE_FLIGHT"])
options = flight.FlightCallOptions(
    headers=[(b"authorization", ("Bearer " + os.environ["HOTGATE_TOKEN"]).encode())])
try:
    client.do_get(flight.Ticket(json.dumps({"table": "app.events"}).encode()), options).read_all()
    print("NO ERROR")
except flight.FlightInternalError as e:
    print("INTERNAL:" + str(e))
"#;
    let out = Command::new(venv_python())
        .args(["-c", script])
        .env("HOTGATE_FLIGHT", format!("grpc://{}", server.flight))
        .env("HOTGATE_TOKEN", &token)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let message = stdout
        .lines()
        .find_map(|l| l.strip_prefix("INTERNAL:"))
        .unwrap_or_else(|| panic!("the client saw no internal error: {stdout}"));
    let id: String = message
        .split("internal error ")
        .nth(1)
        .map(|rest| rest.chars().take_while(char::is_ascii_hexdigit).collect())
        .unwrap_or_default();
    assert_eq!(id.len(), 32, "no error id in {message:?}");
    let data_dir = std::path::absolute(&data).unwrap();
    for leak in [data_dir.to_str().unwrap(), "panicked", "open-read", ".rs:"] {
        assert!(
            !message.contains(leak),
            "{leak:?} leaked to the client: {message:?}"
        );
    }

    // The server log names the id with the cause.
    let logged = std::fs::read_to_string(&log).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("error id {id} is not in the server log:\n{logged}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("panicked"), "the cause is not logged: {line}");
}
