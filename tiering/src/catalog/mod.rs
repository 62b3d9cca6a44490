//! The Iceberg catalog hotgate tiers into, and how a hotgate-built commit reaches it.
//!
//! Two kinds, chosen by `[catalog] type`:
//!
//! - [`sql`]: iceberg-rust's SQL catalog (the JDBC catalog schema, which pyiceberg's
//!   `SqlCatalog` and Spark's `JdbcCatalog` read too) on SQLite, the embedded default,
//!   or Postgres. A commit writes the next metadata file and swaps the table's pointer
//!   with the catalog's own SQL (`UPDATE iceberg_tables ... WHERE metadata_location =
//!   old`).
//! - [`rest`]: an Iceberg REST catalog (Polaris or another). A commit is a
//!   `CommitTableRequest` of the changes, guarded by `assert-table-uuid` and
//!   `assert-ref-snapshot-id`; the catalog writes the metadata file.
//!
//! Either way the caller hands over the built metadata and its changes
//! ([`iceberg::spec::TableMetadataBuildResult`]); the backend publishes them or reports
//! a [`CommitFailure`] that says whether anything may have been committed.
//!
//! Nothing is contacted when the catalog opens: a catalog that is down at start must
//! not keep hotgate from serving the hot tier. The first call connects, and a call
//! after a failure tries again.

pub mod rest;
mod rest_auth;
pub mod sql;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hotgate_store::TableName;
use iceberg::spec::TableMetadataBuildResult;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TieringError};

pub use rest_auth::Secret;

/// The catalog name hotgate registers its tables under in the SQL catalog.
pub const CATALOG_NAME: &str = "hotgate";

/// Where the Iceberg tables live. Serialized as the `[catalog]` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum CatalogConfig {
    /// iceberg-rust's SQL catalog: `sqlite:///abs/catalog.db` or
    /// `postgres://user:password@host:port/database`.
    Sql {
        uri: String,
        /// `file:///abs/dir` or `s3://bucket/prefix`.
        warehouse: String,
        /// Storage properties, e.g. `s3.endpoint`, `s3.access-key-id`.
        #[serde(default)]
        props: HashMap<String, String>,
    },
    /// An Iceberg REST catalog.
    Rest(rest::RestConfig),
}

impl CatalogConfig {
    /// The embedded default: `<data-dir>/catalog.db` and `<data-dir>/warehouse`.
    pub fn embedded(data_dir: &Path) -> Self {
        // URLs need an absolute path; the default data dir is relative.
        let data_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        CatalogConfig::Sql {
            uri: format!("sqlite://{}", data_dir.join("catalog.db").display()),
            warehouse: format!("file://{}", data_dir.join("warehouse").display()),
            props: HashMap::new(),
        }
    }

    /// The configured storage properties (S3 endpoint and credentials). Tables loaded
    /// from a REST catalog add what the catalog returns (vended credentials).
    pub fn props(&self) -> &HashMap<String, String> {
        match self {
            CatalogConfig::Sql { props, .. } => props,
            CatalogConfig::Rest(rest) => &rest.props,
        }
    }

    /// What `/tiering` and `/metrics` call this catalog: `sqlite`, `postgres` or `rest`.
    pub fn kind(&self) -> &'static str {
        match self {
            CatalogConfig::Sql { uri, .. } if uri.starts_with("postgres") => "postgres",
            CatalogConfig::Sql { .. } => "sqlite",
            CatalogConfig::Rest(_) => "rest",
        }
    }
}

/// A commit that did not land, and whether it may have landed after all.
#[derive(Debug)]
pub struct CommitFailure {
    pub error: TieringError,
    /// The catalog may have applied the commit (a timeout, a 5xx, a lost connection).
    /// Files the commit references must then stay; the next load tells.
    pub state_unknown: bool,
}

impl CommitFailure {
    pub(crate) fn rejected(error: TieringError) -> Self {
        Self {
            error,
            state_unknown: false,
        }
    }

    pub(crate) fn unknown(error: TieringError) -> Self {
        Self {
            error,
            state_unknown: true,
        }
    }
}

/// Per table, what the commits to the catalog did since start.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CommitStats {
    pub commits: u64,
    pub conflicts: u64,
    pub failures: u64,
    /// `committed`, `conflict`, `failed` or `unknown` (the catalog may have applied it).
    pub last_outcome: Option<&'static str>,
    pub last_error: Option<String>,
    /// Attempts the last tiering commit took beyond the first (conflicts retried).
    pub last_retries: u32,
    pub last_commit_ms: Option<i64>,
}

#[derive(Debug)]
enum Backend {
    Sql(sql::SqlBackend),
    Rest(Box<rest::RestBackend>),
}

/// An open catalog, shared by the tiering loop, maintenance and reads.
#[derive(Debug, Clone)]
pub struct Catalog {
    backend: Arc<Backend>,
    config: CatalogConfig,
    stats: Arc<Mutex<HashMap<TableName, CommitStats>>>,
}

