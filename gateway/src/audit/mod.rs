//! The audit trail: a record of every read, write, denial and admin change, kept in the
//! `_system.audit` log table, chained by SHA-256 and periodically signed, so that a
//! modified, missing or reordered record, or a forged checkpoint, is found by `verify`.
//!
//! - [`chain`]: the record, the hash chain, checkpoints and their verification;
//! - [`table`]: the `_system.audit` definition and records as Arrow rows;
//! - [`writer`]: appending in chain order, synced before a read returns data;
//! - [`call`]: one call's allow, deny and completion records;
//! - [`mod@verify`]: re-checking the stored log, frame by frame, without repairing it;
//!
//! Reading records back through the governed planner is [`crate::audit_query`]'s job,
//! above the planner, so that this module stays below it (the deletion steps audit
//! through it, and the planner applies the deletions).
//!
//! This module decides nothing about access: it records the decisions of
//! [`crate::governance`].

pub mod call;
pub mod chain;
pub mod table;
pub mod verify;
pub mod writer;

pub use call::{CallAudit, Completion};
pub use chain::{
    AuditRecord, Chain, CheckpointKey, Damage, DamageKind, Decision, VerifyReport, verify,
};
pub use table::{audit_table_name, audit_table_spec};
pub use verify::{AuditVerification, verify_audit_log};
pub use writer::AuditLog;
