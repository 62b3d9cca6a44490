//! The last step, `purged → verified`: the proof that neither tier holds a matching row
//! or any file a literal of the predicate. Only then is the suppression lifted and the
//! predicate erased.
//!
//! The proof is in proportion to the deletion when the predicate fixes the bucket key
//! (`key = v`, `key IN (…)`): a row's bucket is a function of its key, so only those
//! buckets' hot logs and live cold data files can hold a matching row, and only they
//! are scanned and searched. What mixes buckets is still read whole: the RocksDB state
//! of a primary-key table, the table's files outside its logs, and every cold file that
//! is not a live data file of another bucket (metadata JSON, manifest lists, manifests
//! with their column bounds, files of older snapshots, orphans).

use std::sync::Arc;

use arrow_array::RecordBatch;
use hotgate_store::{HotTable, TableName};

use super::registry::{DeletionReceipt, DeletionRecord, DeletionState};
use super::request::DeletionTarget;
use super::steps::{
    Step, StepContext, cold_tier_open, delete_cold, delete_hot, purge_cold, target_table,
};
use super::suppression::Suppression;
use crate::error::{GatewayError, Result};
use crate::tiers::Tiers;

/// Per table, a scan of the hot tier (log segments, and a primary-key table's current
/// state) and of the cold tier's current snapshot finds no matching row, and no file
/// the store holds for the table (its directory, and the RocksDB files that can hold
/// its state) or under its Iceberg location holds one of the predicate's string
/// literals; scoped to the predicate's buckets when it fixes the bucket key.
pub(super) struct Verify;

impl Step for Verify {
    const TO: DeletionState = DeletionState::Verified;
    const FAIL_POINT: &'static str = "deletion-verify";
    const ACTION: &'static str = "deletion_verified";
    const TIERS: Tiers = Tiers::HotAndCold;
    const PENDING: Option<&'static str> = None;

    async fn apply(
        ctx: &StepContext,
        record: &DeletionRecord,
        receipt: &mut DeletionReceipt,
    ) -> Result<()> {
        for target in &record.targets {
            Self::apply_to(ctx, target, receipt).await?;
        }
        receipt.kafka = record
            .targets
            .iter()
            .flat_map(|t| ctx.sources.positions_into(&t.table))
            .collect();
        receipt.total_millis = record
            .history
            .first()
            .and_then(|h| chrono::DateTime::parse_from_rfc3339(&h.at).ok())
            .map(|at| {
                (chrono::Utc::now() - at.with_timezone(&chrono::Utc))
                    .num_milliseconds()
                    .max(0) as u64
            })
            .unwrap_or_default();
        Ok(())
    }

    async fn apply_to(
        ctx: &StepContext,
        target: &DeletionTarget,
        receipt: &mut DeletionReceipt,
    ) -> Result<()> {
        let Some((name, hot)) = target_table(ctx, target)? else {
            return Ok(());
        };
        let def = hot.def();
        let suppression = Suppression::of_target(target, &def)?;
        let needles = suppression.literals();
        receipt.verify_literals += needles.len();
        let buckets = suppression.buckets(&def);
        let key = &def.spec().bucket_key;
        receipt.verify_scope.push(match &buckets {
            Some(b) => format!(
                "{name}: buckets {b:?} of {}, which the predicate's {key} values hash to, and \
                 no other bucket can hold a matching row; the RocksDB state and every cold \
                 metadata file read whole",
                def.buckets()
            ),
            None => format!(
                "{name}: the whole table, since the predicate does not fix the bucket key {key}"
            ),
        });

        // Rows written while the request was pending (hidden since acceptance)
        // match too: they are deleted now, and the scan repeated.
        let (mut scanned, mut matched) = hot_matches(&hot, &suppression, &buckets).await?;
        if matched > 0 {
            tracing::info!(table = %name, matched, "deleting rows written after acceptance");
            delete_hot(ctx, target, receipt).await?;
            (scanned, matched) = hot_matches(&hot, &suppression, &buckets).await?;
        }
        receipt.verify_hot_rows_scanned += scanned;
        if matched > 0 {
            return Err(GatewayError::Internal(format!(
                "{name}: the hot tier still holds {matched} matching rows"
            )));
        }
        let found = {
            let hot = Arc::clone(&hot);
            let needles = needles.clone();
            let buckets = buckets.clone();
            tokio::task::spawn_blocking(move || hot.search_literals(&needles, buckets.as_deref()))
                .await
                .map_err(|e| GatewayError::Internal(format!("hot file search failed: {e}")))??
        };
        receipt.verify_files_searched += found.files_searched;
        receipt.verify_bytes_searched += found.bytes_searched;
        receipt.verify_files_skipped += found.files_skipped;
        if let Some(file) = found.first_match {
            return Err(GatewayError::Internal(format!(
                "{name}: the hot file {file} still holds a literal of the predicate"
            )));
        }

        if !cold_tier_open(ctx, &hot).await? {
            return Ok(());
        }
        let cold_buckets = buckets.map(|only| hotgate_tiering::ColdBuckets {
            key: key.clone(),
            count: def.buckets(),
            only,
        });
        let (mut scanned, mut matched) =
            cold_matches(ctx, &name, &suppression, &cold_buckets).await?;
        if matched > 0 {
            delete_cold(ctx, target, receipt).await?;
            purge_cold(ctx, &def, receipt).await?;
            (scanned, matched) = cold_matches(ctx, &name, &suppression, &cold_buckets).await?;
        }
        receipt.verify_cold_rows_scanned += scanned;
        if matched > 0 {
            return Err(GatewayError::Internal(format!(
                "{name}: the cold tier's current snapshot still holds {matched} matching rows"
            )));
        }
        let found = ctx
            .tierer
            .search_location(&def, &needles, cold_buckets.as_ref())
            .await?;
        receipt.verify_files_searched += found.files_searched;
        receipt.verify_bytes_searched += found.bytes_searched;
        receipt.verify_files_skipped += found.data_files_skipped;
        if let Some(path) = found.files_with_match.first() {
            return Err(GatewayError::Internal(format!(
                "{name}: {path} still holds a literal of the predicate"
            )));
        }
        Ok(())
    }

