//! Compliance deletion requests (`POST /v1/deletions`): validation, the durable request
//! record, the suppression filter, and the steps that remove the rows and prove it.
//! Owns the request state machine; must not touch files itself (the store rewrites
//! segments, tiering rewrites and purges the Iceberg table).
//!
//! A request moves `accepted → hot_applied → cold_applied → purged → verified`, each
//! step run by a background driver ([`spawn_driver`]), durable before the next starts,
//! idempotent (a crash resumes it) and audited:
//! - `accepted`: validated, written under `<data-dir>/deletions/<id>.json`; from then on
//!   its predicate suppresses matching rows in scans (both tiers), changelogs, lookups
//!   and tiering cycles, also after a restart.
//! - `hot_applied`: log segments holding a match are rewritten without it (other rows
//!   keep their offsets); primary-key keys are erased (`-D`, changelog history, RocksDB
//!   compaction). A predicate that fixes the bucket key reads only that bucket's logs.
//! - `cold_applied`: the cold files that may hold a match (pruned by partition and
//!   statistics) are rewritten without it in one overwrite commit per table.
//! - `purged`: older snapshots and refs are removed and every unreferenced file under
//!   the table location deleted, once no read still uses an expired snapshot.
//! - `verified`: scans of both tiers find no match (rows written while the request was
//!   pending are deleted then), and no file of the table holds a string literal of the
//!   predicate. The suppression is lifted and the predicate erased.
//!
//! What is stored: the request's `subject` only as an HMAC (the hash key of write rules);
//! the predicate in clear until `verified` (resuming after a crash needs it), outside
//! every table's directory and Iceberg location, then only as an HMAC.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::Schema;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::prelude::SessionContext;
use hotgate_policy::bounded_expr::{self, ExprLimits};
use hotgate_store::{TableDef, TableName, write_file_durable};
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

/// The tag of columns that identify a data subject: `"tables": "all"` with a
/// `subject_value` targets every table with such a column.
pub const SUBJECT_TAG: &str = "subject";

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionState {
    Accepted,
    HotApplied,
    ColdApplied,
    Purged,
    Verified,
}

impl DeletionState {
    pub const ALL: [DeletionState; 5] = [
        DeletionState::Accepted,
        DeletionState::HotApplied,
        DeletionState::ColdApplied,
        DeletionState::Purged,
        DeletionState::Verified,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeletionState::Accepted => "accepted",
            DeletionState::HotApplied => "hot_applied",
            DeletionState::ColdApplied => "cold_applied",
            DeletionState::Purged => "purged",
            DeletionState::Verified => "verified",
        }
    }
}

/// One table a request deletes from, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionTarget {
    pub table: String,
    /// A SQL boolean expression over the table's columns. It holds the subject's
    /// values, so it is erased once the request is verified (`predicate_hmac` stays).
    pub predicate: String,
    /// HMAC-SHA256 (hex) of the predicate, set when the predicate is erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicate_hmac: Option<String>,
}

/// A state change, for the status and the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChange {
    pub state: DeletionState,
    /// RFC 3339, UTC.
    pub at: String,
}

/// A deletion request as stored and as `GET /v1/deletions/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionRecord {
    pub id: String,
    pub state: DeletionState,
    pub targets: Vec<DeletionTarget>,
    /// HMAC-SHA256 (hex) of the request's `subject`.
    pub subject_hmac: String,
    pub reason: String,
    pub requested_by: String,
    pub history: Vec<StateChange>,
    /// When the request must be `verified` by (RFC 3339): acceptance plus the
    /// configured time bound.
    pub deadline: String,
    /// Past the deadline and not verified; computed when shown, not stored.
    #[serde(default, skip_deserializing)]
    pub overdue: bool,
    /// What is not done yet, in words.
    pub pending: Option<String>,
    /// What was done so far.
    #[serde(default)]
    pub receipt: DeletionReceipt,
}

/// The receipt: what each step did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeletionReceipt {
    /// Hot rows deleted by rewriting segments (log rows and changelog records).
    pub hot_rows_deleted: u64,
    pub hot_segments_rewritten: usize,
    /// Size of the rewritten segments before the rewrite.
    pub hot_bytes_rewritten: u64,
    /// Primary keys deleted (each with a `-D` record, then erased from the changelog).
    pub keys_erased: u64,
    pub hot_millis: u64,
    /// Cold rows removed by the copy-on-write.
    pub cold_rows_deleted: u64,
    /// Cold data files read (pruning could not rule them out).
    pub cold_files_read: usize,
    /// Cold data files replaced, and their size.
    pub cold_files_rewritten: usize,
    pub cold_bytes_rewritten: u64,
    /// Size of the tables' live cold files before, to put the rewrite in proportion.
    pub cold_bytes_total: u64,
    /// Paths of the replaced cold files.
    pub cold_files_removed: Vec<String>,
    pub cold_millis: u64,
    /// Tags and branches removed because they pinned older snapshots (`table:ref`).
    pub refs_removed: Vec<String>,
    /// Snapshots expired by the purge, whatever the snapshot retention said.
    pub snapshots_expired: usize,
    /// Files the purge deleted from the tables' locations (the replaced data files,
    /// old manifests, manifest lists and metadata files), and their size.
    pub cold_files_deleted: usize,
    pub cold_bytes_deleted: u64,
    pub purge_millis: u64,
    /// The proof: rows of each tier scanned and found free of matches...
    pub verify_hot_rows_scanned: u64,
    pub verify_cold_rows_scanned: u64,
    /// ...and the files and bytes searched for the predicate's string literals.
    pub verify_literals: usize,
    pub verify_files_searched: usize,
    pub verify_bytes_searched: u64,
    pub verify_millis: u64,
    /// From `accepted` to `verified`.
    pub total_millis: u64,
}

impl DeletionReceipt {
    fn add_hot(&mut self, rewrite: &hotgate_store::RewriteReport) {
        self.hot_rows_deleted += rewrite.rows_deleted;
        self.hot_segments_rewritten += rewrite.segments_rewritten;
        self.hot_bytes_rewritten += rewrite.bytes_rewritten;
    }
}

