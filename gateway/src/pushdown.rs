//! Filters pushed to the cold tier: `column <op> literal` comparisons turned into the
//! [`ColdFilter`]s Iceberg prunes data files with (partitions and column statistics).
//! Used by the planner for reads and by deletion requests for the files a rewrite must
//! read. Depends on nothing else in the gateway.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use hotgate_tiering::{CmpOp, ColdFilter, ColdValue};

/// `column <op> literal` or `literal <op> column`, as `(column, op, literal)` with the
/// operator turned to read column-first.
pub(crate) fn column_comparison(
    expr: &Expr,
) -> Option<(&datafusion::common::Column, Operator, &ScalarValue)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), Expr::Literal(v, _)) => Some((c, *op, v)),
        (Expr::Literal(v, _), Expr::Column(c)) => Some((c, op.swap()?, v)),
        _ => None,
    }
}

/// `column <op> literal` (either way round) as a filter the cold scan can prune with.
/// Anything else, including comparisons with computed expressions (such as a masked
/// column above the secure view), is not pushed.
pub(crate) fn cold_filter(expr: &Expr) -> Option<ColdFilter> {
    let (column, op, literal) = column_comparison(expr)?;
    let op = match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    };
    let value = match literal {
        ScalarValue::Boolean(Some(v)) => ColdValue::Bool(*v),
        ScalarValue::Int32(Some(v)) => ColdValue::Int(*v),
        ScalarValue::Int64(Some(v)) => ColdValue::Long(*v),
        ScalarValue::Utf8(Some(v))
        | ScalarValue::LargeUtf8(Some(v))
        | ScalarValue::Utf8View(Some(v)) => ColdValue::String(v.clone()),
        ScalarValue::Date32(Some(v)) => ColdValue::Date(*v),
        ScalarValue::TimestampMicrosecond(Some(v), _) => ColdValue::TimestampMicros(*v),
        _ => return None,
    };
    Some(ColdFilter {
        column: column.name.clone(),
        op,
        value,
    })
}
