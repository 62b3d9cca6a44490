//! The HTTP API (axum): health, metrics, tables, the grant mirror, data policies and
//! the audit log.
//!
//! Every route but `/healthz` and `/metrics` authenticates the caller and is one audit
//! record, written (and synced) before the call changes or returns anything. Admin
//! routes need `CATALOG_MANAGE_ACCESS` on the catalog; audit routes need
//! `TABLE_READ_DATA` on `_system.audit`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use hotgate_policy::{DataPolicy, Principal, Privilege, Resource};
use hotgate_store::table::SYSTEM_NAMESPACE;
use hotgate_store::{HotTable, TableName, TableSpec};

use crate::audit::query::{AuditQuery, query as query_audit};
use crate::audit::{CallAudit, audit_table_name, verify_audit_log};
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/tables", get(list_tables).post(create_table))
        .route("/v1/tables/{id}", get(get_table))
        .route("/v1/tables/{id}/columns", post(add_columns))
        .route("/v1/tables/{id}/tier", post(tier_table))
        .route("/v1/tables/{id}/tiering", get(tiering_status))
        .route("/v1/tables/{id}/boundary", get(tier_boundary))
        .route("/v1/tables/{id}/maintenance", post(maintain_table))
        .route("/v1/tables/{id}/access", get(table_access))
        .route("/v1/deletions", post(create_deletion))
        .route("/v1/deletions/{id}", get(get_deletion))
        .route("/v1/grants", get(get_grants))
        .route("/v1/grants/sync", post(sync_grants))
        .route("/v1/grants/drift", get(grants_drift))
        .route("/v1/policies", get(list_policies).post(create_policy))
        .route(
            "/v1/policies/{id}",
            get(get_policy).put(replace_policy).delete(delete_policy),
        )
        .route("/v1/audit", get(audit_records))
        .route("/v1/audit/verify", get(audit_verify))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            catch_panics,
        ))
        .with_state(state)
}

/// A handler that panics fails its own call with a 500, recorded as a denial of the
/// route by whoever called it, instead of dropping the connection unrecorded.
async fn catch_panics(
    State(state): State<Arc<GatewayState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use futures::FutureExt;
    let addr = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(
            || request.uri().path().to_owned(),
            |p| p.as_str().to_owned(),
        );
    let action = format!("{} {route}", request.method());
    let headers = request.headers().clone();
    match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(panic) => {
            let e = crate::error::panicked(panic.as_ref());
            let audit = match principal(&state, &headers) {
                Ok(p) => CallAudit::new(&state.audit, &state.governance, &p, addr, &action),
                Err(_) => CallAudit::anonymous(&state.audit, addr, AUTHENTICATE),
            };
            audit.deny(&e).await;
            e.into_response()
        }
    }
}

/// Who is calling, from where.
struct Caller {
    addr: Option<SocketAddr>,
    headers: HeaderMap,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        Ok(Caller {
            addr: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
            headers: parts.headers.clone(),
        })
    }
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

/// The action of the record of a call that did not authenticate.
const AUTHENTICATE: &str = "authenticate";

/// A JSON request body, decoded only once the caller is authorized for the route: a
/// caller without rights learns nothing from how its body was judged. The error quotes
/// serde's reason to the caller; the audit keeps only its kind.
/// Decodes a JSON body with axum's decoder, whose errors name the field's path
/// (`columns[0].type: unknown type ...`).
fn json_body<T: serde::de::DeserializeOwned>(body: &RawBody) -> Result<T> {
    Json::<T>::from_bytes(body_bytes(body)?)
        .map(|Json(v)| v)
        .map_err(|e| GatewayError::InvalidArgument(format!("request body: {}", e.body_text())))
}

/// A request body as it arrived. A body that could not be read (over the size limit,
/// cut off) is not refused by the extractor, unaudited, but by the handler once the
/// caller is authorized, on record like any bad body.
type RawBody = std::result::Result<Bytes, axum::extract::rejection::BytesRejection>;

fn body_bytes(body: &RawBody) -> Result<&[u8]> {
    body.as_deref()
        .map_err(|e| GatewayError::InvalidArgument(format!("request body: {}", e.body_text())))
}

/// Authenticates the caller and runs `check`, recording a denial if either fails.
/// Returns the principal and the call's audit, for the handler to complete.
async fn audited(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    check: impl FnOnce(&Principal) -> Result<()>,
) -> Result<(Principal, CallAudit)> {
    let principal = match principal(state, &caller.headers) {
        Ok(p) => p,
        Err(e) => {
            // As on Flight: a call that did not authenticate is recorded as such, whatever
            // route it tried.
            CallAudit::anonymous(&state.audit, caller.addr, AUTHENTICATE)
                .deny(&e)
                .await;
            return Err(e);
        }
    };
    let audit = CallAudit::new(
        &state.audit,
        &state.governance,
        &principal,
        caller.addr,
        action,
    );
    match check(&principal) {
        Ok(()) => Ok((principal, audit)),
        Err(e) => {
            audit.deny(&e).await;
            Err(e)
        }
    }
}

