//! hotgate-tiering: the Iceberg cold tier.
//!
//! Owns: the catalog ([`catalog`]), object storage ([`storage`]), the Iceberg table that
//! mirrors a `TableDef` ([`table_spec`]), conversion of hot logs into Parquet files
//! ([`convert`]), hotgate-built snapshot commits ([`commit`]), the tiering loop and its
//! exactly-once offsets ([`tierer`], [`offsets`]), the source offsets a snapshot holds
//! ([`source_offsets`]), maintenance ([`maintenance`]), cold
//! retention ([`retention`]), erasing history ([`history`]), read leases that keep files
//! under running reads (`leases`), searching storage for deleted values ([`search`]), cold reads ([`cold_scan`]) and the
//! rebuild of a primary-key table's lost buckets from the cold tier (`restore`).
//! Must not touch: the network-facing data plane or policy decisions; it reads the hot
//! tier only through `hotgate-store`'s public API.
//!
//! ```text
//! Tierer ── per table: due logs ── Converter (Parquet per (day, bucket))
//!                                 └── commit (CAS on the catalog pointer, hotgate.offsets)
//! ```

pub mod catalog;
pub mod cold_scan;
pub mod commit;
pub mod convert;
pub mod cow;
mod error;
pub mod files;
pub mod history;
mod leases;
pub mod maintenance;
pub mod offsets;
mod restore;
pub mod retention;
pub mod search;
pub mod source_offsets;
pub mod storage;
pub mod table_spec;
pub mod tierer;

pub use catalog::rest::RestConfig;
pub use catalog::{Catalog, CatalogConfig, CommitStats, Secret};
pub use cold_scan::{
    CmpOp, ColdFiles, ColdFilter, ColdPart, ColdScanRequest, ColdSnapshot, ColdValue,
};
pub use convert::RowSuppression;
pub use cow::CowReport;
pub use error::{ErrorKind, Result, TieringError};
pub use files::ColdBuckets;
pub use history::HistoryReport;
pub use leases::SnapshotLease;
pub use maintenance::{MaintenanceOptions, MaintenanceReport};
pub use offsets::TieredOffsets;
pub use retention::ColdRetentionReport;
pub use search::LocationSearch;
pub use source_offsets::{ColdSources, SourcePartitions, SourceProgress};
pub use tierer::{CycleReport, Tierer, TieringStatus, WrittenFile};
