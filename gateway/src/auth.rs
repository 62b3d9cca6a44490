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
        let token = if scheme.eq_ignore_ascii_case("bearer") {
            token.trim().to_owned()
        } else if scheme.eq_ignore_ascii_case("basic") {
            basic_password(token.trim())?
        } else {
            return Err(GatewayError::Unauthenticated(format!(
                "authorization scheme {scheme:?} is not accepted; use Bearer <jwt> (or \
                 Basic with the JWT as the password)"
            )));
        };
        let validator = Arc::clone(&self.validator.read());
        Ok(validator.validate(&token)?)
    }

    /// The bearer token a call authenticated with: the JWT itself, or a Basic
    /// header's password (what a Flight `Handshake` hands back to the client).
    pub fn bearer_token(header: &str) -> Result<String> {
        match header.trim().split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                Ok(token.trim().to_owned())
            }
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("basic") => {
                basic_password(token.trim())
            }
            _ => Err(GatewayError::Unauthenticated(
                "authorization must be `Bearer <jwt>` or Basic".into(),
            )),
        }
    }
}

/// The password of a Basic credential (`base64(user:password)`): clients that take only
/// a user and a password (JDBC, ADBC) send the JWT so. The user name is not checked:
/// the token alone says who the caller is.
fn basic_password(credential: &str) -> Result<String> {
    use base64::Engine as _;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bad = || {
        GatewayError::Unauthenticated(
            "Basic credential is not base64 of `user:password` (the password is the JWT)".into(),
        )
    };
    let decoded = engine.decode(credential).map_err(|_| bad())?;
    let text = String::from_utf8(decoded).map_err(|_| bad())?;
    let (_, password) = text.split_once(':').ok_or_else(bad)?;
    if password.is_empty() {
        return Err(GatewayError::Unauthenticated(
            "Basic credential has an empty password; send a hotgate JWT as the password".into(),
        ));
    }
    Ok(password.to_owned())
}
