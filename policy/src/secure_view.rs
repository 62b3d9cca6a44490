//! Secure views: the data policies that apply to one caller on one table, compiled once
//! into DataFusion expressions and cached.
//!
//! A view is, over the table's stored schema:
//! 1. the AND of the applicable row filters, evaluated on **unmasked** values;
//! 2. a projection of the visible columns, each either passed through or masked, aliased
//!    to its own name.
//!
//! Callers' own filters go on top of the projection, so they only ever see masked values
//! and cannot use a filter as an oracle for what a mask hides.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility, cast, col, lit,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use serde::Serialize;

use crate::bounded_expr::{self, ExprLimits};
use crate::data_policy::{ColumnTarget, DataPolicy, Mask, PolicyKind, PolicyScope, PolicySet};
use crate::error::PolicyError;
use crate::write_rules::HashKey;

/// Field metadata key of a column's classification tags (comma-separated).
pub const TAGS_KEY: &str = "hotgate.tags";
/// What `redact` puts in place of a string.
pub const REDACTED: &str = "[redacted]";

/// The table a view is compiled for.
#[derive(Debug, Clone, Copy)]
pub struct ViewTable<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The stored schema, with `hotgate.tags` field metadata.
    pub schema: &'a SchemaRef,
}

impl ViewTable<'_> {
    fn id(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }

    fn tags(&self, index: usize) -> Vec<&str> {
        self.schema
            .field(index)
            .metadata()
            .get(TAGS_KEY)
            .map(|t| {
                t.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn has_tag(&self, tag: &str) -> bool {
        (0..self.schema.fields().len()).any(|i| self.tags(i).contains(&tag))
    }
}

/// A policy a view applied, for the audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedPolicy {
    pub id: String,
    pub version: u64,
    pub kind: &'static str,
}

impl std::fmt::Display for AppliedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.id, self.version)
    }
}

/// A compiled secure view.
pub struct SecureView {
    table: String,
    /// Visible columns in table order, masked ones nullable.
    schema: SchemaRef,
    /// One aliased expression per visible column, over the stored schema.
    projection: Vec<Expr>,
    row_filter: Option<Expr>,
    /// Denied column → the policy that denies it.
    denied: BTreeMap<String, String>,
    /// Masked column → the policy that masks it.
    masked: BTreeMap<String, String>,
    applied: Vec<AppliedPolicy>,
    physical_filter: Option<Arc<dyn PhysicalExpr>>,
    physical_projection: Vec<Arc<dyn PhysicalExpr>>,
}

impl std::fmt::Debug for SecureView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureView")
            .field("table", &self.table)
            .field("columns", &self.schema.fields().len())
            .field("denied", &self.denied)
            .field("masked", &self.masked)
            .field("row_filter", &self.row_filter.is_some())
            .field("applied", &self.applied)
            .finish()
    }
}

