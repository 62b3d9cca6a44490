//! The Iceberg catalog hotgate tiers into, and the compare-and-swap of its table pointer.
//!
//! The embedded default is iceberg-rust's SQL catalog on SQLite (the JDBC catalog schema,
//! which pyiceberg's `SqlCatalog` and Spark's `JdbcCatalog` read too). [`CatalogConfig`] is
//! tagged by `type` so Postgres and an Iceberg REST catalog slot in later without
//! reshaping configs.
//!
//! iceberg-rust keeps `TableCommit` construction private, so commits hotgate builds itself
//! (see [`crate::commit`]) swap the pointer here with the catalog's own SQL:
//! `UPDATE iceberg_tables SET metadata_location = new WHERE metadata_location = old`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use hotgate_store::TableName;
use iceberg::table::Table;
use iceberg::{Catalog as _, CatalogBuilder as _, NamespaceIdent, TableIdent};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalog, SqlCatalogBuilder};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use crate::error::{Result, TieringError};
use crate::storage::ObjectStoreStorageFactory;

/// The catalog name hotgate registers its tables under.
pub const CATALOG_NAME: &str = "hotgate";

/// Where the Iceberg tables live. Serialized as the `[catalog]` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum CatalogConfig {
    /// iceberg-rust's SQL catalog. Only SQLite URIs (`sqlite:///abs/catalog.db`) for now.
    Sql {
        uri: String,
        /// `file:///abs/dir` or `s3://bucket/prefix`.
        warehouse: String,
        /// Storage properties, e.g. `s3.endpoint`, `s3.access-key-id`.
        #[serde(default)]
        props: HashMap<String, String>,
    },
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

    pub fn warehouse(&self) -> &str {
        match self {
            CatalogConfig::Sql { warehouse, .. } => warehouse,
        }
    }

    /// The storage properties (S3 endpoint and credentials).
    pub fn props(&self) -> &HashMap<String, String> {
        match self {
            CatalogConfig::Sql { props, .. } => props,
        }
    }
}

/// An open catalog: iceberg-rust's catalog for reads and table creation, plus a
/// connection of our own for the pointer swap of hotgate-built commits.
#[derive(Debug, Clone)]
pub struct Catalog {
    inner: Arc<SqlCatalog>,
    pool: SqlitePool,
    config: CatalogConfig,
}

impl Catalog {
    pub async fn open(config: CatalogConfig) -> Result<Self> {
        let CatalogConfig::Sql {
            uri,
            warehouse,
            props,
        } = &config;
        let Some(file) = uri.strip_prefix("sqlite://") else {
            return Err(TieringError::Config(format!(
                "catalog uri {uri:?} is not supported yet: use sqlite:///abs/path/catalog.db"
            )));
        };
        let file = file.split('?').next().unwrap_or_default();
        if let Some(dir) = Path::new(file).parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                TieringError::Config(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        if let Some(dir) = warehouse.strip_prefix("file://") {
            std::fs::create_dir_all(dir)
                .map_err(|e| TieringError::Config(format!("cannot create {dir}: {e}")))?;
        }
        let mut catalog_props = props.clone();
        catalog_props.insert("uri".into(), format!("sqlite://{file}?mode=rwc"));
        catalog_props.insert("warehouse".into(), warehouse.clone());
        catalog_props.insert("sql_bind_style".into(), SqlBindStyle::QMark.to_string());
        let inner = SqlCatalogBuilder::default()
            .with_storage_factory(Arc::new(ObjectStoreStorageFactory))
            .load(CATALOG_NAME, catalog_props)
            .await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(SqliteConnectOptions::new().filename(file))
            .await?;
        Ok(Self {
            inner: Arc::new(inner),
            pool,
            config,
        })
    }

    pub fn config(&self) -> &CatalogConfig {
        &self.config
    }

    /// The Iceberg identifier of a hotgate table: `ns.t` is `ns.t`, nested namespaces
    /// (`a.b.t`) included.
    pub fn ident(name: &TableName) -> Result<TableIdent> {
        let namespace = NamespaceIdent::from_strs(name.namespace().split('.'))?;
        Ok(TableIdent::new(namespace, name.name().to_owned()))
    }

    pub async fn load(&self, name: &TableName) -> Result<Table> {
        Ok(self.inner.load_table(&Self::ident(name)?).await?)
    }

    pub async fn exists(&self, name: &TableName) -> Result<bool> {
        Ok(self.inner.table_exists(&Self::ident(name)?).await?)
    }

    /// Creates the namespace (and its parents) when missing.
    pub async fn ensure_namespace(&self, namespace: &str) -> Result<()> {
        let parts: Vec<&str> = namespace.split('.').collect();
        for depth in 1..=parts.len() {
            let ns = NamespaceIdent::from_strs(&parts[..depth])?;
            if !self.inner.namespace_exists(&ns).await? {
                self.inner.create_namespace(&ns, HashMap::new()).await?;
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
        Ok(self.inner.create_table(ident.namespace(), creation).await?)
    }

    /// Points the catalog at `new_location` if it still points at `expected`. Returns
    /// false, changing nothing, when another commit moved the pointer first.
    pub async fn swap_metadata(
        &self,
        name: &TableName,
        expected: &str,
        new_location: &str,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
             AND metadata_location = ?",
        )
        .bind(new_location)
        .bind(expected)
        .bind(CATALOG_NAME)
        .bind(name.namespace())
        .bind(name.name())
        .bind(expected)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The iceberg-rust catalog, for actions it implements itself (such as
    /// `expire_snapshots`).
    pub fn iceberg(&self) -> &SqlCatalog {
        &self.inner
    }
}
