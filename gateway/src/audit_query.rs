//! Reading audit records back (`GET /v1/audit`): filters, newest first, paged by seq.
//! It sits above both [`crate::audit`] and [`crate::planner`]: the planner applies deletions,
//! whose steps write audit records, so the audit module itself must not plan.
//!
//! The query is an ordinary scan of `_system.audit` through the caller's secure view, so
//! policies on the audit table apply to auditors like to anyone.

use std::sync::Arc;

use datafusion::prelude::col;
use hotgate_policy::SecureView;
use hotgate_store::HotTable;
use serde::{Deserialize, Serialize};

use crate::audit::table::{LIST_COLUMNS, audit_table_name};
use crate::error::{GatewayError, Result};
use crate::planner::{choose_tiers, plan_scan};
use crate::ticket::Scan;
use hotgate_tiering::Tierer;

/// Records per page unless `limit` says otherwise, and the most a page holds.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// The filters of `GET /v1/audit`; each one given must match.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    pub principal: Option<String>,
    pub table: Option<String>,
    pub action: Option<String>,
    /// `allow` or `deny`.
    pub decision: Option<String>,
    /// RFC 3339; records at or after.
    pub since: Option<String>,
    /// RFC 3339; records before.
    pub until: Option<String>,
    pub query_id: Option<String>,
    /// Only records with a smaller seq: the next page of a newest-first listing.
    pub before_seq: Option<u64>,
    /// Only records with a larger seq: what arrived since (as `tail` polls).
    pub after_seq: Option<u64>,
    /// Records per page (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// One page of records, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct AuditPage {
    pub records: Vec<serde_json::Value>,
    /// Pass as `before_seq` for the next (older) page; absent on the last page.
    pub next_before_seq: Option<u64>,
    /// The `query_id` of this read's own records, so a poller can leave them out.
    pub query_id: String,
}

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn micros(what: &str, text: &Option<String>) -> Result<Option<i64>> {
    text.as_deref()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.timestamp_micros())
                .map_err(|e| {
                    GatewayError::InvalidArgument(format!("{what}: {t:?} is not RFC 3339 ({e})"))
                })
        })
        .transpose()
}

impl AuditQuery {
    /// The scan this query makes: the filter is SQL over the audit columns, with every
    /// value a quoted literal.
    fn scan(&self) -> Result<(Scan, usize)> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 || limit > MAX_LIMIT {
            return Err(GatewayError::InvalidArgument(format!(
                "limit: {limit} is out of range; use 1 to {MAX_LIMIT}"
            )));
        }
        let mut clauses = Vec::new();
        if let Some(t) = &self.table {
            // A SQL statement's record lists every table it read, comma-separated.
            clauses.push(format!(
                "(\"table\" = {v} OR strpos(',' || \"table\" || ',', {w}) > 0)",
                v = quoted(t),
                w = quoted(&format!(",{t},"))
            ));
        }
        for (column, value) in [
            ("principal", &self.principal),
            ("action", &self.action),
            ("query_id", &self.query_id),
        ] {
            if let Some(v) = value {
                clauses.push(format!("\"{column}\" = {}", quoted(v)));
            }
        }
        if let Some(d) = &self.decision {
            if d != "allow" && d != "deny" {
                return Err(GatewayError::InvalidArgument(format!(
                    "decision: {d:?}; use allow or deny"
                )));
            }
            clauses.push(format!("decision = {}", quoted(d)));
        }
        if let Some(s) = self.before_seq {
            clauses.push(format!("seq < {s}"));
        }
        if let Some(s) = self.after_seq {
            clauses.push(format!("seq > {s}"));
        }
        let scan = Scan {
            table: audit_table_name(),
            columns: None,
            filter: (!clauses.is_empty()).then(|| clauses.join(" AND ")),
            since: micros("since", &self.since)?,
            until: micros("until", &self.until)?,
            limit: None,
            buckets: None,
        };
        Ok((scan, limit))
    }
}

/// Runs `query` over the audit table through `view`.
pub async fn query(
    table: Arc<HotTable>,
    tierer: &Tierer,
    view: &SecureView,
    query: &AuditQuery,
) -> Result<AuditPage> {
    let (scan, limit) = query.scan()?;
    let tiers = choose_tiers(tierer, &table, &scan)?;
    let mut df = plan_scan(table, view, &scan, &tiers, None).await?;
    if view.schema().index_of("seq").is_err() {
        return Err(GatewayError::PermissionDenied(
            "the policies on _system.audit hide column seq, which paging needs".into(),
        ));
    }
    df = df
        .sort(vec![col("seq").sort(false, false)])?
        .limit(0, Some(limit + 1))?;
    let batches = df.collect().await?;
    let mut writer = arrow_json::ArrayWriter::new(Vec::new());
    let refs: Vec<&arrow_array::RecordBatch> = batches.iter().collect();
    writer
        .write_batches(&refs)
        .and_then(|()| writer.finish())
        .map_err(|e| GatewayError::Internal(format!("audit rows as JSON: {e}")))?;
    let bytes = writer.into_inner();
    let mut records: Vec<serde_json::Value> = if bytes.is_empty() {
        Vec::new()
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| GatewayError::Internal(format!("audit rows as JSON: {e}")))?
    };
    for r in &mut records {
        // Lists are stored as JSON text; hand them out as arrays.
        for c in LIST_COLUMNS {
            if let Some(v) = r.get_mut(c)
                && let Some(text) = v.as_str()
                && let Ok(list) = serde_json::from_str::<serde_json::Value>(text)
            {
                *v = list;
            }
        }
    }
    let next_before_seq = if records.len() > limit {
        records.truncate(limit);
        records
            .last()
            .and_then(|r| r.get("seq"))
            .and_then(|s| s.as_u64())
    } else {
        None
    };
    Ok(AuditPage {
        records,
        next_before_seq,
        query_id: String::new(),
    })
}
