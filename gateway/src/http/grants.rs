//! `/v1/grants`: the mirror of the catalog's grants, its sync and its drift.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;

use crate::error::Result;
use crate::state::GatewayState;

use super::call::{Caller, admin};

pub(super) async fn get_grants(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    admin(&state, &caller, "get_grants", None).await?;
    let mirror = state.governance.mirror();
    Ok(Json(serde_json::json!({
        "status": state.governance.status(),
        "catalog": mirror.catalog(),
        "document": mirror.document(),
    })))
}

pub(super) async fn sync_grants(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &caller, "sync_grants", None).await?;
    let report = state.governance.sync().await?;
    tracing::info!(principal = %principal.name, version = report.version, changed = report.changed, "grants synced on request");
    Ok(Json(report))
}

pub(super) async fn grants_drift(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    admin(&state, &caller, "grants_drift", None).await?;
    let drift = state.governance.drift().await?;
    Ok(Json(serde_json::json!({
        "mirror_version": state.governance.mirror().version(),
        "in_sync": drift.is_empty(),
        "differences": drift,
    })))
}
