//! The shared test kit (server, clients, tables, grants), and the binary's path for
//! tests that run a `hotgate` subcommand themselves.

pub(crate) use hotgate_testkit::*;

/// The `hotgate` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_hotgate");
