//! The cold tier of a table: `POST /v1/tables/{id}/tier` and `/maintenance`, and
//! `GET /v1/tables/{id}/tiering` and `/boundary`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use hotgate_policy::Privilege;

use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

use super::call::{Caller, RawBody, body_bytes, json_body, table_call, table_call_with};
use super::tables::Visibility;

/// `POST /v1/tables/{id}/tier`: one tiering cycle now, whatever the cadence. Needs
/// `CATALOG_MANAGE_CONTENT` (or a grant implying it) on the table.
pub(super) async fn tier_table(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (table, _) = table_call(
        &state,
        &caller,
        "tier",
        &id,
        Privilege::CatalogManageContent,
    )
    .await?;
    if !state.tierer.is_ready(table.def().name()) {
        state.tierer.ensure_table(&table).await?;
    }
    let now = chrono::Utc::now().timestamp_micros();
    let report = state.tierer.cycle(&table, now, true).await?;
    Ok(Json(report))
}

/// The optional body of `POST /v1/tables/{id}/maintenance`; absent fields take the
/// configured defaults.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MaintenanceBody {
    compact: Option<bool>,
    snapshot_retention: Option<String>,
    retain_last: Option<usize>,
    purge_min_age: Option<String>,
}

fn duration_field(
    name: &str,
    value: &Option<String>,
    default: std::time::Duration,
) -> Result<std::time::Duration> {
    match value {
        None => Ok(default),
        Some(text) => humantime::parse_duration(text).map_err(|e| {
            GatewayError::InvalidArgument(format!("{name}: {text:?} is not a duration ({e})"))
        }),
    }
}

/// `POST /v1/tables/{id}/maintenance`: compaction, snapshot expiry and the purge, now.
/// Needs `CATALOG_MANAGE_CONTENT` on the table.
pub(super) async fn maintain_table(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let defaults = state.maintenance.clone();
    let (table, _, options) = table_call_with(
        &state,
        &caller,
        "maintenance",
        &id,
        Privilege::CatalogManageContent,
        body.as_deref().ok(),
        || {
            // No body (or only whitespace) takes every default.
            let body: MaintenanceBody = if body_bytes(&body)?.iter().all(u8::is_ascii_whitespace) {
                MaintenanceBody::default()
            } else {
                json_body(&body)?
            };
            let options = hotgate_tiering::MaintenanceOptions {
                compact: body.compact.unwrap_or(defaults.compact),
                snapshot_retention: duration_field(
                    "snapshot_retention",
                    &body.snapshot_retention,
                    defaults.snapshot_retention,
                )?,
                retain_last: body.retain_last.unwrap_or(defaults.retain_last),
                read_wait: defaults.read_wait,
                purge_min_age: duration_field(
                    "purge_min_age",
                    &body.purge_min_age,
                    defaults.purge_min_age,
                )?,
            };
            if options.retain_last == 0 {
                return Err(GatewayError::InvalidArgument(
                    "retain_last must be at least 1".into(),
                ));
            }
            Ok(options)
        },
    )
    .await?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let report = state
        .tierer
        .maintain(&table.def(), now_ms, &options)
        .await?;
    Ok(Json(report))
}

/// `GET /v1/tables/{id}/tiering`: watermarks, live files and bytes, the size histogram,
/// the current snapshot, the catalog kind, the commits' outcomes and the last error.
/// Needs `TABLE_LIST` on the table.
pub(super) async fn tiering_status(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (table, principal) =
        table_call(&state, &caller, "tiering_status", &id, Privilege::TableList).await?;
    // Answers even when the catalog is down: the error is part of the status.
    let status = state.tierer.status(&table.def()).await;
    let mut status = serde_json::to_value(&status)
        .map_err(|e| GatewayError::Internal(format!("tiering status: {e}")))?;
    if !Visibility::of(&state, &principal, &table).counts {
        // Whole-table counts would tell a row-filtered reader what the filter hides.
        for field in [
            "watermarks",
            "files",
            "bytes",
            "records",
            "size_histogram",
            "oldest_day",
            "last_cold_retention",
            "last_cold_retention_ms",
        ] {
            status[field] = serde_json::Value::Null;
        }
        status["counts_withheld"] = true.into();
    }
    Ok(Json(status))
}

/// `GET /v1/tables/{id}/boundary`: reads since start by the tiers they touched
/// (`hot_only`, `cold_only`, `spanning`) and by requested time range, with the hot
/// window that would have served 95% of time-bounded reads. Needs `TABLE_LIST`.
pub(super) async fn tier_boundary(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (table, _) =
        table_call(&state, &caller, "tier_boundary", &id, Privilege::TableList).await?;
    let counts = state.boundary.counts(table.def().name());
    let mut body = serde_json::to_value(&counts)
        .map_err(|e| GatewayError::Internal(format!("boundary counts: {e}")))?;
    body["suggested_hot_window"] = counts.suggested_hot_window().into();
    body["hot_retention"] = humantime::format_duration(table.def().hot_retention())
        .to_string()
        .into();
    Ok(Json(body))
}
