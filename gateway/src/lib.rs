//! hotgate-gateway: Flight, Flight SQL and HTTP, query planning, audit and orchestration.
//!
//! Owns: the `hotgate` binary, authentication, per-command authorization, DataFusion
//! planning over both tiers, the audit log and the schedulers that drive tiering,
//! retention and deletion.
//! Must not touch: segment files, Parquet files or policy internals directly; it goes
//! through `hotgate-store`, `hotgate-tiering` and `hotgate-policy`.
//!
//! Empty for now: the data-plane issue fills it in.