impl DeletionRecord {
    fn is_overdue(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.state != DeletionState::Verified
            && chrono::DateTime::parse_from_rfc3339(&self.deadline).is_ok_and(|d| now > d)
    }
}

/// The `tables` field: a list of names, or `"all"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TablesField {
    List(Vec<String>),
    All(String),
}

/// The body of `POST /v1/deletions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeletionBody {
    pub tables: TablesField,
    #[serde(default)]
    pub predicate: Option<String>,
    /// With `"tables": "all"`: the value of the `subject`-tagged column to delete.
    #[serde(default)]
    pub subject_value: Option<String>,
    pub subject: String,
    #[serde(default)]
    pub reason: String,
    /// Required for a predicate that matches every row.
    #[serde(default)]
    pub confirm_all: bool,
}

/// The targets of `body` over the tables in `defs`, each predicate checked: it parses,
/// names only columns of its table, is boolean, and does not match everything (unless
/// `confirm_all`). Every failure is `InvalidArgument`; nothing is written.
pub fn plan_targets(body: &DeletionBody, defs: &[Arc<TableDef>]) -> Result<Vec<DeletionTarget>> {
    let invalid = |m: String| Err(GatewayError::InvalidArgument(m));
    if body.subject.trim().is_empty() {
        return invalid("subject: give an identifier for the receipt".into());
    }
    let targets: Vec<DeletionTarget> = match &body.tables {
        TablesField::All(all) if all == "all" => {
            let Some(value) = &body.subject_value else {
                return invalid(
                    "\"tables\": \"all\" needs subject_value, the value of the columns tagged \
                     subject"
                        .into(),
                );
            };
            if body.predicate.is_some() {
                return invalid("\"tables\": \"all\" takes subject_value, not a predicate".into());
            }
            let literal = format!("'{}'", value.replace('\'', "''"));
            let targets: Vec<DeletionTarget> = defs
                .iter()
                .filter(|d| !d.name().is_system())
                .filter_map(|d| {
                    let columns: Vec<String> = d
                        .spec()
                        .columns
                        .iter()
                        .filter(|c| {
                            c.write != hotgate_store::WriteRule::Drop
                                && c.tags.iter().any(|t| t == SUBJECT_TAG)
                        })
                        .map(|c| format!("\"{}\" = {literal}", c.name))
                        .collect();
                    (!columns.is_empty()).then(|| DeletionTarget {
                        table: d.name().to_string(),
                        predicate: columns.join(" OR "),
                        predicate_hmac: None,
                    })
                })
                .collect();
            if targets.is_empty() {
                return invalid("no table has a column tagged subject".into());
            }
            targets
        }
        TablesField::All(other) => {
            return invalid(format!(
                "tables: {other:?} is neither a list of tables nor \"all\""
            ));
        }
        TablesField::List(names) => {
            if names.is_empty() {
                return invalid("tables: name at least one table".into());
            }
            if body.subject_value.is_some() {
                return invalid("subject_value goes with \"tables\": \"all\"".into());
            }
            let Some(predicate) = &body.predicate else {
                return invalid("predicate: a SQL boolean expression is required".into());
            };
            let mut targets = Vec::new();
            for name in names {
                let parsed = TableName::parse(name)
                    .map_err(|e| GatewayError::InvalidArgument(format!("tables: {e}")))?;
                if parsed.is_system() {
                    return invalid(format!("tables: {parsed} is one of hotgate's own tables"));
                }
                if !defs.iter().any(|d| d.name() == &parsed) {
                    return invalid(format!("tables: table {parsed} does not exist"));
                }
                targets.push(DeletionTarget {
                    table: parsed.to_string(),
                    predicate: predicate.clone(),
                    predicate_hmac: None,
                });
            }
            targets
        }
    };
    for target in &targets {
        let def = defs
            .iter()
            .find(|d| d.name().to_string() == target.table)
            .ok_or_else(|| GatewayError::Internal("a target lost its table".into()))?;
        let expr = parse_predicate(&target.predicate, def.stored_schema()).map_err(|e| {
            GatewayError::InvalidArgument(format!("predicate on {}: {e}", target.table))
        })?;
        if matches_everything(&expr, def.stored_schema()) && !body.confirm_all {
            return invalid(format!(
                "predicate on {} matches every row; send \"confirm_all\": true to delete \
                 the whole table",
                target.table
            ));
        }
    }
    Ok(targets)
}

/// Parses `sql` as a boolean expression over `schema`.
fn parse_predicate(sql: &str, schema: &Schema) -> std::result::Result<Expr, String> {
    let df_schema = DFSchema::try_from(schema.clone()).map_err(|e| e.to_string())?;
    let ctx = SessionContext::new();
    let expr = bounded_expr::parse(&ctx, sql, &df_schema, ExprLimits::DEFAULT)
        .map_err(|e| e.to_string())?;
    // Compiling checks every column exists and coerces types.
    let physical = ctx
        .create_physical_expr(expr.clone(), &df_schema)
        .map_err(|e| e.strip_backtrace())?;
    let data_type = physical
        .data_type(schema)
        .map_err(|e| e.strip_backtrace())?;
    if data_type != arrow_schema::DataType::Boolean {
        return Err(format!("the expression is {data_type}, not boolean"));
    }
    Ok(expr)
}

/// True when `expr` simplifies to the literal `true` (`1 = 1`, `true OR id = 3`).
fn matches_everything(expr: &Expr, schema: &Schema) -> bool {
    let Ok(df_schema) = DFSchema::try_from(schema.clone()) else {
        return false;
    };
    let context = SimplifyContext::default().with_schema(Arc::new(df_schema));
    matches!(
        ExprSimplifier::new(context).simplify(expr.clone()),
        Ok(Expr::Literal(ScalarValue::Boolean(Some(true)), _))
    )
}

/// The shortest string literal a verification searches files for.
pub const MIN_SEARCHED_LITERAL: usize = 4;

