//! `/v1/audit`: reading and verifying the audit log (needs `TABLE_READ_DATA` on
//! `_system.audit`).

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use hotgate_policy::Privilege;
use hotgate_store::HotTable;

use crate::audit::{CallAudit, audit_table_name, verify_audit_log};
use crate::audit_query::{AuditQuery, query as query_audit};
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

use super::call::{Caller, audited};

/// Authorizes a read of `_system.audit` and opens it with the caller's view.
pub(super) async fn audit_reader(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
) -> Result<(Arc<HotTable>, Arc<hotgate_policy::SecureView>, CallAudit)> {
    let name = audit_table_name();
    let mut opened = None;
    let (_, mut audit) = audited(state, caller, action, |principal| {
        state
            .governance
            .authorize_table(principal, Privilege::TableReadData, &name)?;
        let table = state.store.table(&name).map_err(|_| {
            GatewayError::NotFound("auditing is switched off: there is no _system.audit".into())
        })?;
        let view = state.governance.view(principal, &table)?;
        opened = Some((table, view));
        Ok(())
    })
    .await?;
    audit.set_table(&name);
    let (table, view) =
        opened.ok_or_else(|| GatewayError::Internal("the opened audit table is gone".into()))?;
    Ok((table, view, audit))
}

/// `GET /v1/audit`: records, newest first, filtered and paged.
pub(super) async fn audit_records(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    query: std::result::Result<Query<AuditQuery>, QueryRejection>,
) -> Result<impl IntoResponse> {
    let (table, view, mut audit) = audit_reader(&state, &caller, "audit_query").await?;
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => {
            let e = GatewayError::InvalidArgument(e.body_text());
            audit.deny(&e).await;
            return Err(e);
        }
    };
    audit.set_request(&serde_json::to_vec(&query).unwrap_or_default());
    audit.set_view(&view, view.schema());
    let mut page = match query_audit(table, &state.tierer, &view, &query).await {
        Ok(page) => page,
        Err(e) => {
            audit.deny(&e).await;
            return Err(e);
        }
    };
    page.query_id = audit.query_id().to_owned();
    let completion = audit.allow().await?;
    completion.add_rows(page.records.len() as u64);
    completion.finished();
    Ok(Json(page))
}

/// `GET /v1/audit/verify`: re-checks the durable part of the chain and every
/// checkpoint. 200 with `"intact": false` and the first damage when it is broken.
pub(super) async fn audit_verify(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    let (table, _, audit) = audit_reader(&state, &caller, "audit_verify").await?;
    audit.allow_once().await?;
    // Bounded by what is durable now; the records this call just wrote are included.
    let ends = table.end_offsets();
    let root = state.store.root().to_path_buf();
    let key = state.audit.public_key_hex();
    let report = tokio::task::spawn_blocking(move || verify_audit_log(&root, &key, Some(&ends)))
        .await
        .map_err(|e| GatewayError::Internal(e.to_string()))??;
    Ok(Json(report))
}
