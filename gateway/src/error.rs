//! The gateway's one error type, mapped to gRPC statuses and HTTP responses. Messages
//! say what to fix and never echo row data.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use datafusion::error::DataFusionError;
use hotgate_policy::{AuthError, PolicyError};
use hotgate_store::{ErrorKind, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

/// Runs one call's step, turning a panic into an `Internal` error: a bug met by one call
/// fails that call, which is then refused and audited like any other failure, instead
/// of silently cutting the stream or the connection.
pub async fn catch_panic<T>(step: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(step).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(panicked(panic.as_ref())),
    }
}

/// The error of a call whose step panicked; the panic's message goes to the log only.
pub fn panicked(panic: &(dyn std::any::Any + Send)) -> GatewayError {
    let what = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-text panic");
    tracing::error!("a call panicked: {what}");
    GatewayError::Internal("the call failed on the server (a bug; see the server log)".into())
}

impl GatewayError {
    /// The gRPC code name, used as the `code` label of the error metric.
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::Unauthenticated(_) => "unauthenticated",
            GatewayError::PermissionDenied(_) => "permission_denied",
            GatewayError::InvalidArgument(_) => "invalid_argument",
            GatewayError::NotFound(_) => "not_found",
            GatewayError::AlreadyExists(_) => "already_exists",
            GatewayError::ResourceExhausted(_) => "resource_exhausted",
            GatewayError::Unavailable(_) => "unavailable",
            GatewayError::Internal(_) => "internal",
        }
    }

    /// What the audit records of this error: its kind and a fixed message. Messages can
    /// quote a request's literals (a parse error), a row's value (a failed cast) or a
    /// server path, so only denials keep theirs: hotgate builds those from names alone
    /// (a privilege, a resource, a role, a policy id, a column) and a token check's
    /// fixed text.
    pub fn audit_reason(&self) -> String {
        let fixed = match self {
            GatewayError::Unauthenticated(m) | GatewayError::PermissionDenied(m) => {
                return format!("{}: {m}", self.code());
            }
            GatewayError::InvalidArgument(_) => {
                "the request was malformed or failed on a value (details withheld; see \
                 query_digest)"
            }
            GatewayError::NotFound(_) => "what the request names does not exist",
            GatewayError::AlreadyExists(_) => "what the request creates exists already",
            GatewayError::ResourceExhausted(_) => "a limit was reached",
            GatewayError::Unavailable(_) => {
                "a part hotgate depends on was unavailable (details in the server log)"
            }
            GatewayError::Internal(_) => "the server failed (details in the server log)",
        };
        format!("{}: {fixed}", self.code())
    }
}

impl From<StoreError> for GatewayError {
    fn from(e: StoreError) -> Self {
        let msg = e.to_string();
        match e.kind() {
            ErrorKind::InvalidArgument => GatewayError::InvalidArgument(msg),
            ErrorKind::NotFound => GatewayError::NotFound(msg),
            ErrorKind::AlreadyExists => GatewayError::AlreadyExists(msg),
            ErrorKind::Unavailable => GatewayError::Unavailable(msg),
            ErrorKind::Corrupt | ErrorKind::Io => GatewayError::Internal(msg),
        }
    }
}

impl From<hotgate_tiering::TieringError> for GatewayError {
    fn from(e: hotgate_tiering::TieringError) -> Self {
        use hotgate_tiering::ErrorKind;
        let msg = e.to_string();
        match e.kind() {
            ErrorKind::InvalidArgument => GatewayError::InvalidArgument(msg),
            ErrorKind::NotFound => GatewayError::NotFound(msg),
            ErrorKind::Conflict | ErrorKind::Unavailable => GatewayError::Unavailable(msg),
        }
    }
}

impl From<AuthError> for GatewayError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Config(_) => GatewayError::Internal(e.to_string()),
            _ => GatewayError::Unauthenticated(e.to_string()),
        }
    }
}

impl From<arrow_schema::ArrowError> for GatewayError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        GatewayError::Internal(e.to_string())
    }
}

impl From<PolicyError> for GatewayError {
    fn from(e: PolicyError) -> Self {
        let msg = e.to_string();
        match e {
            PolicyError::Unenforceable {
                policy,
                table,
                detail,
            } => {
                // The detail can quote the policy's text, which is the administrators'
                // business, not the reader's: it goes to the server log only.
                tracing::warn!(%policy, %table, "policy cannot be applied, reads denied: {detail}");
                GatewayError::PermissionDenied(format!(
                    "permission denied: policy {policy:?} cannot be applied to {table} \
                     (the server log says why)"
                ))
            }
            PolicyError::Denied(_) | PolicyError::ColumnDenied { .. } => {
                GatewayError::PermissionDenied(msg)
            }
            PolicyError::InvalidGrants(_)
            | PolicyError::InvalidPolicy(_)
            | PolicyError::WriteRule(_) => GatewayError::InvalidArgument(msg),
            PolicyError::Internal(m) => GatewayError::Internal(m),
        }
    }
}

impl From<DataFusionError> for GatewayError {
    fn from(e: DataFusionError) -> Self {
        // Errors DataFusion raises while reading come from the store: keep their kind.
        match e {
            DataFusionError::External(inner) => match inner.downcast::<GatewayError>() {
                Ok(g) => *g,
                Err(other) => GatewayError::Internal(other.to_string()),
            },
            DataFusionError::Context(_, inner) => GatewayError::from(*inner),
            // The caller's expression failed on a value: a client error, not the server's.
            DataFusionError::ArrowError(ref inner, _)
                if matches!(
                    inner.as_ref(),
                    arrow_schema::ArrowError::CastError(_)
                        | arrow_schema::ArrowError::ParseError(_)
                        | arrow_schema::ArrowError::DivideByZero
                        | arrow_schema::ArrowError::ArithmeticOverflow(_)
                ) =>
            {
                GatewayError::InvalidArgument(format!(
                    "the query failed on a value: {}",
                    e.strip_backtrace()
                ))
            }
            DataFusionError::SQL(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_) => {
                GatewayError::InvalidArgument(e.strip_backtrace())
            }
            other => GatewayError::Internal(other.strip_backtrace()),
        }
    }
}

impl From<GatewayError> for tonic::Status {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::Unauthenticated(m) => tonic::Status::unauthenticated(m),
            GatewayError::PermissionDenied(m) => tonic::Status::permission_denied(m),
            GatewayError::InvalidArgument(m) => tonic::Status::invalid_argument(m),
            GatewayError::NotFound(m) => tonic::Status::not_found(m),
            GatewayError::AlreadyExists(m) => tonic::Status::already_exists(m),
            GatewayError::ResourceExhausted(m) => tonic::Status::resource_exhausted(m),
            GatewayError::Unavailable(m) => tonic::Status::unavailable(m),
            e @ GatewayError::Internal(_) => tonic::Status::internal(e.to_string()),
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let status = match &self {
            GatewayError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            GatewayError::PermissionDenied(_) => StatusCode::FORBIDDEN,
            GatewayError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            GatewayError::NotFound(_) => StatusCode::NOT_FOUND,
            GatewayError::AlreadyExists(_) => StatusCode::CONFLICT,
            GatewayError::ResourceExhausted(_) => StatusCode::TOO_MANY_REQUESTS,
            GatewayError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = serde_json::json!({"error": self.to_string(), "code": self.code()});
        (status, axum::Json(body)).into_response()
    }
}
