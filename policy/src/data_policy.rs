//! Data policies: row filters, column masks and column denies, gateway-local, in the shape
//! of Unity Catalog ABAC and Apache Ranger.
//!
//! ```json
//! {"id":"eu_only","scope":{"table":"sales.orders"},"to":["reader"],"kind":"row_filter","expr":"region = 'eu'"}
//! {"id":"mask_email","scope":{"tag":"pii"},"to":["*"],"except":["auditor"],"kind":"column_mask","tag":"pii","mask":"hash"}
//! {"id":"no_ssn","scope":{"namespace":"sales"},"to":["reader"],"kind":"column_deny","column":"ssn"}
//! ```
//! `to` names catalog roles (`*` is everyone); `except` exempts catalog roles. A policy set
//! is versioned as a whole, and each policy carries its own version.

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;

/// Where a policy applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum PolicyScope {
    /// One table, `ns.t`.
    Table(String),
    /// Every table of a namespace.
    Namespace(String),
    /// Every table with a column carrying the tag.
    Tag(String),
}

impl PolicyScope {
    /// Lower is more specific: table, then namespace, then tag.
    pub fn specificity(&self) -> u8 {
        match self {
            PolicyScope::Table(_) => 0,
            PolicyScope::Namespace(_) => 1,
            PolicyScope::Tag(_) => 2,
        }
    }
}

/// Which columns a mask or deny targets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ColumnTarget {
    Column(String),
    Tag(String),
}

/// How a masked column's values are replaced. Every mask keeps the column's Arrow type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mask {
    /// A null of the column's type.
    Null,
    /// A fixed placeholder (string columns).
    Redact,
    /// HMAC-SHA256 hex with the gateway key (string columns): joins still work.
    Hash,
    /// `****` and the last four characters (string columns).
    ShowLast4,
    /// Truncated to January 1 of the year (date and timestamp columns).
    YearOnly,
    /// A SQL expression of the column's type, in DataFusion syntax.
    Expr(String),
}

impl Mask {
    fn name(&self) -> &str {
        match self {
            Mask::Null => "null",
            Mask::Redact => "redact",
            Mask::Hash => "hash",
            Mask::ShowLast4 => "show_last_4",
            Mask::YearOnly => "year_only",
            Mask::Expr(_) => "expr",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    RowFilter { expr: String },
    ColumnMask { target: ColumnTarget, mask: Mask },
    ColumnDeny { target: ColumnTarget },
}

impl PolicyKind {
    pub fn name(&self) -> &'static str {
        match self {
            PolicyKind::RowFilter { .. } => "row_filter",
            PolicyKind::ColumnMask { .. } => "column_mask",
            PolicyKind::ColumnDeny { .. } => "column_deny",
        }
    }
}

/// One data policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PolicyJson", into = "PolicyJson")]
pub struct DataPolicy {
    pub id: String,
    /// Assigned by the policy set: 1 on create, +1 on each replace.
    pub version: u64,
    pub scope: PolicyScope,
    pub to: Vec<String>,
    pub except: Vec<String>,
    /// Breaks ties between masks of equal specificity: lower wins.
    pub priority: i32,
    pub kind: PolicyKind,
}

impl DataPolicy {
    /// Whether the policy targets a caller holding these catalog roles.
    pub fn applies_to(&self, catalog_roles: &std::collections::BTreeSet<String>) -> bool {
        let targeted = self
            .to
            .iter()
            .any(|r| r == "*" || catalog_roles.contains(r));
        let exempt = self.except.iter().any(|r| catalog_roles.contains(r));
        targeted && !exempt
    }
}

/// The JSON shape of a policy, flat as users write it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyJson {
    id: String,
    #[serde(default)]
    version: u64,
    scope: PolicyScope,
    to: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    except: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    priority: i32,
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    column: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mask: Option<MaskJson>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum MaskJson {
    Named(String),
    Expr {
        #[serde(rename = "expr")]
        expr: String,
    },
}

impl TryFrom<PolicyJson> for DataPolicy {
    type Error = PolicyError;

