//! The HTTP API (axum): health, metrics, tables, the grant mirror, data policies and
//! the audit log.
//!
//! Every route but `/healthz` and `/metrics` authenticates the caller and is one audit
//! record, written (and synced) before the call changes or returns anything. Admin
//! routes need `CATALOG_MANAGE_ACCESS` on the catalog; audit routes need
//! `TABLE_READ_DATA` on `_system.audit`.
//!
//! One file per resource; `call` holds what every route shares, and no route file
//! depends on another:
//!
//! ```text
//! mod (router) ── tables, tiering, sources, deletions, grants, policies, audit, health ── call
//! ```

mod audit;
mod call;
mod deletions;
mod grants;
mod health;
mod policies;
mod sources;
mod tables;
mod tiering;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use crate::state::GatewayState;

pub fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route(
            "/v1/tables",
            get(tables::list_tables).post(tables::create_table),
        )
        .route("/v1/tables/{id}", get(tables::get_table))
        .route("/v1/tables/{id}/columns", post(tables::add_columns))
        .route("/v1/tables/{id}/tier", post(tiering::tier_table))
        .route("/v1/tables/{id}/tiering", get(tiering::tiering_status))
        .route("/v1/tables/{id}/boundary", get(tiering::tier_boundary))
        .route("/v1/tables/{id}/maintenance", post(tiering::maintain_table))
        .route("/v1/tables/{id}/access", get(tables::table_access))
        .route(
            "/v1/sources",
            get(sources::list_sources).post(sources::create_source),
        )
        .route(
            "/v1/sources/{name}",
            get(sources::get_source).delete(sources::delete_source),
        )
        .route("/v1/sources/{name}/pause", post(sources::pause_source))
        .route("/v1/sources/{name}/resume", post(sources::resume_source))
        .route("/v1/deletions", post(deletions::create_deletion))
        .route("/v1/deletions/{id}", get(deletions::get_deletion))
        .route("/v1/grants", get(grants::get_grants))
        .route("/v1/grants/sync", post(grants::sync_grants))
        .route("/v1/grants/drift", get(grants::grants_drift))
        .route(
            "/v1/policies",
            get(policies::list_policies).post(policies::create_policy),
        )
        .route(
            "/v1/policies/{id}",
            get(policies::get_policy)
                .put(policies::replace_policy)
                .delete(policies::delete_policy),
        )
        .route("/v1/audit", get(audit::audit_records))
        .route("/v1/audit/verify", get(audit::audit_verify))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            call::catch_panics,
        ))
        .with_state(state)
}
