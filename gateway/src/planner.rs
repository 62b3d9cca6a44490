//! Query planning with DataFusion: a table as a `TableProvider` whose scans stream the
//! hot tier from the store (projection and event-time pushdown), unioned with a cold
//! Iceberg snapshot when the read needs one; and the plan a scan command compiles to,
//! always inside the caller's secure view, which wraps the whole union.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::catalog::Session;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::ScalarValue;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use futures::{StreamExt, TryStreamExt};
use hotgate_policy::SecureView;
use hotgate_policy::bounded_expr::{self, ExprLimits};
use hotgate_store::{HotTable, LogId, ScanRequest};
use hotgate_tiering::{ColdScanRequest, ColdSnapshot, Tierer};
use tokio_stream::wrappers::ReceiverStream;

use crate::deletion::Suppression;
use crate::error::{GatewayError, Result};
use crate::pushdown::{cold_filter, column_comparison};
use crate::ticket::Scan;
use crate::tiers::Tiers;

/// Most partitions one scan is split into (each reads a subset of the logs).
pub const MAX_PARTITIONS: usize = 4;

/// The tiers a read of a table uses: the cold snapshot to union with, if any.
#[derive(Debug, Clone)]
pub struct TierChoice {
    pub cold: Option<ColdSnapshot>,
    pub tiers: Tiers,
}

impl TierChoice {
    pub fn hot_only() -> Self {
        Self {
            cold: None,
            tiers: Tiers::Hot,
        }
    }
}

/// Chooses the tiers for `scan` of `table`: its `[since, until)` and its buckets.
///
/// When every log the read can touch still holds its rows from offset 0 (nothing was
/// purged), the hot tier alone answers exactly, and the cold tier is skipped. Otherwise
/// the read is the union of the current cold snapshot S and the hot logs from S's
/// offsets, so each row is read once. A table whose Iceberg table is not open cannot
/// answer such a read: that is `Unavailable`, not a silently partial answer.
pub fn choose_tiers(tierer: &Tierer, table: &HotTable, scan: &Scan) -> Result<TierChoice> {
    let (since, until, buckets) = (scan.since, scan.until, scan.buckets.as_deref());
    let def = table.def();
    if !def.tiering().enabled || table.is_primary_key() {
        return Ok(TierChoice::hot_only());
    }
    const DAY_US: i64 = 86_400_000_000;
    let first_day = since.map(|s| s.div_euclid(DAY_US));
    let last_day = until.map(|u| (u - 1).div_euclid(DAY_US));
    let relevant = |id: &LogId| {
        let day = id.day.map(i64::from);
        buckets.is_none_or(|b| b.contains(&id.bucket))
            && day
                .is_none_or(|d| first_day.is_none_or(|f| d >= f) && last_day.is_none_or(|l| d <= l))
    };
    let hot_complete = table
        .logs()
        .iter()
        .filter(|l| relevant(&l.id()))
        .all(|l| l.start_offset() == 0);
    let cold = match tierer.cold_snapshot(def.name()) {
        Ok(cold) => cold,
        Err(_) if hot_complete => None,
        Err(e) => {
            return Err(GatewayError::Unavailable(format!(
                "the cold tier of {} is not readable, and the hot tier no longer holds all \
                 of the rows asked for: {e}",
                def.name()
            )));
        }
    };
    // A log the cold snapshot covers that the hot tier no longer has at all.
    let cold_only = cold.as_ref().is_some_and(|c| {
        c.offsets
            .0
            .keys()
            .any(|id| relevant(id) && table.log(*id).is_none())
    });
    Ok(match cold {
        Some(cold) if !hot_complete || cold_only => {
            let hot_rows = table
                .logs()
                .iter()
                .any(|l| relevant(&l.id()) && l.end_offset() > cold.offsets.get(&l.id()));
            TierChoice {
                tiers: if hot_rows {
                    Tiers::HotAndCold
                } else {
                    Tiers::Cold
                },
                cold: Some(cold),
            }
        }
        _ => TierChoice::hot_only(),
    })
}

/// One table as DataFusion sees it: the hot tier, unioned with a cold snapshot when the
/// read needs one.
#[derive(Debug)]
pub struct HotTableProvider {
    table: Arc<HotTable>,
    /// The definition when the read began: one schema for the whole plan, even if a
    /// column is added meanwhile.
    def: Arc<hotgate_store::TableDef>,
    since: Option<i64>,
    until: Option<i64>,
    buckets: Option<Vec<u32>>,
    cold: Option<ColdSnapshot>,
}

