//! `/v1/tables`: creating, listing and describing tables (each reader sees the columns of
//! their view only), adding columns, and a table's effective access.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hotgate_policy::{Principal, Privilege, Resource};
use hotgate_store::table_def::SYSTEM_NAMESPACE;
use hotgate_store::{HotTable, TableName, TableSpec};

use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

use super::call::{
    Caller, RawBody, admin_with, audited, body_bytes, json_body, table_call, table_call_with,
};

/// What of a table's metadata a caller may see: a table's description goes through the
/// caller's view as its rows do.
#[derive(Debug)]
pub(super) struct Visibility {
    /// The columns shown; `None` shows all.
    columns: Option<std::collections::HashSet<String>>,
    /// Whole-table counts: rows, bytes, offsets, files.
    pub(super) counts: bool,
}

impl Visibility {
    fn full() -> Self {
        Self {
            columns: None,
            counts: true,
        }
    }

    /// Who manages a table (`TABLE_WRITE_PROPERTIES`, or `CATALOG_MANAGE_CONTENT`,
    /// which implies it) sees all of its definition and counts. Anyone else sees the
    /// columns of their secure view (none if it cannot be compiled: fail closed), and
    /// counts only if they may read the whole table: read access with no row filter.
    pub(super) fn of(state: &GatewayState, principal: &Principal, table: &HotTable) -> Self {
        let governance = &state.governance;
        let def = table.def();
        let name = def.name();
        let manages = [
            Privilege::TableWriteProperties,
            Privilege::CatalogManageContent,
        ]
        .into_iter()
        .any(|p| governance.authorize_table(principal, p, name).is_ok());
        if manages {
            return Self::full();
        }
        let view = governance.view(principal, table).ok();
        let reads_all = governance
            .authorize_table(principal, Privilege::TableReadData, name)
            .is_ok()
            && view.as_ref().is_some_and(|v| v.row_filter().is_none());
        Self {
            columns: Some(
                view.iter()
                    .flat_map(|v| v.schema().fields().iter().map(|f| f.name().clone()))
                    .collect(),
            ),
            counts: reads_all,
        }
    }

    fn shows(&self, column: &str) -> bool {
        self.columns.as_ref().is_none_or(|c| c.contains(column))
    }
}

fn describe(table: &HotTable, visible: &Visibility) -> serde_json::Value {
    let def = table.def();
    let mut definition = serde_json::to_value(def.spec()).unwrap_or_default();
    if visible.columns.is_some() {
        // Hidden columns are left out, and fields naming one are blanked.
        if let Some(columns) = definition["columns"].as_array_mut() {
            columns.retain(|c| c["name"].as_str().is_some_and(|n| visible.shows(n)));
        }
        for field in ["bucket_key", "time_column"] {
            if definition[field]
                .as_str()
                .is_some_and(|n| !visible.shows(n))
            {
                definition[field] = serde_json::Value::Null;
            }
        }
        if let Some(keys) = definition["primary_key"].as_array_mut() {
            for key in keys {
                if key.as_str().is_some_and(|n| !visible.shows(n)) {
                    *key = serde_json::Value::Null;
                }
            }
        }
    }
    let mut described = serde_json::json!({
        "id": def.name().to_string(),
        "definition": definition,
        "kind": match def.kind() {
            hotgate_store::TableKind::Log => "log",
            hotgate_store::TableKind::PrimaryKey { .. } => "primary_key",
        },
    });
    if visible.counts {
        let offsets: serde_json::Map<String, serde_json::Value> = table
            .end_offsets()
            .into_iter()
            .map(|(log, end)| (log.to_string(), end.into()))
            .collect();
        described["end_offsets"] = offsets.into();
    } else {
        described["counts_withheld"] = true.into();
    }
    described
}

