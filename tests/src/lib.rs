//! hotgate-testkit: what the test binaries of every crate share, so that no test file
//! builds its own batches, table specs, grants documents or server.
//!
//! - [`catalogs`]: real catalog servers (rustberg's REST catalog, Postgres) on loopback;
//! - [`batches`]: column builders, event-time constants, reading values back;
//! - [`tables`]: the shared table specs (events, wide) and their rows;
//! - [`grants`]: grants documents for the gateway's file source;
//! - [`server`]: a `hotgate serve` process on loopback (start, restart, SIGTERM, kill -9);
//! - [`client`]: Flight and HTTP calls to it as a principal;
//! - [`files`]: what a store left on disk;
//! - [`process`]: child tests killed at a chosen moment, commands that must succeed.
//!
//! Used as a dev-dependency by `hotgate-store`, `hotgate-tiering` and
//! `hotgate-gateway`, and by `hotgate-bench`. It owns no behaviour under test; the
//! Python client tests beside it (`tests/python`) are run by the gateway's tests.

pub mod batches;
pub mod catalogs;
pub mod client;
pub mod files;
pub mod grants;
pub mod kafka;
pub mod process;
pub mod server;
pub mod tables;

pub use batches::*;
pub use catalogs::*;
pub use client::*;
pub use files::*;
pub use grants::*;
pub use kafka::*;
pub use process::*;
pub use server::*;
pub use tables::*;