impl SecureView {
    /// Compiles the view of `table` for a caller holding `catalog_roles`. Any applicable
    /// policy that cannot be compiled denies the read (fail closed), naming the policy.
    pub fn compile(
        table: ViewTable<'_>,
        catalog_roles: &BTreeSet<String>,
        policies: &PolicySet,
        key: &HashKey,
    ) -> Result<Self, PolicyError> {
        let id = table.id();
        let schema = table.schema;
        let df_schema = DFSchema::try_from(schema.as_ref().clone())
            .map_err(|e| PolicyError::Internal(e.to_string()))?;
        let ctx = SessionContext::new();
        let fail = |p: &DataPolicy, detail: String| PolicyError::Unenforceable {
            policy: p.id.clone(),
            table: id.clone(),
            detail,
        };

        let mut applicable: Vec<&DataPolicy> = policies
            .policies
            .iter()
            .filter(|p| scope_matches(p, &table) && p.applies_to(catalog_roles))
            .collect();
        // Deterministic: most specific scope, then lowest priority, then id.
        applicable.sort_by(|a, b| {
            (a.scope.specificity(), a.priority, &a.id).cmp(&(
                b.scope.specificity(),
                b.priority,
                &b.id,
            ))
        });

        let targets = |p: &DataPolicy, target: &ColumnTarget| -> Result<Vec<usize>, PolicyError> {
            match target {
                ColumnTarget::Column(c) => schema
                    .index_of(c)
                    .map(|i| vec![i])
                    .map_err(|_| fail(p, format!("unknown column {c:?}"))),
                ColumnTarget::Tag(t) => {
                    let hits: Vec<usize> = (0..schema.fields().len())
                        .filter(|i| table.tags(*i).contains(&t.as_str()))
                        .collect();
                    // A table-scoped policy naming a tag the table lacks is a mistake.
                    if hits.is_empty() && matches!(p.scope, PolicyScope::Table(_)) {
                        return Err(fail(p, format!("no column is tagged {t:?}")));
                    }
                    Ok(hits)
                }
            }
        };

        let mut applied = Vec::new();
        let mut denied: BTreeMap<usize, &DataPolicy> = BTreeMap::new();
        let mut masks: BTreeMap<usize, (&DataPolicy, &Mask)> = BTreeMap::new();
        let mut filters: Vec<Expr> = Vec::new();
        for p in &applicable {
            match &p.kind {
                PolicyKind::ColumnDeny { target } => {
                    for i in targets(p, target)? {
                        denied.entry(i).or_insert(p);
                    }
                }
                PolicyKind::ColumnMask { target, mask } => {
                    // `applicable` is sorted, so the first mask seen for a column wins.
                    for i in targets(p, target)? {
                        masks.entry(i).or_insert((p, mask));
                    }
                }
                PolicyKind::RowFilter { expr } => {
                    let e = bounded_expr::parse(&ctx, expr, &df_schema, ExprLimits::DEFAULT)
                        .map_err(|e| fail(p, format!("row filter: {e}")))?;
                    let t = e
                        .get_type(&df_schema)
                        .map_err(|e| fail(p, format!("row filter: {}", e.strip_backtrace())))?;
                    if t != DataType::Boolean {
                        return Err(fail(
                            p,
                            format!("the row filter is not boolean (it returns {t})"),
                        ));
                    }
                    filters.push(e);
                    applied.push(applied_of(p));
                }
            }
        }
        masks.retain(|i, _| !denied.contains_key(i));

        let mut fields = Vec::new();
        let mut projection = Vec::new();
        let mut masked = BTreeMap::new();
        for (i, field) in schema.fields().iter().enumerate() {
            if denied.contains_key(&i) {
                continue;
            }
            match masks.get(&i) {
                None => {
                    fields.push(Arc::clone(field));
                    projection.push(col(column_ref(field.name())).alias(field.name()));
                }
                Some((p, mask)) => {
                    let e =
                        mask_expr(mask, field, key, &ctx, &df_schema).map_err(|d| fail(p, d))?;
                    let t = e
                        .get_type(&df_schema)
                        .map_err(|e| fail(p, format!("mask: {}", e.strip_backtrace())))?;
                    if &t != field.data_type() {
                        return Err(fail(
                            p,
                            format!(
                                "the mask returns {t} but column {:?} is {}",
                                field.name(),
                                field.data_type()
                            ),
                        ));
                    }
                    fields.push(Arc::new(
                        Field::new(field.name(), t, true).with_metadata(field.metadata().clone()),
                    ));
                    projection.push(e.alias(field.name()));
                    masked.insert(field.name().clone(), p.id.clone());
                }
            }
        }
        for p in denied.values().chain(masks.values().map(|(p, _)| p)) {
            let a = applied_of(p);
            if !applied.contains(&a) {
                applied.push(a);
            }
        }
        applied.sort_by(|a, b| a.id.cmp(&b.id));
        let row_filter = bounded_expr::join_balanced(filters, Expr::and);

        let physical_filter = row_filter
            .clone()
            .map(|f| ctx.create_physical_expr(f, &df_schema))
            .transpose()
            .map_err(|e| PolicyError::Internal(e.strip_backtrace()))?;
        let physical_projection = projection
            .iter()
            .map(|e| ctx.create_physical_expr(e.clone(), &df_schema))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PolicyError::Internal(e.strip_backtrace()))?;
        Ok(Self {
            table: id,
            schema: Arc::new(Schema::new(fields)),
            projection,
            row_filter,
            denied: denied
                .into_iter()
                .map(|(i, p)| (schema.field(i).name().clone(), p.id.clone()))
                .collect(),
            masked,
            applied,
            physical_filter,
            physical_projection,
        })
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// The visible columns, as callers see them.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// One aliased expression per visible column, over the stored schema.
    pub fn projection(&self) -> &[Expr] {
        &self.projection
    }

    /// The AND of the applicable row filters, over unmasked values.
    pub fn row_filter(&self) -> Option<&Expr> {
        self.row_filter.as_ref()
    }

