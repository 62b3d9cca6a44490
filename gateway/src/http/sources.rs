//! `GET /v1/sources/{name}`: a source's state, and per partition its position, lag,
//! rates and errors. Needs `TABLE_WRITE_DATA` on the source's table.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use hotgate_policy::Privilege;

use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

use super::call::{Caller, table_call};

pub(super) async fn get_source(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    // An unknown source and one on a table the caller may not write look the same.
    let not_found = || GatewayError::NotFound(format!("no source {name:?} that you may manage"));
    let status = state.sources.status(&name).ok_or_else(not_found)?;
    table_call(
        &state,
        &caller,
        "source status",
        &status.table,
        Privilege::TableWriteData,
    )
    .await
    .map_err(|e| match e {
        GatewayError::PermissionDenied(_) => not_found(),
        other => other,
    })?;
    Ok(Json(status))
}