/// The rows a table's pending requests hide: those where any predicate is true.
#[derive(Debug, Clone)]
pub struct Suppression {
    predicates: Vec<Expr>,
    /// The keep filter compiled for the last batch schema seen: reads call
    /// [`Suppression::keep`] per batch, and their batches share one schema.
    compiled: Arc<std::sync::Mutex<Option<CompiledKeep>>>,
}

type CompiledKeep = (
    arrow_schema::SchemaRef,
    Arc<dyn datafusion::physical_expr::PhysicalExpr>,
);

impl Suppression {
    fn new(predicates: Vec<Expr>) -> Self {
        Self {
            predicates,
            compiled: Arc::default(),
        }
    }

    /// The filter that keeps the other rows: `(p1 OR p2 ...) IS NOT TRUE`, so a row
    /// where a predicate is null is kept, as SQL's `DELETE ... WHERE` would keep it.
    pub fn keep_expr(&self) -> Expr {
        // Balanced: many pending requests add log2(n) levels, not n.
        let any = bounded_expr::join_balanced(self.predicates.clone(), Expr::or)
            .unwrap_or(Expr::Literal(ScalarValue::Boolean(Some(false)), None));
        any.is_not_true()
    }

    /// Which rows of `batch` to keep. The batch must hold every column the predicates
    /// use (stored rows, possibly with extra columns).
    pub fn keep(&self, batch: &RecordBatch) -> std::result::Result<BooleanArray, String> {
        let schema = batch.schema();
        let cached = self
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(s, _)| s == &schema)
            .map(|(_, p)| Arc::clone(p));
        let physical = match cached {
            Some(p) => p,
            None => {
                let df_schema =
                    DFSchema::try_from(schema.as_ref().clone()).map_err(|e| e.to_string())?;
                let p = SessionContext::new()
                    .create_physical_expr(self.keep_expr(), &df_schema)
                    .map_err(|e| e.strip_backtrace())?;
                *self.compiled.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Arc::clone(&schema), Arc::clone(&p)));
                p
            }
        };
        let value = physical
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| e.strip_backtrace())?;
        value
            .as_any()
            .downcast_ref::<BooleanArray>()
            .cloned()
            .ok_or_else(|| "the suppression filter is not boolean".to_owned())
    }

    /// The string literals of the predicates, as bytes: the values a verification
    /// searches files for. Numbers and strings shorter than [`MIN_SEARCHED_LITERAL`]
    /// bytes are not searched: they occur by chance (in ids, hashes, encodings), so a
    /// hit would prove nothing. The scans still check them.
    pub fn literals(&self) -> Vec<Vec<u8>> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let mut found = std::collections::BTreeSet::new();
        for predicate in &self.predicates {
            let _ = predicate.apply(|e| {
                if let Expr::Literal(
                    ScalarValue::Utf8(Some(v))
                    | ScalarValue::LargeUtf8(Some(v))
                    | ScalarValue::Utf8View(Some(v)),
                    _,
                ) = e
                    && v.len() >= MIN_SEARCHED_LITERAL
                {
                    found.insert(v.as_bytes().to_vec());
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        found.into_iter().collect()
    }

    /// The comparisons every predicate ANDs (`column <op> literal`), for pruning cold
    /// files by partition and statistics; empty when there is more than one predicate
    /// or none of that form.
    pub fn prune_filters(&self) -> Vec<hotgate_tiering::ColdFilter> {
        match self.predicates.as_slice() {
            [one] => datafusion::logical_expr::utils::split_conjunction(one)
                .into_iter()
                .filter_map(crate::planner::cold_filter)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The only buckets that can hold a match, when the (single) predicate ANDs
    /// `bucket_key = literal` (or an `IN` list of literals); `None` otherwise.
    pub fn buckets(&self, def: &TableDef) -> Option<Vec<u32>> {
        use datafusion::logical_expr::{BinaryExpr, Operator, expr::InList};
        let [one] = self.predicates.as_slice() else {
            return None;
        };
        let key = &def.spec().bucket_key;
        let key_type = def
            .stored_schema()
            .field_with_name(key)
            .ok()?
            .data_type()
            .clone();
        let is_key = |e: &Expr| matches!(e, Expr::Column(c) if &c.name == key);
        let literals = datafusion::logical_expr::utils::split_conjunction(one)
            .into_iter()
            .find_map(|conjunct| match conjunct {
                Expr::BinaryExpr(BinaryExpr {
                    left,
                    op: Operator::Eq,
                    right,
                }) => match (left.as_ref(), right.as_ref()) {
                    (c, Expr::Literal(v, _)) | (Expr::Literal(v, _), c) if is_key(c) => {
                        Some(vec![v.clone()])
                    }
                    _ => None,
                },
                Expr::InList(InList {
                    expr,
                    list,
                    negated: false,
                }) if is_key(expr) => list
                    .iter()
                    .map(|e| match e {
                        Expr::Literal(v, _) => Some(v.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            })?;
        let values = ScalarValue::iter_to_array(literals).ok()?;
        let values = arrow_cast::cast(&values, &key_type).ok()?;
        if values.null_count() > 0 {
            return None;
        }
        let mut buckets = hotgate_store::bucket::buckets_of(&values, def.buckets()).ok()?;
        buckets.sort_unstable();
        buckets.dedup();
        Some(buckets)
    }

    /// The suppression of one target's predicate.
    pub fn of_target(target: &DeletionTarget, def: &TableDef) -> Result<Self> {
        let expr = parse_predicate(&target.predicate, def.stored_schema())
            .map_err(|e| GatewayError::Internal(format!("predicate on {}: {e}", target.table)))?;
        Ok(Self::new(vec![expr]))
    }

    /// Which rows of `batch` the predicates match (true only where one is true).
    pub fn matches(&self, batch: &RecordBatch) -> std::result::Result<BooleanArray, String> {
        let keep = self.keep(batch)?;
        Ok(keep.iter().map(|k| k.map(|k| !k)).collect())
    }

    /// [`Suppression::matches`] with a predicate failure as an internal error.
    fn matching(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        self.matches(batch)
            .map_err(|e| GatewayError::Internal(format!("deletion predicate: {e}")))
    }

    /// `batch` without the suppressed rows.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let keep = self
            .keep(batch)
            .map_err(|e| GatewayError::Internal(format!("suppression filter: {e}")))?;
        Ok(arrow_select::filter::filter_record_batch(batch, &keep)?)
    }
}

/// Every deletion request, and the suppression of those not yet verified.
#[derive(Debug)]
pub struct Deletions {
    dir: PathBuf,
    time_bound: std::time::Duration,
    records: RwLock<BTreeMap<String, DeletionRecord>>,
    /// Per table, the parsed predicates of its requests that are not verified.
    active: RwLock<HashMap<TableName, Vec<Expr>>>,
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl Deletions {
    /// Loads every request under `<data_dir>/deletions`. The predicates are parsed
    /// against the tables in `defs`; a request whose table is gone is kept on record
    /// and suppresses nothing.
    pub fn open(
        data_dir: &Path,
        defs: &[Arc<TableDef>],
        time_bound: std::time::Duration,
    ) -> Result<Self> {
        let dir = data_dir.join("deletions");
        std::fs::create_dir_all(&dir)
            .map_err(|e| GatewayError::Internal(format!("cannot create {}: {e}", dir.display())))?;
        let mut records = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)
            .map_err(|e| GatewayError::Internal(format!("cannot read {}: {e}", dir.display())))?
        {
            let path = entry
                .map_err(|e| GatewayError::Internal(format!("{}: {e}", dir.display())))?
                .path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read(&path)
                .map_err(|e| GatewayError::Internal(format!("{}: {e}", path.display())))?;
            // Fail closed: a request that cannot be read might be hiding rows that must
            // stay hidden, so the server does not start without it.
            let record: DeletionRecord = serde_json::from_slice(&text).map_err(|e| {
                GatewayError::Internal(format!(
                    "deletion request {} is unreadable: {e}",
                    path.display()
                ))
            })?;
            records.insert(record.id.clone(), record);
        }
        let deletions = Self {
            dir,
            time_bound,
            records: RwLock::new(records),
            active: RwLock::default(),
        };
        deletions.rebuild_active(defs)?;
        Ok(deletions)
    }

    /// Recomputes the suppression from the requests not yet verified: a verified
    /// request stops hiding rows (there are none left to hide).
    pub(crate) fn rebuild_active(&self, defs: &[Arc<TableDef>]) -> Result<()> {
        let records = self.records.read().unwrap_or_else(|p| p.into_inner());
        let mut active: HashMap<TableName, Vec<Expr>> = HashMap::new();
        for record in records
            .values()
            .filter(|r| r.state != DeletionState::Verified)
        {
            for target in &record.targets {
                let Some(def) = defs.iter().find(|d| d.name().to_string() == target.table) else {
                    continue;
                };
                let expr =
                    parse_predicate(&target.predicate, def.stored_schema()).map_err(|e| {
                        GatewayError::Internal(format!(
                            "deletion request {}: its predicate on {} no longer compiles: {e}",
                            record.id, target.table
                        ))
                    })?;
                active.entry(def.name().clone()).or_default().push(expr);
            }
        }
        *self.active.write().unwrap_or_else(|p| p.into_inner()) = active;
        Ok(())
    }

    /// Records a new request as `accepted`, durably, and starts suppressing its rows.
    pub fn accept(
        &self,
        targets: Vec<DeletionTarget>,
        subject_hmac: String,
        reason: String,
        requested_by: String,
        defs: &[Arc<TableDef>],
    ) -> Result<DeletionRecord> {
        let now = chrono::Utc::now();
        let bound = chrono::Duration::from_std(self.time_bound).unwrap_or(chrono::Duration::MAX);
        let record = DeletionRecord {
            deadline: (now.checked_add_signed(bound).unwrap_or(now))
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            overdue: false,
            id: uuid::Uuid::new_v4().to_string(),
            state: DeletionState::Accepted,
            targets,
            subject_hmac,
            reason,
            requested_by,
            history: vec![StateChange {
                state: DeletionState::Accepted,
                at: now_rfc3339(),
            }],
            pending: Some(
                "rows are hidden from every read and from tiering; the hot tier is next".into(),
            ),
            receipt: DeletionReceipt::default(),
        };
        let json = serde_json::to_vec_pretty(&record)
            .map_err(|e| GatewayError::Internal(format!("deletion record: {e}")))?;
        write_file_durable(&self.dir.join(format!("{}.json", record.id)), &json)?;
        self.records
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.id.clone(), record.clone());
        self.rebuild_active(defs)?;
        Ok(record)
    }

    /// The request `id`, with `overdue` as of now.
    pub fn get(&self, id: &str) -> Option<DeletionRecord> {
        let mut record = self
            .records
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()?;
        record.overdue = record.is_overdue(chrono::Utc::now());
        Some(record)
    }

    /// The ids of the requests in `state`.
    pub fn ids_in(&self, state: DeletionState) -> Vec<String> {
        self.records
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|r| r.state == state)
            .map(|r| r.id.clone())
            .collect()
    }

    /// Moves request `id` to `state`, durably, with its receipt and what is pending.
    pub fn advance(
        &self,
        id: &str,
        state: DeletionState,
        receipt: DeletionReceipt,
        pending: Option<String>,
    ) -> Result<DeletionRecord> {
        let mut records = self.records.write().unwrap_or_else(|p| p.into_inner());
        let record = records.get_mut(id).ok_or_else(|| {
            GatewayError::NotFound(format!("deletion request {id} does not exist"))
        })?;
        let mut next = record.clone();
        next.state = state;
        next.receipt = receipt;
        next.pending = pending;
        next.history.push(StateChange {
            state,
            at: now_rfc3339(),
        });
        let json = serde_json::to_vec_pretty(&next)
            .map_err(|e| GatewayError::Internal(format!("deletion record: {e}")))?;
        write_file_durable(&self.dir.join(format!("{id}.json")), &json)?;
        *record = next.clone();
        Ok(next)
    }

    /// Marks request `id` verified, durably, with its predicates erased (only their
    /// HMACs stay), then lifts its suppression.
    pub fn verified(
        &self,
        id: &str,
        receipt: DeletionReceipt,
        hash: impl Fn(&[u8]) -> String,
        defs: &[Arc<TableDef>],
    ) -> Result<DeletionRecord> {
        let record = {
            let mut records = self.records.write().unwrap_or_else(|p| p.into_inner());
            let record = records.get_mut(id).ok_or_else(|| {
                GatewayError::NotFound(format!("deletion request {id} does not exist"))
            })?;
            let mut next = record.clone();
            for target in &mut next.targets {
                if target.predicate_hmac.is_none() {
                    target.predicate_hmac = Some(hash(target.predicate.as_bytes()));
                }
                target.predicate.clear();
            }
            next.state = DeletionState::Verified;
            next.receipt = receipt;
            next.pending = None;
            next.history.push(StateChange {
                state: DeletionState::Verified,
                at: now_rfc3339(),
            });
            let json = serde_json::to_vec_pretty(&next)
                .map_err(|e| GatewayError::Internal(format!("deletion record: {e}")))?;
            write_file_durable(&self.dir.join(format!("{id}.json")), &json)?;
            *record = next.clone();
            next
        };
        self.rebuild_active(defs)?;
        Ok(record)
    }

    /// Replaces what request `id` reports as pending (not durable: a note on progress).
    pub fn note_pending(&self, id: &str, pending: String) {
        if let Some(r) = self
            .records
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(id)
        {
            r.pending = Some(pending);
        }
    }

    /// Requests by state, and how many of them are overdue, for `/metrics`.
    pub fn counts(&self) -> (BTreeMap<DeletionState, u64>, u64) {
        let now = chrono::Utc::now();
        let records = self.records.read().unwrap_or_else(|p| p.into_inner());
        let mut by_state = BTreeMap::new();
        let mut overdue = 0;
        for r in records.values() {
            *by_state.entry(r.state).or_default() += 1;
            overdue += u64::from(r.is_overdue(now));
        }
        (by_state, overdue)
    }

    /// The suppression of `table`, if any request on it is not verified.
    pub fn suppression(&self, table: &TableName) -> Option<Suppression> {
        self.active
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(table)
            .map(|predicates| Suppression::new(predicates.clone()))
    }
}

impl hotgate_tiering::RowSuppression for Deletions {
    fn keep(
        &self,
        table: &TableName,
        batch: &RecordBatch,
    ) -> std::result::Result<Option<BooleanArray>, String> {
        match self.suppression(table) {
            Some(s) => s.keep(batch).map(Some),
            None => Ok(None),
        }
    }
}

/// Runs the steps of pending requests in the background, about twice a second, until
/// `stop`. A step that fails is logged and retried on the next round; each completed
/// step is durable and audited before the next begins, so a crash resumes where it was.
pub fn spawn_driver(
    state: Arc<crate::state::GatewayState>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            for id in state.deletions.ids_in(DeletionState::Accepted) {
                if let Err(e) = apply_hot(&state, &id).await {
                    tracing::warn!(%id, "deletion step hot_applied failed; retrying: {e}");
                }
            }
            for id in state.deletions.ids_in(DeletionState::HotApplied) {
                if let Err(e) = apply_cold(&state, &id).await {
                    tracing::warn!(%id, "deletion step cold_applied failed; retrying: {e}");
                }
            }
            for id in state.deletions.ids_in(DeletionState::ColdApplied) {
                if let Err(e) = purge(&state, &id).await {
                    tracing::warn!(%id, "deletion step purged failed; retrying: {e}");
                    state.deletions.note_pending(&id, format!("purging: {e}"));
                }
            }
            for id in state.deletions.ids_in(DeletionState::Purged) {
                if let Err(e) = verify(&state, &id).await {
                    tracing::warn!(%id, "deletion step verified failed; retrying: {e}");
                    state.deletions.note_pending(&id, format!("verifying: {e}"));
                }
            }
        }
    });
}

/// `accepted → hot_applied`: log tables have the matching rows rewritten out of their
/// segments; primary-key tables have the keys of the matching current rows deleted
/// (`-D`), their changelog records erased and RocksDB compacted.
async fn apply_hot(state: &crate::state::GatewayState, id: &str) -> Result<()> {
    step_fail_point("deletion-apply-hot")?;
    let Some(record) = state.deletions.get(id) else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let mut receipt = record.receipt.clone();
    for target in &record.targets {
        delete_hot(state, target, &mut receipt).await?;
    }
    receipt.hot_millis = started.elapsed().as_millis() as u64;
    let record = state.deletions.advance(
        id,
        DeletionState::HotApplied,
        receipt,
        Some("the hot tier no longer holds the rows; the cold tier is next".into()),
    )?;
    let reason = format!(
        "deletion request {}: {} hot rows deleted, {} segments rewritten, {} keys erased",
        record.id,
        record.receipt.hot_rows_deleted,
        record.receipt.hot_segments_rewritten,
        record.receipt.keys_erased
    );
    audit_step(
        state,
        &record,
        "deletion_hot_applied",
        Some(crate::planner::Tiers::Hot),
        Some(record.receipt.hot_rows_deleted),
        reason,
    )
    .await?;
    Ok(())
}

/// The hot table `target` names, or `None` when it was dropped since (nothing left
/// to delete there).
fn target_table(
    state: &crate::state::GatewayState,
    target: &DeletionTarget,
) -> Result<Option<(TableName, Arc<hotgate_store::HotTable>)>> {
    let name = TableName::parse(&target.table)?;
    Ok(state.store.table(&name).ok().map(|hot| (name, hot)))
}

/// Whether `def`'s table has a cold tier; if so, its Iceberg table is open.
async fn cold_tier_open(state: &crate::state::GatewayState, def: &TableDef) -> Result<bool> {
    if !def.tiering().enabled {
        return Ok(false);
    }
    if !state.tierer.is_ready(def.name()) {
        state.tierer.ensure_table(def).await?;
    }
    Ok(true)
}

/// Deletes `target`'s matching rows from the hot tier, adding to `receipt`. Log
/// tables: every segment holding a match is rewritten without it. Primary-key tables:
/// the keys of matching current rows are erased (`-D`, their whole changelog history,
/// RocksDB compacted), then any changelog record that still matches (a before image
/// of a key whose current row no longer matches) is blanked; replay is unchanged,
/// because a later record of that key supersedes it.
async fn delete_hot(
    state: &crate::state::GatewayState,
    target: &DeletionTarget,
    receipt: &mut DeletionReceipt,
) -> Result<()> {
    let Some((_, hot)) = target_table(state, target)? else {
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
async fn delete_cold(
    state: &crate::state::GatewayState,
    target: &DeletionTarget,
    receipt: &mut DeletionReceipt,
) -> Result<()> {
    let Some((_, hot)) = target_table(state, target)? else {
        return Ok(());
    };
    let def = hot.def();
    if !cold_tier_open(state, &def).await? {
        return Ok(());
    }
    let suppression = Suppression::of_target(target, &def)?;
    let report = state
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

/// `hot_applied → cold_applied`: each target's cold files that hold a match are
/// rewritten without it (copy-on-write, one overwrite commit per table).
async fn apply_cold(state: &crate::state::GatewayState, id: &str) -> Result<()> {
    step_fail_point("deletion-apply-cold")?;
    let Some(record) = state.deletions.get(id) else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let mut receipt = record.receipt.clone();
    for target in &record.targets {
        delete_cold(state, target, &mut receipt).await?;
    }
    receipt.cold_millis = started.elapsed().as_millis() as u64;
    let record = state.deletions.advance(
        id,
        DeletionState::ColdApplied,
        receipt,
        Some(
            "the current snapshots hold no matching row; older snapshots, the refs \
             pinning them and their files are next"
                .into(),
        ),
    )?;
    let reason = format!(
        "deletion request {}: {} cold rows deleted, {} files ({} of {} bytes) rewritten",
        record.id,
        record.receipt.cold_rows_deleted,
        record.receipt.cold_files_rewritten,
        record.receipt.cold_bytes_rewritten,
        record.receipt.cold_bytes_total
    );
    audit_step(
        state,
        &record,
        "deletion_cold_applied",
        Some(crate::planner::Tiers::Cold),
        Some(record.receipt.cold_rows_deleted),
        reason,
    )
    .await?;
    Ok(())
}

/// How long the purge waits for reads of expired snapshots before it retries later.
const PURGE_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A fail point at the start of a step (compiled in for tests only): `return` makes
/// the step fail, so a test can hold a request in a state and kill the server there.
fn step_fail_point(name: &str) -> Result<()> {
    fail::fail_point!(name, |_| Err(GatewayError::Unavailable(format!(
        "fail point {name}"
    ))));
    let _ = name;
    Ok(())
}

/// Erases the history of `def`'s cold table ([`hotgate_tiering::Tierer::erase_history`]),
/// adding to `receipt`. Reads of expired snapshots that outlast the wait are an error,
/// so the caller retries later: their files are still there.
async fn purge_cold(
    state: &crate::state::GatewayState,
    def: &TableDef,
    receipt: &mut DeletionReceipt,
) -> Result<()> {
    let name = def.name();
    let report = state.tierer.erase_history(def, PURGE_READ_WAIT).await?;
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

/// `cold_applied → purged`: per table, every snapshot but the current one is expired
/// and every ref but `main` removed, then, once no read streams from an expired
/// snapshot, every file the current metadata does not reference is deleted.
async fn purge(state: &crate::state::GatewayState, id: &str) -> Result<()> {
    step_fail_point("deletion-purge")?;
    let Some(record) = state.deletions.get(id) else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let mut receipt = record.receipt.clone();
    for target in &record.targets {
        let Some((_, hot)) = target_table(state, target)? else {
            continue;
        };
        let def = hot.def();
        if cold_tier_open(state, &def).await? {
            purge_cold(state, &def, &mut receipt).await?;
        }
    }
    receipt.purge_millis = started.elapsed().as_millis() as u64;
    let record = state.deletions.advance(
        id,
        DeletionState::Purged,
        receipt,
        Some("no snapshot or file reaches the rows any more; verification is next".into()),
    )?;
    let reason = format!(
        "deletion request {}: {} snapshots expired, {} refs removed, {} files ({} bytes) deleted",
        record.id,
        record.receipt.snapshots_expired,
        record.receipt.refs_removed.len(),
        record.receipt.cold_files_deleted,
        record.receipt.cold_bytes_deleted
    );
    audit_step(
        state,
        &record,
        "deletion_purged",
        Some(crate::planner::Tiers::Cold),
        None,
        reason,
    )
    .await?;
    Ok(())
}

/// `purged → verified`: per table, a scan of the hot tier (log segments, and a
/// primary-key table's current state) and of the cold tier's current snapshot finds
/// no matching row, and no file under the table's hot directory, the RocksDB files
/// that can hold its state (primary-key tables) or the Iceberg location holds one of
/// the predicate's string literals. Only then is the suppression lifted and the predicate erased.
async fn verify(state: &crate::state::GatewayState, id: &str) -> Result<()> {
    step_fail_point("deletion-verify")?;
    let Some(record) = state.deletions.get(id) else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    let mut receipt = record.receipt.clone();
    let (mut hot_rows, mut cold_rows) = (0u64, 0u64);
    let (mut files, mut bytes, mut literals) = (0usize, 0u64, 0usize);
    for target in &record.targets {
        let Some((name, hot)) = target_table(state, target)? else {
            continue;
        };
        let def = hot.def();
        let suppression = Suppression::of_target(target, &def)?;
        let needles = suppression.literals();
        literals += needles.len();

        // Rows written while the request was pending (hidden since acceptance) match
        // too: they are deleted now, and the scan repeated.
        let (mut scanned, mut matched) = hot_matches(&hot, &suppression).await?;
        if matched > 0 {
            tracing::info!(table = %name, matched, "deleting rows written after acceptance");
            delete_hot(state, target, &mut receipt).await?;
            (scanned, matched) = hot_matches(&hot, &suppression).await?;
        }
        hot_rows += scanned;
        if matched > 0 {
            return Err(GatewayError::Internal(format!(
                "{name}: the hot tier still holds {matched} matching rows"
            )));
        }
        // The table's directory, and for a primary-key table the files of the shared
        // RocksDB that are not other tables' live SSTs (those may hold the same values
        // legitimately).
        let mut state_needles = needles.clone();
        if hot.is_primary_key() {
            for literal in &needles {
                if let Ok(text) = std::str::from_utf8(literal) {
                    state_needles.push(hotgate_store::state_bytes_of_string(text)?);
                }
            }
        }
        let found = search_files(hot.dir(), hot.state_files()?, &state_needles).await?;
        files += found.files;
        bytes += found.bytes;
        if let Some(path) = found.first_match {
            return Err(GatewayError::Internal(format!(
                "{name}: {} still holds a literal of the predicate",
                path.display()
            )));
        }

        if cold_tier_open(state, &def).await? {
            let (mut scanned, mut matched) = cold_matches(state, &name, &suppression).await?;
            if matched > 0 {
                delete_cold(state, target, &mut receipt).await?;
                purge_cold(state, &def, &mut receipt).await?;
                (scanned, matched) = cold_matches(state, &name, &suppression).await?;
            }
            cold_rows += scanned;
            if matched > 0 {
                return Err(GatewayError::Internal(format!(
                    "{name}: the cold tier's current snapshot still holds {matched} matching rows"
                )));
            }
            let found = state.tierer.search_location(&def, &needles).await?;
            files += found.files_searched;
            bytes += found.bytes_searched;
            if let Some(path) = found.files_with_match.first() {
                return Err(GatewayError::Internal(format!(
                    "{name}: {path} still holds a literal of the predicate"
                )));
            }
        }
    }
    receipt.verify_hot_rows_scanned = hot_rows;
    receipt.verify_cold_rows_scanned = cold_rows;
    receipt.verify_literals = literals;
    receipt.verify_files_searched = files;
    receipt.verify_bytes_searched = bytes;
    receipt.verify_millis = started.elapsed().as_millis() as u64;
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
    let defs: Vec<_> = state.store.tables().iter().map(|t| t.def()).collect();
    let key = state.governance.hash_key();
    let record = state
        .deletions
        .verified(id, receipt, |p| key.hmac_hex(p), &defs)?;
    let reason = format!(
        "deletion request {}: verified; {} hot and {} cold rows scanned, {} files ({} bytes) \
         searched for {} literals, none found; suppression lifted",
        record.id,
        record.receipt.verify_hot_rows_scanned,
        record.receipt.verify_cold_rows_scanned,
        record.receipt.verify_files_searched,
        record.receipt.verify_bytes_searched,
        record.receipt.verify_literals
    );
    audit_step(
        state,
        &record,
        "deletion_verified",
        Some(crate::planner::Tiers::HotAndCold),
        None,
        reason,
    )
    .await?;
    tracing::info!(id = %record.id, "deletion request verified");
    Ok(())
}

/// Rows of the hot tier scanned, and how many `suppression` matches: every log row
/// (a primary-key table's changelog included) and a primary-key table's current state.
async fn hot_matches(
    hot: &Arc<hotgate_store::HotTable>,
    suppression: &Suppression,
) -> Result<(u64, u64)> {
    let hot = Arc::clone(hot);
    let suppression = suppression.clone();
    tokio::task::spawn_blocking(move || -> Result<(u64, u64)> {
        let count = |batch: &RecordBatch| -> Result<u64> {
            Ok(suppression.matching(batch)?.true_count() as u64)
        };
        let (mut scanned, mut matched) = (0, 0);
        for item in hot.scan(&hotgate_store::ScanRequest::default())? {
            let batch = item?.batch;
            scanned += batch.num_rows() as u64;
            matched += count(&batch)?;
        }
        if hot.is_primary_key() {
            for batch in hot.current_rows(8192)? {
                scanned += batch.num_rows() as u64;
                matched += count(&batch)?;
            }
        }
        Ok((scanned, matched))
    })
    .await
    .map_err(|e| GatewayError::Internal(format!("hot verification failed: {e}")))?
}

/// Rows of the cold tier's current snapshot scanned, and how many `suppression` matches.
async fn cold_matches(
    state: &crate::state::GatewayState,
    name: &TableName,
    suppression: &Suppression,
) -> Result<(u64, u64)> {
    let Some(cold) = state.tierer.cold_snapshot(name)? else {
        return Ok((0, 0));
    };
    let mut stream = cold
        .scan(hotgate_tiering::ColdScanRequest::default())
        .await?;
    let (mut scanned, mut matched) = (0, 0);
    while let Some(batch) = futures::StreamExt::next(&mut stream).await {
        let batch = batch?;
        scanned += batch.num_rows() as u64;
        matched += suppression.matching(&batch)?.true_count() as u64;
    }
    Ok((scanned, matched))
}

/// What a search of a directory found.
struct DirSearch {
    files: usize,
    bytes: u64,
    first_match: Option<PathBuf>,
}

/// Searches the raw bytes of every file under `dir`, and of `more`, for `needles`.
async fn search_files(dir: &Path, more: Vec<PathBuf>, needles: &[Vec<u8>]) -> Result<DirSearch> {
    let dir = dir.to_path_buf();
    let needles = needles.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut found = DirSearch {
            files: 0,
            bytes: 0,
            first_match: None,
        };
        let search = |path: PathBuf, found: &mut DirSearch| {
            // A file can vanish meanwhile (RocksDB compactions, segment renames).
            let Ok(bytes) = std::fs::read(&path) else {
                return;
            };
            found.files += 1;
            found.bytes += bytes.len() as u64;
            if found.first_match.is_none() && hotgate_tiering::contains_any(&bytes, &needles) {
                found.first_match = Some(path);
            }
        };
        for path in more {
            search(path, &mut found);
        }
        let mut pending = vec![dir];
        while let Some(dir) = pending.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(GatewayError::Internal(format!("{}: {e}", dir.display())));
                }
            };
            for entry in entries {
                let path = entry
                    .map_err(|e| GatewayError::Internal(format!("{}: {e}", dir.display())))?
                    .path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                search(path, &mut found);
            }
        }
        Ok(found)
    })
    .await
    .map_err(|e| GatewayError::Internal(format!("file search failed: {e}")))?
}

