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
            PolicyError::Denied(_)
            | PolicyError::ColumnDenied { .. }
            | PolicyError::Unenforceable { .. } => GatewayError::PermissionDenied(msg),
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