pub(super) async fn create_table(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let mut checked = None;
    let (principal, mut audit) = audited(&state, &caller, "create_table", |principal| {
        // Authorized first, on the namespace the body names if it names one (on the
        // catalog otherwise), then decoded.
        let namespace = body
            .as_deref()
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| v.get("namespace")?.as_str().map(str::to_owned));
        // The reserved namespace is public knowledge: refusing it by name tells nobody
        // anything, and is clearer than a missing grant.
        if namespace.as_deref() == Some(SYSTEM_NAMESPACE) {
            return Err(GatewayError::PermissionDenied(format!(
                "namespace {SYSTEM_NAMESPACE} is reserved for hotgate's own tables: nobody creates tables in it"
            )));
        }
        let resource = match &namespace {
            Some(ns) => Resource::Namespace(ns.split('.').map(str::to_owned).collect()),
            None => Resource::Catalog,
        };
        state
            .governance
            .authorize(principal, Privilege::TableCreate, &resource)?;
        let spec: TableSpec = json_body(&body)?;
        let parsed = TableName::parse(&format!("{}.{}", spec.namespace, spec.name))?;
        if parsed.is_system() {
            return Err(GatewayError::PermissionDenied(format!(
                "namespace {SYSTEM_NAMESPACE} is reserved for hotgate's own tables: nobody creates tables in it"
            )));
        }
        // A definition that cannot be a table (a column declared twice, an unknown
        // bucket key) is refused here, on record, before anything is created.
        hotgate_store::TableDef::new(spec.clone())?;
        checked = Some((parsed, spec));
        Ok(())
    })
    .await?;
    let (name, spec) =
        checked.ok_or_else(|| GatewayError::Internal("the checked body is gone".into()))?;
    audit.set_table(&name);
    audit.set_request(body_bytes(&body)?);
    audit.allow_once().await?;
    // The Iceberg table first: a refusal by the catalog (a table there that differs, a
    // bad credential) leaves no hot table behind, and a retry of the same definition
    // reuses an Iceberg table created before. A catalog that cannot be reached does not
    // keep the hot tier from taking the table: the scheduler creates the Iceberg table
    // once the catalog answers, and tiers nothing before.
    let def = hotgate_store::TableDef::new(spec.clone())?;
    let mut pending = None;
    if def.tiering().enabled {
        match state.tierer.prepare_table(&def).await {
            Ok(()) => {}
            Err(e) if e.kind() == hotgate_tiering::ErrorKind::Unavailable => {
                tracing::warn!(table = %name, "the catalog is unreachable; the Iceberg table is created when it answers: {e}");
                pending = Some(e.to_string());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let table = state.store.create_table(spec).await?;
    if pending.is_none()
        && let Err(e) = state.tierer.ensure_table(&table).await
    {
        // The scheduler tries again, with the error in the table's tiering status;
        // until then no cycle runs and no source writes the table.
        tracing::warn!(table = %name, "cannot open the Iceberg table: {e}");
        pending = Some(e.to_string());
    }
    tracing::info!(table = %name, principal = %principal.name, "table created");
    let mut body = describe(&table, &Visibility::full());
    if let Some(reason) = pending {
        body["cold_table_pending"] = reason.into();
    }
    Ok((StatusCode::CREATED, Json(body)))
}

pub(super) async fn list_tables(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    let (principal, audit) = audited(&state, &caller, "list_tables", |_| Ok(())).await?;
    audit.allow_once().await?;
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
        .map(|t| describe(t, &Visibility::of(&state, &principal, t)))
        .collect();
    Ok(Json(serde_json::json!({"tables": tables})))
}

pub(super) async fn get_table(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (table, principal) =
        table_call(&state, &caller, "describe_table", &id, Privilege::TableList).await?;
    // Lets a test make a handler meet a bug (`FAILPOINTS=describe-table=panic`).
    fail::fail_point!("describe-table");
    Ok(Json(describe(
        &table,
        &Visibility::of(&state, &principal, &table),
    )))
}

/// The body of `POST /v1/tables/{id}/columns`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AddColumnsBody {
    columns: Vec<hotgate_store::ColumnSpec>,
}

/// `POST /v1/tables/{id}/columns`: adds nullable columns to a table, in the hot
/// table and its Iceberg table in one step, or in neither. Needs
/// `TABLE_WRITE_PROPERTIES` on the table.
///
/// The Iceberg schema commits first and the hot definition (`table.json`) second; the
/// hot definition is the commit point. If the second step fails, the Iceberg schema is
/// set back; if the process dies between the two, the start-up check
/// ([`hotgate_tiering::Tierer::ensure_table`]) sets it back.
pub(super) async fn add_columns(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let (table, _, body) = table_call_with(
        &state,
        &caller,
        "add_columns",
        &id,
        Privilege::TableWriteProperties,
        body.as_deref().ok(),
        || json_body::<AddColumnsBody>(&body),
    )
    .await?;
    let _one_change = state.schema_changes.lock().await;
    let base = table.def();
    let name = base.name();
    let tiered = base.tiering().enabled;
    let first_field_id = if tiered {
        if !state.tierer.is_ready(name) {
            state.tierer.ensure_table(&table).await?;
        }
        state.tierer.last_column_id(name).await? + 1
    } else {
        1
    };
    let next = base.with_added_columns(body.columns, first_field_id)?;
    if tiered {
        state.tierer.sync_schema(&next).await?;
    }
    let hot = add_columns_hot(&state, &base, next).await;
    if let Err(e) = hot {
        if tiered && let Err(undo) = state.tierer.sync_schema(&base).await {
            tracing::error!(table = %name, error = %undo, "cannot set the Iceberg schema back; the next start will");
        }
        return Err(e);
    }
    tracing::info!(table = %name, "columns added");
    Ok(Json(describe(&table, &Visibility::full())))
}

/// The second step of [`add_columns`]: the hot definition.
pub(super) async fn add_columns_hot(
    state: &GatewayState,
    base: &hotgate_store::TableDef,
    next: hotgate_store::TableDef,
) -> Result<()> {
    fail::fail_point!("add-columns-before-hot", |_| Err(
        GatewayError::Unavailable("fail point add-columns-before-hot".into())
    ));
    state.store.add_columns(base, next).await?;
    Ok(())
}

/// `GET /v1/tables/{id}/access`: every catalog role that can read or write the table,
/// through which grants, and the row filters, masks and denies its reads go through;
/// `unfiltered_readers` names the roles that read every row. Needs
/// `CATALOG_MANAGE_ACCESS` on the catalog.
pub(super) async fn table_access(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (_, name) = admin_with(&state, &caller, "table_access", None, || {
        Ok(TableName::parse(&id)?)
    })
    .await?;
    let table = state.store.table(&name)?;
    Ok(Json(state.governance.access_report(&table)))
}
