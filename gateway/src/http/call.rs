//! What every route shares: who is calling, authentication, the audited call (one
//! record per call, written before the call changes or returns anything), body decoding
//! after authorization, and the panic guard.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use hotgate_policy::{Principal, Privilege, Resource};
use hotgate_store::{HotTable, TableName};

use crate::audit::CallAudit;
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

/// A handler that panics fails its own call with a 500, recorded as a denial of the
/// route by whoever called it, instead of dropping the connection unrecorded.
pub(super) async fn catch_panics(
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
pub(super) struct Caller {
    pub(super) addr: Option<SocketAddr>,
    pub(super) headers: HeaderMap,
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

pub(super) fn principal(state: &GatewayState, headers: &HeaderMap) -> Result<Principal> {
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
pub(super) const AUTHENTICATE: &str = "authenticate";

/// A JSON request body, decoded only once the caller is authorized for the route: a
/// caller without rights learns nothing from how its body was judged. The error quotes
/// serde's reason to the caller; the audit keeps only its kind.
/// Decodes a JSON body with axum's decoder, whose errors name the field's path
/// (`columns[0].type: unknown type ...`).
pub(super) fn json_body<T: serde::de::DeserializeOwned>(body: &RawBody) -> Result<T> {
    Json::<T>::from_bytes(body_bytes(body)?)
        .map(|Json(v)| v)
        .map_err(|e| GatewayError::InvalidArgument(format!("request body: {}", e.body_text())))
}

/// A request body as it arrived. A body that could not be read (over the size limit,
/// cut off) is not refused by the extractor, unaudited, but by the handler once the
/// caller is authorized, on record like any bad body.
pub(super) type RawBody = std::result::Result<Bytes, axum::extract::rejection::BytesRejection>;

pub(super) fn body_bytes(body: &RawBody) -> Result<&[u8]> {
    body.as_deref()
        .map_err(|e| GatewayError::InvalidArgument(format!("request body: {}", e.body_text())))
}

/// Authenticates the caller and runs `check`, recording a denial if either fails.
/// Returns the principal and the call's audit, for the handler to complete.
pub(super) async fn audited(
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

/// Authenticates, checks `privilege` on table `id` and records the call; returns the
/// table and the caller.
pub(super) async fn table_call(
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
pub(super) async fn table_call_with<T>(
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

/// Authenticates and checks `CATALOG_MANAGE_ACCESS` on the catalog; the call's record
/// is durable before this returns.
pub(super) async fn admin(
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
pub(super) async fn admin_with<T>(
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
