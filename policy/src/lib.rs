//! hotgate-policy: identity, grants, data policies and write rules, as pure decisions.
//!
//! Owns:
//! - [`identity`]: JWT → [`Principal`];
//! - [`bounded_expr`]: expressions from outside, parsed within limits of size and depth;
//! - [`privilege`] and [`grants`]: the Polaris grant model, evaluated with casbin;
//! - [`data_policy`]: row filters, column masks and denies as documents;
//! - [`secure_view`]: those policies compiled for one caller and table, and cached;
//! - [`write_rules`]: `drop` and `hash` applied to a batch before it is stored.
//!
//! Must not touch: storage, the network, or any table type from `hotgate-store`; column
//! facts arrive as Arrow field metadata. Loading documents from files or a Polaris server
//! is the gateway's job; this crate only judges them.

pub mod bounded_expr;
pub mod data_policy;
pub mod error;
pub mod grants;
pub mod identity;
pub mod privilege;
pub mod secure_view;
pub mod write_rules;

pub use data_policy::{DataPolicy, PolicySet};
pub use error::PolicyError;
pub use grants::{DEFAULT_CATALOG, GrantsDocument, GrantsMirror, Resource, RoleAccess};
pub use identity::{ActivatedRoles, AuthError, EmbeddedIssuer, JwtValidator, Principal};
pub use privilege::Privilege;
pub use secure_view::{AppliedPolicy, SecureView, SecureViewCache, ViewTable};
pub use write_rules::{HashKey, WriteRules};
