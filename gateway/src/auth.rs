//! Authentication and the authorization seam.
//!
//! Authentication happens once per call (a tonic interceptor, an axum extractor) and
//! yields a [`Principal`]. Authorization happens in each handler after the ticket or
//! descriptor is decoded, through the [`Authorizer`] trait.

use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use hotgate_policy::{JwtValidator, Principal};
use hotgate_store::TableName;

use crate::error::{GatewayError, Result};

/// Turns an `authorization` header value into a [`Principal`].
#[derive(Debug)]
pub struct Authenticator {
    /// Swapped whole when an external issuer's keys are fetched again.
    validator: RwLock<Arc<JwtValidator>>,
}

impl Authenticator {
    pub fn new(validator: JwtValidator) -> Self {
        Self {
            validator: RwLock::new(Arc::new(validator)),
        }
    }

    /// Replaces the keys, e.g. after a JWKS refresh.
    pub fn replace(&self, validator: JwtValidator) {
        *self.validator.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(validator);
    }

    pub fn authenticate(&self, header: Option<&str>) -> Result<Principal> {
        let header = header.ok_or_else(|| {
            GatewayError::Unauthenticated(
                "no bearer token: send `authorization: Bearer <jwt>`".into(),
            )
        })?;
        let (scheme, token) = header.trim().split_once(' ').ok_or_else(|| {
            GatewayError::Unauthenticated("authorization must be `Bearer <jwt>`".into())
        })?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(GatewayError::Unauthenticated(format!(
                "authorization scheme {scheme:?} is not accepted; use Bearer"
            )));
        }
        let validator = Arc::clone(&self.validator.read().unwrap_or_else(|p| p.into_inner()));
        Ok(validator.validate(token.trim())?)
    }
}

/// Catalog privileges checked by the data plane (Polaris names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    TableReadData,
    TableWriteData,
    TableList,
    TableCreate,
}

impl Privilege {
    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::TableReadData => "TABLE_READ_DATA",
            Privilege::TableWriteData => "TABLE_WRITE_DATA",
            Privilege::TableList => "TABLE_LIST",
            Privilege::TableCreate => "TABLE_CREATE",
        }
    }
}

/// Decides whether a principal holds a privilege on a table (or the catalog).
pub trait Authorizer: Send + Sync + Debug {
    fn authorize(
        &self,
        principal: &Principal,
        privilege: Privilege,
        table: Option<&TableName>,
    ) -> Result<()>;
}

/// Lets every authenticated caller do everything. This is the embedded default until the
/// grant mirror lands; the server says so in its log at start.
#[derive(Debug, Default)]
pub struct AllowAuthenticated;

impl Authorizer for AllowAuthenticated {
    fn authorize(&self, _: &Principal, _: Privilege, _: Option<&TableName>) -> Result<()> {
        Ok(())
    }
}
