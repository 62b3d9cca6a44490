//! Compliance deletion requests (`POST /v1/deletions`): validation, the durable request
//! record, and the suppression filter that hides matching rows from every read of
//! either tier and from tiering, from the instant a request is accepted.
//!
//! A request moves `accepted → hot_applied → cold_applied → purged → verified`. This
//! version builds `accepted`: the request is validated, written durably under
//! `<data-dir>/deletions/<id>.json`, audited, and from then on its predicate suppresses
//! matching rows in scans (both tiers), changelogs, lookups and tiering cycles, also
//! after a restart. The later states (rewriting segments and files, expiry, purge,
//! verification) are not built yet, so a request stays `accepted` and keeps its rows
//! hidden rather than removed.
//!
//! What is stored: the request's `subject` only as an HMAC (the hash key of write rules);
//! the predicate in clear, because resuming after a crash needs it. It lives outside
//! every table's directory and Iceberg location.

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
    /// A SQL boolean expression over the table's columns.
    pub predicate: String,
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
    let expr = ctx
        .parse_sql_expr(sql, &df_schema)
        .map_err(|e| e.strip_backtrace())?;
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

/// The rows a table's pending requests hide: those where any predicate is true.
#[derive(Debug, Clone)]
pub struct Suppression {
    predicates: Vec<Expr>,
}

impl Suppression {
    /// The filter that keeps the other rows: `(p1 OR p2 ...) IS NOT TRUE`, so a row
    /// where a predicate is null is kept, as SQL's `DELETE ... WHERE` would keep it.
    pub fn keep_expr(&self) -> Expr {
        let any = self
            .predicates
            .iter()
            .cloned()
            .reduce(Expr::or)
            .unwrap_or(Expr::Literal(ScalarValue::Boolean(Some(false)), None));
        any.is_not_true()
    }

    /// Which rows of `batch` to keep. The batch must hold every column the predicates
    /// use (stored rows, possibly with extra columns).
    pub fn keep(&self, batch: &RecordBatch) -> std::result::Result<BooleanArray, String> {
        let schema = batch.schema();
        let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(|e| e.to_string())?;
        let physical = SessionContext::new()
            .create_physical_expr(self.keep_expr(), &df_schema)
            .map_err(|e| e.strip_backtrace())?;
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

    fn rebuild_active(&self, defs: &[Arc<TableDef>]) -> Result<()> {
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
                "rows are hidden from every read and from tiering; rewriting the hot \
                 segments and cold files, expiry, purge and verification are not built yet"
                    .into(),
            ),
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
            .map(|predicates| Suppression {
                predicates: predicates.clone(),
            })
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
        let suppression = Suppression {
            predicates: vec![expr],
        };
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
    }
}
