//! The steps that take a request from `accepted` to `purged`, each run through one
//! skeleton ([`run`]): fail point, load, time, advance durably, audit. Steps see a
//! [`StepContext`] (the registry, both tiers, the audit log, the hash key), never the
//! whole gateway state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use hotgate_policy::HashKey;
use hotgate_store::{HotTable, Store, TableDef, TableName};
use hotgate_tiering::Tierer;

use super::registry::{DeletionReceipt, DeletionRecord, DeletionState, Deletions, KafkaRecords};
use super::request::DeletionTarget;
use super::suppression::Suppression;
use crate::audit::{AuditLog, CallAudit};
use crate::error::{GatewayError, Result};
use crate::tiers::Tiers;

/// What the deletion steps may touch, and no more.
#[derive(Debug, Clone)]
pub struct StepContext {
    pub deletions: Arc<Deletions>,
    pub store: Arc<Store>,
    pub tierer: Arc<Tierer>,
    pub audit: Arc<AuditLog>,
    /// Hashes a predicate when it is erased (the write rules' key).
    pub hash_key: HashKey,
    /// How far the Kafka sources into a table have read, for the receipt.
    pub sources: Arc<dyn SourcePositions>,
}

/// The Kafka partitions that feed a table, and the last offset taken of each: the
/// records a receipt names as possibly still holding a subject.
pub trait SourcePositions: Send + Sync + std::fmt::Debug {
    fn positions_into(&self, table: &str) -> Vec<KafkaRecords>;
}

/// One step of a request's life. [`run`] does what every step shares; a step says only
/// what it does to the tiers and how that reads in the receipt and the audit.
pub(super) trait Step {
    /// The state the step leaves the request in.
    const TO: DeletionState;
    /// A fail point at the start (compiled in for tests only).
    const FAIL_POINT: &'static str;
    /// The audit action of the state change.
    const ACTION: &'static str;
    const TIERS: Tiers;
    /// What is not done yet once the step is.
    const PENDING: Option<&'static str>;

    /// Does the step's work on one target, adding to `receipt`.
    async fn apply_to(
        ctx: &StepContext,
        target: &DeletionTarget,
        receipt: &mut DeletionReceipt,
    ) -> Result<()>;

    /// Does the step's work on every target of the request.
    async fn apply(
        ctx: &StepContext,
        record: &DeletionRecord,
        receipt: &mut DeletionReceipt,
    ) -> Result<()> {
        for target in &record.targets {
            Self::apply_to(ctx, target, receipt).await?;
        }
        Ok(())
    }

    /// The receipt's field for the step's duration.
    fn millis(receipt: &mut DeletionReceipt) -> &mut u64;

    /// The rows the audit record counts, if the step deletes rows.
    fn rows(_: &DeletionReceipt) -> Option<u64> {
        None
    }

    /// What the step did, in words (no values), for the audit record.
    fn summary(receipt: &DeletionReceipt) -> String;

    /// Records the new state durably. Verification overrides it: it also erases the
    /// predicates and lifts the suppression.
    fn advance(ctx: &StepContext, id: &str, receipt: DeletionReceipt) -> Result<DeletionRecord> {
        ctx.deletions
            .advance(id, Self::TO, receipt, Self::PENDING.map(Into::into))
    }
}

/// Runs step `S` on request `id`: each completed step is durable and audited before the
/// next begins, so a crash resumes where it was.
pub(super) async fn run<S: Step>(ctx: &StepContext, id: &str) -> Result<()> {
    step_fail_point(S::FAIL_POINT)?;
    let Some(record) = ctx.deletions.get(id) else {
        return Ok(());
    };
    let started = Instant::now();
    let mut receipt = record.receipt.clone();
    S::apply(ctx, &record, &mut receipt).await?;
    *S::millis(&mut receipt) = started.elapsed().as_millis() as u64;
    let record = S::advance(ctx, id, receipt)?;
    let reason = format!(
        "deletion request {}: {}",
        record.id,
        S::summary(&record.receipt)
    );
    audit_step(
        &ctx.audit,
        &record,
        S::ACTION,
        Some(S::TIERS),
        S::rows(&record.receipt),
        reason,
    )
    .await
}

/// A fail point at the start of a step (compiled in for tests only): `return` makes
/// the step fail, so a test can hold a request in a state and kill the server there.
fn step_fail_point(name: &str) -> Result<()> {
    fail::fail_point!(name, |_| Err(GatewayError::Unavailable(format!(
        "fail point {name}"
    ))));
    let _ = name;
    Ok(())
}

/// `accepted → hot_applied`: log tables have the matching rows rewritten out of their
/// segments; primary-key tables have the keys of the matching current rows deleted
/// (`-D`), their changelog records erased and RocksDB compacted.
pub(super) struct ApplyHot;