impl HotTableProvider {
    pub fn new(
        table: Arc<HotTable>,
        since: Option<i64>,
        until: Option<i64>,
        buckets: Option<Vec<u32>>,
        cold: Option<ColdSnapshot>,
    ) -> Self {
        Self {
            def: table.def(),
            table,
            since,
            until,
            buckets,
            cold,
        }
    }

    fn time_column(&self) -> Option<&str> {
        let def = &self.def;
        def.time_index()
            .map(|i| def.stored_schema().field(i).name().as_str())
    }

    /// An event-time bound a filter implies, if it is `time_col <op> timestamp literal`.
    fn time_bound(&self, expr: &Expr) -> Option<(Option<i64>, Option<i64>)> {
        let (col, op, lit) = column_comparison(expr)?;
        if Some(col.name.as_str()) != self.time_column() {
            return None;
        }
        let ScalarValue::TimestampMicrosecond(Some(v), _) = lit else {
            return None;
        };
        match op {
            Operator::GtEq => Some((Some(*v), None)),
            Operator::Gt => Some((Some(v.saturating_add(1)), None)),
            Operator::Lt => Some((None, Some(*v))),
            Operator::LtEq => Some((None, Some(v.saturating_add(1)))),
            Operator::Eq => Some((Some(*v), Some(v.saturating_add(1)))),
            _ => None,
        }
    }
}

