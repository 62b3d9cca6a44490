//! hotgate-store: the hot tier. Iceberg-aligned, group-committed logs of Arrow IPC
//! frames, one per (day partition, bucket) of each table.
//!
//! Owns: table definitions ([`TableDef`]), routing rows to Iceberg-aligned logs
//! ([`bucket`]), the segment format and its recovery, durable appends with group commit,
//! projected and time-pruned scans, tails, and hot retention.
//! Must not touch: the network, policy decisions, or Iceberg. Other crates reach the hot
//! tier only through [`Store`] and [`HotTable`].
//!
//! ```text
//! Store ── HotTable (one per table, from TableDef)
//!            └── Log (one per day × bucket) ── writer task (group commit)
//!                  └── segments: framed Arrow IPC, in-memory frame index
//! ```

pub mod bucket;
mod error;
pub mod fs;
mod hot_table;
pub mod inspect;
mod log;
mod metrics;
pub mod primary_key;
mod scan;
mod search;
mod segment;
pub mod source_marks;
mod state_cache;
mod state_recovery;
mod store;
pub mod table_def;
mod validate;

pub use bucket::LogId;
pub use error::{ErrorKind, Result, StoreError};
pub use hot_table::{
    AppendResult, AppendedPart, ChangeResult, HotTable, LogFloor, Lookup, PendingAppend,
    RetentionReport, StateSnapshot, StateStream,
};
pub use inspect::{InspectedFrame, inspect_table};
pub use log::{Clock, Log, LogOptions, Pending, RewriteReport};
pub use metrics::{MetricsSnapshot, StoreMetrics};
pub use primary_key::{CHANGE_COLUMN, ChangeOp, state_bytes_of_string};
pub use scan::{
    BUCKET_COLUMN, COMMIT_TS_COLUMN, HotScan, OFFSET_COLUMN, ScanRequest, ScannedBatch,
    ScannedItem, Tail, change_meta_fields,
};
pub use search::{HotSearch, contains_any};
pub use segment::IpcFrame;
pub use source_marks::{SourceMarks, SourceRows};
pub use store::{DEFAULT_STATE_CACHE_BYTES, Store, StoreOptions};
pub use table_def::{
    ColumnSpec, ColumnType, TableDef, TableKind, TableName, TableSpec, TieringSpec, UTC, WriteRule,
};
