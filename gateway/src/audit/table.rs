//! The `_system.audit` log table: its definition, and records to and from Arrow rows.
//!
//! Lists (roles, columns, policies, tiers) are stored as JSON arrays in string columns,
//! because the hot tier's column types are Iceberg primitives. The conversion is exact
//! both ways, so a record read back hashes to the value it was sealed with.

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder, TimestampMicrosecondBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use hotgate_store::{ColumnType, TableName, TableSpec};

use super::chain::{AuditRecord, Decision};

/// The audit table's name in the `_system` namespace.
pub const AUDIT_TABLE: &str = "audit";

pub fn audit_table_name() -> TableName {
    TableName::system(AUDIT_TABLE).expect("a valid identifier")
}

/// Column name and type, in table order. `principal` is the (single-bucket) bucket key.
const COLUMNS: [(&str, ColumnType, bool); 24] = [
    ("seq", ColumnType::Int64, false),
    ("time", ColumnType::TimestampUs, false),
    ("query_id", ColumnType::String, false),
    ("principal", ColumnType::String, false),
    ("principal_id", ColumnType::Int64, true),
    ("activated_roles", ColumnType::String, false),
    ("client_addr", ColumnType::String, true),
    ("action", ColumnType::String, false),
    ("table", ColumnType::String, true),
    ("columns_requested", ColumnType::String, false),
    ("columns_returned", ColumnType::String, false),
    ("policies", ColumnType::String, false),
    ("mirror_version", ColumnType::Int64, false),
    ("tiers", ColumnType::String, false),
    ("rows", ColumnType::Int64, true),
    ("bytes", ColumnType::Int64, true),
    ("decision", ColumnType::String, true),
    ("reason", ColumnType::String, true),
    ("query_digest", ColumnType::String, true),
    ("token_id", ColumnType::String, true),
    ("duration_ms", ColumnType::Int64, true),
    ("signature", ColumnType::String, true),
    ("prev_hash", ColumnType::String, false),
    ("hash", ColumnType::String, false),
];

/// Columns whose strings hold JSON arrays.
pub const LIST_COLUMNS: [&str; 5] = [
    "activated_roles",
    "columns_requested",
    "columns_returned",
    "policies",
    "tiers",
];

/// The definition of `_system.audit`. One bucket keeps a single total order; records
/// are kept hot for `hot_retention` and, with tiering on, never dropped before they are
/// tiered.
pub fn audit_table_spec(hot_retention: std::time::Duration) -> TableSpec {
    TableSpec::system_log(AUDIT_TABLE, &COLUMNS, "principal", hot_retention)
}

/// Formats µs since the epoch the one way record times are written.
pub fn format_time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn parse_time(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_micros())
        .map_err(|e| format!("audit time {text:?}: {e}"))
}

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// Records as one batch in the table's stored schema.
pub fn to_batch(schema: &SchemaRef, records: &[AuditRecord]) -> Result<RecordBatch, String> {
    let n = records.len();
    // The stored schema's own timezone spelling, so the batch matches it exactly.
    let mut time = TimestampMicrosecondBuilder::with_capacity(n)
        .with_data_type(schema.field(1).data_type().clone());
    for r in records {
        time.append_value(parse_time(&r.time)?);
    }
    let ints = |f: &dyn Fn(&AuditRecord) -> Option<i64>| -> ArrayRef {
        let mut b = Int64Builder::with_capacity(n);
        records.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish())
    };
    let strings = |f: &dyn Fn(&AuditRecord) -> Option<String>| -> ArrayRef {
        let mut b = StringBuilder::with_capacity(n, n * 32);
        records.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish())
    };
    let decision = |d: Option<Decision>| {
        d.map(|d| match d {
            Decision::Allow => "allow".to_owned(),
            Decision::Deny => "deny".to_owned(),
        })
    };
    let columns: Vec<ArrayRef> = vec![
        ints(&|r| Some(r.seq as i64)),
        Arc::new(time.finish()),
        strings(&|r| Some(r.query_id.clone())),
        strings(&|r| Some(r.principal.clone())),
        ints(&|r| r.principal_id),
        strings(&|r| Some(json_list(&r.activated_roles))),
        strings(&|r| r.client_addr.clone()),
        strings(&|r| Some(r.action.clone())),
        strings(&|r| r.table.clone()),
        strings(&|r| Some(json_list(&r.columns_requested))),
        strings(&|r| Some(json_list(&r.columns_returned))),
        strings(&|r| Some(json_list(&r.policies))),
        ints(&|r| opt_i64(Some(r.mirror_version))),
        strings(&|r| Some(json_list(&r.tiers))),
        ints(&|r| opt_i64(r.rows)),
        ints(&|r| opt_i64(r.bytes)),
        strings(&|r| decision(r.decision)),
        strings(&|r| r.reason.clone()),
        strings(&|r| r.query_digest.clone()),
        strings(&|r| r.token_id.clone()),
        ints(&|r| opt_i64(r.duration_ms)),
        strings(&|r| r.signature.clone()),
        strings(&|r| Some(r.prev_hash.clone())),
        strings(&|r| Some(r.hash.clone())),
    ];
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| e.to_string())
}