async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

async fn metrics(State(state): State<Arc<GatewayState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&state.store, &state.deletions),
    )
}

/// What of a table's metadata a caller may see: a table's description goes through the
/// caller's view as its rows do.
#[derive(Debug)]
struct Visibility {
    /// The columns shown; `None` shows all.
    columns: Option<std::collections::HashSet<String>>,
    /// Whole-table counts: rows, bytes, offsets, files.
    counts: bool,
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
    fn of(state: &GatewayState, principal: &Principal, table: &HotTable) -> Self {
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

async fn create_table(
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
    // The Iceberg table first: a catalog failure leaves no hot table behind, and a retry
    // of the same definition reuses an Iceberg table created before.
    let def = hotgate_store::TableDef::new(spec.clone())?;
    if def.tiering().enabled {
        state.tierer.ensure_table(&def).await?;
    }
    let table = state.store.create_table(spec).await?;
    tracing::info!(table = %name, principal = %principal.name, "table created");
    Ok((
        StatusCode::CREATED,
        Json(describe(&table, &Visibility::full())),
    ))
}

async fn list_tables(
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

async fn get_table(
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

/// Authenticates, checks `privilege` on table `id` and records the call; returns the
/// table and the caller.
async fn table_call(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    id: &str,
    privilege: Privilege,
) -> Result<(Arc<HotTable>, Principal)> {
    let (table, principal, ()) =
        table_call_with(state, caller, action, id, privilege, None, || Ok(())).await?;
    Ok((table, principal))
}

/// [`table_call`] with a request body: `decode` runs once the caller is authorized, and
/// its refusal is recorded as the call's denial; the body is kept as a digest.
async fn table_call_with<T>(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    id: &str,
    privilege: Privilege,
    body: Option<&[u8]>,
    decode: impl FnOnce() -> Result<T>,
) -> Result<(Arc<HotTable>, Principal, T)> {
    let mut checked = None;
    let (principal, mut audit) = audited(state, caller, action, |principal| {
        let parsed = TableName::parse(id)?;
        state
            .governance
            .authorize_table(principal, privilege, &parsed)?;
        checked = Some((parsed, decode()?));
        Ok(())
    })
    .await?;
    let (name, decoded) =
        checked.ok_or_else(|| GatewayError::Internal("the checked request is gone".into()))?;
    audit.set_table(&name);
    if let Some(body) = body {
        audit.set_request(body);
    }
    audit.allow_once().await?;
    Ok((state.store.table(&name)?, principal, decoded))
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
async fn add_columns(
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
            state.tierer.ensure_table(&base).await?;
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
async fn add_columns_hot(
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

/// `POST /v1/tables/{id}/tier`: one tiering cycle now, whatever the cadence. Needs
/// `CATALOG_MANAGE_CONTENT` (or a grant implying it) on the table.
async fn tier_table(
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
        state.tierer.ensure_table(&table.def()).await?;
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
async fn maintain_table(
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

/// `GET /v1/tables/{id}/tiering`: watermarks, live files and bytes, the size histogram
/// and the current snapshot. Needs `TABLE_LIST` on the table.
async fn tiering_status(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse> {
    let (table, principal) =
        table_call(&state, &caller, "tiering_status", &id, Privilege::TableList).await?;
    if !state.tierer.is_ready(table.def().name()) {
        state.tierer.ensure_table(&table.def()).await?;
    }
    let status = state.tierer.status(&table.def()).await?;
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
async fn tier_boundary(
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

/// `GET /v1/tables/{id}/access`: every catalog role that can read or write the table,
/// through which grants, and the row filters, masks and denies its reads go through;
/// `unfiltered_readers` names the roles that read every row. Needs
/// `CATALOG_MANAGE_ACCESS` on the catalog.
async fn table_access(
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

/// `POST /v1/deletions`: files a compliance deletion request. Needs
/// `CATALOG_MANAGE_CONTENT` on every table it targets. A bad request is a 400 that
/// deletes nothing; an accepted one is durable and suppressing before the 202.
async fn create_deletion(
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
    let record = state.deletions.accept(
        targets,
        subject_hmac,
        body.reason.clone(),
        principal.name.clone(),
        &defs,
    )?;
    crate::deletion::audit_step(
        &state,
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
async fn get_deletion(
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

/// Authenticates and checks `CATALOG_MANAGE_ACCESS` on the catalog; the call's record
/// is durable before this returns.
async fn admin(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    request: Option<&[u8]>,
) -> Result<Principal> {
    let (principal, ()) = admin_with(state, caller, action, request, || Ok(())).await?;
    Ok(principal)
}

/// [`admin`] with a request to decode once the caller is authorized; a refusal of it is
/// the call's recorded denial.
async fn admin_with<T>(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
    request: Option<&[u8]>,
    decode: impl FnOnce() -> Result<T>,
) -> Result<(Principal, T)> {
    let mut decoded = None;
    let (principal, mut audit) = audited(state, caller, action, |principal| {
        state.governance.authorize(
            principal,
            Privilege::CatalogManageAccess,
            &Resource::Catalog,
        )?;
        decoded = Some(decode()?);
        Ok(())
    })
    .await?;
    if let Some(bytes) = request {
        audit.set_request(bytes);
    }
    audit.allow_once().await?;
    let decoded =
        decoded.ok_or_else(|| GatewayError::Internal("the checked request is gone".into()))?;
    Ok((principal, decoded))
}

async fn get_grants(
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

async fn sync_grants(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    let principal = admin(&state, &caller, "sync_grants", None).await?;
    let report = state.governance.sync().await?;
    tracing::info!(principal = %principal.name, version = report.version, changed = report.changed, "grants synced on request");
    Ok(Json(report))
}

async fn grants_drift(
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

async fn list_policies(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    admin(&state, &caller, "list_policies", None).await?;
    Ok(Json(state.governance.policies().as_ref().clone()))
}

async fn get_policy(
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

async fn create_policy(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let (principal, policy) = admin_with(
        &state,
        &caller,
        "create_policy",
        body.as_deref().ok(),
        || json_body::<DataPolicy>(&body),
    )
    .await?;
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
    caller: Caller,
    Path(id): Path<String>,
    body: RawBody,
) -> Result<impl IntoResponse> {
    let (principal, policy) = admin_with(
        &state,
        &caller,
        "replace_policy",
        body.as_deref().ok(),
        || json_body::<DataPolicy>(&body),
    )
    .await?;
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

/// Authorizes a read of `_system.audit` and opens it with the caller's view.
async fn audit_reader(
    state: &Arc<GatewayState>,
    caller: &Caller,
    action: &str,
) -> Result<(Arc<HotTable>, Arc<hotgate_policy::SecureView>, CallAudit)> {
    let name = audit_table_name();
    let mut opened = None;
    let (_, mut audit) = audited(state, caller, action, |principal| {
        state
            .governance
            .authorize_table(principal, Privilege::TableReadData, &name)?;
        let table = state.store.table(&name).map_err(|_| {
            GatewayError::NotFound("auditing is switched off: there is no _system.audit".into())
        })?;
        let view = state.governance.view(principal, &table)?;
        opened = Some((table, view));
        Ok(())
    })
    .await?;
    audit.set_table(&name);
    let (table, view) =
        opened.ok_or_else(|| GatewayError::Internal("the opened audit table is gone".into()))?;
    Ok((table, view, audit))
}

/// `GET /v1/audit`: records, newest first, filtered and paged.
async fn audit_records(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
    query: std::result::Result<Query<AuditQuery>, QueryRejection>,
) -> Result<impl IntoResponse> {
    let (table, view, mut audit) = audit_reader(&state, &caller, "audit_query").await?;
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => {
            let e = GatewayError::InvalidArgument(e.body_text());
            audit.deny(&e).await;
            return Err(e);
        }
    };
    audit.set_request(&serde_json::to_vec(&query).unwrap_or_default());
    audit.set_view(&view, view.schema());
    let mut page = match query_audit(table, &state.tierer, &view, &query).await {
        Ok(page) => page,
        Err(e) => {
            audit.deny(&e).await;
            return Err(e);
        }
    };
    page.query_id = audit.query_id().to_owned();
    let completion = audit.allow().await?;
    completion.add_rows(page.records.len() as u64);
    completion.finished();
    Ok(Json(page))
}

/// `GET /v1/audit/verify`: re-checks the durable part of the chain and every
/// checkpoint. 200 with `"intact": false` and the first damage when it is broken.
async fn audit_verify(
    State(state): State<Arc<GatewayState>>,
    caller: Caller,
) -> Result<impl IntoResponse> {
    let (table, _, audit) = audit_reader(&state, &caller, "audit_verify").await?;
    audit.allow_once().await?;
    // Bounded by what is durable now; the records this call just wrote are included.
    let ends = table.end_offsets();
    let root = state.store.root().to_path_buf();
    let key = state.audit.public_key_hex();
    let report = tokio::task::spawn_blocking(move || verify_audit_log(&root, &key, Some(&ends)))
        .await
        .map_err(|e| GatewayError::Internal(e.to_string()))??;
    Ok(Json(report))
}
