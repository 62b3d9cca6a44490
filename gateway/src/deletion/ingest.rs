//! Deletions on the way in: what a source must not write again. A request whose
//! predicate only names values of `subject`-tagged columns (`email = 'a@b'`, `OR`s and
//! `IN` lists of them, as `"tables": "all"` makes) keeps those values, as HMACs, after
//! it is verified; a row holding one is dropped before disk, so a replay of a topic
//! never brings an erased subject back. While a request is pending, its whole predicate
//! also drops matching rows on ingest, so verification does not meet rows written
//! after the hot step.

use std::collections::{HashMap, HashSet};

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use hotgate_store::{TableDef, WriteRule};
use serde::{Deserialize, Serialize};

use super::request::{DeletionTarget, SUBJECT_TAG, parse_predicate};
use super::suppression::Suppression;

/// A value of a subject-tagged column that a request erased, as the HMAC of its
/// stored form (a `hash` column's stored form is its HMAC already).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IngestBlock {
    pub table: String,
    pub column: String,
    pub value_hmac: String,
}

/// The blocks of `targets`: for each target whose predicate is a disjunction of
/// equalities between a subject-tagged column and a literal, one per literal. A target
/// with any other predicate yields none: blocking a part of it for ever would drop
/// rows the request did not name.
pub fn ingest_blocks(
    targets: &[DeletionTarget],
    defs: &[std::sync::Arc<TableDef>],
    hash: impl Fn(&[u8]) -> String,
) -> Vec<IngestBlock> {
    let mut out = Vec::new();
    for target in targets {
        let Some(def) = defs.iter().find(|d| d.name().to_string() == target.table) else {
            continue;
        };
        let Ok(expr) = parse_predicate(&target.predicate, def.stored_schema()) else {
            continue;
        };
        let mut values = Vec::new();
        if subject_values(&expr, def, &mut values) {
            out.extend(values.into_iter().map(|(column, value)| IngestBlock {
                table: target.table.clone(),
                column,
                value_hmac: hash(value.as_bytes()),
            }));
        }
    }
    out.sort_by(|a, b| {
        (&a.table, &a.column, &a.value_hmac).cmp(&(&b.table, &b.column, &b.value_hmac))
    });
    out.dedup();
    out
}

/// Collects `(column, value)` of `expr` when it is exactly "a subject column equals one
/// of these values"; false otherwise.
fn subject_values(expr: &Expr, def: &TableDef, out: &mut Vec<(String, String)>) -> bool {
    let subject_column = |e: &Expr| match e {
        Expr::Column(c) => def
            .spec()
            .columns
            .iter()
            .find(|col| col.name == c.name)
            .filter(|col| col.write != WriteRule::Drop && col.tags.iter().any(|t| t == SUBJECT_TAG))
            .map(|col| col.name.clone()),
        _ => None,
    };
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => subject_values(left, def, out) && subject_values(right, def, out),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => {
            let (column, literal) = match (subject_column(left), subject_column(right)) {
                (Some(c), None) => (c, right.as_ref()),
                (None, Some(c)) => (c, left.as_ref()),
                _ => return false,
            };
            match rendered(literal) {
                Some(v) => {
                    out.push((column, v));
                    true
                }
                None => false,
            }
        }
        Expr::InList(list) if !list.negated => {
            let Some(column) = subject_column(&list.expr) else {
                return false;
            };
            for item in &list.list {
                match rendered(item) {
                    Some(v) => out.push((column.clone(), v)),
                    None => return false,
                }
            }
            true
        }
        _ => false,
    }
}

/// A literal as the text its column's values are compared in: strings as they are,
/// integers in decimal (as Arrow casts them to text).
fn rendered(e: &Expr) -> Option<String> {
    let Expr::Literal(v, _) = e else {
        return None;
    };
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        ScalarValue::Int8(Some(_))
        | ScalarValue::Int16(Some(_))
        | ScalarValue::Int32(Some(_))
        | ScalarValue::Int64(Some(_))
        | ScalarValue::UInt8(Some(_))
        | ScalarValue::UInt16(Some(_))
        | ScalarValue::UInt32(Some(_))
        | ScalarValue::UInt64(Some(_)) => Some(v.to_string()),
        _ => None,
    }
}

/// What a table's ingest drops: the rows its pending requests match, and the rows that
/// hold an erased subject value.
#[derive(Debug, Clone)]
pub struct IngestFilter {
    pub(super) pending: Option<Suppression>,
    /// Column → HMACs of erased values.
    pub(super) blocked: HashMap<String, HashSet<String>>,
}

impl IngestFilter {
    /// Which rows of `batch` (stored rows, after the write rules) to write; `None` keeps
    /// them all. `hash` is the write rules' HMAC.
    pub fn keep(
        &self,
        batch: &RecordBatch,
        hash: impl Fn(&[u8]) -> String,
    ) -> std::result::Result<Option<BooleanArray>, String> {
        let mut keep: Option<BooleanArray> = match &self.pending {
            Some(s) => Some(s.keep(batch)?),
            None => None,
        };
        for (column, values) in &self.blocked {
            let Some(array) = batch.column_by_name(column) else {
                continue;
            };
            let text = arrow_cast::cast(array, &arrow_schema::DataType::Utf8)
                .map_err(|e| format!("column {column}: {e}"))?;
            let text = text
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| format!("column {column}: not text after a cast"))?;
            let free: BooleanArray = (0..text.len())
                .map(|i| Some(text.is_null(i) || !values.contains(&hash(text.value(i).as_bytes()))))
                .collect();
            keep = Some(match keep {
                Some(k) => datafusion::arrow::compute::and(&k, &free).map_err(|e| e.to_string())?,
                None => free,
            });
        }
        Ok(keep)
    }
}
