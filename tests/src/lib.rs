//! hotgate-tests: cross-crate checks and the `hotgate-bench` program.
//!
//! The end-to-end tests of the binary live in `gateway/tests/e2e` (Cargo builds the
//! `hotgate` binary only for its own package's tests); the Python client tests live in
//! `tests/python` and run from there. This crate holds `hotgate-bench`.
