//! A client for the Polaris management API, enough to mirror one catalog's grants:
//! catalog roles, their grants and principal-role assignees, and the principals of each
//! principal role. The result is one [`GrantsDocument`], built whole or not at all.

use std::time::Duration;

use hotgate_policy::GrantsDocument;
use hotgate_policy::grants::{CatalogDoc, CatalogRoleDoc, GrantResource, PrincipalRoleDoc};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::config::GrantsConfig;
use crate::error::{GatewayError, Result};

const API: [&str; 3] = ["api", "management", "v1"];

#[derive(Debug)]
pub struct PolarisClient {
    base: reqwest::Url,
    token: String,
    catalog: String,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct Roles {
    roles: Vec<Named>,
}

#[derive(Deserialize)]
struct Principals {
    principals: Vec<Named>,
}

#[derive(Deserialize)]
struct Grants {
    grants: Vec<GrantResource>,
}

impl PolarisClient {
    pub fn from_config(config: &GrantsConfig) -> Result<Self> {
        let url = config.polaris_url.as_deref().ok_or_else(|| {
            GatewayError::InvalidArgument(
                "grants.source = \"polaris\" needs grants.polaris_url".into(),
            )
        })?;
        let base = reqwest::Url::parse(url).map_err(|e| {
            GatewayError::InvalidArgument(format!("grants.polaris_url {url:?}: {e}"))
        })?;
        if base.cannot_be_a_base() {
            return Err(GatewayError::InvalidArgument(format!(
                "grants.polaris_url {url:?} is not an http(s) base URL"
            )));
        }
        let token = match (&config.polaris_token, &config.polaris_token_file) {
            (Some(t), None) => t.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| {
                    GatewayError::InvalidArgument(format!(
                        "grants.polaris_token_file {}: {e}",
                        path.display()
                    ))
                })?
                .trim()
                .to_owned(),
            _ => {
                return Err(GatewayError::InvalidArgument(
                    "grants.source = \"polaris\" needs exactly one of grants.polaris_token or \
                     grants.polaris_token_file"
                        .into(),
                ));
            }
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| GatewayError::Internal(format!("HTTP client: {e}")))?;
        Ok(Self {
            base,
            token,
            catalog: config.catalog.clone(),
            http,
        })
    }

    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| GatewayError::Internal("polaris URL cannot take a path".into()))?
            .pop_if_empty()
            .extend(API)
            .extend(segments);
        let unavailable =
            |what: String| GatewayError::Unavailable(format!("polaris {url}: {what}"));
        let response = self
            .http
            .get(url.clone())
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(unavailable(format!("HTTP {status}")));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        serde_json::from_slice(&body).map_err(|e| {
            GatewayError::InvalidArgument(format!("polaris {url}: unexpected response: {e}"))
        })
    }

    /// Reads the whole grant model of the configured catalog. Any failed request fails
    /// the fetch: a half-read mirror is never returned.
    pub async fn fetch_document(&self) -> Result<GrantsDocument> {
        let cat = self.catalog.as_str();
        let roles: Roles = self.get(&["catalogs", cat, "catalog-roles"]).await?;
        let mut catalog_roles = Vec::with_capacity(roles.roles.len());
        for role in roles.roles {
            let r = role.name.as_str();
            let grants: Grants = self
                .get(&["catalogs", cat, "catalog-roles", r, "grants"])
                .await?;
            let assignees: Roles = self
                .get(&["catalogs", cat, "catalog-roles", r, "principal-roles"])
                .await?;
            catalog_roles.push(CatalogRoleDoc {
                name: role.name.clone(),
                principal_roles: assignees.roles.into_iter().map(|n| n.name).collect(),
                grants: grants.grants,
            });
        }
        let principal_roles: Roles = self.get(&["principal-roles"]).await?;
        let mut prs = Vec::with_capacity(principal_roles.roles.len());
        for pr in principal_roles.roles {
            let principals: Principals = self
                .get(&["principal-roles", pr.name.as_str(), "principals"])
                .await?;
            prs.push(PrincipalRoleDoc {
                name: pr.name,
                principals: principals.principals.into_iter().map(|p| p.name).collect(),
            });
        }
        Ok(GrantsDocument {
            catalogs: vec![CatalogDoc {
                name: self.catalog.clone(),
                catalog_roles,
            }],
            principal_roles: prs,
        })
    }
}