    fn try_from(j: PolicyJson) -> Result<Self, PolicyError> {
        let bad =
            |detail: String| PolicyError::InvalidPolicy(format!("policy {:?}: {detail}", j.id));
        if j.id.is_empty()
            || !j
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(PolicyError::InvalidPolicy(format!(
                "policy id {:?} must be non-empty and use only letters, digits, _, - and .",
                j.id
            )));
        }
        if j.to.is_empty() {
            return Err(bad(
                "\"to\" must name at least one catalog role (\"*\" for everyone)".into(),
            ));
        }
        let scope_value = match &j.scope {
            PolicyScope::Table(t) => t,
            PolicyScope::Namespace(n) => n,
            PolicyScope::Tag(t) => t,
        };
        if scope_value.is_empty() {
            return Err(bad("the scope must name a table, namespace or tag".into()));
        }
        if let PolicyScope::Table(t) = &j.scope
            && t.split('.').count() != 2
        {
            return Err(bad(format!("scope table {t:?} must be written ns.table")));
        }
        let target = || -> Result<ColumnTarget, PolicyError> {
            match (&j.column, &j.tag) {
                (Some(c), None) if !c.is_empty() => Ok(ColumnTarget::Column(c.clone())),
                (None, Some(t)) if !t.is_empty() => Ok(ColumnTarget::Tag(t.clone())),
                _ => Err(bad(format!(
                    "a {} names exactly one of \"column\" or \"tag\"",
                    j.kind
                ))),
            }
        };
        let unexpected = |field: &str, present: bool| -> Result<(), PolicyError> {
            if present {
                Err(bad(format!("\"{field}\" does not belong to a {}", j.kind)))
            } else {
                Ok(())
            }
        };
        let kind = match j.kind.as_str() {
            "row_filter" => {
                unexpected("column", j.column.is_some())?;
                unexpected("tag", j.tag.is_some())?;
                unexpected("mask", j.mask.is_some())?;
                let expr = j
                    .expr
                    .clone()
                    .filter(|e| !e.trim().is_empty())
                    .ok_or_else(|| bad("a row_filter needs \"expr\"".into()))?;
                check_sql_syntax(&expr).map_err(|e| bad(format!("expr: {e}")))?;
                PolicyKind::RowFilter { expr }
            }
            "column_mask" => {
                unexpected("expr", j.expr.is_some())?;
                let mask = match &j.mask {
                    None => return Err(bad("a column_mask needs \"mask\"".into())),
                    Some(MaskJson::Named(n)) => match n.as_str() {
                        "null" => Mask::Null,
                        "redact" => Mask::Redact,
                        "hash" => Mask::Hash,
                        "show_last_4" => Mask::ShowLast4,
                        "year_only" => Mask::YearOnly,
                        other => {
                            return Err(bad(format!(
                                "unknown mask {other:?}: use null, redact, hash, show_last_4, \
                                 year_only or {{\"expr\":\"...\"}}"
                            )));
                        }
                    },
                    Some(MaskJson::Expr { expr }) => {
                        check_sql_syntax(expr).map_err(|e| bad(format!("mask expr: {e}")))?;
                        Mask::Expr(expr.clone())
                    }
                };
                PolicyKind::ColumnMask {
                    target: target()?,
                    mask,
                }
            }
            "column_deny" => {
                unexpected("expr", j.expr.is_some())?;
                unexpected("mask", j.mask.is_some())?;
                PolicyKind::ColumnDeny { target: target()? }
            }
            other => {
                return Err(bad(format!(
                    "unknown kind {other:?}: use row_filter, column_mask or column_deny"
                )));
            }
        };
        Ok(DataPolicy {
            id: j.id,
            version: j.version,
            scope: j.scope,
            to: j.to,
            except: j.except,
            priority: j.priority,
            kind,
        })
    }
}

impl From<DataPolicy> for PolicyJson {
    fn from(p: DataPolicy) -> Self {
        let (kind, mut expr, mut column, mut tag, mut mask) =
            (p.kind.name().to_owned(), None, None, None, None);
        let mut set_target = |t: ColumnTarget| match t {
            ColumnTarget::Column(c) => column = Some(c),
            ColumnTarget::Tag(t) => tag = Some(t),
        };
        match p.kind {
            PolicyKind::RowFilter { expr: e } => expr = Some(e),
            PolicyKind::ColumnMask { target, mask: m } => {
                set_target(target);
                mask = Some(match m {
                    Mask::Expr(e) => MaskJson::Expr { expr: e },
                    named => MaskJson::Named(named.name().to_owned()),
                });
            }
            PolicyKind::ColumnDeny { target } => set_target(target),
        }
        PolicyJson {
            id: p.id,
            version: p.version,
            scope: p.scope,
            to: p.to,
            except: p.except,
            priority: p.priority,
            kind,
            expr,
            column,
            tag,
            mask,
        }
    }
}

/// Parses an expression for syntax and the limits of every expression from outside
/// ([`crate::bounded_expr`]); column and type checks happen against a schema.
fn check_sql_syntax(sql: &str) -> Result<(), String> {
    crate::bounded_expr::check_syntax(sql, crate::bounded_expr::ExprLimits::DEFAULT)
        .map_err(|e| e.to_string())
}

