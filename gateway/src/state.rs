//! What every handler shares: the store, the authorizer, metrics and the shutdown signal.

use std::sync::Arc;

use hotgate_store::Store;
use tokio::sync::watch;

use crate::auth::{Authenticator, Authorizer};
use crate::metrics::GatewayMetrics;

#[derive(Debug)]
pub struct GatewayState {
    pub store: Arc<Store>,
    pub authn: Arc<Authenticator>,
    pub authz: Arc<dyn Authorizer>,
    pub metrics: Arc<GatewayMetrics>,
    /// Flips to `true` when the server begins shutting down; long-lived streams end.
    pub shutdown: watch::Receiver<bool>,
}
