//! A caller's secure view of one table as a DataFusion table: what every table
//! reference of a SQL statement resolves to.
//!
//! The view is a stage of its own. Its plan (the hot and cold union, the deletion
//! suppression, the policy row filter, masks and denies) is optimized and planned apart
//! from the statement around it, and the statement sees only the view's output streams,
//! through a leaf node it cannot look into. No optimizer rule of the outer statement can
//! push a caller's predicate below the row filter, so no expression of the caller ever
//! runs on a row or value the view hides; only the caller's projection and a limit
//! (which drop columns and rows of the view's *output*) reach inside.

use std::any::Any;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType, provider_as_source};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::{
    Expr, LogicalPlan, LogicalPlanBuilder, TableProviderFilterPushDown,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::col;
use futures::StreamExt;
use hotgate_policy::SecureView;
use hotgate_store::HotTable;

use crate::deletion::Suppression;
use crate::planner::{HotTableProvider, TierChoice, secure_view};

/// One table reference of a statement: `table` as `view` shows it.
#[derive(Debug)]
pub(crate) struct ViewTable {
    table: Arc<HotTable>,
    view: Arc<SecureView>,
    tiers: TierChoice,
    suppression: Option<Suppression>,
    /// The view's output schema (visible columns, masked types).
    schema: SchemaRef,
}

impl ViewTable {
    pub(crate) fn try_new(
        table: Arc<HotTable>,
        view: Arc<SecureView>,
        tiers: TierChoice,
        suppression: Option<Suppression>,
    ) -> DfResult<Self> {
        let mut this = Self {
            table,
            view,
            tiers,
            suppression,
            schema: Arc::new(Schema::empty()),
        };
        let plan = this.view_plan(None, None)?;
        this.schema = Arc::new(plan.schema().as_arrow().clone());
        Ok(this)
    }

    /// The view's logical plan, keeping only the output columns `projection` (indices
    /// into the view's schema) and at most `limit` rows of its output.
    fn view_plan(
        &self,
        projection: Option<&[usize]>,
        limit: Option<usize>,
    ) -> DfResult<LogicalPlan> {
        let provider = HotTableProvider::new(
            Arc::clone(&self.table),
            None,
            None,
            None,
            self.tiers.cold.clone(),
        );
        let name = self.table.def().name().to_string();
        let raw = LogicalPlanBuilder::scan(name, provider_as_source(Arc::new(provider)), None)?;
        let mut plan = secure_view(raw, &self.view, self.suppression.as_ref())?;
        if let Some(projection) = projection {
            let fields = self.schema.fields();
            // A statement that needs no column (`count(*)`) still needs the rows: the
            // view yields its first column, and the stage drops it.
            let keep: Vec<Expr> = match projection {
                [] => fields
                    .iter()
                    .take(1)
                    .map(|f| col(quoted(f.name())))
                    .collect(),
                p => p.iter().map(|&i| col(quoted(fields[i].name()))).collect(),
            };
            plan = plan.project(keep)?;
        }
        if let Some(limit) = limit {
            plan = plan.limit(0, Some(limit))?;
        }
        plan.build()
    }
}

/// A column name as an identifier DataFusion takes literally.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[async_trait::async_trait]
impl TableProvider for ViewTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // The caller's filters stay outside the view: see the module doc.
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let session = state
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| {
                DataFusionError::Internal("a view planned outside a SessionState".into())
            })?;
        let plan = self.view_plan(projection.map(Vec::as_slice), limit)?;
        let physical = session.create_physical_plan(&plan).await?;
        let schema: SchemaRef = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        };
        let partitions = physical.output_partitioning().partition_count().max(1);
        let stages: Vec<Arc<dyn PartitionStream>> = (0..partitions)
            .map(|partition| {
                Arc::new(ViewStage {
                    plan: Arc::clone(&physical),
                    partition,
                    schema: Arc::clone(&schema),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            stages,
            None,
            Vec::new(),
            false,
            limit,
        )?))
    }
}

/// One output partition of a view's own physical plan, run when the statement first
/// pulls from it, in the statement's task context (its memory pool).
#[derive(Debug)]
struct ViewStage {
    plan: Arc<dyn ExecutionPlan>,
    partition: usize,
    /// What the statement was promised: the view's schema, projected.
    schema: SchemaRef,
}

impl PartitionStream for ViewStage {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = Arc::clone(&self.schema);
        let out = Arc::clone(&schema);
        let batches = match self.plan.execute(self.partition, ctx) {
            Ok(stream) => stream.map(move |batch| conform(batch?, &out)).boxed(),
            Err(e) => futures::stream::iter([Err(e)]).boxed(),
        };
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }
}

/// A batch of the view's plan in the schema the statement was promised: the column a
/// zero-column projection carried is dropped, and a physical plan's field metadata or
/// nullability, where it differs from the logical plan's, is restated.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> DfResult<RecordBatch> {
    if schema.fields().is_empty() {
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        return Ok(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            Vec::new(),
            &options,
        )?);
    }
    if batch.schema() == *schema {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(
        Arc::clone(schema),
        batch.columns().to_vec(),
    )?)
}
