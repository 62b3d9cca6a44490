//! An Iceberg REST catalog (Polaris or another): iceberg-rust's `RestCatalog` for
//! namespaces, table creation, loads and its own actions, and `CommitTableRequest`s of
//! our own for the commits hotgate builds.
//!
//! - **Commits.** iceberg-rust 0.10.1 keeps `TableCommit` construction private, so a
//!   hotgate commit is sent as the spec's JSON: the metadata builder's changes
//!   (`add-snapshot`, `set-snapshot-ref`, `remove-snapshots`, `add-schema`, ...) with
//!   `assert-table-uuid` and `assert-ref-snapshot-id` on `main`. A 409 is a conflict,
//!   nothing committed; a 5xx or a lost connection leaves the outcome unknown.
//! - **Tokens.** `RestCatalog` never refreshes a token, so `rest_auth`
//!   owns it, and the `RestCatalog` is rebuilt with each new token.
//! - **Prefix.** From `GET /v1/config`: the catalog's `overrides` win over the
//!   configured `prefix`, which wins over its `defaults`, as the spec orders them.
//! - **Storage.** With `vended_credentials`, loads ask for
//!   `X-Iceberg-Access-Delegation: vended-credentials`; the credentials the catalog
//!   returns reach the table's storage, and a table is loaded again for every cycle,
//!   so they are renewed long before they expire. Otherwise `props` serve.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hotgate_store::TableName;
use iceberg::table::Table;
use iceberg::{Catalog as _, CatalogBuilder as _, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::CommitFailure;
use super::rest_auth::{Secret, TokenSource, Tokens};
use crate::error::{Result, TieringError};
use crate::storage::ObjectStoreStorageFactory;

/// `[catalog] type = "rest"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestConfig {
    /// The catalog's base URI, without `/v1` (`http://polaris:8181/api/catalog`).
    pub uri: String,
    /// The warehouse to ask `GET /v1/config` for (Polaris: the catalog's name).
    #[serde(default)]
    pub warehouse: Option<String>,
    /// The path prefix of every call, when the catalog's config does not set one.
    #[serde(default)]
    pub prefix: Option<String>,
    /// OAuth2 client credentials, `<client_id>:<secret>`.
    #[serde(default)]
    pub credential: Option<Secret>,
    /// A static bearer token.
    #[serde(default)]
    pub token: Option<Secret>,
    /// A file holding the bearer token, read again when it changes.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The token endpoint; default `<uri>/v1/oauth/tokens`.
    #[serde(default)]
    pub oauth2_server_uri: Option<String>,
    /// The OAuth2 scope (Polaris: `PRINCIPAL_ROLE:ALL`).
    #[serde(default = "default_scope")]
    pub scope: String,
    /// Ask the catalog for storage credentials with each table load.
    #[serde(default)]
    pub vended_credentials: bool,
    /// Storage properties, e.g. `s3.endpoint`, `s3.access-key-id`.
    #[serde(default)]
    pub props: HashMap<String, String>,
}

fn default_scope() -> String {
    "catalog".into()
}

/// Calls to the catalog give up after this; a commit that times out is `unknown`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Session {
    token: Option<Secret>,
    prefix: Option<String>,
    catalog: Arc<RestCatalog>,
}

/// A REST catalog, connected on first use.
#[derive(Debug)]
pub struct RestBackend {
    config: RestConfig,
    base: url::Url,
    http: reqwest::Client,
    tokens: Tokens,
    session: Mutex<Option<Session>>,
}

#[derive(Deserialize)]
struct ConfigResponse {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
}

/// The spec's error model: `{"error": {"message", "type", "code"}}`.
#[derive(Deserialize)]
struct ErrorResponse {
    error: ErrorModel,
}

#[derive(Deserialize)]
struct ErrorModel {
    message: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

#[derive(Serialize)]
struct Identifier<'a> {
    namespace: Vec<&'a str>,
    name: &'a str,
}

#[derive(Serialize)]
struct CommitTableRequest<'a> {
    identifier: Identifier<'a>,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
}