#[async_trait::async_trait]
impl TableProvider for HotTableProvider {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(self.def.stored_schema())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Time bounds prune frames in the store, and simple comparisons prune cold files
        // and row groups; DataFusion still applies every filter.
        Ok(filters
            .iter()
            .map(|f| {
                if self.time_bound(f).is_some() || (self.cold.is_some() && cold_filter(f).is_some())
                {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let def = Arc::clone(&self.def);
        let schema = def.stored_schema();
        let projected: SchemaRef = match projection {
            Some(p) => Arc::new(schema.project(p)?),
            None => Arc::clone(schema),
        };
        let (mut since, mut until) = (self.since, self.until);
        for f in filters {
            if let Some((lo, hi)) = self.time_bound(f) {
                since = since.max(lo);
                until = match (until, hi) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        if self.table.is_primary_key() {
            return self.scan_state(projection, projected, since, until, limit);
        }
        // Pin every log's end offset now: the plan reads a consistent snapshot.
        let logs: Vec<(LogId, u64)> = self
            .table
            .logs()
            .iter()
            .filter(|l| {
                self.buckets
                    .as_ref()
                    .is_none_or(|b| b.contains(&l.id().bucket))
            })
            .map(|l| (l.id(), l.end_offset()))
            .collect();
        // With a cold snapshot, the hot tier is read from the offsets it covers.
        let start_offsets: HashMap<LogId, u64> = self
            .cold
            .as_ref()
            .map(|c| c.offsets.to_map())
            .unwrap_or_default();
        let parts = logs.len().clamp(1, MAX_PARTITIONS);
        let mut partitions: Vec<Arc<dyn PartitionStream>> =
            Vec::with_capacity(parts + MAX_PARTITIONS);
        // The cold files are split among partitions of their own, so that their
        // decoding spreads over the cores like the hot logs'.
        let files = hotgate_tiering::ColdFiles::default();
        for (index, cold) in (0..MAX_PARTITIONS).flat_map(|p| self.cold.as_ref().map(|c| (p, c))) {
            partitions.push(Arc::new(ColdPartition {
                cold: cold.clone(),
                request: ColdScanRequest {
                    schema: Some(Arc::clone(&projected)),
                    time_column: self.time_column().map(str::to_owned),
                    since,
                    until,
                    filters: filters.iter().filter_map(cold_filter).collect(),
                    part: Some(hotgate_tiering::ColdPart {
                        index,
                        of: MAX_PARTITIONS,
                        files: files.clone(),
                    }),
                    buckets: None,
                },
                schema: Arc::clone(&projected),
                buckets: self.buckets.clone(),
                bucket_key: def.spec().bucket_key.clone(),
                bucket_field: Arc::new(def.stored_schema().field(def.bucket_index()).clone()),
                bucket_count: def.buckets(),
            }));
        }
        for i in 0..parts {
            let mine: Vec<(LogId, u64)> = logs.iter().skip(i).step_by(parts).copied().collect();
            let request = ScanRequest {
                columns: Some(
                    projected
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect(),
                ),
                since,
                until,
                logs: Some(mine.iter().map(|(id, _)| *id).collect()),
                start_offsets: start_offsets.clone(),
                end_offsets: mine.into_iter().collect(),
                ..Default::default()
            };
            partitions.push(Arc::new(HotPartition {
                table: Arc::clone(&self.table),
                request,
                schema: Arc::clone(&projected),
            }));
        }
        Ok(Arc::new(StreamingTableExec::try_new(
            projected,
            partitions,
            None,
            Vec::new(),
            false,
            limit,
        )?))
    }
}

impl HotTableProvider {
    /// A primary-key table scans its current state in RocksDB, not its changelog.
    fn scan_state(
        &self,
        projection: Option<&Vec<usize>>,
        projected: SchemaRef,
        since: Option<i64>,
        until: Option<i64>,
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let buckets: Vec<u32> = self
            .buckets
            .clone()
            .unwrap_or_else(|| (0..self.def.buckets()).collect());
        let parts = buckets.len().clamp(1, MAX_PARTITIONS);
        let partitions: Vec<Arc<dyn PartitionStream>> = (0..parts)
            .map(|i| {
                Arc::new(StatePartition {
                    table: Arc::clone(&self.table),
                    buckets: buckets.iter().skip(i).step_by(parts).copied().collect(),
                    projection: projection.cloned(),
                    since,
                    until,
                    schema: Arc::clone(&projected),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(
            projected,
            partitions,
            None,
            Vec::new(),
            false,
            limit,
        )?))
    }
}

/// Rows per batch read from a primary-key table's state.
const STATE_BATCH_ROWS: usize = 8192;

/// One partition of a primary-key table's scan: some buckets' current rows.
#[derive(Debug)]
struct StatePartition {
    table: Arc<HotTable>,
    buckets: Vec<u32>,
    projection: Option<Vec<usize>>,
    since: Option<i64>,
    until: Option<i64>,
    schema: SchemaRef,
}

impl PartitionStream for StatePartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rows = self.table.read_state(
            Some(self.buckets.clone()),
            self.since,
            self.until,
            STATE_BATCH_ROWS,
        );
        let projection = self.projection.clone();
        let batches = futures::stream::once(async move { rows })
            .map(|rows| match rows {
                Ok(rx) => ReceiverStream::new(rx).boxed(),
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
            })
            .flatten()
            .map(move |item| {
                let (_, batch) = item.map_err(|e| to_df(e.into()))?;
                Ok(match &projection {
                    Some(p) => batch.project(p)?,
                    None => batch,
                })
            });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            batches,
        ))
    }
}

/// The cold part of a union read: a share of one snapshot's files, scanned by
/// iceberg-rust.
#[derive(Debug)]
struct ColdPartition {
    cold: ColdSnapshot,
    request: ColdScanRequest,
    schema: SchemaRef,
    /// A scan of some buckets only (a Flight endpoint) keeps the rows of those.
    buckets: Option<Vec<u32>>,
    bucket_key: String,
    /// The bucket key's field, read for bucket filtering when not projected.
    bucket_field: arrow_schema::FieldRef,
    bucket_count: u32,
}

impl PartitionStream for ColdPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let cold = self.cold.clone();
        let mut request = self.request.clone();
        let schema = Arc::clone(&self.schema);
        let buckets = self.buckets.clone();
        let bucket_key = self.bucket_key.clone();
        let n = self.bucket_count;
        // Bucket filtering needs the bucket key even when the caller did not ask for it.
        if buckets.is_some() && schema.index_of(&bucket_key).is_err() {
            let mut fields = schema.fields().to_vec();
            fields.push(Arc::clone(&self.bucket_field));
            request.schema = Some(Arc::new(arrow_schema::Schema::new(fields)));
        }
        let out_schema = Arc::clone(&schema);
        // The stream holds the snapshot's lease until it ends: the purge does not
        // delete files this read still has to open.
        let lease = Arc::clone(&cold.lease);
        let batches = futures::stream::once(async move { cold.scan(request).await })
            .map(|opened| match opened {
                Ok(stream) => stream,
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
            })
            .flatten()
            .map(move |item| {
                let _reading = &lease;
                let batch = item.map_err(|e| to_df(e.into()))?;
                let batch = match &buckets {
                    Some(b) => keep_buckets(&batch, &bucket_key, n, b)?,
                    None => batch,
                };
                // The cold scan already yields the hot tier's types; only the bucket
                // key added above may need dropping.
                let indices = out_schema
                    .fields()
                    .iter()
                    .map(|f| batch.schema().index_of(f.name()))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(batch
                    .project(&indices)?
                    .with_schema(Arc::clone(&out_schema))?)
            });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }
}

/// The rows of `batch` whose bucket key falls in `buckets` (Iceberg's `bucket[n]`).
fn keep_buckets(batch: &RecordBatch, key: &str, n: u32, buckets: &[u32]) -> DfResult<RecordBatch> {
    let column = batch.column(batch.schema().index_of(key)?);
    let ids = hotgate_store::bucket::buckets_of(column, n).map_err(|e| to_df(e.into()))?;
    let mask: arrow_array::BooleanArray = ids.iter().map(|b| Some(buckets.contains(b))).collect();
    Ok(datafusion::arrow::compute::filter_record_batch(
        batch, &mask,
    )?)
}

/// One partition of a hot scan: a blocking reader feeding a bounded channel.
#[derive(Debug)]
struct HotPartition {
    table: Arc<HotTable>,
    request: ScanRequest,
    schema: SchemaRef,
}

impl PartitionStream for HotPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(2);
        let table = Arc::clone(&self.table);
        let request = self.request.clone();
        tokio::task::spawn_blocking(move || {
            let scan = match table.scan(&request) {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.blocking_send(Err(to_df(e.into())));
                    return;
                }
            };
            for item in scan {
                let msg = item.map(|b| b.batch).map_err(|e| to_df(e.into()));
                // A closed channel means the reader went away: stop reading.
                if tx.blocking_send(msg).is_err() {
                    return;
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            ReceiverStream::new(rx),
        ))
    }
}

