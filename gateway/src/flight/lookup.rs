//! Lookups: the current rows of many keys of a primary-key table in one call, through
//! the caller's secure view.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, SchemaRef};
use futures::StreamExt;
use hotgate_policy::SecureView;
use hotgate_store::{HotTable, TableName};

use super::opened::{OpenedRead, ReadBody};
use crate::deletion::Suppression;
use crate::error::{GatewayError, Result};
use crate::governance::Governance;
use crate::planner::check_columns;
use crate::ticket;

/// Lookups of at most this many keys read the store on the calling task.
const INLINE_LOOKUP_KEYS: usize = 16;

/// What a lookup's trailer reports.
#[derive(Debug, serde::Serialize)]
struct LookupResult {
    requested: usize,
    found: usize,
    /// Request indices of the keys with no row the caller may see.
    missing: Vec<u64>,
}

/// A batched point read of a primary-key table: the current rows of the requested keys,
/// in request order, through the caller's secure view. Keys are matched on their stored
/// form, so the key columns must be visible to the caller unmasked; a row the view's
/// row filter hides is reported missing, exactly like a key with no row.
///
/// Everything that can refuse the call (the view, the keys) is checked here; the read
/// itself runs when the stream is first polled, which the caller does while the audit
/// record syncs, so the two overlap.
pub(super) async fn lookup(
    governance: &Governance,
    table: Arc<HotTable>,
    view: Arc<SecureView>,
    l: ticket::Lookup,
    suppression: Option<Suppression>,
) -> Result<OpenedRead> {
    if !table.is_primary_key() {
        return Err(lookup_unsupported(&l.table));
    }
    let key_columns = table.key_columns();
    for k in &key_columns {
        view.check_column(k)?;
        if view.is_masked(k) {
            return Err(GatewayError::PermissionDenied(format!(
                "lookup: key column {k:?} is masked for you; lookups need every key column \
                 visible unmasked"
            )));
        }
    }
    let schema = match &l.columns {
        Some(cols) => check_columns(&view, cols)?,
        None => Arc::clone(view.schema()),
    };
    let keys = lookup_keys(governance, &table, &key_columns, &l.keys)?;
    let trailer = Arc::new(std::sync::OnceLock::new());
    let filled = Arc::clone(&trailer);
    let out_schema = Arc::clone(&schema);
    let batches = futures::stream::once(async move {
        let read = read_rows(table, keys, &view, suppression.as_ref(), &out_schema).await?;
        let _ = filled.set(read.trailer);
        Ok(read.rows)
    })
    .boxed();
    Ok(OpenedRead {
        schema,
        body: ReadBody::Rows(batches),
        kind: "lookup",
        trailer: Some(trailer),
    })
}

struct ReadRows {
    rows: RecordBatch,
    trailer: bytes::Bytes,
}

