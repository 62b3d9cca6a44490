//! What every Flight method shares: the principal the interceptor authenticated, the
//! call's audit record, authorization of a table, and the one place where a failed
//! call is counted, logged and turned into a status.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hotgate_policy::{Principal, Privilege};
use hotgate_store::{HotTable, TableName};
use tonic::{Request, Response, Status};

use crate::audit::CallAudit;
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

/// Runs one Flight method: counts it, hands `body` the principal the interceptor
/// authenticated, and counts, logs and maps its error.
pub(super) async fn serve<T, R, Fut>(
    state: &GatewayState,
    method: &'static str,
    request: Request<T>,
    body: impl FnOnce(Principal, Request<T>) -> Fut,
) -> Result<Response<R>, Status>
where
    Fut: Future<Output = Result<R>>,
{
    state.metrics.requests.with_label_values(&[method]).inc();
    let result = match principal(&request) {
        Ok(p) => body(p, request).await,
        Err(e) => Err(e),
    };
    result
        .map(Response::new)
        .map_err(|e| fail(state, method, e))
}

/// The principal the interceptor put on the call.
pub(super) fn principal<T>(request: &Request<T>) -> Result<Principal> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| {
            GatewayError::Unauthenticated("no authenticated principal on the call".into())
        })
}

/// Starts the audit of a call by `principal`.
pub(super) fn new_audit(
    state: &GatewayState,
    principal: &Principal,
    addr: Option<SocketAddr>,
    action: &str,
) -> CallAudit {
    CallAudit::new(&state.audit, &state.governance, principal, addr, action)
}

/// Authorizes `privilege` on the table, then opens it. The check comes first so a
/// caller without access cannot probe which tables exist.
pub(super) fn table_for(
    state: &GatewayState,
    principal: &Principal,
    privilege: Privilege,
    name: &TableName,
) -> Result<Arc<HotTable>> {
    state
        .governance
        .authorize_table(principal, privilege, name)?;
    Ok(state.store.table(name)?)
}

/// Counts the error, logs it, and turns it into a status.
pub(super) fn fail(state: &GatewayState, method: &str, e: GatewayError) -> Status {
    state.metrics.errors.with_label_values(&[e.code()]).inc();
    tracing::debug!(method, code = e.code(), "request failed: {e}");
    e.into_status()
}