/// Every data policy, versioned as a whole. Immutable: changes return a new set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySet {
    pub version: u64,
    pub policies: Vec<DataPolicy>,
}

impl PolicySet {
    pub fn get(&self, id: &str) -> Option<&DataPolicy> {
        self.policies.iter().find(|p| p.id == id)
    }

    /// A new set with `policy` added at version 1.
    pub fn with_created(&self, mut policy: DataPolicy) -> Result<Self, PolicyError> {
        if self.get(&policy.id).is_some() {
            return Err(PolicyError::InvalidPolicy(format!(
                "policy {:?} already exists; replace it with PUT /v1/policies/{}",
                policy.id, policy.id
            )));
        }
        policy.version = 1;
        let mut next = self.clone();
        next.version += 1;
        next.policies.push(policy);
        Ok(next)
    }

    /// A new set with policy `id` replaced; its version goes up by one.
    pub fn with_replaced(&self, id: &str, mut policy: DataPolicy) -> Result<Self, PolicyError> {
        if policy.id != id {
            return Err(PolicyError::InvalidPolicy(format!(
                "the body's id {:?} differs from the path's {id:?}",
                policy.id
            )));
        }
        let mut next = self.clone();
        let slot = next
            .policies
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| PolicyError::InvalidPolicy(format!("no policy {id:?}")))?;
        policy.version = slot.version + 1;
        *slot = policy;
        next.version += 1;
        Ok(next)
    }

    /// A new set without policy `id`.
    pub fn without(&self, id: &str) -> Result<Self, PolicyError> {
        let mut next = self.clone();
        let before = next.policies.len();
        next.policies.retain(|p| p.id != id);
        if next.policies.len() == before {
            return Err(PolicyError::InvalidPolicy(format!("no policy {id:?}")));
        }
        next.version += 1;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<DataPolicy, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn policies_round_trip_through_their_json_shape() {
        for v in [
            serde_json::json!({"id":"f","version":0,"scope":{"table":"s.o"},"to":["r"],"kind":"row_filter","expr":"a > 1"}),
            serde_json::json!({"id":"m","version":0,"scope":{"tag":"pii"},"to":["*"],"except":["aud"],"priority":2,"kind":"column_mask","tag":"pii","mask":"hash"}),
            serde_json::json!({"id":"e","version":0,"scope":{"namespace":"s"},"to":["r"],"kind":"column_mask","column":"c","mask":{"expr":"upper(c)"}}),
            serde_json::json!({"id":"d","version":0,"scope":{"namespace":"s"},"to":["r"],"kind":"column_deny","column":"ssn"}),
        ] {
            let p = parse(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&p).unwrap(), v);
        }
    }

    #[test]
    fn malformed_policies_name_the_problem() {
        let cases = [
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":["r"],"kind":"row_filter"}),
                "needs \"expr\"",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":["r"],"kind":"row_filter","expr":"a >"}),
                "expr:",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":["r"],"kind":"column_mask","column":"c","mask":"blur"}),
                "unknown mask \"blur\"",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":["r"],"kind":"column_deny","column":"c","tag":"t"}),
                "exactly one of",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":[],"kind":"column_deny","column":"c"}),
                "at least one catalog role",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"so"},"to":["r"],"kind":"column_deny","column":"c"}),
                "ns.table",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":["r"],"kind":"mask","column":"c"}),
                "unknown kind",
            ),
            (
                serde_json::json!({"id":"x y","scope":{"table":"s.o"},"to":["r"],"kind":"column_deny","column":"c"}),
                "policy id",
            ),
            (
                serde_json::json!({"id":"x","scope":{"table":"s.o"},"to":["r"],"kind":"column_deny","column":"c","extra":1}),
                "unknown field",
            ),
        ];
        for (v, want) in cases {
            let e = parse(v.clone()).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
    }

    #[test]
    fn set_versions_move_on_every_change() {
        let p = parse(serde_json::json!({"id":"d","scope":{"namespace":"s"},"to":["r"],"kind":"column_deny","column":"ssn"})).unwrap();
        let s0 = PolicySet::default();
        let s1 = s0.with_created(p.clone()).unwrap();
        assert_eq!((s1.version, s1.policies[0].version), (1, 1));
        assert!(s1.with_created(p.clone()).is_err());
        let s2 = s1.with_replaced("d", p.clone()).unwrap();
        assert_eq!((s2.version, s2.policies[0].version), (2, 2));
        let s3 = s2.without("d").unwrap();
        assert_eq!((s3.version, s3.policies.len()), (3, 0));
        assert!(s3.without("d").is_err());
    }
}
