//! The HTTP API (axum): health, metrics and table administration.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use hotgate_policy::Principal;
use hotgate_store::{HotTable, TableName, TableSpec};

use crate::auth::Privilege;
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/tables", get(list_tables).post(create_table))
        .route("/v1/tables/{id}", get(get_table))
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
    state
        .authz
        .authorize(&principal, Privilege::TableCreate, Some(&name))?;
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
                .authz
                .authorize(&principal, Privilege::TableList, Some(t.def().name()))
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
        .authz
        .authorize(&principal, Privilege::TableList, Some(&name))?;
    let table = state.store.table(&name)?;
    Ok(Json(describe(&table)))
}