fn to_df(e: GatewayError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// A fresh session: one per request, so no state leaks between callers.
pub fn session() -> SessionContext {
    SessionContext::new_with_config(SessionConfig::new().with_target_partitions(MAX_PARTITIONS))
}

/// Compiles a scan command into a DataFusion plan: the hot table wrapped in the caller's
/// secure view (row filter on unmasked values, then masks), with the caller's own filter,
/// projection and limit on top, so they only ever see masked values.
pub async fn plan_scan(
    table: Arc<HotTable>,
    view: &SecureView,
    scan: &Scan,
    tiers: &TierChoice,
    suppression: Option<&Suppression>,
) -> Result<DataFrame> {
    if let Some(cols) = &scan.columns {
        check_columns(view, cols)?;
    }
    if (scan.since.is_some() || scan.until.is_some()) && table.def().time_index().is_none() {
        return Err(GatewayError::InvalidArgument(format!(
            "since/until: {} has no time_column, so it cannot be read by time",
            table.def().name()
        )));
    }
    let ctx = session();
    if let Some(filter) = &scan.filter {
        check_filter_columns(&ctx, &table, view, filter)?;
    }
    let provider = HotTableProvider::new(
        table,
        scan.since,
        scan.until,
        scan.buckets.clone(),
        tiers.cold.clone(),
    );
    let (session, raw) = ctx.read_table(Arc::new(provider))?.into_parts();
    let mut df = DataFrame::new(
        session,
        secure_view(raw.into(), view, suppression)?.build()?,
    );
    if !view.is_unrestricted() {
        // Only what the caller's columns and filter need leaves the view.
        let needed = view_columns_needed(&ctx, view, scan)?;
        if needed.len() < view.schema().fields().len() {
            let needed: Vec<&str> = needed.iter().map(String::as_str).collect();
            df = df.select_columns(&needed)?;
        }
        df = behind_barrier(&ctx, df)?;
    }
    if let Some(filter) = &scan.filter {
        let expr = parse_filter(&ctx, filter, df.schema())?;
        df = df.filter(expr).map_err(|e| {
            GatewayError::InvalidArgument(format!("filter: {}", e.strip_backtrace()))
        })?;
    }
    if let Some(cols) = &scan.columns {
        let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
        df = df.select_columns(&cols)?;
    }
    if let Some(limit) = scan.limit {
        df = df.limit(0, Some(limit))?;
    }
    Ok(df)
}

/// `view` over the raw rows `plan` yields: the rows of pending deletion requests are
/// gone first, for every reader whatever the view (below masks and policies); then the
/// policy row filter, on unmasked values; then the masks and denies.
pub fn secure_view(
    mut plan: LogicalPlanBuilder,
    view: &SecureView,
    suppression: Option<&Suppression>,
) -> DfResult<LogicalPlanBuilder> {
    if let Some(suppression) = suppression {
        plan = plan.filter(suppression.keep_expr())?;
    }
    if !view.is_unrestricted() {
        if let Some(row_filter) = view.row_filter() {
            plan = plan.filter(row_filter.clone())?;
        }
        plan = plan.project(view.projection().to_vec())?;
    }
    Ok(plan)
}

/// Requested columns: a denied one is `PermissionDenied` naming it; an unknown one is
/// `InvalidArgument`. Returns the visible schema projected to the request.
pub fn check_columns(view: &SecureView, columns: &[String]) -> Result<SchemaRef> {
    let mut indices = Vec::with_capacity(columns.len());
    for c in columns {
        view.check_column(c)?;
        let i = view.schema().index_of(c).map_err(|_| {
            let known: Vec<&str> = view
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            GatewayError::InvalidArgument(format!(
                "columns: unknown column {c:?}; the table has columns {}",
                known.join(", ")
            ))
        })?;
        indices.push(i);
    }
    Ok(Arc::new(view.schema().project(&indices)?))
}

/// A caller's filter naming a denied column is refused before planning, naming it,
/// rather than failing later as an unknown column (which would hide the reason).
fn check_filter_columns(
    ctx: &SessionContext,
    table: &HotTable,
    view: &SecureView,
    filter: &str,
) -> Result<()> {
    let full =
        datafusion::common::DFSchema::try_from(table.def().stored_schema().as_ref().clone())?;
    // A filter that does not parse against the table is reported by the real parse;
    // one over the limits is refused here.
    let expr = match bounded_expr::parse(ctx, filter, &full, ExprLimits::DEFAULT) {
        Ok(expr) => Some(expr),
        Err(bounded_expr::ExprError::Invalid(_)) => None,
        Err(e) => return Err(GatewayError::InvalidArgument(format!("filter: {e}"))),
    };
    if let Some(expr) = expr {
        for column in expr.column_refs() {
            view.check_column(&column.name)?;
        }
    }
    Ok(())
}

/// The view columns a scan reads: its `columns` plus those its filter names, in view
/// order; all of them when it names no columns.
fn view_columns_needed(
    ctx: &SessionContext,
    view: &SecureView,
    scan: &Scan,
) -> Result<Vec<String>> {
    let all = || view.schema().fields().iter().map(|f| f.name().clone());
    let Some(cols) = &scan.columns else {
        return Ok(all().collect());
    };
    let mut wanted: std::collections::HashSet<String> = cols.iter().cloned().collect();
    if let Some(filter) = &scan.filter {
        let schema = datafusion::common::DFSchema::try_from(view.schema().as_ref().clone())?;
        let expr = parse_filter(ctx, filter, &schema)?;
        wanted.extend(expr.column_refs().into_iter().map(|c| c.name.clone()));
    }
    Ok(all().filter(|c| wanted.contains(c)).collect())
}

/// Parses a caller's filter within the limits of every expression from outside.
fn parse_filter(
    ctx: &SessionContext,
    filter: &str,
    schema: &datafusion::common::DFSchema,
) -> Result<Expr> {
    bounded_expr::parse(ctx, filter, schema, ExprLimits::DEFAULT)
        .map_err(|e| GatewayError::InvalidArgument(format!("filter: {e}")))
}

/// Ends the secure view's plan at a stage boundary: the caller's filter, projection and
/// limit are planned over the view's *output stream*, so no optimizer rule can push a
/// caller's predicate below the policy row filter. Merged into one filter, a caller's
/// expression would also run on rows the policy hides, and an error it raised there (a
/// division by zero, a failed cast) would reveal that those rows exist.
fn behind_barrier(ctx: &SessionContext, view: DataFrame) -> Result<DataFrame> {
    let schema: SchemaRef = Arc::new(view.schema().as_arrow().clone());
    let stage = ViewStage {
        view,
        schema: Arc::clone(&schema),
    };
    let table = StreamingTable::try_new(schema, vec![Arc::new(stage)])?;
    Ok(ctx.read_table(Arc::new(table))?)
}

/// The secure view's plan, executed when the outer plan first pulls from it.
#[derive(Debug)]
struct ViewStage {
    view: DataFrame,
    schema: SchemaRef,
}

impl PartitionStream for ViewStage {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let view = self.view.clone();
        let batches =
            futures::stream::once(async move { view.execute_stream().await }).try_flatten();
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            batches,
        ))
    }
}
