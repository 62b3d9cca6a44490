//! `/v1/sources`: creating, listing, describing, pausing, resuming and deleting Kafka
//! sources. Each needs `TABLE_WRITE_DATA` on the source's table; a source on a table
//! the caller may not write looks the same as no source.
//!
//! A source's view is its state (per partition its position, lag, counts and errors)
//! and its settings.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hotgate_policy::Privilege;
use hotgate_store::TableName;

use crate::error::{GatewayError, Result};
use crate::sources::{SourceConfig, SourceView};
use crate::state::GatewayState;

use super::call::{Caller, RawBody, audited, body_bytes, json_body};

pub(super) async fn list_sources(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    let (principal, audit) = audited(&state, &caller, "list_sources", |_| Ok(())).await?;
    audit.allow_once().await?;
    let sources: Vec<SourceView> = state
        .sources
        .views()
        .into_iter()
        .filter(|v| {
            TableName::parse(&v.settings.table).is_ok_and(|t| {
                state
                    .governance
                    .authorize_table(&principal, Privilege::TableWriteData, &t)
                    .is_ok()
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "sources": sources })))
}

pub(super) async fn create_source(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let mut checked = None;
    let (principal, mut audit) = audited(&state, &caller, "create_source", |principal| {
        // Authorized first, on the table the body names, then decoded: a caller who may
        // not write the table learns nothing from how the rest was judged.
        let table = body
            .as_deref()
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| v.get("table")?.as_str().map(str::to_owned))
            .ok_or_else(|| {
                GatewayError::InvalidArgument(
                    "request body: a JSON object with a string `table` (namespace.table)".into(),
                )
            })?;
        let table = TableName::parse(&table)?;
        state
            .governance
            .authorize_table(principal, Privilege::TableWriteData, &table)?;
        let config: SourceConfig = json_body(&body)?;
        if config.avro_schema_file.is_some() {
            // A path names a file on the server: the API takes the schema inline.
            return Err(GatewayError::InvalidArgument(
                "avro_schema_file is for the config file; send the writer schema inline as \
                 avro_schema"
                    .into(),
            ));
        }
        config.validate().map_err(GatewayError::InvalidArgument)?;
        checked = Some((table, config));
        Ok(())
    })
    .await?;
    let (table, config) =
        checked.ok_or_else(|| GatewayError::Internal("the checked body is gone".into()))?;
    audit.set_table(&table);
    audit.set_request(body_bytes(&body)?);
    audit.allow_once().await?;
    let name = config.name.clone();
    let view = state.sources.create(&state, config).await?;
    tracing::info!(principal = %principal.name, source = %name, "source created through the API");
    Ok((StatusCode::CREATED, Json(view)))
}

pub(super) async fn get_source(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    Ok(Json(
        source_call(&state, &caller, "source status", &name).await?,
    ))
}

pub(super) async fn delete_source(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    source_call(&state, &caller, "delete_source", &name).await?;
    state.sources.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn pause_source(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    source_call(&state, &caller, "pause_source", &name).await?;
    Ok(Json(state.sources.pause(&name).await?))
}

pub(super) async fn resume_source(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<impl IntoResponse> {
    source_call(&state, &caller, "resume_source", &name).await?;
    Ok(Json(state.sources.resume(&state, &name).await?))
}

/// Authenticates, checks `TABLE_WRITE_DATA` on the table of source `name` and records
/// the call; returns the source as it was. The record of a refusal keeps its real
/// reason; the caller gets "no source" for an unknown source and for one they may not
/// manage alike.
async fn source_call(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    name: &str,
) -> Result<SourceView> {
    let not_found = || GatewayError::NotFound(format!("no source {name:?} that you may manage"));
    let view = state.sources.view(name);
    let mut table = None;
    let (_, mut audit) = audited(state, caller, action, |principal| {
        let view = view.as_ref().ok_or_else(not_found)?;
        let name = TableName::parse(&view.settings.table)?;
        state
            .governance
            .authorize_table(principal, Privilege::TableWriteData, &name)?;
        table = Some(name);
        Ok(())
    })
    .await
    .map_err(|e| match e {
        GatewayError::PermissionDenied(_) => not_found(),
        other => other,
    })?;
    let (Some(view), Some(table)) = (view, table) else {
        return Err(GatewayError::Internal("the checked source is gone".into()));
    };
    audit.set_table(&table);
    audit.set_reason(format!("source {name}"));
    audit.allow_once().await?;
    Ok(view)
}