/// Audits a state change of `record`: one record per target table.
pub(crate) async fn audit_step(
    state: &crate::state::GatewayState,
    record: &DeletionRecord,
    action: &str,
    tiers: Option<crate::planner::Tiers>,
    rows: Option<u64>,
    reason: String,
) -> Result<()> {
    for target in &record.targets {
        let table = TableName::parse(&target.table)?;
        crate::audit::CallAudit::record_system(
            &state.audit,
            action,
            &table,
            tiers,
            rows,
            reason.clone(),
        )
        .await?;
    }
    Ok(())
}

/// The key columns of a primary-key table's current rows that `suppression` matches.
async fn matching_keys(
    hot: &Arc<hotgate_store::HotTable>,
    suppression: &Suppression,
) -> Result<RecordBatch> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> Arc<TableDef> {
        Arc::new(
            TableDef::new(
                serde_json::from_value(serde_json::json!({
                    "namespace": "app", "name": "events",
                    "columns": [
                        {"name": "id", "type": "int64", "nullable": false},
                        {"name": "user_id", "type": "string", "nullable": false, "tags": ["subject"]},
                        {"name": "ts", "type": "timestamp_us", "nullable": false}
                    ],
                    "time_column": "ts", "bucket_key": "user_id", "buckets": 4
                }))
                .unwrap(),
            )
            .unwrap(),
        )
    }

    fn body(v: serde_json::Value) -> DeletionBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let defs = [def()];
        let cases = [
            (
                serde_json::json!({"tables": [], "predicate": "id = 1", "subject": "s"}),
                "at least one table",
            ),
            (
                serde_json::json!({"tables": ["app.nope"], "predicate": "id = 1", "subject": "s"}),
                "does not exist",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "id = = 1", "subject": "s"}),
                "predicate on app.events",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "nope = 1", "subject": "s"}),
                "nope",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "id + 1", "subject": "s"}),
                "not boolean",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "1 = 1", "subject": "s"}),
                "matches every row",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "true OR id = 3", "subject": "s"}),
                "matches every row",
            ),
            (
                serde_json::json!({"tables": "all", "subject": "s"}),
                "needs subject_value",
            ),
            (
                serde_json::json!({"tables": "some", "subject": "s", "subject_value": "u"}),
                "neither a list",
            ),
            (
                serde_json::json!({"tables": ["app.events"], "predicate": "id = 1", "subject": " "}),
                "subject",
            ),
        ];
        for (v, expected) in cases {
            let err = plan_targets(&body(v.clone()), &defs)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{v}: {err} should say {expected}");
        }
        let all = body(
            serde_json::json!({"tables": ["app.events"], "predicate": "1 = 1",
            "subject": "s", "confirm_all": true}),
        );
        assert_eq!(plan_targets(&all, &defs).unwrap().len(), 1);
    }

    #[test]
    fn all_tables_target_the_subject_columns_and_suppress_matching_rows() {
        let defs = [def()];
        let targets = plan_targets(
            &body(serde_json::json!({"tables": "all", "subject_value": "u-'7", "subject": "s"})),
            &defs,
        )
        .unwrap();
        assert_eq!(targets[0].predicate, "\"user_id\" = 'u-''7'");
        let expr = parse_predicate(&targets[0].predicate, defs[0].stored_schema()).unwrap();
        let suppression = Suppression::new(vec![expr]);
        let schema = Arc::clone(defs[0].stored_schema());
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3])),
                Arc::new(arrow_array::StringArray::from(vec!["u-'7", "u-8", "u-'7"])),
                Arc::new(
                    arrow_array::TimestampMicrosecondArray::from(vec![0, 0, 0])
                        .with_timezone(hotgate_store::UTC),
                ),
            ],
        )
        .unwrap();
        let kept = suppression.apply(&batch).unwrap();
        assert_eq!(kept.num_rows(), 1);
        // Compiled once per schema: the same batch again, then another schema (the
        // user_id column alone), then the first again.
        assert_eq!(suppression.apply(&batch).unwrap().num_rows(), 1);
        let narrow = batch.project(&[1]).unwrap();
        assert_eq!(suppression.apply(&narrow).unwrap().num_rows(), 1);
        assert_eq!(suppression.apply(&batch).unwrap().num_rows(), 1);
    }

    #[test]
    fn a_fixed_bucket_key_names_the_only_buckets_to_rewrite() {
        let def = def();
        let of = |predicate: &str| {
            Suppression::of_target(
                &DeletionTarget {
                    table: "app.events".into(),
                    predicate: predicate.into(),
                    predicate_hmac: None,
                },
                &def,
            )
            .unwrap()
            .buckets(&def)
        };
        // The same buckets the store routes the values to.
        let routed = |values: &[&str]| {
            let array: arrow_array::ArrayRef =
                Arc::new(arrow_array::StringArray::from(values.to_vec()));
            let mut b = hotgate_store::bucket::buckets_of(&array, 4).unwrap();
            b.sort_unstable();
            b.dedup();
            b
        };
        assert_eq!(of("user_id = 'u-1'"), Some(routed(&["u-1"])));
        assert_eq!(of("'u-1' = user_id AND id > 3"), Some(routed(&["u-1"])));
        assert_eq!(
            of("user_id IN ('u-1', 'u-2', 'u-9')"),
            Some(routed(&["u-1", "u-2", "u-9"]))
        );
        assert_eq!(of("user_id = 'u-1' OR id = 3"), None);
        assert_eq!(of("id = 3"), None);
        assert_eq!(of("user_id <> 'u-1'"), None);
        assert_eq!(of("user_id NOT IN ('u-1')"), None);
    }
}