/// Reads the rows of `keys` and passes them through the pending deletions and the view.
async fn read_rows(
    table: Arc<HotTable>,
    keys: RecordBatch,
    view: &SecureView,
    suppression: Option<&Suppression>,
    schema: &SchemaRef,
) -> Result<ReadRows> {
    let requested = keys.num_rows();
    // A few keys are a few cache probes: done in place, they cost less than the two
    // thread handoffs of the blocking pool, which dominate a single-key lookup.
    let found = if requested <= INLINE_LOOKUP_KEYS {
        table.lookup(&keys)?
    } else {
        tokio::task::spawn_blocking(move || table.lookup(&keys))
            .await
            .map_err(|e| GatewayError::Internal(format!("lookup task failed: {e}")))??
    };
    // Carry each row's request index through the view to learn which rows it hides.
    let mut index = Vec::with_capacity(found.rows.num_rows());
    let mut missing = found.missing.iter().peekable();
    for i in 0..requested as u64 {
        if missing.peek() == Some(&&i) {
            missing.next();
        } else {
            index.push(i);
        }
    }
    let mut fields: Vec<Field> = found
        .rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("_request_index", DataType::UInt64, false));
    let mut columns = found.rows.columns().to_vec();
    columns.push(Arc::new(UInt64Array::from(index)));
    let rows = RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)?;
    // A row a pending deletion request covers is missing, like a key without a row.
    let rows = match suppression {
        Some(s) => s.apply(&rows)?,
        None => rows,
    };
    let shown = view.apply_with_trailing(&rows, 1)?;
    let shown_index = shown
        .column(shown.num_columns() - 1)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| GatewayError::Internal("lookup index column".into()))?;
    let mut seen = vec![false; requested];
    for i in shown_index.values() {
        seen[*i as usize] = true;
    }
    let missing: Vec<u64> = (0..requested as u64)
        .filter(|i| !seen[*i as usize])
        .collect();
    let indices = schema
        .fields()
        .iter()
        .map(|f| view.schema().index_of(f.name()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let rows = shown.project(&indices)?;
    let trailer = serde_json::to_vec(&LookupResult {
        requested,
        found: rows.num_rows(),
        missing,
    })
    .map_err(|e| GatewayError::Internal(e.to_string()))?;
    Ok(ReadRows {
        rows,
        trailer: trailer.into(),
    })
}

/// Decodes a lookup's JSON keys into a batch of key columns, as stored (write rules
/// applied, so a key written hashed is looked up hashed). The keys' text goes straight
/// into Arrow's JSON decoder; only a failure looks at them one by one, to say which key
/// is wrong and how.
fn lookup_keys(
    governance: &Governance,
    table: &HotTable,
    key_columns: &[String],
    keys: &ticket::LookupKeys,
) -> Result<RecordBatch> {
    let def = table.def();
    let stored = def.stored_schema();
    let fields = key_columns
        .iter()
        .map(|k| stored.field_with_name(k).cloned())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let schema = Arc::new(arrow_schema::Schema::new(fields));
    // Decoded as nullable, so that a missing key column is a null to report, not an
    // error without its key's index.
    let nullable = Arc::new(arrow_schema::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let elements: Vec<&str> = keys.elements().collect();
    let decoded = decode_keys(&nullable, &elements)
        .map_err(|e| explain_bad_keys(key_columns, &elements).unwrap_or(e))?;
    for (column, k) in decoded.columns().iter().zip(key_columns) {
        if let Some(i) = column
            .logical_nulls()
            .and_then(|n| (0..n.len()).find(|i| n.is_null(*i)))
        {
            return Err(bad_key(format!(
                "key {i} has no value for key column {k:?}; the key is ({})",
                key_columns.join(", ")
            )));
        }
    }
    let batch = RecordBatch::try_new(schema, decoded.columns().to_vec())?;
    Ok(Governance::write_rules(&table.def()).apply(&batch, governance.hash_key())?)
}

fn bad_key(msg: String) -> GatewayError {
    GatewayError::InvalidArgument(format!("lookup: {msg}"))
}

fn decode_keys(schema: &SchemaRef, elements: &[&str]) -> Result<RecordBatch> {
    let mismatch = |e: arrow_schema::ArrowError| {
        bad_key(format!("a key does not match the key column types: {e}"))
    };
    let mut decoder = arrow_json::ReaderBuilder::new(Arc::clone(schema))
        .with_strict_mode(true)
        .with_batch_size(elements.len().max(1))
        .build_decoder()?;
    for (i, key) in elements.iter().enumerate() {
        let text = key.as_bytes();
        if text.first() != Some(&b'{') {
            return Err(bad_key(format!("key {i} is not an object of key columns")));
        }
        decoder.decode(text).map_err(mismatch)?;
    }
    Ok(decoder
        .flush()
        .map_err(mismatch)?
        .unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(schema))))
}

/// Finds the first key that is not an object of exactly the key columns, and says why
/// (in the order of the checks: an object, every key column, no other column).
fn explain_bad_keys(key_columns: &[String], elements: &[&str]) -> Option<GatewayError> {
    for (i, key) in elements.iter().enumerate() {
        let Ok(serde_json::Value::Object(object)) = serde_json::from_str(key) else {
            return Some(bad_key(format!("key {i} is not an object of key columns")));
        };
        if let Some(k) = key_columns
            .iter()
            .find(|k| object.get(*k).is_none_or(serde_json::Value::is_null))
        {
            return Some(bad_key(format!(
                "key {i} has no value for key column {k:?}; the key is ({})",
                key_columns.join(", ")
            )));
        }
        if let Some(extra) = object.keys().find(|c| !key_columns.contains(c)) {
            return Some(bad_key(format!(
                "key {i} names {extra:?}, which is not a key column; the key is ({})",
                key_columns.join(", ")
            )));
        }
    }
    None
}

pub(super) fn lookup_unsupported(table: &TableName) -> GatewayError {
    GatewayError::InvalidArgument(format!(
        "lookup: {table} is a log table; lookups need a primary-key table"
    ))
}
