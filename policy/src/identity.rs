//! Identity: validating bearer JWTs into a [`Principal`], and the embedded HS256 issuer.
//!
//! Claims follow Polaris: `sub` is the principal name, `principalId` its id, and `scope`
//! a space-separated list of `PRINCIPAL_ROLE:<name>`; `PRINCIPAL_ROLE:ALL` activates
//! every granted role. The verifier's algorithm is fixed by configuration: a token's
//! own `alg` header never chooses it, so `alg: none` and algorithm-confusion tokens fail.

use std::collections::{BTreeSet, HashMap};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Scope prefix of a principal role, as Polaris writes it.
pub const ROLE_SCOPE_PREFIX: &str = "PRINCIPAL_ROLE:";
/// Allowed clock skew when checking `exp` and `nbf`.
const LEEWAY_SECS: u64 = 30;

/// Which principal roles a caller activated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivatedRoles {
    /// `PRINCIPAL_ROLE:ALL`: every role granted to the principal.
    All,
    /// Exactly these roles (possibly none).
    Only(BTreeSet<String>),
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    /// Polaris `principalId`, when the issuer sets one.
    pub id: Option<i64>,
    pub roles: ActivatedRoles,
    /// The token's `jti`, for the audit record.
    pub token_id: Option<String>,
}

impl Principal {
    /// The activated roles as written in scopes, for logs and audit records.
    pub fn role_names(&self) -> Vec<String> {
        match &self.roles {
            ActivatedRoles::All => vec!["ALL".to_owned()],
            ActivatedRoles::Only(r) => r.iter().cloned().collect(),
        }
    }
}

/// Why a token was refused. Messages name what was wrong, never the token's content.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("no bearer token: send `authorization: Bearer <jwt>`")]
    Missing,
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token's signature does not verify")]
    BadSignature,
    #[error("the token's algorithm is not accepted here (accepted: {0})")]
    WrongAlgorithm(String),
    #[error("the token's issuer (iss) is not the configured one")]
    WrongIssuer,
    #[error("the token's audience (aud) does not include this gateway")]
    WrongAudience,
    #[error("the token lacks the required claim {0}")]
    MissingClaim(String),
    #[error("no key with the token's key id (kid) is configured")]
    UnknownKey,
    #[error("identity configuration error: {0}")]
    Config(String),
}

/// The claims hotgate reads and the embedded issuer writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claims {
    sub: String,
    #[serde(
        rename = "principalId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    principal_id: Option<i64>,
    #[serde(default)]
    scope: String,
    iss: String,
    aud: serde_json::Value,
    exp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jti: Option<String>,
}

fn parse_roles(scope: &str) -> ActivatedRoles {
    let mut roles = BTreeSet::new();
    for s in scope.split_whitespace() {
        if let Some(role) = s.strip_prefix(ROLE_SCOPE_PREFIX) {
            if role == "ALL" {
                return ActivatedRoles::All;
            }
            if !role.is_empty() {
                roles.insert(role.to_owned());
            }
        }
    }
    ActivatedRoles::Only(roles)
}

/// A verification key and the one algorithm it accepts.
struct VerifyKey {
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Validates bearer tokens for one issuer and audience.
pub struct JwtValidator {
    issuer: String,
    audience: String,
    /// Keys by `kid`; the key under `None` serves tokens without a `kid`.
    keys: HashMap<Option<String>, VerifyKey>,
}

impl std::fmt::Debug for JwtValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtValidator")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl JwtValidator {
    /// A validator for HS256 tokens signed with `secret` (the embedded issuer).
    pub fn hs256(secret: &[u8], issuer: &str, audience: &str) -> Result<Self, AuthError> {
        let key = VerifyKey {
            algorithm: Algorithm::HS256,
            key: DecodingKey::from_secret(secret)
                .map_err(|e| AuthError::Config(format!("unusable HS256 key: {e}")))?,
        };
        Ok(Self {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            keys: HashMap::from([(None, key)]),
        })
    }

