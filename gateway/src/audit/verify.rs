//! Verification of the stored audit log: every frame of `_system.audit` is read as it is
//! on disk (nothing is repaired), and the chain and every checkpoint are re-checked.

use std::collections::HashMap;
use std::path::Path;

use hotgate_store::{InspectedFrame, LogId, inspect_table};
use serde::Serialize;

use super::chain::{AuditRecord, Stored, VerifyReport, verify_stored};
use super::table::{audit_table_name, from_batch};
use crate::error::{GatewayError, Result};

/// The outcome of verifying the stored audit log.
#[derive(Debug, Clone, Serialize)]
pub struct AuditVerification {
    #[serde(flatten)]
    pub report: VerifyReport,
    /// True when the chain is intact.
    pub intact: bool,
    /// The public key the checkpoints were checked against.
    pub public_key: String,
    /// Where on disk the first damage is, when it is a damaged frame.
    pub damaged_frame: Option<String>,
    /// An unfinished write at the very end (a crash before the sync): never
    /// acknowledged, so not damage; the server cuts it on its next start.
    pub torn_tail: Option<String>,
}

/// Verifies the audit log under store root `root`. With `end_offsets` (a running
/// server's durable ends), frames not yet durable are left out.
pub fn verify_audit_log(
    root: &Path,
    public_key_hex: &str,
    end_offsets: Option<&HashMap<LogId, u64>>,
) -> Result<AuditVerification> {
    let frames = inspect_table(root, &audit_table_name(), end_offsets).map_err(|e| {
        GatewayError::NotFound(format!(
            "cannot read the audit log under {}: {e}",
            root.display()
        ))
    })?;
    // Rows of each intact frame become records; a frame that holds bytes but no
    // readable records becomes one unreadable entry where its records should be.
    enum Entry {
        Records(Vec<AuditRecord>),
        Unreadable(String),
    }
    let mut entries = Vec::with_capacity(frames.len());
    let mut torn_tail = None;
    for frame in frames {
        match frame {
            InspectedFrame::Rows {
                log,
                offsets,
                batch,
                ..
            } => match from_batch(&batch) {
                Ok(records) => entries.push(Entry::Records(records)),
                Err(e) => entries.push(Entry::Unreadable(format!(
                    "log {log} offsets {}..{}: {e}",
                    offsets.start, offsets.end
                ))),
            },
            InspectedFrame::Damaged {
                segment,
                position,
                problem,
                ..
            } => entries.push(Entry::Unreadable(format!(
                "{} at byte {position}: {problem}",
                segment.display()
            ))),
            InspectedFrame::TornTail {
                segment, position, ..
            } => {
                torn_tail = Some(format!("{} from byte {position}", segment.display()));
            }
        }
    }
    let mut stored = Vec::new();
    let mut where_unreadable = Vec::new();
    for entry in &entries {
        match entry {
            Entry::Records(records) => stored.extend(records.iter().map(Stored::Record)),
            Entry::Unreadable(at) => {
                stored.push(Stored::Unreadable);
                where_unreadable.push((stored.len() - 1, at.clone()));
            }
        }
    }
    let report = verify_stored(stored.iter().copied(), public_key_hex)
        .map_err(GatewayError::InvalidArgument)?;
    // The damage is a frame's when verification stopped on an unreadable entry (the
    // entry right after the intact ones).
    let damaged_frame = report.first_damage.as_ref().and_then(|_| {
        where_unreadable
            .into_iter()
            .find(|(i, _)| *i == report.records as usize)
            .map(|(_, at)| at)
    });
    Ok(AuditVerification {
        intact: report.first_damage.is_none(),
        report,
        public_key: public_key_hex.to_owned(),
        damaged_frame,
        torn_tail,
    })
}
