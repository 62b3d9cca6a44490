//! The gateway's one error type, and the one place it becomes a gRPC status or an HTTP
//! response. Messages say what to fix and never echo row data.
//!
//! An error of kind [`Code::Internal`] is the server's own failure: its message can
//! name server paths or causes the caller has no business seeing. When it leaves the
//! server ([`GatewayError::into_status`], [`IntoResponse`]), it is logged at `error`
//! with a fresh error id and its whole cause chain, and the caller gets only the id.

use std::error::Error as _;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use datafusion::error::DataFusionError;
use hotgate_policy::{AuthError, PolicyError};
use hotgate_store::{ErrorKind, StoreError};
use hotgate_tiering::TieringError;

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
    #[error("{0}")]
    Unimplemented(String),
    /// The caller cancelled the call (a Flight SQL statement, by `CancelFlightInfo`).
    #[error("{0}")]
    Cancelled(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// A failure of the hot store, with its cause; its kind decides the code.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A failure of the cold tier, with its cause; its kind decides the code.
    #[error(transparent)]
    Tiering(#[from] TieringError),
}

/// The kind of a [`GatewayError`]: its gRPC code (and HTTP status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unauthenticated,
    PermissionDenied,
    InvalidArgument,
    NotFound,
    AlreadyExists,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
    Cancelled,
    Internal,
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
    // Logged with the error id when the error leaves the server.
    GatewayError::Internal(format!("a call panicked (a bug): {what}"))
}

impl GatewayError {
    /// The error's kind.
    pub fn kind(&self) -> Code {
        match self {
            GatewayError::Unauthenticated(_) => Code::Unauthenticated,
            GatewayError::PermissionDenied(_) => Code::PermissionDenied,
            GatewayError::InvalidArgument(_) => Code::InvalidArgument,
            GatewayError::NotFound(_) => Code::NotFound,
            GatewayError::AlreadyExists(_) => Code::AlreadyExists,
            GatewayError::ResourceExhausted(_) => Code::ResourceExhausted,
            GatewayError::Unavailable(_) => Code::Unavailable,
            GatewayError::Unimplemented(_) => Code::Unimplemented,
            GatewayError::Cancelled(_) => Code::Cancelled,
            GatewayError::Internal(_) => Code::Internal,
            GatewayError::Store(e) => match e.kind() {
                ErrorKind::InvalidArgument => Code::InvalidArgument,
                ErrorKind::NotFound => Code::NotFound,
                ErrorKind::AlreadyExists => Code::AlreadyExists,
                ErrorKind::Unavailable => Code::Unavailable,
                ErrorKind::Corrupt | ErrorKind::Io => Code::Internal,
            },
            GatewayError::Tiering(e) => match e.kind() {
                hotgate_tiering::ErrorKind::InvalidArgument => Code::InvalidArgument,
                hotgate_tiering::ErrorKind::NotFound => Code::NotFound,
                hotgate_tiering::ErrorKind::Conflict | hotgate_tiering::ErrorKind::Unavailable => {
                    Code::Unavailable
                }
            },
        }
    }

    /// The gRPC code name, used as the `code` label of the error metric.
    pub fn code(&self) -> &'static str {
        match self.kind() {
            Code::Unauthenticated => "unauthenticated",
            Code::PermissionDenied => "permission_denied",
            Code::InvalidArgument => "invalid_argument",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::ResourceExhausted => "resource_exhausted",
            Code::Unavailable => "unavailable",
            Code::Unimplemented => "unimplemented",
            Code::Cancelled => "cancelled",
            Code::Internal => "internal",
        }
    }

    /// Whether trying the same thing again later can succeed: a part that was
    /// unavailable, a limit, or the server's own failure (I/O, a file still being
    /// compacted). A bad request, a missing table or a denial fail the same way again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            Code::Unavailable | Code::ResourceExhausted | Code::Internal
        )
    }

    /// The message a caller may see. For an internal error that is only an error id:
    /// the error is logged at `error` under that id with its whole cause chain.
    pub fn public_message(&self) -> String {
        if self.kind() != Code::Internal {
            return self.to_string();
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut cause = self.to_string();
        let mut source = self.source();
        // A transparent variant's source is the error itself: skip repeats.
        while let Some(s) = source {
            let text = s.to_string();
            if !cause.ends_with(&text) {
                cause.push_str(": ");
                cause.push_str(&text);
            }
            source = s.source();
        }
        tracing::error!(error_id = %id, "{cause}");
        format!("internal error {id}: the server failed; its log has the cause under this id")
    }

    /// The status of a method hotgate does not offer.
    pub fn unimplemented(what: &str) -> tonic::Status {
        GatewayError::Unimplemented(what.to_owned()).into_status()
    }

    /// The gRPC status of this error; the one place where one is made.
    pub fn into_status(self) -> tonic::Status {
        let message = self.public_message();
        match self.kind() {
            Code::Unauthenticated => tonic::Status::unauthenticated(message),
            Code::PermissionDenied => tonic::Status::permission_denied(message),
            Code::InvalidArgument => tonic::Status::invalid_argument(message),
            Code::NotFound => tonic::Status::not_found(message),
            Code::AlreadyExists => tonic::Status::already_exists(message),
            Code::ResourceExhausted => tonic::Status::resource_exhausted(message),
            Code::Unavailable => tonic::Status::unavailable(message),
            Code::Unimplemented => tonic::Status::unimplemented(message),
            Code::Cancelled => tonic::Status::cancelled(message),
            Code::Internal => tonic::Status::internal(message),
        }
    }

    /// What the audit records of this error: its kind and a fixed message. Messages can
    /// quote a request's literals (a parse error), a row's value (a failed cast) or a
    /// server path, so only denials keep theirs: hotgate builds those from names alone
    /// (a privilege, a resource, a role, a policy id, a column) and a token check's
    /// fixed text.
    pub fn audit_reason(&self) -> String {
        let fixed = match (self.kind(), self) {
            (_, GatewayError::Unauthenticated(m) | GatewayError::PermissionDenied(m)) => {
                return format!("{}: {m}", self.code());
            }
            (Code::Unauthenticated | Code::PermissionDenied, _) => "the call was refused",
            (Code::InvalidArgument, _) => {
                "the request was malformed or failed on a value (details withheld; see \
                 query_digest)"
            }
            (Code::NotFound, _) => "what the request names does not exist",
            (Code::AlreadyExists, _) => "what the request creates exists already",
            (Code::ResourceExhausted, _) => "a limit was reached",
            (Code::Unavailable, _) => {
                "a part hotgate depends on was unavailable (details in the server log)"
            }
            (Code::Unimplemented, _) => "the call is not supported",
            (Code::Cancelled, _) => "the caller cancelled the call",
            (Code::Internal, _) => "the server failed (details in the server log)",
        };
        format!("{}: {fixed}", self.code())
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

impl From<arrow_flight::error::FlightError> for GatewayError {
    /// The Flight SQL metadata builders' errors: the server's own.
    fn from(e: arrow_flight::error::FlightError) -> Self {
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
        e.into_status()
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let status = match self.kind() {
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::InvalidArgument => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists => StatusCode::CONFLICT,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            // nginx's "client closed request": no standard status fits.
            Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = serde_json::json!({"error": self.public_message(), "code": self.code()});
        (status, axum::Json(body)).into_response()
    }
}