impl Catalog {
    /// Checks the configuration and prepares the catalog; it connects on first use.
    pub async fn open(config: CatalogConfig) -> Result<Self> {
        let backend = match &config {
            CatalogConfig::Sql {
                uri,
                warehouse,
                props,
            } => Backend::Sql(sql::SqlBackend::new(uri, warehouse, props)?),
            CatalogConfig::Rest(rest) => {
                Backend::Rest(Box::new(rest::RestBackend::new(rest.clone())?))
            }
        };
        Ok(Self {
            backend: Arc::new(backend),
            config,
            stats: Arc::default(),
        })
    }

    pub fn config(&self) -> &CatalogConfig {
        &self.config
    }

    pub fn kind(&self) -> &'static str {
        self.config.kind()
    }

    /// The Iceberg identifier of a hotgate table: `ns.t` is `ns.t`, nested namespaces
    /// (`a.b.t`) included.
    pub fn ident(name: &TableName) -> Result<TableIdent> {
        let namespace = NamespaceIdent::from_strs(name.namespace().split('.'))?;
        Ok(TableIdent::new(namespace, name.name().to_owned()))
    }

    /// The iceberg-rust catalog, for actions it implements itself (such as
    /// `expire_snapshots`).
    pub async fn iceberg(&self) -> Result<Arc<dyn iceberg::Catalog>> {
        match &*self.backend {
            Backend::Sql(sql) => sql.iceberg().await,
            Backend::Rest(rest) => rest.iceberg().await,
        }
    }

    pub async fn load(&self, name: &TableName) -> Result<Table> {
        Ok(self
            .iceberg()
            .await?
            .load_table(&Self::ident(name)?)
            .await?)
    }

    pub async fn exists(&self, name: &TableName) -> Result<bool> {
        Ok(self
            .iceberg()
            .await?
            .table_exists(&Self::ident(name)?)
            .await?)
    }

    /// Creates the namespace (and its parents) when missing.
    pub async fn ensure_namespace(&self, namespace: &str) -> Result<()> {
        let catalog = self.iceberg().await?;
        let parts: Vec<&str> = namespace.split('.').collect();
        for depth in 1..=parts.len() {
            let ns = NamespaceIdent::from_strs(&parts[..depth])?;
            if !catalog.namespace_exists(&ns).await? {
                catalog.create_namespace(&ns, HashMap::new()).await?;
            }
        }
        Ok(())
    }

    pub async fn create(
        &self,
        name: &TableName,
        creation: iceberg::TableCreation,
    ) -> Result<Table> {
        self.ensure_namespace(name.namespace()).await?;
        let ident = Self::ident(name)?;
        Ok(self
            .iceberg()
            .await?
            .create_table(ident.namespace(), creation)
            .await?)
    }

    /// Publishes `built`, made from `base`'s metadata, if `base` is still the table's
    /// current state; then returns the table as committed. Counts the outcome.
    pub async fn commit(
        &self,
        name: &TableName,
        base: &Table,
        built: TableMetadataBuildResult,
    ) -> std::result::Result<Table, CommitFailure> {
        let result = match &*self.backend {
            Backend::Sql(sql) => sql.commit(name, base, built.metadata).await,
            Backend::Rest(rest) => rest.commit(name, base, built.changes).await,
        };
        let mut stats = self.stats.lock();
        let entry = stats.entry(name.clone()).or_default();
        entry.last_commit_ms = Some(chrono::Utc::now().timestamp_millis());
        match &result {
            Ok(_) => {
                entry.commits += 1;
                entry.last_outcome = Some("committed");
                entry.last_error = None;
            }
            Err(failure) => {
                let outcome = if failure.state_unknown {
                    entry.failures += 1;
                    "unknown"
                } else if matches!(failure.error, TieringError::Conflict { .. }) {
                    entry.conflicts += 1;
                    "conflict"
                } else {
                    entry.failures += 1;
                    "failed"
                };
                entry.last_outcome = Some(outcome);
                entry.last_error = Some(failure.error.to_string());
            }
        }
        result
    }

    /// Records how many conflicts the last tiering commit of `name` retried.
    pub(crate) fn record_retries(&self, name: &TableName, retries: u32) {
        self.stats
            .lock()
            .entry(name.clone())
            .or_default()
            .last_retries = retries;
    }

    /// What the commits to `name` did since start.
    pub fn commit_stats(&self, name: &TableName) -> CommitStats {
        self.stats.lock().get(name).cloned().unwrap_or_default()
    }

    /// Every table's commit counts, for `/metrics`.
    pub fn all_commit_stats(&self) -> Vec<(TableName, CommitStats)> {
        let stats = self.stats.lock();
        let mut all: Vec<_> = stats.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        all.sort_by_key(|a| a.0.to_string());
        all
    }
}

/// A file path as the configuration gives it, made absolute.
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
