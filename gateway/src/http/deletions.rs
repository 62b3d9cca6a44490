//! `/v1/deletions`: filing a compliance deletion request and reading its status.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hotgate_policy::{Privilege, Resource};
use hotgate_store::TableName;

use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

use super::call::{Caller, RawBody, audited, json_body};

/// `POST /v1/deletions`: files a compliance deletion request. Needs
/// `CATALOG_MANAGE_CONTENT` on every table it targets. A bad request is a 400 that
/// deletes nothing; an accepted one is durable and suppressing before the 202.
pub(super) async fn create_deletion(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    raw: RawBody,
) -> Result<impl IntoResponse> {
    let defs: Vec<_> = state.store.tables().iter().map(|t| t.def()).collect();
    let mut checked = None;
    let (principal, mut audit) = audited(&state, &caller, "create_deletion", |principal| {
        let manage = |resource: &Resource| {
            state
                .governance
                .authorize(principal, Privilege::CatalogManageContent, resource)
        };
        // Authorized before the body is judged: on each table a list names, or on the
        // catalog when the body names none it can be checked against.
        let named: Option<Vec<TableName>> = raw
            .as_deref()
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| {
                v.get("tables")?
                    .as_array()?
                    .iter()
                    .map(|t| TableName::parse(t.as_str()?).ok())
                    .collect()
            });
        match named {
            Some(tables) if !tables.is_empty() => {
                for t in &tables {
                    manage(&crate::governance::table_resource(t))?;
                }
            }
            _ => manage(&Resource::Catalog)?,
        }
        let body: crate::deletion::DeletionBody = json_body(&raw)?;
        let targets = crate::deletion::plan_targets(&body, &defs)?;
        for target in &targets {
            manage(&crate::governance::table_resource(&TableName::parse(
                &target.table,
            )?))?;
        }
        checked = Some((body, targets));
        Ok(())
    })
    .await?;
    let (body, targets) =
        checked.ok_or_else(|| GatewayError::Internal("the checked body is gone".into()))?;
    // The audit keeps a digest of the body only: it holds the subject's values.
    audit.set_request(&serde_json::to_vec(&serde_json::json!({
        "predicate": body.predicate, "subject_value": body.subject_value, "subject": body.subject
    })).unwrap_or_default());
    audit.allow_once().await?;
    let subject_hmac = state
        .governance
        .hash_key()
        .hmac_hex(body.subject.as_bytes());
    let key = state.governance.hash_key();
    let blocks = crate::deletion::ingest_blocks(&targets, &defs, |v| key.hmac_hex(v));
    let record = state.deletions.accept(
        targets,
        subject_hmac,
        blocks,
        body.reason.clone(),
        principal.name.clone(),
        &defs,
    )?;
    crate::deletion::audit_step(
        &state.audit,
        &record,
        "deletion_accepted",
        None,
        None,
        format!(
            "deletion request {} accepted; its rows are suppressed",
            record.id
        ),
    )
    .await?;
    tracing::info!(id = %record.id, principal = %principal.name, "deletion request accepted");
    Ok((StatusCode::ACCEPTED, Json(record)))
}

/// `GET /v1/deletions/{id}`: a request's state, history and targets. Needs
/// `CATALOG_MANAGE_CONTENT` on the catalog.
pub(super) async fn get_deletion(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (_, audit) = audited(&state, &caller, "get_deletion", |principal| {
        state.governance.authorize(
            principal,
            Privilege::CatalogManageContent,
            &Resource::Catalog,
        )
    })
    .await?;
    audit.allow_once().await?;
    state
        .deletions
        .get(&id)
        .map(Json)
        .ok_or_else(|| GatewayError::NotFound(format!("deletion request {id} does not exist")))
}