impl RestBackend {
    pub(super) fn new(config: RestConfig) -> Result<Self> {
        let base = url::Url::parse(config.uri.trim_end_matches('/'))
            .map_err(|e| TieringError::Config(format!("[catalog] uri: not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(TieringError::Config(
                "[catalog] uri: a REST catalog is reached over http:// or https://".into(),
            ));
        }
        let set = [
            config.credential.is_some(),
            config.token.is_some(),
            config.token_file.is_some(),
        ];
        if set.iter().filter(|s| **s).count() > 1 {
            return Err(TieringError::Config(
                "[catalog]: set one of credential, token and token_file".into(),
            ));
        }
        let source = if let Some(credential) = &config.credential {
            let Some((client_id, secret)) = credential.expose().split_once(':') else {
                return Err(TieringError::Config(
                    "[catalog] credential: expected <client_id>:<secret>".into(),
                ));
            };
            TokenSource::ClientCredentials {
                endpoint: config.oauth2_server_uri.clone().unwrap_or_else(|| {
                    format!("{}/v1/oauth/tokens", base.as_str().trim_end_matches('/'))
                }),
                client_id: client_id.to_owned(),
                secret: Secret::new(secret),
                scope: config.scope.clone(),
            }
        } else if let Some(token) = &config.token {
            TokenSource::Static(token.clone())
        } else if let Some(path) = &config.token_file {
            TokenSource::File(super::absolute(path))
        } else {
            TokenSource::None
        };
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| {
                TieringError::Config(format!("[catalog]: cannot build an HTTP client: {e}"))
            })?;
        Ok(Self {
            config,
            base,
            http,
            tokens: Tokens::new(source),
            session: Mutex::new(None),
        })
    }

    /// The catalog for the current token, built again when the token changed.
    async fn session(&self) -> Result<(Arc<RestCatalog>, Option<String>)> {
        let token = self.tokens.token(&self.http).await?;
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_ref()
            && s.token == token
        {
            return Ok((Arc::clone(&s.catalog), s.prefix.clone()));
        }
        let prefix = self.load_config(token.as_ref()).await?;
        let mut props = self.config.props.clone();
        props.insert(
            "uri".into(),
            self.base.as_str().trim_end_matches('/').to_owned(),
        );
        if let Some(warehouse) = &self.config.warehouse {
            props.insert("warehouse".into(), warehouse.clone());
        }
        if let Some(token) = &token {
            props.insert("token".into(), token.expose().to_owned());
        }
        if let Some(prefix) = &prefix {
            props.insert("prefix".into(), prefix.clone());
        }
        if self.config.vended_credentials {
            props.insert(
                "header.X-Iceberg-Access-Delegation".into(),
                "vended-credentials".into(),
            );
        }
        let catalog = RestCatalogBuilder::default()
            .with_storage_factory(Arc::new(ObjectStoreStorageFactory))
            .with_client(self.http.clone())
            .load("hotgate", props)
            .await?;
        let catalog = Arc::new(catalog);
        *session = Some(Session {
            token,
            prefix: prefix.clone(),
            catalog: Arc::clone(&catalog),
        });
        Ok((catalog, prefix))
    }

    /// `GET /v1/config`: checks that the catalog answers and accepts the token, and
    /// returns the prefix to use.
    async fn load_config(&self, token: Option<&Secret>) -> Result<Option<String>> {
        let mut url = self.url(&["config"], None);
        if let Some(warehouse) = &self.config.warehouse {
            url.query_pairs_mut().append_pair("warehouse", warehouse);
        }
        let mut request = self.http.get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token.expose());
        }
        let response = request.send().await.map_err(|e| {
            TieringError::Unavailable(format!(
                "the REST catalog ([catalog] uri) is unreachable: {}",
                e.without_url()
            ))
        })?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            self.tokens.invalidate().await;
            return Err(TieringError::Config(format!(
                "the REST catalog refused {}: HTTP {status}",
                self.tokens.setting()
            )));
        }
        let body = response.bytes().await.unwrap_or_default();
        if !status.is_success() {
            return Err(TieringError::Unavailable(format!(
                "the REST catalog's GET /v1/config failed: {}",
                error_message(status, &body)
            )));
        }
        let config: ConfigResponse = serde_json::from_slice(&body).map_err(|e| {
            TieringError::Unavailable(format!("the REST catalog's config is not valid JSON: {e}"))
        })?;
        Ok(config
            .overrides
            .get("prefix")
            .or(self.config.prefix.as_ref())
            .or(config.defaults.get("prefix"))
            .filter(|p| !p.is_empty())
            .cloned())
    }

    /// `<uri>/v1[/<prefix>]/<parts...>`, each part one encoded path segment.
    fn url(&self, parts: &[&str], prefix: Option<&str>) -> url::Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().push("v1");
            if let Some(prefix) = prefix {
                segments.extend(prefix.split('/').filter(|s| !s.is_empty()));
            }
            segments.extend(parts);
        }
        url
    }

    pub(super) async fn iceberg(&self) -> Result<Arc<dyn iceberg::Catalog>> {
        Ok(self.session().await?.0)
    }

    /// Sends `updates` as one `CommitTableRequest` guarded by `base`'s table UUID and
    /// `main` snapshot.
    pub(super) async fn commit(
        &self,
        name: &TableName,
        base: &Table,
        updates: Vec<TableUpdate>,
    ) -> std::result::Result<Table, CommitFailure> {
        let (catalog, prefix) = self.session().await.map_err(CommitFailure::rejected)?;
        let ident = super::Catalog::ident(name).map_err(CommitFailure::rejected)?;
        let metadata = base.metadata();
        let request = CommitTableRequest {
            identifier: Identifier {
                namespace: name.namespace().split('.').collect(),
                name: name.name(),
            },
            requirements: vec![
                TableRequirement::UuidMatch {
                    uuid: metadata.uuid(),
                },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: iceberg::spec::MAIN_BRANCH.to_owned(),
                    snapshot_id: metadata.current_snapshot_id(),
                },
            ],
            updates,
        };
        let namespace = ident.namespace().to_url_string();
        let url = self.url(
            &["namespaces", &namespace, "tables", name.name()],
            prefix.as_deref(),
        );
        let token = self
            .tokens
            .token(&self.http)
            .await
            .map_err(CommitFailure::rejected)?;
        let mut http = self.http.post(url).json(&request);
        if let Some(token) = &token {
            http = http.bearer_auth(token.expose());
        }
        let response = match http.send().await {
            Ok(response) => response,
            // Sent or not, the catalog may have applied it.
            Err(e) => {
                return Err(CommitFailure::unknown(TieringError::Unavailable(format!(
                    "{name}: the commit to the REST catalog got no answer: {}",
                    e.without_url()
                ))));
            }
        };
        let status = response.status();
        let body = response.bytes().await.unwrap_or_default();
        use reqwest::StatusCode;
        match status {
            s if s.is_success() => catalog
                .load_table(&ident)
                .await
                .map_err(|e| CommitFailure::unknown(e.into())),
            StatusCode::CONFLICT => Err(CommitFailure::rejected(TieringError::Conflict {
                table: name.to_string(),
                detail: format!(
                    "the REST catalog refused the commit: {}",
                    error_message(status, &body)
                ),
            })),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                self.tokens.invalidate().await;
                Err(CommitFailure::rejected(TieringError::Config(format!(
                    "{name}: the REST catalog refused the commit with {}: {}",
                    self.tokens.setting(),
                    error_message(status, &body)
                ))))
            }
            StatusCode::NOT_FOUND => Err(CommitFailure::rejected(TieringError::NotFound(format!(
                "{name}: the REST catalog has no such table: {}",
                error_message(status, &body)
            )))),
            s if s.is_client_error() => {
                Err(CommitFailure::rejected(TieringError::Invalid(format!(
                    "{name}: the REST catalog refused the commit: {}",
                    error_message(status, &body)
                ))))
            }
            // 500, 502, 503, 504: the spec's CommitStateUnknown.
            _ => Err(CommitFailure::unknown(TieringError::Unavailable(format!(
                "{name}: the REST catalog failed during the commit: {}",
                error_message(status, &body)
            )))),
        }
    }
}

/// The catalog's own message when its body is the spec's error model.
fn error_message(status: reqwest::StatusCode, body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorResponse>(body) {
        Ok(e) => match e.error.kind {
            Some(kind) => format!("HTTP {status} {kind}: {}", e.error.message),
            None => format!("HTTP {status}: {}", e.error.message),
        },
        Err(_) => format!("HTTP {status}"),
    }
}
