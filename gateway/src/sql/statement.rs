//! One SQL statement from outside: bounded, read-only, planned inside the caller's
//! secure views, and run within its limits.
//!
//! The text is refused unless it is at most [`SqlLimits::max_bytes`] long; it is parsed
//! with the parser's recursion limit, its syntax tree and then its plan are measured,
//! and everything up to an accepted plan happens on a stack of its own
//! ([`bounded_expr::PARSE_STACK`]), so no statement can overflow a thread's stack. Only a
//! query is planned: DDL, DML, `COPY`, `EXPLAIN`, `SET` and every other statement are
//! refused before any table is resolved. The plan runs with a memory pool of its own
//! (no spilling to disk) and a deadline.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::catalog::MemoryCatalogProviderList;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::GreedyMemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SQLOptions, SessionConfig};
use datafusion::scalar::ScalarValue;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser;
use datafusion::sql::sqlparser::ast::{Visit, Visitor};
use futures::StreamExt;
use futures::stream::BoxStream;
use hotgate_policy::Principal;
use hotgate_policy::bounded_expr::{self, PARSE_STACK};
use tokio_util::sync::CancellationToken;

use super::catalog::{CATALOG, Referenced, StatementAccess, StatementCatalog, Touched};
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

/// What one statement may use. `[sql]` in the configuration sets the memory and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlLimits {
    /// Longest statement text, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of the syntax tree (expressions and subqueries) and of the plan.
    pub max_depth: usize,
    /// Memory for the statement's sorts, joins and aggregates.
    pub memory_bytes: usize,
    /// How long the statement may run, planning and streaming included.
    pub timeout: Duration,
}

impl SqlLimits {
    /// 64 KiB and 128 levels, as for every expression from outside; 256 MiB and 5
    /// minutes, `[sql]`'s defaults.
    pub const DEFAULT: SqlLimits = SqlLimits {
        max_bytes: 64 * 1024,
        max_depth: 128,
        memory_bytes: 256 << 20,
        timeout: Duration::from_secs(300),
    };

    /// The limits `[sql]` sets (memory and time), with the fixed text limits.
    pub fn of(config: &crate::config::SqlConfig) -> Self {
        Self {
            memory_bytes: usize::try_from(config.memory_limit_mb.saturating_mul(1 << 20))
                .unwrap_or(usize::MAX),
            timeout: config.statement_timeout,
            ..Self::DEFAULT
        }
    }
}

impl Default for SqlLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The message of a statement that is not a query.
pub const READ_ONLY: &str = "hotgate SQL is read-only: only queries (SELECT, WITH … SELECT, VALUES) \
     run here; write rows with DoPut or Flight SQL's CommandStatementIngest, and manage \
     tables through the HTTP API";

/// A statement planned for its caller, ready to run.
#[derive(Debug)]
pub struct PlannedStatement {
    pub plan: Arc<dyn ExecutionPlan>,
    /// The schema of the rows it yields: the same for `GetFlightInfo` and `DoGet`,
    /// since both plan the statement alike.
    pub schema: SchemaRef,
    /// Every table the statement reads, with the caller's view of it.
    pub touched: Vec<Touched>,
    session: SessionState,
    limits: SqlLimits,
}

/// Plans `sql` for `principal`, binding `params` to its placeholders (`$1`, `$2`, …);
/// every table it names is added to `referenced`, even if planning then fails.
pub async fn plan_statement(
    state: &Arc<GatewayState>,
    principal: &Principal,
    sql: &str,
    params: Option<&RecordBatch>,
    limits: SqlLimits,
    referenced: &Referenced,
) -> Result<PlannedStatement> {
    let params = params.map(param_values).transpose()?;
    let (access, session) = begin(state, principal, sql, limits, referenced)?;
    let (sql, planning, resolver) = (sql.to_owned(), session.clone(), Arc::clone(&access));
    let plan = on_planning_stack(limits, move || {
        futures::executor::block_on(plan_bounded(&planning, &resolver, &sql, params, limits))
    })
    .await?;
    Ok(PlannedStatement {
        schema: plan.schema(),
        plan,
        touched: access.touched(),
        session,
        limits,
    })
}

