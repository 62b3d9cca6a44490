//! The cold tier's error type, with a coarse [`ErrorKind`] for protocol mapping.

use hotgate_store::StoreError;

/// What kind of failure an error is, for mapping to a protocol status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller asked for something invalid (a bad config or schema change).
    InvalidArgument,
    /// The table has no Iceberg counterpart, or tiering is off for it.
    NotFound,
    /// Another writer changed the table between our read and our commit.
    Conflict,
    /// The catalog or the object store failed; retrying later may succeed.
    Unavailable,
}

#[derive(Debug, thiserror::Error)]
pub enum TieringError {
    #[error("invalid catalog configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("commit conflict on {table}: {detail}")]
    Conflict { table: String, detail: String },
    /// The catalog or its token endpoint cannot be reached or failed.
    #[error("{0}")]
    Unavailable(String),
    #[error("iceberg: {0}")]
    Iceberg(#[from] iceberg::Error),
    #[error("catalog database: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("hot store: {0}")]
    Store(#[from] StoreError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("{0}")]
    Internal(String),
}

impl TieringError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            TieringError::Config(_) | TieringError::Invalid(_) => ErrorKind::InvalidArgument,
            TieringError::NotFound(_) => ErrorKind::NotFound,
            TieringError::Conflict { .. } => ErrorKind::Conflict,
            TieringError::Store(e) if e.kind() == hotgate_store::ErrorKind::InvalidArgument => {
                ErrorKind::InvalidArgument
            }
            TieringError::Store(e) if e.kind() == hotgate_store::ErrorKind::NotFound => {
                ErrorKind::NotFound
            }
            _ => ErrorKind::Unavailable,
        }
    }
}

pub type Result<T, E = TieringError> = std::result::Result<T, E>;
