//! hotgate-tests: cross-crate and end-to-end tests against the real binary and real
//! clients, plus the `hotgate-bench` programs.
//!
//! Empty for now: the data-plane issue adds the first end-to-end tests.