/// Checks the statement's length, and makes its access to the store and its session.
fn begin(
    state: &Arc<GatewayState>,
    principal: &Principal,
    sql: &str,
    limits: SqlLimits,
    referenced: &Referenced,
) -> Result<(Arc<StatementAccess>, SessionState)> {
    if sql.len() > limits.max_bytes {
        return Err(GatewayError::InvalidArgument(format!(
            "SQL: the statement is {} bytes long; the limit is {} bytes",
            sql.len(),
            limits.max_bytes
        )));
    }
    let access = StatementAccess::new(Arc::clone(state), principal.clone(), Arc::clone(referenced));
    let session = statement_session(state, Arc::clone(&access), limits)?;
    Ok((access, session))
}

/// Runs `work` (parsing and planning, which recurse once per level, and dropping a
/// refused tree) on a stack of its own, within the statement's time limit. Table
/// resolution inside is synchronous work, so `work` may block on it.
async fn on_planning_stack<T: Send + 'static>(
    limits: SqlLimits,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let planning = tokio::task::spawn_blocking(move || stacker::grow(PARSE_STACK, work));
    tokio::time::timeout(limits.timeout, planning)
        .await
        .map_err(|_| timed_out(limits))?
        .map_err(|e| GatewayError::Internal(format!("SQL planning task failed: {e}")))?
}

/// A statement described without running it: what `CreatePreparedStatement` returns.
#[derive(Debug)]
pub struct DescribedStatement {
    /// The schema of its rows.
    pub dataset: SchemaRef,
    /// One field per placeholder, `$1` first; `Null` where the type is not known.
    pub parameters: SchemaRef,
    pub touched: Vec<Touched>,
}

/// Checks and plans `sql` for `principal` as [`plan_statement`] does, without values
/// for its placeholders.
pub async fn describe_statement(
    state: &Arc<GatewayState>,
    principal: &Principal,
    sql: &str,
    limits: SqlLimits,
    referenced: &Referenced,
) -> Result<DescribedStatement> {
    let (access, session) = begin(state, principal, sql, limits, referenced)?;
    let (sql, resolver) = (sql.to_owned(), Arc::clone(&access));
    let (dataset, parameters) = on_planning_stack(limits, move || {
        futures::executor::block_on(async {
            let plan = logical_plan(&session, &resolver, &sql, limits).await?;
            let mut parameters: Vec<(usize, arrow_schema::Field)> = plan
                .get_parameter_fields()
                .map_err(|e| statement_error(e, limits))?
                .into_iter()
                .map(|(id, field)| {
                    let position = id.trim_start_matches('$').parse::<usize>().unwrap_or(0);
                    let data_type = field
                        .map(|f| f.data_type().clone())
                        .unwrap_or(arrow_schema::DataType::Null);
                    (position, arrow_schema::Field::new(id, data_type, true))
                })
                .collect();
            parameters.sort_by_key(|(position, _)| *position);
            // Without placeholders the physical plan's schema is the one DoGet streams.
            let dataset: SchemaRef = if parameters.is_empty() {
                session
                    .create_physical_plan(&plan)
                    .await
                    .map_err(|e| statement_error(e, limits))?
                    .schema()
            } else {
                Arc::new(plan.schema().as_arrow().clone())
            };
            let parameters = arrow_schema::Schema::new(
                parameters.into_iter().map(|(_, f)| f).collect::<Vec<_>>(),
            );
            Ok::<_, GatewayError>((dataset, Arc::new(parameters)))
        })
    })
    .await?;
    Ok(DescribedStatement {
        dataset,
        parameters,
        touched: access.touched(),
    })
}

