//! `GET /healthz` and `GET /metrics`: unauthenticated, and they show no data.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::state::GatewayState;

pub(super) async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

pub(super) async fn metrics(State(state): State<Arc<GatewayState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(
            &state.store,
            &state.deletions,
            state.tierer.catalog(),
            &state.sources.statuses(),
        ),
    )
}
