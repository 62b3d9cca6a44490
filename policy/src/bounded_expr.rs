//! Expressions that come from outside (scan filters, row filters and masks of data
//! policies, deletion predicates), parsed within explicit limits.
//!
//! A parser's recursion limit catches deep parentheses and `NOT` chains, but a flat chain
//! (`a = 1 OR a = 2 OR …`, `'x' || 'y' || …`, `c::int::int…`) is parsed in a loop into a
//! tree as deep as the chain is long. Every later step that walks that tree (type
//! checks, the optimizer, physical planning, evaluation, even dropping it) recurses once
//! per level, and a few hundred levels overflow a thread's stack: the process aborts.
//!
//! So an expression is refused unless it is at most [`ExprLimits::max_bytes`] long and
//! at most [`ExprLimits::max_depth`] levels deep. The text is parsed and measured on a
//! stack of its own ([`PARSE_STACK`]), big enough for the deepest tree the byte limit
//! admits, and a refused tree is dropped there too. An accepted tree is shallow enough
//! for any thread. Subqueries are refused: an expression reads the one table it is
//! written for.
//!
//! This module owns only parsing and measuring; what an expression means (types,
//! columns, policies) is its callers' business.

use std::ops::ControlFlow;

use datafusion::common::DFSchema;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser;
use datafusion::sql::sqlparser::ast::{Visit, Visitor};

/// The limits on one expression from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExprLimits {
    /// Longest expression text, in bytes.
    pub max_bytes: usize,
    /// Deepest expression tree: each operator of a flat `AND`/`OR`/`||` chain, each
    /// nested `CASE`, function call or parenthesis is one level.
    pub max_depth: usize,
}

impl ExprLimits {
    /// hotgate's limits: 64 KiB of text (an `IN` list of thousands of values fits), 128
    /// levels (a chain of 120 `OR`ed comparisons fits; longer lists belong in `IN`).
    pub const DEFAULT: ExprLimits = ExprLimits {
        max_bytes: 64 * 1024,
        max_depth: 128,
    };
}

impl Default for ExprLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Longest string a constant call (`repeat`, `lpad`, `rpad`) may ask for: the planner
/// folds constants, so `repeat('x', 2000000000)` would allocate while planning.
pub const MAX_CONSTANT_STRING: i64 = 1 << 20;

/// The stack an expression is parsed, measured and (if refused) dropped on. Dropping a
/// tree recurses once per level; the byte limit admits at most one level per byte or
/// two, a few hundred bytes of stack each in a debug build. It is mapped lazily: only
/// what a deep tree touches is ever allocated.
pub const PARSE_STACK: usize = 64 << 20;

/// Why an expression was refused. Messages name the limit, never the expression's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("the expression is {bytes} bytes long; the limit is {limit} bytes")]
    TooLong { bytes: usize, limit: usize },
    #[error(
        "the expression is nested more than {limit} levels deep, the depth limit (each \
         operator of a flat AND/OR chain counts as a level; write a long list of \
         alternatives as IN (...))"
    )]
    TooDeep { limit: usize },
    #[error("subqueries are not allowed in an expression")]
    Subquery,
    #[error(
        "{function}() asks for a string longer than {limit} characters, the limit of a constant"
    )]
    HugeConstant { function: String, limit: i64 },
    /// The parser's or planner's own message, which may quote the expression: callers
    /// show it to the one who sent the expression, and keep it out of the audit.
    #[error("{0}")]
    Invalid(String),
}

/// Parses `sql` as an expression over `schema` within `limits`.
pub fn parse(
    ctx: &SessionContext,
    sql: &str,
    schema: &DFSchema,
    limits: ExprLimits,
) -> Result<Expr, ExprError> {
    check_length(sql, limits)?;
    stacker::grow(PARSE_STACK, || {
        // The syntax tree measured is the one planned: the text is parsed once.
        let ast = check_syntax_tree(sql, limits)?;
        let expr = ctx
            .state_ref()
            .read()
            .create_logical_expr_from_sql_expr(
                sqlparser::ast::ExprWithAlias {
                    expr: ast,
                    alias: None,
                },
                schema,
            )
            .map_err(|e| ExprError::Invalid(e.strip_backtrace()))?;
        check_tree(&expr, limits)?;
        Ok(expr)
    })
}

/// Checks `sql` for syntax and the limits only (no schema): for documents checked before
/// the table they apply to is known.
pub fn check_syntax(sql: &str, limits: ExprLimits) -> Result<(), ExprError> {
    check_length(sql, limits)?;
    stacker::grow(PARSE_STACK, || check_syntax_tree(sql, limits).map(drop))
}

fn check_length(sql: &str, limits: ExprLimits) -> Result<(), ExprError> {
    if sql.len() > limits.max_bytes {
        return Err(ExprError::TooLong {
            bytes: sql.len(),
            limit: limits.max_bytes,
        });
    }
    Ok(())
}