impl PlannedStatement {
    /// Runs the statement: its rows, ending with an error that names the limit if it
    /// runs past its deadline or its memory, or says it was cancelled once `cancel` is.
    pub fn execute(
        &self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let task = self.session.task_ctx();
        let stream = datafusion::physical_plan::execute_stream(Arc::clone(&self.plan), task)
            .map_err(|e| statement_error(e, self.limits))?;
        let limits = self.limits;
        let deadline = tokio::time::Instant::now() + limits.timeout;
        let stream = futures::stream::unfold(Some(stream), move |stream| {
            let cancel = cancel.clone();
            async move {
                let mut stream = stream?;
                // Checked before each batch too: a plan that never waits would not let
                // the timer or the token be polled.
                if cancel.is_cancelled() {
                    return Some((Err(cancelled()), None));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Some((Err(timed_out(limits)), None));
                }
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => Some((Err(cancelled()), None)),
                    next = tokio::time::timeout_at(deadline, stream.next()) => match next {
                        Ok(Some(Ok(batch))) => Some((Ok(batch), Some(stream))),
                        Ok(Some(Err(e))) => Some((Err(statement_error(e, limits)), None)),
                        Ok(None) => None,
                        Err(_) => Some((Err(timed_out(limits)), None)),
                    },
                }
            }
        });
        Ok(stream.boxed())
    }
}

/// The session of one statement: the `hotgate` catalog seen as `principal`, nothing
/// else (no default in-memory catalog, no information schema, no URL tables), its own
/// memory pool, and no disk to spill to.
fn statement_session(
    state: &Arc<GatewayState>,
    access: Arc<StatementAccess>,
    limits: SqlLimits,
) -> Result<SessionState> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(GreedyMemoryPool::new(limits.memory_bytes)))
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()?;
    let mut config = SessionConfig::new()
        .with_target_partitions(crate::planner::MAX_PARTITIONS)
        .with_create_default_catalog_and_schema(false)
        .with_default_catalog_and_schema(CATALOG, &state.sql.default_namespace)
        .with_information_schema(false);
    config.options_mut().sql_parser.recursion_limit = limits.max_depth;
    // DataFusion's functions are registered once; each statement starts from a copy
    // with its own config, memory pool and catalog (registering them per statement
    // cost about a millisecond).
    static FUNCTIONS: std::sync::LazyLock<SessionState> =
        std::sync::LazyLock::new(|| SessionStateBuilder::new().with_default_features().build());
    let session = SessionStateBuilder::new_from_existing(FUNCTIONS.clone())
        .with_config(config)
        .with_runtime_env(runtime)
        .with_catalog_list(Arc::new(MemoryCatalogProviderList::new()))
        .build();
    access.set_table_functions(session.table_functions().keys().cloned());
    session
        .catalog_list()
        .register_catalog(CATALOG.to_owned(), Arc::new(StatementCatalog(access)));
    Ok(session)
}

/// Parses, checks and plans on the caller's (large) stack.
async fn plan_bounded(
    session: &SessionState,
    access: &StatementAccess,
    sql: &str,
    params: Option<ParamValues>,
    limits: SqlLimits,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = logical_plan(session, access, sql, limits).await?;
    let plan = match params {
        // Bound values are constants too.
        Some(values) => {
            let plan = plan
                .with_param_values(values)
                .map_err(|e| statement_error(e, limits))?;
            check_constants(&plan)?;
            plan
        }
        None => plan,
    };
    session
        .create_physical_plan(&plan)
        .await
        .map_err(|e| statement_error(e, limits))
}

/// The checked logical plan of `sql`: a query, within the limits.
async fn logical_plan(
    session: &SessionState,
    access: &StatementAccess,
    sql: &str,
    limits: SqlLimits,
) -> Result<LogicalPlan> {
    let statement = parse_query(sql, limits)?;
    let plan = session
        .statement_to_plan(statement)
        .await
        .map_err(|e| denied_column(&e, access).unwrap_or_else(|| statement_error(e, limits)))?;
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(&plan)
        .map_err(|_| GatewayError::InvalidArgument(READ_ONLY.into()))?;
    check_plan_depth(&plan, limits)?;
    check_constants(&plan)?;
    Ok(plan)
}