impl Step for ApplyHot {
    const TO: DeletionState = DeletionState::HotApplied;
    const FAIL_POINT: &'static str = "deletion-apply-hot";
    const ACTION: &'static str = "deletion_hot_applied";
    const TIERS: Tiers = Tiers::Hot;
    const PENDING: Option<&'static str> =
        Some("the hot tier no longer holds the rows; the cold tier is next");

    async fn apply_to(
        ctx: &StepContext,
        target: &DeletionTarget,
        receipt: &mut DeletionReceipt,
    ) -> Result<()> {
        delete_hot(ctx, target, receipt).await
    }

    fn millis(receipt: &mut DeletionReceipt) -> &mut u64 {
        &mut receipt.hot_millis
    }

    fn rows(receipt: &DeletionReceipt) -> Option<u64> {
        Some(receipt.hot_rows_deleted)
    }

    fn summary(r: &DeletionReceipt) -> String {
        format!(
            "{} hot rows deleted, {} segments rewritten, {} keys erased",
            r.hot_rows_deleted, r.hot_segments_rewritten, r.keys_erased
        )
    }
}

/// `hot_applied → cold_applied`: each target's cold files that hold a match are
/// rewritten without it (copy-on-write, one overwrite commit per table).
pub(super) struct ApplyCold;

impl Step for ApplyCold {
    const TO: DeletionState = DeletionState::ColdApplied;
    const FAIL_POINT: &'static str = "deletion-apply-cold";
    const ACTION: &'static str = "deletion_cold_applied";
    const TIERS: Tiers = Tiers::Cold;
    const PENDING: Option<&'static str> = Some(
        "the current snapshots hold no matching row; older snapshots, the refs pinning them \
         and their files are next",
    );

    async fn apply_to(
        ctx: &StepContext,
        target: &DeletionTarget,
        receipt: &mut DeletionReceipt,
    ) -> Result<()> {
        delete_cold(ctx, target, receipt).await
    }

    fn millis(receipt: &mut DeletionReceipt) -> &mut u64 {
        &mut receipt.cold_millis
    }

    fn rows(receipt: &DeletionReceipt) -> Option<u64> {
        Some(receipt.cold_rows_deleted)
    }

    fn summary(r: &DeletionReceipt) -> String {
        format!(
            "{} cold rows deleted, {} files ({} of {} bytes) rewritten",
            r.cold_rows_deleted, r.cold_files_rewritten, r.cold_bytes_rewritten, r.cold_bytes_total
        )
    }
}

/// `cold_applied → purged`: per table, every snapshot but the current one is expired
/// and every ref but `main` removed, then, once no read streams from an expired
/// snapshot, every file the current metadata does not reference is deleted.
pub(super) struct Purge;

impl Step for Purge {
    const TO: DeletionState = DeletionState::Purged;
    const FAIL_POINT: &'static str = "deletion-purge";
    const ACTION: &'static str = "deletion_purged";
    const TIERS: Tiers = Tiers::Cold;
    const PENDING: Option<&'static str> =
        Some("no snapshot or file reaches the rows any more; verification is next");

    async fn apply_to(
        ctx: &StepContext,
        target: &DeletionTarget,
        receipt: &mut DeletionReceipt,
    ) -> Result<()> {
        let Some((_, hot)) = target_table(ctx, target)? else {
            return Ok(());
        };
        let def = hot.def();
        if cold_tier_open(ctx, &hot).await? {
            purge_cold(ctx, &def, receipt).await?;
        }
        Ok(())
    }

    fn millis(receipt: &mut DeletionReceipt) -> &mut u64 {
        &mut receipt.purge_millis
    }

    fn summary(r: &DeletionReceipt) -> String {
        format!(
            "{} snapshots expired, {} refs removed, {} files ({} bytes) deleted",
            r.snapshots_expired,
            r.refs_removed.len(),
            r.cold_files_deleted,
            r.cold_bytes_deleted
        )
    }
}

/// The hot table `target` names, or `None` when it was dropped since (nothing left
/// to delete there).
pub(super) fn target_table(
    ctx: &StepContext,
    target: &DeletionTarget,
) -> Result<Option<(TableName, Arc<HotTable>)>> {
    let name = TableName::parse(&target.table)?;
    Ok(ctx.store.table(&name).ok().map(|hot| (name, hot)))
}

/// Whether `hot`'s table has a cold tier; if so, its Iceberg table is open.
pub(super) async fn cold_tier_open(ctx: &StepContext, hot: &HotTable) -> Result<bool> {
    let def = hot.def();
    if !def.tiering().enabled {
        return Ok(false);
    }
    if !ctx.tierer.is_ready(def.name()) {
        ctx.tierer.ensure_table(hot).await?;
    }
    Ok(true)
}

