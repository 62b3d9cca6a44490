//! Child processes of a test: a test of the running test binary started as a child
//! (to be killed at a chosen moment), and commands that must succeed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An `#[ignore]`d test of this test binary, run as a child process whose stdout lines
/// the parent reads as they come (the child prints what it has acknowledged).
#[derive(Debug)]
pub struct ChildTest {
    child: Child,
    lines: Receiver<String>,
    reader: JoinHandle<()>,
    seen: Vec<String>,
}

impl ChildTest {
    /// Runs the test named `test` (its full path, e.g. `durability::kill9_child`) alone,
    /// with `env` set.
    pub fn spawn(test: &str, env: &[(&str, String)]) -> Self {
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args([
                test,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("the child test starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            reader,
            seen: Vec::new(),
        }
    }

    /// Waits until the child has printed `count` lines that start with `prefix`
    /// (panics after two minutes: the child never got that far).
    pub fn wait_for(&mut self, prefix: &str, count: usize) {
        let start = Instant::now();
        while self.seen.iter().filter(|l| l.starts_with(prefix)).count() < count {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the child printed fewer than {count} {prefix:?} lines in two minutes"
            );
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(l);
            }
        }
    }

    /// SIGKILL, no cleanup; returns every line the child printed.
    pub fn kill9(mut self) -> Vec<String> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.reader.join().unwrap();
        self.seen.extend(self.lines.try_iter());
        self.seen
    }
}

/// Runs `command`, which must exit successfully; returns its standard output.
pub fn stdout_of(command: &mut Command) -> String {
    let out = command.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{command:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Asserts that `stored`, the ids read back after a crash, holds every id of `acked`
/// (the acknowledged writes) and none twice. `context` opens the failure message.
pub fn assert_acked_once(acked: &[i64], stored: &[i64], context: &str) {
    let mut seen = std::collections::HashSet::with_capacity(stored.len());
    let twice: Vec<_> = stored
        .iter()
        .filter(|id| !seen.insert(**id))
        .take(5)
        .collect();
    assert!(twice.is_empty(), "{context}: rows stored twice: {twice:?}");
    let lost: Vec<_> = acked
        .iter()
        .filter(|id| !seen.contains(id))
        .take(5)
        .collect();
    assert!(
        lost.is_empty(),
        "{context}: acknowledged rows lost: {lost:?}"
    );
}
