//! `/v1/policies`: data policies (row filters, masks, denies), versioned and audited.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hotgate_policy::DataPolicy;

use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

use super::call::{Caller, RawBody, admin, admin_with, json_body};

pub(super) async fn list_policies(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    admin(&state, &caller, "list_policies", None).await?;
    Ok(Json(state.governance.policies().as_ref().clone()))
}

pub(super) async fn get_policy(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    admin(&state, &caller, "get_policy", None).await?;
    let set = state.governance.policies();
    let policy = set
        .get(&id)
        .cloned()
        .ok_or_else(|| GatewayError::NotFound(format!("no policy {id:?}")))?;
    Ok(Json(policy))
}

pub(super) async fn create_policy(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let written = write_policy(&state, &caller, "create_policy", &body, None).await?;
    Ok((StatusCode::CREATED, Json(written)))
}

pub(super) async fn replace_policy(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let written = write_policy(&state, &caller, "replace_policy", &body, Some(&id)).await?;
    Ok(Json(written))
}

/// Creates the body's policy, or replaces policy `replacing` with it. The call is
/// authorized before the body is parsed, so a caller without the grant learns nothing
/// from a parse error. Answers with the new set's version, the policy as stored, and
/// warnings about the roles it names.
async fn write_policy(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    body: &RawBody,
    replacing: Option<&str>,
) -> Result<serde_json::Value> {
    let (principal, policy) = admin_with(state, caller, action, body.as_deref().ok(), || {
        json_body::<DataPolicy>(body)
    })
    .await?;
    let id = match replacing {
        Some(id) if state.governance.policies().get(id).is_none() => {
            return Err(GatewayError::NotFound(format!("no policy {id:?}")));
        }
        Some(id) => id.to_owned(),
        None => policy.id.clone(),
    };
    let warnings = unknown_role_warnings(state, &policy);
    let set = state
        .governance
        .change_policies(&state.store, |s| match replacing {
            Some(id) => s.with_replaced(id, policy),
            None => s.with_created(policy),
        })
        .await?;
    tracing::info!(principal = %principal.name, policy = %id, version = set.version, action, "policy written");
    Ok(serde_json::json!({
        "policy_set_version": set.version,
        "policy": set.get(&id),
        "warnings": warnings,
    }))
}

/// Catalog roles a policy names that the grant mirror does not know: the policy is
/// accepted (roles may be created later) but targets nobody through them, so say so.
fn unknown_role_warnings(state: &GatewayState, policy: &DataPolicy) -> Vec<String> {
    let mirror = state.governance.mirror();
    let known: std::collections::HashSet<&str> = mirror
        .document()
        .catalogs
        .iter()
        .filter(|c| c.name == mirror.catalog())
        .flat_map(|c| c.catalog_roles.iter().map(|r| r.name.as_str()))
        .collect();
    policy
        .to
        .iter()
        .chain(&policy.except)
        .filter(|r| r.as_str() != "*" && !known.contains(r.as_str()))
        .map(|r| {
            format!(
                "catalog role {r:?} is not in the grant mirror (version {})",
                mirror.version()
            )
        })
        .collect()
}

pub(super) async fn delete_policy(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &caller, "delete_policy", Some(id.as_bytes())).await?;
    if state.governance.policies().get(&id).is_none() {
        return Err(GatewayError::NotFound(format!("no policy {id:?}")));
    }
    let set = state
        .governance
        .change_policies(&state.store, |s| s.without(&id))
        .await?;
    tracing::info!(principal = %principal.name, policy = %id, version = set.version, "policy deleted");
    Ok(Json(serde_json::json!({"policy_set_version": set.version})))
}
