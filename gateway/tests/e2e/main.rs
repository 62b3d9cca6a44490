//! End-to-end tests: the real `hotgate` binary on free ports in a temp dir, driven by a
//! real Flight client (arrow-flight) and, in `pyarrow_client`, by pyarrow.flight.

mod audit;
mod auth;
mod catalogs;
mod deletion;
mod governance;
mod harness;
mod hostile;
mod ingest;
mod primary_key;
mod pyarrow_client;
mod reads;
mod retention;
mod s3;
mod schema;
mod shutdown;
mod sources;
mod sql;
mod tiering;
