//! The policy crate's one error type. Messages name what is missing or wrong (a
//! privilege, a column, a policy id) and never carry data values.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The caller lacks a privilege; the message says which and on what.
    #[error("permission denied: {0}")]
    Denied(String),
    /// The caller asked for a column a policy denies to it.
    #[error("permission denied: column {column:?} is denied to you by policy {policy:?}")]
    ColumnDenied { column: String, policy: String },
    /// A policy that applies to this read cannot be compiled: the read is denied
    /// (fail closed) and the message names the policy.
    #[error("permission denied: policy {policy:?} cannot be applied to {table}: {detail}")]
    Unenforceable {
        policy: String,
        table: String,
        detail: String,
    },
    /// A grants document was refused; the previous mirror keeps serving.
    #[error("invalid grants document: {0}")]
    InvalidGrants(String),
    /// A data policy was refused; the previous policy version keeps serving.
    #[error("invalid policy: {0}")]
    InvalidPolicy(String),
    /// A write rule could not be applied to a batch.
    #[error("write rule: {0}")]
    WriteRule(String),
    #[error("internal policy error: {0}")]
    Internal(String),
}

impl PolicyError {
    /// True for the errors that mean "not allowed" rather than "bad input".
    pub fn is_denial(&self) -> bool {
        matches!(
            self,
            PolicyError::Denied(_)
                | PolicyError::ColumnDenied { .. }
                | PolicyError::Unenforceable { .. }
        )
    }
}
