//! A deletion request as it arrives: the body of `POST /v1/deletions`, and the targets it
//! resolves to (one checked predicate per table). Depends on nothing else of `deletion`.

use std::sync::Arc;

use arrow_schema::Schema;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::prelude::SessionContext;
use hotgate_policy::bounded_expr::{self, ExprLimits};
use hotgate_store::{TableDef, TableName};
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

/// The tag of columns that identify a data subject: `"tables": "all"` with a
/// `subject_value` targets every table with such a column.
pub const SUBJECT_TAG: &str = "subject";

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

/// `"tables"`: a list of table names, or `"all"` (with `subject_value`).
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
pub(super) fn parse_predicate(sql: &str, schema: &Schema) -> std::result::Result<Expr, String> {
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