    fn millis(receipt: &mut DeletionReceipt) -> &mut u64 {
        &mut receipt.verify_millis
    }

    fn summary(r: &DeletionReceipt) -> String {
        let kafka = if r.kafka.is_empty() {
            String::new()
        } else {
            let topics: std::collections::BTreeSet<&str> =
                r.kafka.iter().map(|k| k.topic.as_str()).collect();
            format!(
                "; Kafka topics {} may still hold the subject up to the offsets in the receipt",
                topics.into_iter().collect::<Vec<_>>().join(", ")
            )
        };
        let skipped = if r.verify_files_skipped == 0 {
            String::new()
        } else {
            format!(
                " ({} files of other buckets not read)",
                r.verify_files_skipped
            )
        };
        format!(
            "verified; {} hot and {} cold rows scanned, {} files ({} bytes) searched for {} \
             literals{skipped}, none found; suppression lifted{kafka}",
            r.verify_hot_rows_scanned,
            r.verify_cold_rows_scanned,
            r.verify_files_searched,
            r.verify_bytes_searched,
            r.verify_literals
        )
    }

    fn advance(ctx: &StepContext, id: &str, receipt: DeletionReceipt) -> Result<DeletionRecord> {
        let defs: Vec<_> = ctx.store.tables().iter().map(|t| t.def()).collect();
        let record = ctx
            .deletions
            .verified(id, receipt, |p| ctx.hash_key.hmac_hex(p), &defs)?;
        tracing::info!(id = %record.id, "deletion request verified");
        Ok(record)
    }
}

/// Rows of the hot tier scanned, and how many `suppression` matches: every log row
/// (a primary-key table's changelog included) and a primary-key table's current state,
/// of `buckets` only when given.
async fn hot_matches(
    hot: &Arc<HotTable>,
    suppression: &Suppression,
    buckets: &Option<Vec<u32>>,
) -> Result<(u64, u64)> {
    let hot = Arc::clone(hot);
    let suppression = suppression.clone();
    let buckets = buckets.clone();
    tokio::task::spawn_blocking(move || -> Result<(u64, u64)> {
        let count = |batch: &RecordBatch| -> Result<u64> {
            Ok(suppression.matching(batch)?.true_count() as u64)
        };
        let (mut scanned, mut matched) = (0, 0);
        let request = hotgate_store::ScanRequest {
            buckets: buckets.clone(),
            ..Default::default()
        };
        for item in hot.scan(&request)? {
            let batch = item?.batch;
            scanned += batch.num_rows() as u64;
            matched += count(&batch)?;
        }
        if hot.is_primary_key() {
            for batch in hot.current_rows_of(buckets.as_deref(), 8192)? {
                scanned += batch.num_rows() as u64;
                matched += count(&batch)?;
            }
        }
        Ok((scanned, matched))
    })
    .await
    .map_err(|e| GatewayError::Internal(format!("hot verification failed: {e}")))?
}

/// Rows of the cold tier's current snapshot scanned (the data files of `buckets` only,
/// when given), and how many `suppression` matches.
async fn cold_matches(
    ctx: &StepContext,
    name: &TableName,
    suppression: &Suppression,
    buckets: &Option<hotgate_tiering::ColdBuckets>,
) -> Result<(u64, u64)> {
    let Some(cold) = ctx.tierer.cold_snapshot(name)? else {
        return Ok((0, 0));
    };
    let mut stream = cold
        .scan(hotgate_tiering::ColdScanRequest {
            buckets: buckets.clone(),
            ..Default::default()
        })
        .await?;
    let (mut scanned, mut matched) = (0, 0);
    while let Some(batch) = futures::StreamExt::next(&mut stream).await {
        let batch = batch?;
        scanned += batch.num_rows() as u64;
        matched += suppression.matching(&batch)?.true_count() as u64;
    }
    Ok((scanned, matched))
}