    /// A validator for RS256 and ES256 tokens from an external issuer, with keys from a
    /// JWKS document. Each key accepts only the algorithm its type implies (RSA: RS256,
    /// EC P-256: ES256); other key types are refused.
    pub fn from_jwks(jwks_json: &str, issuer: &str, audience: &str) -> Result<Self, AuthError> {
        let set: JwkSet = serde_json::from_str(jwks_json)
            .map_err(|e| AuthError::Config(format!("unreadable JWKS: {e}")))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let algorithm = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                _ => {
                    return Err(AuthError::Config(format!(
                        "JWKS key {:?} is neither RSA nor EC P-256",
                        jwk.common.key_id
                    )));
                }
            };
            let key = DecodingKey::from_jwk(jwk)
                .map_err(|e| AuthError::Config(format!("bad JWKS key: {e}")))?;
            keys.insert(jwk.common.key_id.clone(), VerifyKey { algorithm, key });
        }
        if keys.is_empty() {
            return Err(AuthError::Config("the JWKS holds no keys".into()));
        }
        Ok(Self {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            keys,
        })
    }

    /// Validates a token and returns the caller it names.
    pub fn validate(&self, token: &str) -> Result<Principal, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        let verify = match &header.kid {
            Some(kid) => self
                .keys
                .get(&Some(kid.clone()))
                .or_else(|| self.single_key()),
            None => self.keys.get(&None).or_else(|| self.single_key()),
        }
        .ok_or(AuthError::UnknownKey)?;
        if header.alg != verify.algorithm {
            return Err(AuthError::WrongAlgorithm(format!("{:?}", verify.algorithm)));
        }
        let mut validation = Validation::new(verify.algorithm);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data =
            jsonwebtoken::decode::<Claims>(token, &verify.key, &validation).map_err(|e| match e
                .kind()
            {
                JwtErrorKind::ExpiredSignature => AuthError::Expired,
                JwtErrorKind::ImmatureSignature => AuthError::NotYetValid,
                JwtErrorKind::InvalidSignature => AuthError::BadSignature,
                JwtErrorKind::InvalidIssuer => AuthError::WrongIssuer,
                JwtErrorKind::InvalidAudience => AuthError::WrongAudience,
                JwtErrorKind::MissingRequiredClaim(c) => AuthError::MissingClaim(c.clone()),
                JwtErrorKind::InvalidAlgorithm => {
                    AuthError::WrongAlgorithm(format!("{:?}", verify.algorithm))
                }
                _ => AuthError::Malformed,
            })?;
        let claims = data.claims;
        if claims.sub.is_empty() {
            return Err(AuthError::MissingClaim("sub".into()));
        }
        Ok(Principal {
            name: claims.sub,
            id: claims.principal_id,
            roles: parse_roles(&claims.scope),
            token_id: claims.jti,
        })
    }

    fn single_key(&self) -> Option<&VerifyKey> {
        (self.keys.len() == 1)
            .then(|| self.keys.values().next())
            .flatten()
    }
}

/// The embedded default issuer: an HS256 key kept in the data directory.
pub struct EmbeddedIssuer {
    secret: Vec<u8>,
    issuer: String,
    audience: String,
}