/// Deletes `target`'s matching rows from the hot tier, adding to `receipt`. Log
/// tables: every segment holding a match is rewritten without it. Primary-key tables:
/// the keys of matching current rows are erased (`-D`, their whole changelog history,
/// RocksDB compacted), then any changelog record that still matches (a before image
/// of a key whose current row no longer matches) is blanked; replay is unchanged,
/// because a later record of that key supersedes it.
pub(super) async fn delete_hot(
    ctx: &StepContext,
    target: &DeletionTarget,
    receipt: &mut DeletionReceipt,
) -> Result<()> {
    let Some((_, hot)) = target_table(ctx, target)? else {
        return Ok(());
    };
    let def = hot.def();
    let suppression = Suppression::of_target(target, &def)?;
    if hot.is_primary_key() {
        let keys = matching_keys(&hot, &suppression).await?;
        if keys.num_rows() > 0 {
            let (deleted, rewrite) = hot.erase_keys(&keys).await?;
            receipt.keys_erased += deleted.changes;
            receipt.add_hot(&rewrite);
        }
    }
    let buckets = suppression.buckets(&def);
    let rewrite = hot
        .delete_rows(buckets.as_deref(), &|batch| {
            suppression
                .matches(batch)
                .map_err(hotgate_store::StoreError::InvalidRequest)
        })
        .await?;
    receipt.add_hot(&rewrite);
    Ok(())
}

/// Rewrites `target`'s cold files that hold a match without it (copy-on-write, one
/// overwrite commit), adding to `receipt`.
pub(super) async fn delete_cold(
    ctx: &StepContext,
    target: &DeletionTarget,
    receipt: &mut DeletionReceipt,
) -> Result<()> {
    let Some((_, hot)) = target_table(ctx, target)? else {
        return Ok(());
    };
    let def = hot.def();
    if !cold_tier_open(ctx, &hot).await? {
        return Ok(());
    }
    let suppression = Suppression::of_target(target, &def)?;
    let report = ctx
        .tierer
        .delete_matching(
            &def,
            &|batch| suppression.matches(batch),
            &suppression.prune_filters(),
        )
        .await?;
    receipt.cold_rows_deleted += report.rows_deleted;
    receipt.cold_files_read += report.files_read;
    receipt.cold_files_rewritten += report.files_rewritten;
    receipt.cold_bytes_rewritten += report.bytes_rewritten;
    receipt.cold_bytes_total += report.bytes_total;
    receipt.cold_files_removed.extend(report.removed);
    Ok(())
}

/// How long the purge waits for reads of expired snapshots before it retries later.
const PURGE_READ_WAIT: Duration = Duration::from_secs(5);

/// Erases the history of `def`'s cold table ([`hotgate_tiering::Tierer::erase_history`]),
/// adding to `receipt`. Reads of expired snapshots that outlast the wait are an error,
/// so the caller retries later: their files are still there.
pub(super) async fn purge_cold(
    ctx: &StepContext,
    def: &TableDef,
    receipt: &mut DeletionReceipt,
) -> Result<()> {
    let name = def.name();
    let report = ctx.tierer.erase_history(def, PURGE_READ_WAIT).await?;
    receipt
        .refs_removed
        .extend(report.refs_removed.iter().map(|r| format!("{name}:{r}")));
    receipt.snapshots_expired += report.snapshots_expired;
    receipt.cold_files_deleted += report.files_deleted;
    receipt.cold_bytes_deleted += report.bytes_deleted;
    if report.reads_waited_out > 0 {
        return Err(GatewayError::Unavailable(format!(
            "{name}: {} reads of expired snapshots are still streaming; their files \
             are deleted when they end",
            report.reads_waited_out
        )));
    }
    Ok(())
}

/// Audits a state change of `record`: one record per target table.
pub async fn audit_step(
    audit: &Arc<AuditLog>,
    record: &DeletionRecord,
    action: &str,
    tiers: Option<Tiers>,
    rows: Option<u64>,
    reason: String,
) -> Result<()> {
    for target in &record.targets {
        let table = TableName::parse(&target.table)?;
        CallAudit::record_system(audit, action, &table, tiers, rows, reason.clone()).await?;
    }
    Ok(())
}

/// The key columns of a primary-key table's current rows that `suppression` matches.
async fn matching_keys(hot: &Arc<HotTable>, suppression: &Suppression) -> Result<RecordBatch> {
    let key_columns = hot.key_columns();
    let mut rows = hot.read_state(None, None, None, 8192)?;
    let mut found = Vec::new();
    while let Some(item) = rows.recv().await {
        let (_, batch) = item?;
        let hit = suppression.matching(&batch)?;
        let matched = arrow_select::filter::filter_record_batch(&batch, &hit)?;
        let indices = key_columns
            .iter()
            .map(|k| matched.schema().index_of(k))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        found.push(matched.project(&indices)?);
    }
    let def = hot.def();
    let schema = Arc::new(
        def.stored_schema().project(
            &key_columns
                .iter()
                .map(|k| def.stored_schema().index_of(k))
                .collect::<std::result::Result<Vec<_>, _>>()?,
        )?,
    );
    Ok(arrow_select::concat::concat_batches(&schema, &found)?)
}