/// Parses with sqlparser (the generic dialect, DataFusion's default) and measures the
/// syntax tree; runs on [`PARSE_STACK`].
fn check_syntax_tree(sql: &str, limits: ExprLimits) -> Result<sqlparser::ast::Expr, ExprError> {
    use sqlparser::keywords::Keyword;
    use sqlparser::parser::{Parser, ParserError};
    use sqlparser::tokenizer::{Token, Tokenizer};

    let dialect = sqlparser::dialect::GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| ExprError::Invalid(e.to_string()))?;
    // Nesting that the parser follows by recursion (brackets, CASE … END) is measured on
    // the tokens first, without recursion: past the parser's own recursion limit, some
    // shapes come out as a confusing syntax error far from the cause.
    let mut open = 0_usize;
    for token in &tokens {
        match token {
            Token::LParen | Token::LBracket => open += 1,
            Token::Word(w) if w.keyword == Keyword::CASE => open += 1,
            Token::RParen | Token::RBracket => open = open.saturating_sub(1),
            Token::Word(w) if w.keyword == Keyword::END => open = open.saturating_sub(1),
            _ => {}
        }
        if open > limits.max_depth {
            return Err(ExprError::TooDeep {
                limit: limits.max_depth,
            });
        }
    }
    let mut parser = Parser::new(&dialect)
        .with_recursion_limit(limits.max_depth.saturating_mul(4))
        .with_tokens(tokens);
    let ast = parser
        .parse_expr()
        .and_then(|e| match parser.peek_token().token {
            // Text after the expression (`a = 1; DROP …`) is not part of it.
            Token::EOF => Ok(e),
            t => Err(ParserError::ParserError(format!(
                "unexpected {t} after the expression"
            ))),
        })
        .map_err(|e| match e {
            ParserError::RecursionLimitExceeded => ExprError::TooDeep {
                limit: limits.max_depth,
            },
            e => ExprError::Invalid(e.to_string()),
        })?;
    let mut depth = SyntaxDepth {
        depth: 0,
        limit: limits.max_depth,
    };
    match ast.visit(&mut depth) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(ast),
    }
}

/// Tracks the depth of the expression being visited; breaks past the limit, so the
/// visit itself never recurses deeper than the limit.
struct SyntaxDepth {
    depth: usize,
    limit: usize,
}

impl Visitor for SyntaxDepth {
    type Break = ExprError;

    fn pre_visit_query(&mut self, _: &sqlparser::ast::Query) -> ControlFlow<ExprError> {
        ControlFlow::Break(ExprError::Subquery)
    }