/// Reads records back from rows in the stored schema. A row that does not make a record
/// (a required value missing, a list that is not JSON) is an error naming its column.
pub fn from_batch(batch: &RecordBatch) -> Result<Vec<AuditRecord>, String> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| format!("the audit rows have no column {name:?}"))
    };
    let strings = |name: &str| -> Result<Vec<Option<String>>, String> {
        let c = column(name)?;
        let a = c
            .as_string_opt::<i32>()
            .ok_or_else(|| format!("audit column {name:?} is not a string"))?;
        Ok(a.iter().map(|v| v.map(str::to_owned)).collect())
    };
    let ints = |name: &str| -> Result<Vec<Option<i64>>, String> {
        let c = column(name)?;
        let a = c
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| format!("audit column {name:?} is not a long"))?;
        Ok(a.iter().collect())
    };
    let required =
        |name: &str, v: Option<String>| v.ok_or_else(|| format!("audit column {name:?} is null"));
    let list = |name: &str, v: Option<String>| -> Result<Vec<String>, String> {
        serde_json::from_str(&required(name, v)?)
            .map_err(|e| format!("audit column {name:?} is not a JSON list: {e}"))
    };
    let times = column("time")?
        .as_primitive_opt::<TimestampMicrosecondType>()
        .ok_or("audit column \"time\" is not a timestamp")?
        .clone();
    let [seq, principal_id, mirror_version, rows, bytes, duration_ms] = [
        "seq",
        "principal_id",
        "mirror_version",
        "rows",
        "bytes",
        "duration_ms",
    ]
    .map(ints);
    let [
        query_id,
        principal,
        activated_roles,
        client_addr,
        action,
        table,
        columns_requested,
        columns_returned,
        policies,
        tiers,
        decision,
        reason,
        query_digest,
        token_id,
        signature,
        prev_hash,
        hash,
    ] = [
        "query_id",
        "principal",
        "activated_roles",
        "client_addr",
        "action",
        "table",
        "columns_requested",
        "columns_returned",
        "policies",
        "tiers",
        "decision",
        "reason",
        "query_digest",
        "token_id",
        "signature",
        "prev_hash",
        "hash",
    ]
    .map(strings);
    let (seq, principal_id, mirror_version, rows, bytes, duration_ms) = (
        seq?,
        principal_id?,
        mirror_version?,
        rows?,
        bytes?,
        duration_ms?,
    );
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut query_id = query_id?.into_iter();
    let mut principal = principal?.into_iter();
    let mut activated_roles = activated_roles?.into_iter();
    let mut client_addr = client_addr?.into_iter();
    let mut action = action?.into_iter();
    let mut table = table?.into_iter();
    let mut columns_requested = columns_requested?.into_iter();
    let mut columns_returned = columns_returned?.into_iter();
    let mut policies = policies?.into_iter();
    let mut tiers = tiers?.into_iter();
    let mut decision = decision?.into_iter();
    let mut reason = reason?.into_iter();
    let mut query_digest = query_digest?.into_iter();
    let mut token_id = token_id?.into_iter();
    let mut signature = signature?.into_iter();
    let mut prev_hash = prev_hash?.into_iter();
    let mut hash = hash?.into_iter();
    let unsigned = |v: Option<i64>| v.map(|v| v.max(0) as u64);
    for i in 0..batch.num_rows() {
        let next = |it: &mut std::vec::IntoIter<Option<String>>| it.next().flatten();
        out.push(AuditRecord {
            seq: unsigned(seq[i]).ok_or("audit column \"seq\" is null")?,
            time: format_time(times.value(i)),
            query_id: required("query_id", next(&mut query_id))?,
            principal: required("principal", next(&mut principal))?,
            principal_id: principal_id[i],
            activated_roles: list("activated_roles", next(&mut activated_roles))?,
            client_addr: next(&mut client_addr),
            action: required("action", next(&mut action))?,
            table: next(&mut table),
            columns_requested: list("columns_requested", next(&mut columns_requested))?,
            columns_returned: list("columns_returned", next(&mut columns_returned))?,
            policies: list("policies", next(&mut policies))?,
            mirror_version: unsigned(mirror_version[i]).unwrap_or(0),
            tiers: list("tiers", next(&mut tiers))?,
            rows: unsigned(rows[i]),
            bytes: unsigned(bytes[i]),
            decision: match next(&mut decision).as_deref() {
                None => None,
                Some("allow") => Some(Decision::Allow),
                Some("deny") => Some(Decision::Deny),
                Some(other) => return Err(format!("audit decision {other:?} is not allow/deny")),
            },
            reason: next(&mut reason),
            query_digest: next(&mut query_digest),
            token_id: next(&mut token_id),
            duration_ms: unsigned(duration_ms[i]),
            signature: next(&mut signature),
            prev_hash: required("prev_hash", next(&mut prev_hash))?,
            hash: required("hash", next(&mut hash))?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::Chain;
    use hotgate_store::TableDef;

    #[test]
    fn records_round_trip_through_rows_with_their_hashes() {
        let def = TableDef::new(audit_table_spec(std::time::Duration::from_secs(60))).unwrap();
        let mut chain = Chain::default();
        let full = AuditRecord {
            time: format_time(1_764_460_800_123_456),
            query_id: "q1".into(),
            principal: "alice".into(),
            principal_id: Some(7),
            activated_roles: vec!["analyst".into(), "ops \"x\"".into()],
            client_addr: Some("127.0.0.1:5000".into()),
            action: "scan".into(),
            table: Some("sales.orders".into()),
            columns_requested: vec!["id".into()],
            columns_returned: vec!["id".into(), "email".into()],
            policies: vec!["eu_rows@2".into()],
            mirror_version: 3,
            tiers: vec!["hot".into()],
            rows: Some(10),
            bytes: Some(1024),
            decision: Some(Decision::Allow),
            reason: None,
            query_digest: Some("ab".repeat(32)),
            token_id: Some("jti-1".into()),
            duration_ms: Some(4),
            ..Default::default()
        };
        let sparse = AuditRecord {
            time: format_time(1_764_460_801_000_000),
            principal: "bob".into(),
            action: "authenticate".into(),
            decision: Some(Decision::Deny),
            reason: Some("no bearer token".into()),
            ..Default::default()
        };
        let records = vec![chain.seal(full), chain.seal(sparse)];
        let batch = to_batch(def.stored_schema(), &records).unwrap();
        assert_eq!(from_batch(&batch).unwrap(), records);
        for r in from_batch(&batch).unwrap() {
            assert_eq!(r.compute_hash(), r.hash);
        }
    }
}
