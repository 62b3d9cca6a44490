//! hotgate-tiering integration tests: one binary, one module per concern. Each reads
//! what tiering wrote back through iceberg-rust's own scan.

mod catalogs;
mod commits;
mod common;
mod cycles;
mod maintenance;
mod primary_key;
mod search;
