//! The store's error type: one enum, with a coarse [`ErrorKind`] that callers map to
//! protocol statuses (gRPC, HTTP) without matching every variant.

use std::path::PathBuf;

use arrow_schema::ArrowError;

/// What kind of failure an error is, for mapping to a protocol status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller sent something wrong: a bad definition, batch or request.
    InvalidArgument,
    /// The named table does not exist.
    NotFound,
    /// A table of that name already exists with another definition.
    AlreadyExists,
    /// Bytes on disk fail validation outside a recoverable torn tail.
    Corrupt,
    /// The operating system refused an I/O operation.
    Io,
    /// The store, or one of its logs, is closed or poisoned by an earlier I/O failure.
    Unavailable,
}

/// An error from the hot store. Messages name the table, column or file involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid table definition: {0}")]
    InvalidDefinition(String),
    #[error("invalid batch for table {table}: {detail}")]
    InvalidBatch { table: String, detail: String },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("table {0} not found")]
    TableNotFound(String),
    #[error("table {0} already exists with a different definition")]
    TableExists(String),
    #[error("corrupt data in {path}: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
    #[error("{0}")]
    Unavailable(String),
}

impl StoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::InvalidDefinition(_)
            | StoreError::InvalidBatch { .. }
            | StoreError::InvalidRequest(_) => ErrorKind::InvalidArgument,
            StoreError::TableNotFound(_) => ErrorKind::NotFound,
            StoreError::TableExists(_) => ErrorKind::AlreadyExists,
            StoreError::Corrupt { .. } | StoreError::Arrow(_) => ErrorKind::Corrupt,
            StoreError::Io { .. } => ErrorKind::Io,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        StoreError::Corrupt {
            path: path.into(),
            detail: detail.into(),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
