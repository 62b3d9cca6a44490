//! The HTTP API (axum): health, metrics, tables, the grant mirror and data policies.
//!
//! Every route but `/healthz` and `/metrics` authenticates the caller; admin routes need
//! `CATALOG_MANAGE_ACCESS` on the catalog.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use hotgate_policy::{DataPolicy, Principal, Privilege, Resource};
use hotgate_store::{HotTable, TableName, TableSpec};

use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/tables", get(list_tables).post(create_table))
        .route("/v1/tables/{id}", get(get_table))
        .route("/v1/grants", get(get_grants))
        .route("/v1/grants/sync", post(sync_grants))
        .route("/v1/grants/drift", get(grants_drift))
        .route("/v1/policies", get(list_policies).post(create_policy))
        .route(
            "/v1/policies/{id}",
            get(get_policy).put(replace_policy).delete(delete_policy),
        )
        .with_state(state)
}

fn principal(state: &GatewayState, headers: &HeaderMap) -> Result<Principal> {
    let value = headers
        .get(header::AUTHORIZATION)
        .map(|v| {
            v.to_str().map_err(|_| {
                GatewayError::Unauthenticated("authorization header is not text".into())
            })
        })
        .transpose()?;
    state.authn.authenticate(value)
}

async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&state.store),
    )
}

fn describe(table: &HotTable) -> serde_json::Value {
    let offsets: serde_json::Map<String, serde_json::Value> = table
        .end_offsets()
        .into_iter()
        .map(|(log, end)| (log.to_string(), end.into()))
        .collect();
    serde_json::json!({
        "id": table.def().name().to_string(),
        "definition": table.def().spec(),
        "kind": match table.def().kind() {
            hotgate_store::TableKind::Log => "log",
            hotgate_store::TableKind::PrimaryKey { .. } => "primary_key",
        },
        "end_offsets": offsets,
    })
}

async fn create_table(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: std::result::Result<Json<TableSpec>, JsonRejection>,
) -> Result<impl IntoResponse> {
    let principal = principal(&state, &headers)?;
    let Json(spec) = body.map_err(|e| GatewayError::InvalidArgument(e.body_text()))?;
    let name = TableName::parse(&format!("{}.{}", spec.namespace, spec.name))?;
    if name.is_system() {
        return Err(GatewayError::InvalidArgument(format!(
            "namespace {}: the _system namespace is reserved for hotgate's own tables",
            spec.namespace
        )));
    }
    state.governance.authorize(
        &principal,
        Privilege::TableCreate,
        &Resource::Namespace(vec![name.namespace().to_owned()]),
    )?;
    let table = state.store.create_table(spec).await?;
    tracing::info!(table = %name, principal = %principal.name, "table created");
    Ok((StatusCode::CREATED, Json(describe(&table))))
}

async fn list_tables(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    let principal = principal(&state, &headers)?;
    let tables: Vec<serde_json::Value> = state
        .store
        .tables()
        .iter()
        .filter(|t| {
            state
                .governance
                .authorize_table(&principal, Privilege::TableList, t.def().name())
                .is_ok()
        })
        .map(|t| describe(t))
        .collect();
    Ok(Json(serde_json::json!({"tables": tables})))
}

async fn get_table(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let principal = principal(&state, &headers)?;
    let name = TableName::parse(&id)?;
    state
        .governance
        .authorize_table(&principal, Privilege::TableList, &name)?;
    let table = state.store.table(&name)?;
    Ok(Json(describe(&table)))
}

/// Authenticates and checks `CATALOG_MANAGE_ACCESS` on the catalog.
fn admin(state: &GatewayState, headers: &HeaderMap) -> Result<Principal> {
    let principal = principal(state, headers)?;
    state.governance.authorize(
        &principal,
        Privilege::CatalogManageAccess,
        &Resource::Catalog,
    )?;
    Ok(principal)
}

async fn get_grants(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    admin(&state, &headers)?;
    let mirror = state.governance.mirror();
    Ok(Json(serde_json::json!({
        "status": state.governance.status(),
        "catalog": mirror.catalog(),
        "document": mirror.document(),
    })))
}

async fn sync_grants(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &headers)?;
    let report = state.governance.sync().await?;
    tracing::info!(principal = %principal.name, version = report.version, changed = report.changed, "grants synced on request");
    Ok(Json(report))
}

async fn grants_drift(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    admin(&state, &headers)?;
    let drift = state.governance.drift().await?;
    Ok(Json(serde_json::json!({
        "mirror_version": state.governance.mirror().version(),
        "in_sync": drift.is_empty(),
        "differences": drift,
    })))
}

async fn list_policies(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
) -> Result<impl IntoResponse> {
    admin(&state, &headers)?;
    Ok(Json(state.governance.policies().as_ref().clone()))
}

async fn get_policy(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    admin(&state, &headers)?;
    let set = state.governance.policies();
    let policy = set
        .get(&id)
        .cloned()
        .ok_or_else(|| GatewayError::NotFound(format!("no policy {id:?}")))?;
    Ok(Json(policy))
}

fn policy_body(body: std::result::Result<Json<DataPolicy>, JsonRejection>) -> Result<DataPolicy> {
    body.map(|Json(p)| p)
        .map_err(|e| GatewayError::InvalidArgument(e.body_text()))
}

async fn create_policy(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    body: std::result::Result<Json<DataPolicy>, JsonRejection>,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &headers)?;
    let policy = policy_body(body)?;
    let id = policy.id.clone();
    let warnings = unknown_role_warnings(&state, &policy);
    let set = state
        .governance
        .change_policies(&state.store, |s| s.with_created(policy))
        .await?;
    tracing::info!(principal = %principal.name, policy = %id, version = set.version, "policy created");
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({
            "policy_set_version": set.version,
            "policy": set.get(&id),
            "warnings": warnings,
        })),
    ))
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

async fn replace_policy(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: std::result::Result<Json<DataPolicy>, JsonRejection>,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &headers)?;
    let policy = policy_body(body)?;
    if state.governance.policies().get(&id).is_none() {
        return Err(GatewayError::NotFound(format!("no policy {id:?}")));
    }
    let warnings = unknown_role_warnings(&state, &policy);
    let set = state
        .governance
        .change_policies(&state.store, |s| s.with_replaced(&id, policy))
        .await?;
    tracing::info!(principal = %principal.name, policy = %id, version = set.version, "policy replaced");
    Ok(Json(serde_json::json!({
        "policy_set_version": set.version,
        "policy": set.get(&id),
        "warnings": warnings,
    })))
}

async fn delete_policy(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &headers)?;
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