    pub fn applied(&self) -> &[AppliedPolicy] {
        &self.applied
    }

    pub fn masked_columns(&self) -> impl Iterator<Item = &str> {
        self.masked.keys().map(String::as_str)
    }

    /// Each masked column and the policy that masks it.
    pub fn masks(&self) -> &BTreeMap<String, String> {
        &self.masked
    }

    /// Each denied column and the policy that denies it.
    pub fn denies(&self) -> &BTreeMap<String, String> {
        &self.denied
    }

    /// True when no policy changes what the caller sees.
    pub fn is_unrestricted(&self) -> bool {
        self.applied.is_empty()
    }

    /// Refuses a column the view denies; other names pass (unknown ones are the
    /// caller's schema problem, reported elsewhere).
    pub fn check_column(&self, name: &str) -> Result<(), PolicyError> {
        match self.denied.get(name) {
            Some(policy) => Err(PolicyError::ColumnDenied {
                column: name.to_owned(),
                policy: policy.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Applies the view to a batch in the stored schema: row filter on unmasked values,
    /// then the masked projection. Streams (changelog, follow) use this; scans build the
    /// same expressions into their DataFusion plan.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, PolicyError> {
        self.apply_with_trailing(batch, 0)
    }

    /// [`SecureView::apply`] for a batch whose first columns are the stored schema and
    /// whose last `trailing` columns are hotgate's own metadata (`_change`, `_offset`, a
    /// request index): those follow the row filter and are appended unmasked after the
    /// view's columns.
    pub fn apply_with_trailing(
        &self,
        batch: &RecordBatch,
        trailing: usize,
    ) -> Result<RecordBatch, PolicyError> {
        let err = |e: datafusion::error::DataFusionError| {
            PolicyError::Internal(format!("applying the secure view: {}", e.strip_backtrace()))
        };
        // The physical expressions address stored columns by index, and trailing columns
        // come after all of them, so they evaluate on the whole batch unchanged.
        let batch = match &self.physical_filter {
            None => batch.clone(),
            Some(f) => {
                let mask = f
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(err)?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<arrow_array::BooleanArray>()
                    .ok_or_else(|| PolicyError::Internal("row filter is not boolean".into()))?;
                arrow_select::filter::filter_record_batch(batch, mask)
                    .map_err(|e| PolicyError::Internal(e.to_string()))?
            }
        };
        let mut columns = self
            .physical_projection
            .iter()
            .map(|e| {
                e.evaluate(&batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let first_trailing = batch.num_columns().saturating_sub(trailing);
        let schema = if trailing == 0 {
            Arc::clone(&self.schema)
        } else {
            let input = batch.schema();
            let mut fields: Vec<_> = self.schema.fields().iter().cloned().collect();
            fields.extend(input.fields()[first_trailing..].iter().cloned());
            columns.extend(batch.columns()[first_trailing..].iter().cloned());
            Arc::new(arrow_schema::Schema::new(fields))
        };
        RecordBatch::try_new_with_options(
            schema,
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(|e| PolicyError::Internal(e.to_string()))
    }

    /// True when the column is shown masked (hashed, redacted, ...), not as stored.
    pub fn is_masked(&self, name: &str) -> bool {
        self.masked.contains_key(name)
    }
}

fn applied_of(p: &DataPolicy) -> AppliedPolicy {
    AppliedPolicy {
        id: p.id.clone(),
        version: p.version,
        kind: p.kind.name(),
    }
}

fn scope_matches(p: &DataPolicy, table: &ViewTable<'_>) -> bool {
    match &p.scope {
        PolicyScope::Table(t) => *t == table.id(),
        PolicyScope::Namespace(n) => n == table.namespace,
        PolicyScope::Tag(t) => table.has_tag(t),
    }
}

/// A column reference that keeps the name as written (no case folding, no dots).
fn column_ref(name: &str) -> datafusion::common::Column {
    datafusion::common::Column::new_unqualified(name)
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The expression that replaces a column under `mask`. Errors name the problem.
fn mask_expr(
    mask: &Mask,
    field: &Field,
    key: &HashKey,
    ctx: &SessionContext,
    df_schema: &DFSchema,
) -> Result<Expr, String> {
    let t = field.data_type();
    let c = || col(column_ref(field.name()));
    let parse = |sql: &str| {
        bounded_expr::parse(ctx, sql, df_schema, ExprLimits::DEFAULT).map_err(|e| e.to_string())
    };
    let strings_only = |name: &str| -> Result<(), String> {
        if is_string(t) {
            Ok(())
        } else {
            Err(format!(
                "mask {name} applies to string columns; column {:?} is {t} (use null or an expr)",
                field.name()
            ))
        }
    };
    let null = || {
        ScalarValue::try_from(t)
            .map(|v| Expr::Literal(v, None))
            .map_err(|e| e.strip_backtrace())
    };
    Ok(match mask {
        Mask::Null => null()?,
        Mask::Redact => {
            strings_only("redact")?;
            let q = quoted(field.name());
            cast(
                parse(&format!(
                    "CASE WHEN {q} IS NULL THEN NULL ELSE '{REDACTED}' END"
                ))?,
                t.clone(),
            )
        }
        Mask::Hash => {
            strings_only("hash")?;
            let udf = ScalarUDF::from(HmacMask::new(key.clone()));
            Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(udf), vec![c()]))
        }
        Mask::ShowLast4 => {
            strings_only("show_last_4")?;
            let q = quoted(field.name());
            cast(
                parse(&format!(
                    "CASE WHEN {q} IS NULL THEN NULL ELSE concat('****', right({q}, 4)) END"
                ))?,
                t.clone(),
            )
        }
        Mask::YearOnly => match t {
            DataType::Timestamp(_, _) => cast(
                parse(&format!("date_trunc('year', {})", quoted(field.name())))?,
                t.clone(),
            ),
            DataType::Date32 | DataType::Date64 => {
                let as_ts = cast(c(), DataType::Timestamp(TimeUnit::Microsecond, None));
                let trunc =
                    datafusion::functions::datetime::expr_fn::date_trunc(lit("year"), as_ts);
                cast(trunc, t.clone())
            }
            _ => {
                return Err(format!(
                    "mask year_only applies to date and timestamp columns; column {:?} is {t}",
                    field.name()
                ));
            }
        },
        Mask::Expr(sql) => parse(sql)?,
    })
}

/// The `hash` mask: HMAC-SHA256 hex under the gateway key, the same function the `hash`
/// write rule uses.
#[derive(Debug, PartialEq, Eq, Hash)]
struct HmacMask {
    key: HashKey,
    signature: Signature,
}

impl HmacMask {
    fn new(key: HashKey) -> Self {
        Self {
            key,
            signature: Signature::string(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for HmacMask {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "hotgate_hmac"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Utf8))
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let n = args.number_rows;
        let input = args
            .args
            .into_iter()
            .next()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Internal(
                    "hotgate_hmac takes one argument".into(),
                )
            })?
            .into_array(n)?;
        let hashed = self
            .key
            .hmac_strings(input.as_ref())
            .map_err(datafusion::error::DataFusionError::Execution)?;
        let hashed = arrow_cast::cast(&hashed, args.return_field.data_type())?;
        Ok(ColumnarValue::Array(hashed))
    }
}

/// Compiled views keyed by everything that can change them. Views depend on the caller
/// only through its catalog roles, so callers with the same roles share one.
#[derive(Debug, Default)]
pub struct SecureViewCache {
    views: Mutex<HashMap<ViewKey, Arc<SecureView>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ViewKey {
    pub table: String,
    /// Tables only gain columns, so the count identifies the schema version.
    pub schema_columns: usize,
    pub policy_version: u64,
    pub catalog_roles: BTreeSet<String>,
}

/// Most views kept; past it the cache starts over (views are cheap to rebuild).
const MAX_CACHED_VIEWS: usize = 4096;

impl SecureViewCache {
    pub fn get_or_compile(
        &self,
        table: ViewTable<'_>,
        catalog_roles: &BTreeSet<String>,
        policies: &PolicySet,
        key: &HashKey,
    ) -> Result<Arc<SecureView>, PolicyError> {
        let view_key = ViewKey {
            table: table.id(),
            schema_columns: table.schema.fields().len(),
            policy_version: policies.version,
            catalog_roles: catalog_roles.clone(),
        };
        let lock = || self.views.lock();
        if let Some(v) = lock().get(&view_key) {
            return Ok(Arc::clone(v));
        }
        let view = Arc::new(SecureView::compile(table, catalog_roles, policies, key)?);
        let mut views = lock();
        if views.len() >= MAX_CACHED_VIEWS {
            views.clear();
        }
        // Entries of older policy versions can never be asked for again.
        views.retain(|k, _| k.policy_version == policies.version);
        views.insert(view_key, Arc::clone(&view));
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::{Array, ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};

    fn schema() -> SchemaRef {
        let tagged = |name: &str, t: DataType, tags: &str| {
            let f = Field::new(name, t, true);
            if tags.is_empty() {
                f
            } else {
                f.with_metadata(HashMap::from([(TAGS_KEY.to_string(), tags.to_string())]))
            }
        };
        Arc::new(Schema::new(vec![
            tagged("id", DataType::Int64, ""),
            tagged("region", DataType::Utf8, ""),
            tagged("email", DataType::Utf8, "pii,subject"),
            tagged("card", DataType::Utf8, "pii"),
            tagged(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                "",
            ),
        ]))
    }

    fn batch(schema: &SchemaRef) -> RecordBatch {
        RecordBatch::try_new(
            Arc::clone(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
                Arc::new(StringArray::from(vec!["eu", "us", "eu"])),
                Arc::new(StringArray::from(vec![
                    Some("a@x.io"),
                    Some("b@y.io"),
                    None,
                ])),
                Arc::new(StringArray::from(vec!["4111111111111111", "5500", "12"])),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![
                        1_700_000_000_000_000,
                        1_710_000_000_000_000,
                        1_720_000_000_000_000,
                    ])
                    .with_timezone("+00:00"),
                ),
            ],
        )
        .unwrap()
    }

    fn policies(json: serde_json::Value) -> PolicySet {
        let list: Vec<DataPolicy> = serde_json::from_value(json).unwrap();
        list.into_iter()
            .fold(PolicySet::default(), |s, p| s.with_created(p).unwrap())
    }

    fn roles(r: &[&str]) -> BTreeSet<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    fn view(p: &PolicySet, r: &[&str]) -> Result<SecureView, PolicyError> {
        let s = schema();
        SecureView::compile(
            ViewTable {
                namespace: "sales",
                name: "orders",
                schema: &s,
            },
            &roles(r),
            p,
            &HashKey::from_bytes([1; 32]),
        )
    }

    #[test]
    fn roles_see_different_rows_and_masks() {
        let p = policies(serde_json::json!([
            {"id":"eu","scope":{"table":"sales.orders"},"to":["analyst"],"kind":"row_filter","expr":"region = 'eu'"},
            {"id":"pii","scope":{"tag":"pii"},"to":["*"],"except":["admin"],"kind":"column_mask","tag":"pii","mask":"hash"},
            {"id":"card4","scope":{"table":"sales.orders"},"to":["analyst"],"kind":"column_mask","column":"card","mask":"show_last_4"},
            {"id":"year","scope":{"namespace":"sales"},"to":["analyst"],"kind":"column_mask","column":"ts","mask":"year_only"}
        ]));
        let s = schema();
        let b = batch(&s);
        let analyst = view(&p, &["analyst"]).unwrap().apply(&b).unwrap();
        assert_eq!(analyst.num_rows(), 2);
        let email = analyst.column_by_name("email").unwrap().as_string::<i32>();
        assert_eq!(
            email.value(0),
            HashKey::from_bytes([1; 32]).hmac_hex(b"a@x.io")
        );
        assert!(email.is_null(1), "null stays null under hash");
        let card = analyst.column_by_name("card").unwrap().as_string::<i32>();
        // The table-scoped mask beats the tag-scoped one.
        assert_eq!(card.value(0), "****1111");
        let ts = analyst
            .column_by_name("ts")
            .unwrap()
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_672_531_200_000_000, "2023-01-01");
        assert_eq!(
            analyst.schema().field(4).data_type(),
            s.field(4).data_type()
        );

        let other = view(&p, &["clerk"]).unwrap().apply(&b).unwrap();
        assert_eq!(other.num_rows(), 3);
        assert_eq!(
            other
                .column_by_name("card")
                .unwrap()
                .as_string::<i32>()
                .value(1),
            HashKey::from_bytes([1; 32]).hmac_hex(b"5500")
        );
        let admin = view(&p, &["admin"]).unwrap();
        assert!(admin.is_unrestricted());
        assert_eq!(admin.apply(&b).unwrap(), b);
        let v = view(&p, &["analyst"]).unwrap();
        let applied: Vec<String> = v.applied().iter().map(|a| a.to_string()).collect();
        assert_eq!(applied, ["card4@1", "eu@1", "pii@1", "year@1"]);
    }

    #[test]
    fn deny_by_tag_hides_the_column_and_names_it() {
        let p = policies(serde_json::json!([
            {"id":"nopii","scope":{"namespace":"sales"},"to":["analyst"],"kind":"column_deny","tag":"pii"},
            {"id":"m","scope":{"table":"sales.orders"},"to":["analyst"],"kind":"column_mask","column":"email","mask":"null"}
        ]));
        let v = view(&p, &["analyst"]).unwrap();
        let names: Vec<&str> = v
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["id", "region", "ts"]);
        let e = v.check_column("card").unwrap_err();
        assert_eq!(
            e.to_string(),
            "permission denied: column \"card\" is denied to you by policy \"nopii\""
        );
        assert!(v.check_column("region").is_ok());
        assert_eq!(v.apply(&batch(&schema())).unwrap().num_columns(), 3);
    }

    #[test]
    fn two_masks_on_one_column_resolve_by_scope_then_priority_then_id() {
        let p = policies(serde_json::json!([
            {"id":"b","scope":{"tag":"pii"},"to":["*"],"kind":"column_mask","column":"email","mask":"redact"},
            {"id":"a","scope":{"tag":"pii"},"to":["*"],"kind":"column_mask","column":"email","mask":"null"},
            {"id":"c","scope":{"tag":"pii"},"to":["*"],"priority":-1,"kind":"column_mask","column":"card","mask":"null"},
            {"id":"d","scope":{"tag":"pii"},"to":["*"],"kind":"column_mask","column":"card","mask":"redact"}
        ]));
        for _ in 0..3 {
            let out = view(&p, &["x"]).unwrap().apply(&batch(&schema())).unwrap();
            // Same scope and priority: id "a" (null) beats "b".
            assert!(out.column_by_name("email").unwrap().is_null(0));
            // Lower priority wins over a lower id.
            assert!(out.column_by_name("card").unwrap().is_null(0));
        }
    }

    #[test]
    fn fail_closed_cases_name_the_policy() {
        let cases = [
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_deny","column":"nope"}),
                "unknown column \"nope\"",
            ),
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","tag":"secret","mask":"null"}),
                "no column is tagged \"secret\"",
            ),
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"row_filter","expr":"id + 1"}),
                "not boolean",
            ),
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"row_filter","expr":"missing = 1"}),
                "row filter",
            ),
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","column":"id","mask":{"expr":"'x'"}}),
                "the mask returns Utf8 but column \"id\" is Int64",
            ),
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","column":"id","mask":"redact"}),
                "applies to string columns",
            ),
            (
                serde_json::json!({"id":"p1","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","column":"region","mask":"year_only"}),
                "year_only applies",
            ),
        ];
        for (json, want) in cases {
            let p = policies(serde_json::json!([json]));
            let e = view(&p, &["r"]).unwrap_err();
            assert!(e.is_denial());
            let msg = e.to_string();
            assert!(msg.contains("policy \"p1\""), "{msg}");
            assert!(msg.contains(want), "{json}: {msg}");
            // A caller the policy does not target is unaffected.
            assert!(view(&p, &["other"]).is_ok());
        }
    }

    #[test]
    fn custom_mask_expressions_keep_the_type() {
        let p = policies(serde_json::json!([
            {"id":"e","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_mask","column":"id","mask":{"expr":"id * 0"}}
        ]));
        let out = view(&p, &["r"]).unwrap().apply(&batch(&schema())).unwrap();
        let ids = out
            .column_by_name("id")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>();
        assert_eq!(ids.values().to_vec(), [0, 0, 0]);
    }

    #[test]
    fn the_cache_reuses_views_until_the_policy_version_moves() {
        let cache = SecureViewCache::default();
        let s = schema();
        let t = ViewTable {
            namespace: "sales",
            name: "orders",
            schema: &s,
        };
        let key = HashKey::from_bytes([1; 32]);
        let p1 = policies(serde_json::json!([]));
        let a = cache.get_or_compile(t, &roles(&["r"]), &p1, &key).unwrap();
        let b = cache.get_or_compile(t, &roles(&["r"]), &p1, &key).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let p2 = p1
            .with_created(
                serde_json::from_value(serde_json::json!({"id":"d","scope":{"table":"sales.orders"},"to":["r"],"kind":"column_deny","column":"email"}))
                    .unwrap(),
            )
            .unwrap();
        let c = cache.get_or_compile(t, &roles(&["r"]), &p2, &key).unwrap();
        assert_eq!(c.schema().fields().len(), 4);
    }
}
