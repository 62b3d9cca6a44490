//! The audit trail: records of reads, writes, denials and admin changes, chained by
//! SHA-256 and periodically signed, so that a modified, missing or reordered record, or a
//! forged checkpoint, is found by `verify`.
//!
//! This module holds the record format, the chain and its verification. Storing records
//! in the `_system.audit` log table and writing them on every call come with the rest of
//! the audit work.

pub mod chain;

pub use chain::{
    AuditRecord, Chain, CheckpointKey, Damage, DamageKind, Decision, VerifyReport, verify,
};
