//! The store: the registry of tables under one data directory.
//!
//! Layout: `<root>/data/<namespace>/<table>/table.json` holds the definition; the table's
//! logs live beside it in `day=YYYY-MM-DD/bucket=N/` directories of segment files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use arrow_array::RecordBatch;

use crate::error::{Result, StoreError};
use crate::fs::{create_dir_durable, write_file_durable};
use crate::hot_table::{AppendResult, HotTable};
use crate::log::LogOptions;
use crate::metrics::StoreMetrics;
use crate::primary_key::StateDb;
use crate::table_def::{TableDef, TableKind, TableName, TableSpec};

const DEF_FILE: &str = "table.json";

/// Options of a store; the defaults suit production.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub log: LogOptions,
    /// Memory for the current rows of primary-key tables, which serve lookups (0: none;
    /// lookups then read RocksDB alone).
    pub state_cache_bytes: u64,
}

/// The default state cache: 256 MiB, about 1.5 million rows of 100 bytes.
pub const DEFAULT_STATE_CACHE_BYTES: u64 = 256 << 20;

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            log: LogOptions::default(),
            state_cache_bytes: DEFAULT_STATE_CACHE_BYTES,
        }
    }
}

/// The hot tier of every table under one data directory.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    options: StoreOptions,
    metrics: Arc<StoreMetrics>,
    tables: RwLock<BTreeMap<TableName, Arc<HotTable>>>,
    create: tokio::sync::Mutex<()>,
    /// RocksDB for primary-key tables, opened when the first one is.
    state: parking_lot::Mutex<Option<Arc<StateDb>>>,
}

/// The state database a table needs: none for log tables; for primary-key tables, the
/// store's one RocksDB under `<root>/state`, opened on first use.
fn state_for(
    root: &Path,
    options: &StoreOptions,
    slot: &parking_lot::Mutex<Option<Arc<StateDb>>>,
    def: &TableDef,
) -> Result<Option<Arc<StateDb>>> {
    if matches!(def.kind(), TableKind::Log) {
        return Ok(None);
    }
    let mut slot = slot.lock();
    if let Some(db) = slot.as_ref() {
        return Ok(Some(Arc::clone(db)));
    }
    let db = StateDb::open(&root.join("state"), options.state_cache_bytes)?;
    *slot = Some(Arc::clone(&db));
    Ok(Some(db))
}

impl Store {
    /// Bytes held by the state cache of primary-key tables (0 before the first one).
    pub fn state_cache_bytes(&self) -> u64 {
        self.state.lock().as_ref().map_or(0, |db| db.cache_bytes())
    }

    /// Opens the store in `root`, creating it if needed, and recovers every table.
    /// Must be called inside a Tokio runtime: each log gets a writer task.
    pub fn open(root: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let data = root.join("data");
        create_dir_durable(&data)?;
        let metrics = Arc::new(StoreMetrics::default());
        let state = parking_lot::Mutex::new(None);
        let mut tables = BTreeMap::new();
        for ns in read_dirs(&data)? {
            for table_dir in read_dirs(&ns)? {
                let def_path = table_dir.join(DEF_FILE);
                if !def_path.exists() {
                    tracing::warn!(path = %table_dir.display(), "ignoring directory without {DEF_FILE}");
                    continue;
                }
                let text =
                    std::fs::read_to_string(&def_path).map_err(|e| StoreError::io(&def_path, e))?;
                let spec: TableSpec = serde_json::from_str(&text).map_err(|e| {
                    StoreError::corrupt(&def_path, format!("unreadable table definition: {e}"))
                })?;
                let def = TableDef::new(spec)
                    .map_err(|e| StoreError::corrupt(&def_path, e.to_string()))?;
                let name = def.name().clone();
                let db = state_for(&root, &options, &state, &def)?;
                let table = HotTable::open(
                    def,
                    table_dir,
                    options.log.clone(),
                    Arc::clone(&metrics),
                    db,
                )?;
                crate::state_recovery::catch_up(&table)?;
                tables.insert(name, table);
            }
        }
        Ok(Self {
            root,
            options,
            metrics,
            tables: RwLock::new(tables),
            create: tokio::sync::Mutex::new(()),
            state,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn metrics(&self) -> &Arc<StoreMetrics> {
        &self.metrics
    }

    /// Creates a table from a spec, durably. Creating a table that exists with the same
    /// definition returns it; with another definition it is an error.
    pub async fn create_table(&self, spec: TableSpec) -> Result<Arc<HotTable>> {
        let def = TableDef::new(spec)?;
        let _guard = self.create.lock().await;
        if let Ok(existing) = self.table(def.name()) {
            if existing.def().spec() == def.spec() {
                return Ok(existing);
            }
            return Err(StoreError::TableExists(def.name().to_string()));
        }
        let dir = self.table_dir(def.name());
        create_dir_durable(&dir)?;
        let json = serde_json::to_vec_pretty(def.spec())
            .map_err(|e| StoreError::InvalidDefinition(e.to_string()))?;
        write_file_durable(&dir.join(DEF_FILE), &json)?;
        let name = def.name().clone();
        let db = state_for(&self.root, &self.options, &self.state, &def)?;
        let table = HotTable::open(
            def,
            dir,
            self.options.log.clone(),
            Arc::clone(&self.metrics),
            db,
        )?;
        crate::state_recovery::catch_up(&table)?;
        self.tables.write().insert(name, Arc::clone(&table));
        Ok(table)
    }

    /// Replaces the definition of a table with `next`, durably, if the table's current
    /// definition is still `base` and `next` only adds columns to it (see
    /// [`TableDef::with_added_columns`]). Appends in flight finish under the definition
    /// they started with; frames written before have fewer columns and read back with
    /// nulls for the new ones.
    pub async fn add_columns(&self, base: &TableDef, next: TableDef) -> Result<Arc<HotTable>> {
        let _guard = self.create.lock().await;
        let table = self.table(next.name())?;
        if *table.def() != *base {
            return Err(StoreError::InvalidRequest(format!(
                "{}: the table definition changed meanwhile; retry",
                next.name()
            )));
        }
        if !base.evolves_to(&next) {
            return Err(StoreError::InvalidDefinition(format!(
                "{}: a schema change may only add columns at the end",
                next.name()
            )));
        }
        let dir = self.table_dir(next.name());
        let json = serde_json::to_vec_pretty(next.spec())
            .map_err(|e| StoreError::InvalidDefinition(e.to_string()))?;
        write_file_durable(&dir.join(DEF_FILE), &json)?;
        table.evolve(next).await?;
        Ok(table)
    }

    fn table_dir(&self, name: &TableName) -> PathBuf {
        self.root
            .join("data")
            .join(name.namespace())
            .join(name.name())
    }

    /// The table of that name, or `NotFound`.
    pub fn table(&self, name: &TableName) -> Result<Arc<HotTable>> {
        self.tables
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::TableNotFound(name.to_string()))
    }

    /// Every table, by name.
    pub fn tables(&self) -> Vec<Arc<HotTable>> {
        self.tables.read().values().cloned().collect()
    }

    /// Appends a batch to a table; see [`HotTable::append`].
    pub async fn append(&self, name: &TableName, batch: &RecordBatch) -> Result<AppendResult> {
        self.table(name)?.append(batch).await
    }

    /// Stops every writer once its queued appends are durable. Appends after this fail.
    pub async fn close(&self) {
        for table in self.tables() {
            table.close().await;
        }
    }
}

fn read_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        if entry.path().is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}
