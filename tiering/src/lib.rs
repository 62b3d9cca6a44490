//! hotgate-tiering: the Iceberg cold tier.
//!
//! Owns: the catalog, object storage, conversion of hot segments into Parquet files,
//! exactly-once commits, overwrite and delete commits, maintenance and cold reads.
//! Must not touch: the network-facing data plane or policy decisions; it reads the hot
//! tier only through `hotgate-store`'s public API.
//!
//! Empty for now: the tiering issue fills it in.
