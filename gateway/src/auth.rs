//! Authentication: once per call (a tonic interceptor, an axum extractor), yielding a
//! [`Principal`]. Authorization happens in each handler after the ticket or descriptor
//! is decoded, against the grant mirror in [`crate::governance`].

use std::sync::Arc;

use parking_lot::RwLock;

use hotgate_policy::{JwtValidator, Principal};

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
        *self.validator.write() = Arc::new(validator);
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
        let validator = Arc::clone(&self.validator.read());
        Ok(validator.validate(token.trim())?)
    }
}
