//! hotgate-policy: identity, grants, data policies and write rules, as pure decisions.
//!
//! Owns: JWT → [`Principal`] ([`identity`]); later the Polaris grant model evaluated
//! with casbin, row filters, column masks and denies compiled into secure views, and the
//! per-column write rules.
//! Must not touch: storage, the network on the hot path, or any table type from
//! `hotgate-store`; column facts arrive as Arrow field metadata.

pub mod identity;

pub use identity::{ActivatedRoles, AuthError, EmbeddedIssuer, JwtValidator, Principal};