impl std::fmt::Debug for EmbeddedIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedIssuer")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl EmbeddedIssuer {
    /// A fresh random 256-bit key, as hex: what the gateway stores (mode 0600) on the
    /// first start. This crate touches no storage; the gateway keeps the key file.
    pub fn generate_hex_key() -> String {
        hex::encode(rand::random::<[u8; 32]>())
    }

    /// The issuer of the hex key `hex_key` (at least 256 bits).
    pub fn from_hex_key(hex_key: &str, issuer: &str, audience: &str) -> Result<Self, AuthError> {
        let secret = hex::decode(hex_key.trim())
            .map_err(|_| AuthError::Config("the issuer key file does not hold a hex key".into()))?;
        if secret.len() < 32 {
            return Err(AuthError::Config(
                "the issuer key file holds a key shorter than 256 bits".into(),
            ));
        }
        Ok(Self {
            secret,
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
        })
    }

    /// The validator that accepts this issuer's tokens.
    pub fn validator(&self) -> Result<JwtValidator, AuthError> {
        JwtValidator::hs256(&self.secret, &self.issuer, &self.audience)
    }

    /// Mints a token for `sub` with the given principal roles, valid for `ttl`.
    pub fn mint(&self, sub: &str, roles: &[String], ttl: Duration) -> Result<String, AuthError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| AuthError::Config(e.to_string()))?
            .as_secs();
        let claims = Claims {
            sub: sub.to_owned(),
            principal_id: Some(principal_id(sub)),
            scope: roles
                .iter()
                .map(|r| format!("{ROLE_SCOPE_PREFIX}{r}"))
                .collect::<Vec<_>>()
                .join(" "),
            iss: self.issuer.clone(),
            aud: serde_json::Value::String(self.audience.clone()),
            exp: now + ttl.as_secs(),
            nbf: None,
            iat: Some(now),
            jti: Some(hex::encode(rand::random::<[u8; 16]>())),
        };
        let key = EncodingKey::from_secret(&self.secret)
            .map_err(|e| AuthError::Config(format!("unusable HS256 key: {e}")))?;
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key)
            .map_err(|e| AuthError::Config(format!("cannot sign a token: {e}")))
    }
}

