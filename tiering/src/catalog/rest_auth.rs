//! The bearer token hotgate sends to a REST catalog: a static `token`, a `token_file`
//! (read again when it changes, as mounted secrets rotate), or OAuth2 client
//! credentials exchanged at the token endpoint and refreshed before they expire, as
//! Polaris issues them.
//!
//! Secrets never reach a log or an error message: [`Secret`] prints as `<redacted>`,
//! and errors name the setting (`[catalog] credential`), not its value.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::sync::Mutex;

use crate::error::{Result, TieringError};

/// A configured secret. Debug and Serialize print `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// How hotgate authenticates to the catalog.
#[derive(Debug)]
pub(super) enum TokenSource {
    None,
    Static(Secret),
    File(PathBuf),
    ClientCredentials {
        endpoint: String,
        client_id: String,
        secret: Secret,
        scope: String,
    },
}

/// A token and when to fetch the next one.
#[derive(Debug)]
struct Cached {
    token: Secret,
    refresh_at: Option<Instant>,
    /// A token file's modification time when it was read.
    file_mtime: Option<SystemTime>,
}

/// The token in use, refreshed on demand.
#[derive(Debug)]
pub(super) struct Tokens {
    source: TokenSource,
    cached: Mutex<Option<Cached>>,
}

/// Without `expires_in`, a client-credentials token is fetched again after this.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

impl Tokens {
    pub(super) fn new(source: TokenSource) -> Self {
        Self {
            source,
            cached: Mutex::new(None),
        }
    }

    /// The bearer token to send now, if any.
    pub(super) async fn token(&self, http: &reqwest::Client) -> Result<Option<Secret>> {
        let mut cached = self.cached.lock().await;
        if let Some(current) = cached.as_ref()
            && self.still_good(current)
        {
            return Ok(Some(current.token.clone()));
        }
        let fresh = match &self.source {
            TokenSource::None => return Ok(None),
            TokenSource::Static(token) => Cached {
                token: token.clone(),
                refresh_at: None,
                file_mtime: None,
            },
            TokenSource::File(path) => read_token_file(path)?,
            TokenSource::ClientCredentials {
                endpoint,
                client_id,
                secret,
                scope,
            } => exchange(http, endpoint, client_id, secret, scope).await?,
        };
        let token = fresh.token.clone();
        *cached = Some(fresh);
        Ok(Some(token))
    }

    /// Forgets the token, so the next call fetches one (after the catalog said 401).
    pub(super) async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }

    /// The setting a refused token came from, for error messages.
    pub(super) fn setting(&self) -> &'static str {
        match self.source {
            TokenSource::None => "[catalog] credential or token (none is set)",
            TokenSource::Static(_) => "[catalog] token",
            TokenSource::File(_) => "[catalog] token_file",
            TokenSource::ClientCredentials { .. } => "[catalog] credential",
        }
    }

    fn still_good(&self, cached: &Cached) -> bool {
        if cached.refresh_at.is_some_and(|at| Instant::now() >= at) {
            return false;
        }
        match &self.source {
            TokenSource::File(path) => std::fs::metadata(path)
                .and_then(|m| m.modified())
                .is_ok_and(|mtime| Some(mtime) == cached.file_mtime),
            _ => true,
        }
    }
}

fn read_token_file(path: &std::path::Path) -> Result<Cached> {
    let unreadable = |e: std::io::Error| {
        TieringError::Config(format!("[catalog] token_file: cannot read it: {e}"))
    };
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TieringError::Config(
            "[catalog] token_file: the file is empty".into(),
        ));
    }
    Ok(Cached {
        token: Secret::new(token),
        refresh_at: None,
        file_mtime: mtime,
    })
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct OAuthError {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// The OAuth2 client-credentials grant. The token is fetched again when 90% of its
/// lifetime has passed (at least 10 s before it expires).
async fn exchange(
    http: &reqwest::Client,
    endpoint: &str,
    client_id: &str,
    secret: &Secret,
    scope: &str,
) -> Result<Cached> {
    let form = [
        ("grant_type", "client_credentials"),
        ("client_id", client_id),
        ("client_secret", secret.expose()),
        ("scope", scope),
    ];
    let response = http.post(endpoint).form(&form).send().await.map_err(|e| {
        TieringError::Unavailable(format!(
            "the catalog's token endpoint is unreachable: {}",
            e.without_url()
        ))
    })?;
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    if !status.is_success() {
        // RFC 6749 errors name the problem (`invalid_client`) and never echo the secret.
        let reason = serde_json::from_slice::<OAuthError>(&body)
            .map(|e| match e.error_description {
                Some(d) => format!("{}: {d}", e.error),
                None => e.error,
            })
            .unwrap_or_else(|_| format!("HTTP {status}"));
        let err = format!(
            "[catalog] credential: the token endpoint refused client id {client_id:?}: {reason}"
        );
        return Err(if status.is_server_error() {
            TieringError::Unavailable(err)
        } else {
            TieringError::Config(err)
        });
    }
    let parsed: TokenResponse = serde_json::from_slice(&body).map_err(|_| {
        TieringError::Unavailable(
            "the catalog's token endpoint answered without an access_token".into(),
        )
    })?;
    let lifetime = parsed
        .expires_in
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_LIFETIME);
    let early = (lifetime / 10).max(Duration::from_secs(10)).min(lifetime);
    Ok(Cached {
        token: Secret::new(parsed.access_token),
        refresh_at: Some(Instant::now() + lifetime - early),
        file_mtime: None,
    })
}
