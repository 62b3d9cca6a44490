//! The suppression filter: the rows a table's pending requests hide from every read,
//! changelog, lookup and tiering cycle, and what a verification searches for.

use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use hotgate_policy::bounded_expr;
use hotgate_store::TableDef;
use parking_lot::Mutex;

use super::request::{DeletionTarget, parse_predicate};
use crate::error::{GatewayError, Result};

/// The shortest string literal a verification searches files for.
pub const MIN_SEARCHED_LITERAL: usize = 4;

/// The rows a table's pending requests hide: those where any predicate is true.
#[derive(Debug, Clone)]
pub struct Suppression {
    predicates: Vec<Expr>,
    /// The keep filter compiled for the last batch schema seen: reads call
    /// [`Suppression::keep`] per batch, and their batches share one schema.
    compiled: Arc<Mutex<Option<CompiledKeep>>>,
}

type CompiledKeep = (
    arrow_schema::SchemaRef,
    Arc<dyn datafusion::physical_expr::PhysicalExpr>,
);

impl Suppression {
    pub(super) fn new(predicates: Vec<Expr>) -> Self {
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
                *self.compiled.lock() = Some((Arc::clone(&schema), Arc::clone(&p)));
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
                .filter_map(crate::pushdown::cold_filter)
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
    pub(super) fn matching(&self, batch: &RecordBatch) -> Result<BooleanArray> {
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
