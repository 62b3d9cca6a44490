//! The background work of the cold tier: tiering cycles on their cadence, hot retention
//! gated by the tiered watermarks, and table maintenance (with cold retention) every
//! `maintenance_interval`. Retention runs that remove data are audited as
//! `hotgate:system` actions.
//!
//! Each tick visits every table: its Iceberg table is created if it is still missing
//! (a catalog that was down at start is retried here), due logs are tiered, and hot
//! segments that are both past `hot_retention` and wholly tiered are deleted. A failure
//! is logged and retried on the next tick; it never stops the loop.

use std::sync::Arc;
use std::time::Duration;

use hotgate_store::HotTable;
use tokio_util::sync::CancellationToken;

use crate::audit::CallAudit;
use crate::state::GatewayState;
use crate::tiers::Tiers;

/// Tiers, retains and maintains every table each `tick` until `cancel` fires. A cycle
/// in progress then finishes its table (tiering is exactly-once, so a cycle cut by a
/// crash is also safe) and the loop ends.
pub async fn run_tiering(
    state: Arc<GatewayState>,
    tick: Duration,
    maintenance_interval: Duration,
    cancel: CancellationToken,
) {
    let mut last_maintenance = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            () = cancel.cancelled() => return,
        }
        let maintain =
            !maintenance_interval.is_zero() && last_maintenance.elapsed() >= maintenance_interval;
        if maintain {
            last_maintenance = tokio::time::Instant::now();
        }
        for hot in state.store.tables() {
            if cancel.is_cancelled() {
                return;
            }
            tick_table(&state, &hot).await;
            if maintain {
                maintain_table(&state, &hot).await;
            }
        }
    }
}

async fn maintain_table(state: &GatewayState, hot: &Arc<HotTable>) {
    let def = hot.def();
    if !def.tiering().enabled || !state.tierer.is_ready(def.name()) {
        return;
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    match state
        .tierer
        .maintain(&def, now_ms, &state.maintenance)
        .await
    {
        Ok(r) => {
            if let Some(retention) = r.cold_retention.as_ref().filter(|r| r.files_removed > 0) {
                audit_retention(
                    state,
                    def.name(),
                    "cold_retention",
                    Tiers::Cold,
                    Some(retention.records_removed),
                    format!(
                        "dropped day partitions {} (before {}): {} files, {} bytes; {} \
                         snapshots expired, {} files deleted",
                        retention.days_removed.join(", "),
                        retention.cutoff_day,
                        retention.files_removed,
                        retention.bytes_removed,
                        retention.snapshots_expired,
                        retention.files_deleted,
                    ),
                )
                .await;
            }
            tracing::info!(
                table = %def.name(),
                compacted = r.compaction.files_removed,
                written = r.compaction.files_added,
                expired = r.snapshots_expired,
                purged = r.files_purged,
                "maintenance"
            )
        }
        Err(e) => tracing::warn!(table = %def.name(), "maintenance failed: {e}"),
    }
}

/// Records a retention run in the audit log as hotgate's own action.
async fn audit_retention(
    state: &GatewayState,
    table: &hotgate_store::TableName,
    action: &str,
    tiers: Tiers,
    rows: Option<u64>,
    reason: String,
) {
    let recorded =
        CallAudit::record_system(&state.audit, action, table, Some(tiers), rows, reason).await;
    if let Err(e) = recorded {
        tracing::error!(%table, "{action} ran but could not be audited: {e}");
    }
}

async fn tick_table(state: &GatewayState, hot: &Arc<HotTable>) {
    let def = hot.def();
    let name = def.name();
    let now = chrono::Utc::now().timestamp_micros();
    // A table whose catalog calls keep failing is tried again after a growing wait.
    if def.tiering().enabled && state.tierer.retry_due(name) {
        if !state.tierer.is_ready(name)
            && let Err(e) = state.tierer.ensure_table(hot).await
        {
            tracing::warn!(table = %name, "cannot open the Iceberg table; retrying with backoff: {e}");
            return;
        }
        match state.tierer.cycle(hot, now, false).await {
            Ok(report) if report.snapshot_id.is_some() => tracing::info!(
                table = %name,
                snapshot = report.snapshot_id,
                files = report.files.len(),
                records = report.records,
                "tiered"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(table = %name, "tiering cycle failed; retrying with backoff: {e}")
            }
        }
    }
    let watermarks = state.tierer.watermarks(name);
    match hot.apply_retention(now, &watermarks).await {
        Ok(r) if r.segments_deleted > 0 => {
            // The audit table's own retention is not audited: each record of it would
            // be a new row of the table it trims.
            if !name.is_system() {
                audit_retention(
                    state,
                    name,
                    "hot_retention",
                    Tiers::Hot,
                    None,
                    format!(
                        "deleted {} segments ({} bytes) past hot_retention and below the \
                         tiered watermark",
                        r.segments_deleted, r.bytes_freed
                    ),
                )
                .await;
            }
            tracing::info!(
                table = %name,
                segments = r.segments_deleted,
                bytes = r.bytes_freed,
                "hot retention"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(table = %name, "hot retention failed: {e}"),
    }
}
