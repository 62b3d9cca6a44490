//! The SQL catalog: iceberg-rust's `SqlCatalog` on SQLite or Postgres, plus a pool of
//! our own for the compare-and-swap of the table pointer.
//!
//! iceberg-rust keeps `TableCommit` construction private, so commits hotgate builds
//! itself write the next metadata file here and swap the pointer with the catalog's
//! own SQL: `UPDATE iceberg_tables SET metadata_location = new WHERE metadata_location =
//! old`. One row updated is a commit; none is a conflict.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use hotgate_store::TableName;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{Catalog as _, CatalogBuilder as _, MetadataLocation};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalog, SqlCatalogBuilder};
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use tokio::sync::OnceCell;

use super::{CATALOG_NAME, CommitFailure};
use crate::error::{Result, TieringError};
use crate::storage::ObjectStoreStorageFactory;

/// Which database holds the catalog: its placeholders differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Sqlite,
    Postgres,
}

#[derive(Debug)]
struct Open {
    catalog: Arc<SqlCatalog>,
    pool: AnyPool,
}

/// A SQL catalog, connected on first use.
#[derive(Debug)]
pub struct SqlBackend {
    dialect: Dialect,
    /// The URI sqlx connects to (SQLite's with `mode=rwc`).
    uri: String,
    warehouse: String,
    props: HashMap<String, String>,
    open: OnceCell<Open>,
}

impl SqlBackend {
    pub(super) fn new(uri: &str, warehouse: &str, props: &HashMap<String, String>) -> Result<Self> {
        let (dialect, uri) = if let Some(file) = uri.strip_prefix("sqlite://") {
            let file = file.split('?').next().unwrap_or_default();
            if let Some(dir) = Path::new(file).parent() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    TieringError::Config(format!(
                        "[catalog] uri: cannot create the directory of the SQLite file: {e}"
                    ))
                })?;
            }
            (Dialect::Sqlite, format!("sqlite://{file}?mode=rwc"))
        } else if uri.starts_with("postgres://") || uri.starts_with("postgresql://") {
            (Dialect::Postgres, uri.to_owned())
        } else {
            return Err(TieringError::Config(
                "[catalog] uri: a SQL catalog takes sqlite:///abs/path/catalog.db or \
                 postgres://user:password@host:port/database"
                    .into(),
            ));
        };
        if let Some(dir) = warehouse.strip_prefix("file://") {
            std::fs::create_dir_all(dir).map_err(|e| {
                TieringError::Config(format!("[catalog] warehouse: cannot create it: {e}"))
            })?;
        }
        Ok(Self {
            dialect,
            uri,
            warehouse: warehouse.to_owned(),
            props: props.clone(),
            open: OnceCell::new(),
        })
    }

    /// Connects when not connected yet; a failed attempt is tried again next call.
    async fn open(&self) -> Result<&Open> {
        self.open
            .get_or_try_init(|| async {
                let mut props = self.props.clone();
                props.insert("uri".into(), self.uri.clone());
                props.insert("warehouse".into(), self.warehouse.clone());
                let bind = match self.dialect {
                    Dialect::Sqlite => SqlBindStyle::QMark,
                    Dialect::Postgres => SqlBindStyle::DollarNumeric,
                };
                props.insert("sql_bind_style".into(), bind.to_string());
                let catalog = SqlCatalogBuilder::default()
                    .with_storage_factory(Arc::new(ObjectStoreStorageFactory))
                    .load(CATALOG_NAME, props)
                    .await
                    .map_err(|e| self.unreachable(e))?;
                let pool = AnyPoolOptions::new()
                    .max_connections(2)
                    .connect(&self.uri)
                    .await
                    .map_err(|e| self.unreachable(e))?;
                Ok(Open {
                    catalog: Arc::new(catalog),
                    pool,
                })
            })
            .await
    }

    /// The database's own message may quote the URI, password included: keep only
    /// what kind of catalog failed.
    fn unreachable(&self, e: impl std::fmt::Display) -> TieringError {
        let what = match self.dialect {
            Dialect::Sqlite => "the SQLite catalog",
            Dialect::Postgres => "the Postgres catalog ([catalog] uri)",
        };
        let detail = e.to_string();
        let detail = if detail.contains("://") {
            "cannot connect".to_owned()
        } else {
            detail
        };
        TieringError::Unavailable(format!("{what}: {detail}"))
    }

    pub(super) async fn iceberg(&self) -> Result<Arc<dyn iceberg::Catalog>> {
        Ok(self.open().await?.catalog.clone())
    }

    /// Writes `metadata` as the next metadata file of `base` and swaps the pointer.
    pub(super) async fn commit(
        &self,
        name: &TableName,
        base: &Table,
        metadata: TableMetadata,
    ) -> std::result::Result<Table, CommitFailure> {
        let open = self.open().await.map_err(CommitFailure::rejected)?;
        let base_location = base
            .metadata_location()
            .ok_or_else(|| {
                CommitFailure::rejected(TieringError::Internal(format!(
                    "{name}: table has no metadata location"
                )))
            })?
            .to_owned();
        let location = MetadataLocation::from_str(&base_location)
            .map_err(|e| CommitFailure::rejected(e.into()))?
            .with_next_version()
            .with_new_metadata(&metadata);
        metadata
            .write_to(base.file_io(), &location)
            .await
            .map_err(|e| CommitFailure::rejected(e.into()))?;
        let location = location.to_string();
        let swapped = match self.swap(&open.pool, name, &base_location, &location).await {
            Ok(swapped) => swapped,
            // The update may have run before the error: the file stays.
            Err(e) => return Err(CommitFailure::unknown(e)),
        };
        if !swapped {
            if let Err(e) = base.file_io().delete(&location).await {
                tracing::warn!(error = %e, "cannot delete the metadata file of a lost commit");
            }
            return Err(CommitFailure::rejected(TieringError::Conflict {
                table: name.to_string(),
                detail: "another commit changed the table since it was read".into(),
            }));
        }
        // Reloaded rather than assembled: the catalog builds tables with its own runtime.
        open.catalog
            .load_table(&super::Catalog::ident(name).map_err(CommitFailure::unknown)?)
            .await
            .map_err(|e| CommitFailure::unknown(e.into()))
    }

    /// Points the catalog at `new_location` if it still points at `expected`. Returns
    /// false, changing nothing, when another commit moved the pointer first.
    async fn swap(
        &self,
        pool: &AnyPool,
        name: &TableName,
        expected: &str,
        new_location: &str,
    ) -> Result<bool> {
        let sql = match self.dialect {
            Dialect::Sqlite => {
                "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
                 WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
                 AND metadata_location = ?"
            }
            Dialect::Postgres => {
                "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
                 WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 \
                 AND metadata_location = $6"
            }
        };
        let done = sqlx::query(sql)
            .bind(new_location)
            .bind(expected)
            .bind(CATALOG_NAME)
            .bind(name.namespace())
            .bind(name.name())
            .bind(expected)
            .execute(pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
