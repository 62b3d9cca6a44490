//! What every handler shares: the store, the tierer, authentication, governance (grants, policies,
//! write key), the audit log, metrics and the shutdown signal.

use std::sync::Arc;

use hotgate_store::Store;
use hotgate_tiering::Tierer;
use tokio::sync::watch;

use crate::audit::AuditLog;
use crate::auth::Authenticator;
use crate::governance::Governance;
use crate::metrics::GatewayMetrics;

#[derive(Debug)]
pub struct GatewayState {
    pub store: Arc<Store>,
    /// The cold tier: Iceberg tables, tiering cycles and their watermarks.
    pub tierer: Arc<Tierer>,
    /// Maintenance defaults (from `[tiering]`), for the scheduler and the HTTP route.
    pub maintenance: hotgate_tiering::MaintenanceOptions,
    /// Held for a whole schema change, which commits to Iceberg and then to the hot
    /// table: two changes must not interleave between the two.
    pub schema_changes: tokio::sync::Mutex<()>,
    /// Per table: reads by the tiers they touched and the time ranges they asked for.
    pub boundary: crate::boundary::TierBoundary,
    /// Deletion requests, and the suppression filter of those not yet verified.
    pub deletions: Arc<crate::deletion::Deletions>,
    pub authn: Arc<Authenticator>,
    pub governance: Arc<Governance>,
    pub metrics: Arc<GatewayMetrics>,
    /// The audit log every call is recorded in.
    pub audit: Arc<AuditLog>,
    /// What a SQL statement may use, and the namespace of its unqualified tables.
    pub sql: crate::config::SqlConfig,
    /// The Kafka topics consumed into tables.
    pub sources: Arc<crate::sources::Sources>,
    /// Flips to `true` when the server begins shutting down; long-lived streams end.
    pub shutdown: watch::Receiver<bool>,
}