/// A stable positive id for a principal name (the embedded issuer has no directory).
fn principal_id(name: &str) -> i64 {
    // FNV-1a: stable across runs and platforms, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 1) as i64
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use super::*;

    /// The issuer of one fixed key (a test key, not a secret).
    fn issuer() -> EmbeddedIssuer {
        EmbeddedIssuer::from_hex_key(&"ab".repeat(32), "hotgate", "hotgate").unwrap()
    }

    fn sign(secret: &[u8], claims: serde_json::Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap()
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn minted_tokens_validate_with_polaris_claims() {
        let iss = issuer();
        let token = iss
            .mint(
                "alice",
                &["analyst".into(), "writer".into()],
                Duration::from_secs(60),
            )
            .unwrap();
        let p = iss.validator().unwrap().validate(&token).unwrap();
        assert_eq!(p.name, "alice");
        assert_eq!(p.id, Some(principal_id("alice")));
        assert_eq!(
            p.roles,
            ActivatedRoles::Only(["analyst".to_owned(), "writer".to_owned()].into())
        );
        let all = iss
            .mint("bob", &["ALL".into()], Duration::from_secs(60))
            .unwrap();
        assert_eq!(
            iss.validator().unwrap().validate(&all).unwrap().roles,
            ActivatedRoles::All
        );
        // The key decides: another issuer of the same key validates these tokens, one
        // of a fresh key does not.
        assert!(issuer().validator().unwrap().validate(&token).is_ok());
        let other =
            EmbeddedIssuer::from_hex_key(&EmbeddedIssuer::generate_hex_key(), "hotgate", "hotgate")
                .unwrap();
        assert!(other.validator().unwrap().validate(&token).is_err());
        // A key shorter than 256 bits, or not hex, is refused.
        assert!(EmbeddedIssuer::from_hex_key(&"ab".repeat(31), "hotgate", "hotgate").is_err());
        assert!(EmbeddedIssuer::from_hex_key("not hex", "hotgate", "hotgate").is_err());
    }

    #[test]
    fn bad_tokens_are_refused_with_the_reason() {
        let iss = issuer();
        let v = iss.validator().unwrap();
        let claims = |patch: serde_json::Value| {
            let mut c = serde_json::json!({
                "sub": "alice", "scope": "PRINCIPAL_ROLE:r", "iss": "hotgate", "aud": "hotgate",
                "exp": now() + 600,
            });
            for (k, val) in patch.as_object().unwrap() {
                c[k] = val.clone();
            }
            c
        };
        let secret = &iss.secret;
        assert_eq!(
            v.validate(&sign(
                secret,
                claims(serde_json::json!({"exp": now() - 600}))
            )),
            Err(AuthError::Expired)
        );
        assert_eq!(
            v.validate(&sign(
                secret,
                claims(serde_json::json!({"nbf": now() + 600}))
            )),
            Err(AuthError::NotYetValid)
        );
        assert_eq!(
            v.validate(&sign(secret, claims(serde_json::json!({"iss": "evil"})))),
            Err(AuthError::WrongIssuer)
        );
        assert_eq!(
            v.validate(&sign(secret, claims(serde_json::json!({"aud": "other"})))),
            Err(AuthError::WrongAudience)
        );
        assert_eq!(
            v.validate(&sign(
                b"another-key-another-key-another-k",
                claims(serde_json::json!({}))
            )),
            Err(AuthError::BadSignature)
        );
        // Tampered payload: same signature, different claims.
        let good = sign(secret, claims(serde_json::json!({})));
        let parts: Vec<&str> = good.split('.').collect();
        let forged = URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&claims(serde_json::json!({"sub": "root"}))).unwrap());
        let tampered = format!("{}.{}.{}", parts[0], forged, parts[2]);
        assert_eq!(v.validate(&tampered), Err(AuthError::BadSignature));
        // alg: none, unsigned.
        let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        let unsigned = format!("{none_header}.{}.", parts[1]);
        assert!(v.validate(&unsigned).is_err());
        // HS512 with the right key: the token's alg does not choose the verifier.
        let hs512 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims(serde_json::json!({})),
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            v.validate(&hs512),
            Err(AuthError::WrongAlgorithm(_))
        ));
        assert_eq!(v.validate("not a jwt"), Err(AuthError::Malformed));
        assert!(v.validate(&good).is_ok());
    }

    #[test]
    fn jwks_keys_fix_their_algorithm() {
        // An EC P-256 key pair made for this test only; it protects nothing.
        let private_pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgpU89M4xGWqoCACXE\nwcPZ2YVsI9opGzknJUpkuX4H6CyhRANCAAR/sAy3MBg/Q9V9XylEPr1WjT8YlhzJ\nDxfKES0Sm7HcGkfAskv0e5QYyQyOdLcW/29j8XPAI/PITGmiByL8/CWJ\n-----END PRIVATE KEY-----\n";
        let jwks = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","use":"sig",
            "x":"f7AMtzAYP0PVfV8pRD69Vo0_GJYcyQ8XyhEtEpux3Bo",
            "y":"R8CyS_R7lBjJDI50txb_b2Pxc8Aj88hMaaIHIvz8JYk"}]}"#;
        let v = JwtValidator::from_jwks(jwks, "https://idp", "hotgate").unwrap();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k1".into());
        let claims = serde_json::json!({"sub": "svc", "scope": "PRINCIPAL_ROLE:ingest",
            "iss": "https://idp", "aud": ["hotgate", "x"], "exp": now() + 60, "principalId": 7});
        let token = jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_ec_pem(private_pem.as_bytes()).unwrap(),
        )
        .unwrap();
        let p = v.validate(&token).unwrap();
        assert_eq!((p.name.as_str(), p.id), ("svc", Some(7)));
        // An HS256 token claiming the same kid is refused, whatever it is signed with.
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some("k1".into());
        let confused =
            jsonwebtoken::encode(&h, &claims, &EncodingKey::from_secret(b"x").unwrap()).unwrap();
        assert!(matches!(
            v.validate(&confused),
            Err(AuthError::WrongAlgorithm(_))
        ));
    }
}