/// Parses one query; any other kind of statement is refused as a write.
fn parse_query(sql: &str, limits: SqlLimits) -> Result<DfStatement> {
    let mut statements = DFParserBuilder::new(sql)
        .with_recursion_limit(limits.max_depth)
        .build()
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| parse_error(e, limits))?;
    if statements.len() != 1 {
        return Err(GatewayError::InvalidArgument(format!(
            "SQL: send exactly one statement (this text holds {})",
            statements.len()
        )));
    }
    let statement = statements.pop_front().expect("one statement");
    let DfStatement::Statement(inner) = &statement else {
        return Err(GatewayError::InvalidArgument(READ_ONLY.into()));
    };
    let sqlparser::ast::Statement::Query(query) = inner.as_ref() else {
        return Err(GatewayError::InvalidArgument(READ_ONLY.into()));
    };
    // `SELECT … INTO t` creates a table.
    if query_writes(query) {
        return Err(GatewayError::InvalidArgument(READ_ONLY.into()));
    }
    let mut depth = SyntaxDepth {
        depth: 0,
        limit: limits.max_depth,
    };
    if let ControlFlow::Break(()) = inner.visit(&mut depth) {
        return Err(too_deep(limits));
    }
    Ok(statement)
}

/// Whether a query writes: `SELECT … INTO` anywhere in it.
fn query_writes(query: &sqlparser::ast::Query) -> bool {
    struct Into(bool);
    impl Visitor for Into {
        type Break = ();
        fn pre_visit_query(&mut self, q: &sqlparser::ast::Query) -> ControlFlow<()> {
            if let sqlparser::ast::SetExpr::Select(s) = q.body.as_ref()
                && s.into.is_some()
            {
                self.0 = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut into = Into(false);
    let _ = query.visit(&mut into);
    into.0
}

/// The depth of the expression and query being visited; breaks past the limit, so the
/// visit never recurses much deeper than that.
struct SyntaxDepth {
    depth: usize,
    limit: usize,
}

impl SyntaxDepth {
    fn enter(&mut self) -> ControlFlow<()> {
        self.depth += 1;
        if self.depth > self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn leave(&mut self) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

impl Visitor for SyntaxDepth {
    type Break = ();

    fn pre_visit_query(&mut self, _: &sqlparser::ast::Query) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_query(&mut self, _: &sqlparser::ast::Query) -> ControlFlow<()> {
        self.leave()
    }

    fn pre_visit_expr(&mut self, _: &sqlparser::ast::Expr) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_expr(&mut self, _: &sqlparser::ast::Expr) -> ControlFlow<()> {
        self.leave()
    }
}

/// Measures the logical plan: the nesting of its nodes (a chain of `UNION`s, joins and
/// subqueries) and of each expression in it. The walk stops at the limit.
fn check_plan_depth(plan: &LogicalPlan, limits: SqlLimits) -> Result<()> {
    fn plan_depth(plan: &LogicalPlan, depth: usize, limit: usize) -> bool {
        if depth > limit {
            return false;
        }
        let mut ok = true;
        let _ = plan.apply_expressions(|e| {
            ok = expr_depth(e, depth, 1, limit);
            Ok(if ok {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        });
        ok && plan
            .inputs()
            .iter()
            .all(|i| plan_depth(i, depth + 1, limit))
    }
    fn expr_depth(expr: &Expr, plan_level: usize, depth: usize, limit: usize) -> bool {
        if depth > limit {
            return false;
        }

        let nested = match expr {
            Expr::ScalarSubquery(s) => Some(&s.subquery),
            Expr::Exists(e) => Some(&e.subquery.subquery),
            Expr::InSubquery(i) => Some(&i.subquery.subquery),
            _ => None,
        };
        if let Some(sub) = nested
            && !plan_depth(sub, plan_level + 1, limit)
        {
            return false;
        }
        let mut ok = true;
        let _ = expr.apply_children(|child| {
            ok = expr_depth(child, plan_level, depth + 1, limit);
            Ok(if ok {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        });
        ok
    }
    if plan_depth(plan, 1, limits.max_depth) {
        Ok(())
    } else {
        Err(too_deep(limits))
    }
}

/// Refuses constant calls that would allocate a huge string while the plan is
/// simplified (`repeat('x', 2000000000)`), before any memory pool counts it. Runs after
/// the depth check, so its walk is shallow.
fn check_constants(plan: &LogicalPlan) -> Result<()> {
    let mut refused = None;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarFunction(f) = e
                    && let Err(err) = bounded_expr::check_constant_call(f.name(), &f.args)
                {
                    refused = Some(err);
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    match refused {
        Some(e) => Err(GatewayError::InvalidArgument(format!("SQL: {e}"))),
        None => Ok(()),
    }
}

/// The positional parameters of one execution: the first (only) row of `batch`.
fn param_values(batch: &RecordBatch) -> Result<ParamValues> {
    if batch.num_rows() != 1 {
        return Err(GatewayError::InvalidArgument(format!(
            "parameters: bind exactly one row per execution (got {} rows)",
            batch.num_rows()
        )));
    }
    let values = batch
        .columns()
        .iter()
        .map(|c| ScalarValue::try_from_array(c, 0))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            GatewayError::InvalidArgument(format!("parameters: {}", e.strip_backtrace()))
        })?;
    Ok(ParamValues::from(values))
}

fn too_deep(limits: SqlLimits) -> GatewayError {
    GatewayError::InvalidArgument(format!(
        "SQL: the statement is nested more than {} levels deep, the depth limit (each \
         subquery, join, UNION and operator of a flat AND/OR chain counts as a level)",
        limits.max_depth
    ))
}

fn cancelled() -> GatewayError {
    GatewayError::Cancelled("the statement was cancelled (CancelFlightInfo)".into())
}

fn timed_out(limits: SqlLimits) -> GatewayError {
    GatewayError::ResourceExhausted(format!(
        "the statement ran past its time limit of {}s ([sql] statement_timeout)",
        limits.timeout.as_secs()
    ))
}

fn parse_error(e: DataFusionError, limits: SqlLimits) -> GatewayError {
    let text = e.strip_backtrace();
    if text
        .to_ascii_lowercase()
        .replace(' ', "")
        .contains("recursionlimitexceeded")
    {
        return too_deep(limits);
    }
    GatewayError::InvalidArgument(format!("SQL: {text}"))
}

/// A statement's error as the caller sees it: a limit by its name, a table the caller
/// may not read as the same error a JSON read gets, the planner's own message for a
/// statement it cannot plan (it names the caller's columns and tables, which the caller
/// wrote), and a value that fails as the caller's error.
fn statement_error(e: DataFusionError, limits: SqlLimits) -> GatewayError {
    match e.find_root() {
        DataFusionError::ResourcesExhausted(_) => GatewayError::ResourceExhausted(format!(
            "the statement needs more memory than its limit of {} MiB ([sql] memory_limit_mb)",
            limits.memory_bytes >> 20
        )),
        DataFusionError::External(inner) if inner.downcast_ref::<GatewayError>().is_some() => {
            GatewayError::from(unwrap_external(e))
        }
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_) => {
            GatewayError::InvalidArgument(format!("SQL: {}", e.strip_backtrace()))
        }
        _ => GatewayError::from(unwrap_external(e)),
    }
}

/// A column the statement names that the caller's view of a table it reads denies:
/// refused naming the column, as a JSON read is, rather than as an unknown column.
fn denied_column(e: &DataFusionError, access: &StatementAccess) -> Option<GatewayError> {
    let DataFusionError::SchemaError(err, _) = e.find_root() else {
        return None;
    };
    let datafusion::common::SchemaError::FieldNotFound { field, .. } = err.as_ref() else {
        return None;
    };
    access
        .touched()
        .iter()
        .find_map(|t| t.view.check_column(&field.name).err())
        .map(GatewayError::from)
}

/// The `External` error at the root of `e`, taken out of any `Context` around it.
fn unwrap_external(e: DataFusionError) -> DataFusionError {
    match e {
        DataFusionError::Context(_, inner) => unwrap_external(*inner),
        DataFusionError::Shared(shared) => match std::sync::Arc::try_unwrap(shared) {
            Ok(inner) => unwrap_external(inner),
            Err(shared) => DataFusionError::Internal(shared.to_string()),
        },
        other => other,
    }
}