    fn pre_visit_expr(&mut self, _: &sqlparser::ast::Expr) -> ControlFlow<ExprError> {
        self.depth += 1;
        if self.depth > self.limit {
            return ControlFlow::Break(ExprError::TooDeep { limit: self.limit });
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &sqlparser::ast::Expr) -> ControlFlow<ExprError> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

/// Measures a planned expression: planning may add levels (casts for coercion). Refuses
/// subqueries and constant calls that would allocate huge strings. The walk stops at the
/// limit, so it never recurses deeper than that.
fn check_tree(expr: &Expr, limits: ExprLimits) -> Result<(), ExprError> {
    fn walk(expr: &Expr, depth: usize, limits: ExprLimits) -> Result<(), ExprError> {
        if depth > limits.max_depth {
            return Err(ExprError::TooDeep {
                limit: limits.max_depth,
            });
        }
        match expr {
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) => {
                return Err(ExprError::Subquery);
            }
            Expr::ScalarFunction(f) => check_constant_call(f.name(), &f.args)?,
            _ => {}
        }
        let mut found = Ok(());
        expr.apply_children(|child| {
            found = walk(child, depth + 1, limits);
            Ok(if found.is_ok() {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        })
        .map_err(|e| ExprError::Invalid(e.strip_backtrace()))?;
        found
    }
    walk(expr, 1, limits)
}

/// Joins expressions with `op` (`Expr::and`, `Expr::or`) as a balanced tree, so that n
/// expressions of depth d make one of depth d + log2(n), not d + n: many policies' row
/// filters, or many pending deletion predicates, stay within what a stack can walk.
pub fn join_balanced(mut exprs: Vec<Expr>, op: fn(Expr, Expr) -> Expr) -> Option<Expr> {
    while exprs.len() > 1 {
        let mut next = Vec::with_capacity(exprs.len().div_ceil(2));
        let mut items = exprs.into_iter();
        while let Some(left) = items.next() {
            next.push(match items.next() {
                Some(right) => op(left, right),
                None => left,
            });
        }
        exprs = next;
    }
    exprs.pop()
}

/// `repeat(s, n)`, `lpad(s, n, …)` and `rpad(s, n, …)` with a literal `n` beyond
/// [`MAX_CONSTANT_STRING`]: the planner folds such a call while planning, outside any
/// memory limit. Also used on whole SQL statements.
pub fn check_constant_call(name: &str, args: &[Expr]) -> Result<(), ExprError> {
    if !matches!(name, "repeat" | "lpad" | "rpad") {
        return Ok(());
    }
    let Some(Expr::Literal(n, _)) = args.get(1) else {
        return Ok(());
    };
    let n = match n {
        ScalarValue::Int64(Some(n)) => *n,
        ScalarValue::Int32(Some(n)) => i64::from(*n),
        ScalarValue::UInt64(Some(n)) => i64::try_from(*n).unwrap_or(i64::MAX),
        _ => return Ok(()),
    };
    if n > MAX_CONSTANT_STRING {
        return Err(ExprError::HugeConstant {
            function: name.to_owned(),
            limit: MAX_CONSTANT_STRING,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn schema() -> DFSchema {
        DFSchema::try_from(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]))
        .unwrap()
    }

    fn parse_default(sql: &str) -> Result<Expr, ExprError> {
        parse(&SessionContext::new(), sql, &schema(), ExprLimits::DEFAULT)
    }

    fn or_chain(terms: usize) -> String {
        (0..terms)
            .map(|i| format!("a = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    }

    #[test]
    fn a_chain_within_the_depth_limit_parses() {
        let expr = parse_default(&or_chain(100)).unwrap();
        assert_eq!(expr.column_refs().len(), 1);
    }

    #[test]
    fn long_flat_chains_are_refused_by_depth_not_by_a_crash() {
        // Run on a small stack, as a runtime worker would: the check must not need more.
        let handle = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                for sql in [
                    or_chain(1_000),
                    (0..5_000).map(|_| "s").collect::<Vec<_>>().join(" || "),
                    format!("a{}", "::bigint".repeat(2_000)),
                    (0..4_000)
                        .map(|_| "a > 0")
                        .collect::<Vec<_>>()
                        .join(" AND "),
                ] {
                    assert_eq!(
                        parse_default(&sql).unwrap_err(),
                        ExprError::TooDeep { limit: 128 },
                        "{}",
                        &sql[..40]
                    );
                }
            })
            .unwrap();
        handle.join().unwrap();
    }

    #[test]
    fn text_over_the_byte_limit_is_refused_before_parsing() {
        let err = parse_default(&or_chain(20_000)).unwrap_err();
        assert!(
            matches!(err, ExprError::TooLong { limit: 65_536, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("65536"));
    }

    #[test]
    fn deep_case_and_brackets_are_refused_by_the_depth_limit() {
        let limits = ExprLimits::default();
        let case = format!(
            "{}false{}",
            "CASE WHEN a = 1 THEN true ELSE ".repeat(1000),
            " END".repeat(1000)
        );
        let brackets = format!("{}a = 1{}", "(".repeat(1000), ")".repeat(1000));
        for sql in [case, brackets] {
            assert_eq!(
                check_syntax(&sql, limits),
                Err(ExprError::TooDeep {
                    limit: limits.max_depth
                })
            );
        }
        // Ten levels of either are fine.
        let case = format!(
            "{}false{}",
            "CASE WHEN a = 1 THEN true ELSE ".repeat(10),
            " END".repeat(10)
        );
        assert_eq!(check_syntax(&case, limits), Ok(()));
    }

    #[test]
    fn wide_in_lists_are_fine() {
        let list = (0..5_000).map(|i| i.to_string()).collect::<Vec<_>>();
        let expr = parse_default(&format!("a IN ({})", list.join(","))).unwrap();
        assert!(matches!(expr, Expr::InList(_)));
    }

    #[test]
    fn subqueries_and_trailing_statements_are_refused() {
        assert_eq!(
            parse_default("a IN (SELECT 1)").unwrap_err(),
            ExprError::Subquery
        );
        assert_eq!(
            parse_default("EXISTS (SELECT 1)").unwrap_err(),
            ExprError::Subquery
        );
        assert!(matches!(
            parse_default("a = 1; DROP TABLE x").unwrap_err(),
            ExprError::Invalid(_)
        ));
    }

    #[test]
    fn constant_calls_cannot_allocate_while_planning() {
        let err = parse_default("s = repeat('x', 2000000000)").unwrap_err();
        assert!(matches!(err, ExprError::HugeConstant { .. }), "{err}");
        parse_default("s = repeat('x', 10)").unwrap();
    }

    #[test]
    fn joined_expressions_grow_by_log_depth() {
        let terms: Vec<Expr> = (0..1_000)
            .map(|i| parse_default(&format!("a = {i}")).unwrap())
            .collect();
        let joined = join_balanced(terms, Expr::or).unwrap();
        // 1,000 terms: 10 levels of OR over `a = i` (2 levels).
        check_tree(
            &joined,
            ExprLimits {
                max_bytes: 0,
                max_depth: 12,
            },
        )
        .unwrap();
        assert!(
            check_tree(
                &joined,
                ExprLimits {
                    max_bytes: 0,
                    max_depth: 11
                }
            )
            .is_err()
        );
        assert_eq!(join_balanced(Vec::new(), Expr::and), None);
    }

    #[test]
    fn syntax_only_check_applies_the_same_limits() {
        check_syntax("a = 1 AND s LIKE 'x%'", ExprLimits::DEFAULT).unwrap();
        assert_eq!(
            check_syntax(&or_chain(1_000), ExprLimits::DEFAULT).unwrap_err(),
            ExprError::TooDeep { limit: 128 }
        );
        assert!(matches!(
            check_syntax("a = ", ExprLimits::DEFAULT).unwrap_err(),
            ExprError::Invalid(_)
        ));
    }
}
