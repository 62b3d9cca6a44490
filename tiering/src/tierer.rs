//! The tiering loop: hot logs past the tiered offsets become Parquet files, committed
//! for all buckets of a table at once with the new offsets in the same snapshot.
//!
//! - **Cadence.** A log is due when its untiered bytes reach the table's target file
//!   size, or when its oldest untiered row has waited `max_freshness`. A cycle converts
//!   every due log and commits once. A forced cycle (`POST .../tier`) converts every log
//!   with untiered rows.
//! - **Exactly-once.** The offsets a cycle starts from are read from the table's current
//!   snapshot, and the commit requires that snapshot to still be current. A crash before
//!   the commit leaves orphan files the purge removes; after it, the next start reads the
//!   new offsets. Watermarks are never persisted elsewhere. When another writer
//!   committed in between (a conflict), the cycle deletes its files, reloads and
//!   converts again from the offsets of the new current snapshot, a few times.
//! - **Watermarks** (the committed offsets) gate hot retention: untiered rows are never
//!   purged.
//! - One cycle or maintenance job runs per table at a time (a per-table lock).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use std::time::Duration;

use hotgate_store::{HotTable, LogFloor, LogId, SourceMarks, TableDef, TableName};
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::catalog::{Catalog, CommitStats};
use crate::cold_scan::ColdSnapshot;
use crate::commit::{CommitRequest, commit, commit_schema};
use crate::convert::{Converter, RowSuppression};
use crate::cow::CowReport;
use crate::error::{Result, TieringError};
use crate::history::{HistoryReport, delete_unreferenced, expire_history};
use crate::leases::Leases;
use crate::maintenance::{MaintenanceOptions, MaintenanceReport, compact, expire, purge};
use crate::offsets::{OFFSETS_PROP, TieredOffsets};
use crate::retention::{ColdRetentionReport, drop_old_days};
use crate::source_offsets::{ColdSources, SourcePartitions, SourceProgress};
use crate::storage::ObjectStoreStorage;
use crate::table_spec::{
    HOTGATE_TABLE_PROP, iceberg_schema, partition_spec, properties, table_creation,
};

/// How often a cycle whose commit conflicted reloads and tries again before it fails
/// (and the loop's backoff takes over).
const CONFLICT_RETRIES: u32 = 5;

/// One file a cycle wrote.
#[derive(Debug, Clone, Serialize)]
pub struct WrittenFile {
    pub path: String,
    pub partition: String,
    pub records: u64,
    pub bytes: u64,
}

/// What one tiering cycle did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CycleReport {
    /// The snapshot committed, or none when nothing was due.
    pub snapshot_id: Option<i64>,
    pub files: Vec<WrittenFile>,
    pub records: u64,
    /// Every log's tiered offset after the cycle, as in `hotgate.offsets`.
    pub offsets: BTreeMap<String, u64>,
}

/// What `GET /v1/tables/{id}/tiering` shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TieringStatus {
    /// The catalog kind: `sqlite`, `postgres` or `rest`.
    pub catalog: &'static str,
    /// The Iceberg table is open. When it is not (the catalog is unreachable, or the
    /// table there differs from hotgate's), nothing is tiered and hot retention keeps
    /// every row; `last_error` says why.
    pub ready: bool,
    /// The last failure to open the table or to tier it, cleared by the next success.
    pub last_error: Option<String>,
    pub last_error_ms: Option<i64>,
    /// Failures in a row; the scheduler waits 1 s after the first, doubling up to 5 min.
    pub consecutive_failures: u32,
    /// How long until the scheduler tries again, when it is backing off.
    pub retry_in_ms: Option<u64>,
    /// What the commits to the catalog did since start: counts, and the last outcome
    /// with its conflict retries.
    pub commits: CommitStats,
    /// Per hot log, the first offset not in the cold tier.
    pub watermarks: BTreeMap<String, u64>,
    pub snapshot_id: Option<i64>,
    /// Commit time of the current snapshot, ms since the epoch.
    pub snapshot_timestamp_ms: Option<i64>,
    pub snapshots: usize,
    pub files: u64,
    pub bytes: u64,
    pub records: u64,
    pub target_file_size: u64,
    /// Live data files by size relative to the target: `<1/8`, `1/8-1/2`, `1/2-1`, `>=1`.
    pub size_histogram: BTreeMap<String, u64>,
    /// The table's `cold_retention`, if any (`30days`).
    pub cold_retention: Option<String>,
    /// The oldest day partition with live files (`YYYY-MM-DD`).
    pub oldest_day: Option<String>,
    /// The last cold retention run that dropped days since start, and when (ms).
    pub last_cold_retention: Option<ColdRetentionReport>,
    pub last_cold_retention_ms: Option<i64>,
}

/// Lists `table`'s location (iceberg's storage cannot list), with the table's own
/// storage properties: vended credentials, when the catalog hands them out.
fn listing(table: &Table) -> ObjectStoreStorage {
    ObjectStoreStorage::new(table.file_io().config().props().clone())
}

/// Refuses to tier into a table hotgate did not create when its schema or partition
/// spec differs from what `def` derives: another engine's table is never rewritten.
/// hotgate's own tables (`hotgate.table` names this table) may differ in schema after
/// a crash mid schema change, which [`Tierer::ensure_table`] converges; their spec must
/// still match.
fn check_adoptable(def: &TableDef, table: &Table) -> Result<()> {
    let metadata = table.metadata();
    let name = def.name();
    let owned = metadata.properties().get(HOTGATE_TABLE_PROP) == Some(&name.to_string());
    let wanted_schema = iceberg_schema(def)?;
    let current = metadata.current_schema();
    if !owned && current.as_struct() != wanted_schema.as_struct() {
        let fields = |s: &iceberg::spec::Schema| {
            s.as_struct()
                .fields()
                .iter()
                .map(|f| format!("{}: {} (id {})", f.name, f.field_type, f.id))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(TieringError::Invalid(format!(
            "the Iceberg table of {name} exists in the catalog, was not created by hotgate, and its schema [{}] differs from hotgate's [{}]; tiering of {name} stops, nothing is overwritten",
            fields(current),
            fields(&wanted_schema),
        )));
    }
    let wanted_spec = partition_spec(def, &wanted_schema)?;
    let spec = metadata.default_partition_spec();
    let same_spec = spec.fields().len() == wanted_spec.fields().len()
        && spec
            .fields()
            .iter()
            .zip(wanted_spec.fields())
            .all(|(have, want)| {
                have.source_id == want.source_id && have.transform == want.transform
            });
    if !same_spec {
        let show = |fields: Vec<String>| format!("[{}]", fields.join(", "));
        return Err(TieringError::Invalid(format!(
            "the Iceberg table of {name} exists in the catalog with partition spec {} where hotgate partitions by {}; tiering of {name} stops, nothing is overwritten",
            show(
                spec.fields()
                    .iter()
                    .map(|f| format!("{}(field {})", f.transform, f.source_id))
                    .collect()
            ),
            show(
                wanted_spec
                    .fields()
                    .iter()
                    .map(|f| format!("{}(field {})", f.transform, f.source_id))
                    .collect()
            ),
        )));
    }
    Ok(())
}

/// The histogram bucket of a file of `bytes` against `target`.
pub fn size_class(bytes: u64, target: u64) -> &'static str {
    let target = target.max(1);
    if bytes * 8 < target {
        "<1/8"
    } else if bytes * 2 < target {
        "1/8-1/2"
    } else if bytes < target {
        "1/2-1"
    } else {
        ">=1"
    }
}

/// Per-table tiering state.
#[derive(Debug, Default)]
struct TableState {
    /// Held for a whole cycle or maintenance job.
    busy: Mutex<()>,
    /// The offsets of the latest committed snapshot.
    watermarks: RwLock<TieredOffsets>,
    /// The Iceberg table exists and the watermarks are loaded.
    ready: std::sync::atomic::AtomicBool,
    /// The table as last loaded or committed: what union reads scan. hotgate's own
    /// commits all pass through here; another writer's commit (the catalog owner's
    /// maintenance) shows from the next load.
    current: RwLock<Option<Table>>,
    /// The last cold retention run that dropped something, with its time (ms).
    last_retention: RwLock<Option<(i64, ColdRetentionReport)>>,
    /// Reads in flight, by the snapshot they read.
    leases: Arc<Leases>,
    /// The last failure to open or tier the table, with its time (ms).
    last_error: RwLock<Option<(i64, String)>>,
    /// Failures in a row, and when the scheduler may try again.
    backoff: RwLock<(u32, Option<std::time::Instant>)>,
}

/// The scheduler's wait after the first failure of a table; it doubles with each
/// failure in a row, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl TableState {
    /// Remembers the outcome of an open or a cycle for the status.
    fn note<T>(&self, result: &Result<T>) {
        *self.last_error.write() = result
            .as_ref()
            .err()
            .map(|e| (chrono::Utc::now().timestamp_millis(), e.to_string()));
        let mut backoff = self.backoff.write();
        *backoff = match result {
            Ok(_) => (0, None),
            Err(_) => {
                let failures = backoff.0.saturating_add(1);
                let wait = FIRST_BACKOFF
                    .saturating_mul(1 << (failures - 1).min(16))
                    .min(MAX_BACKOFF);
                (failures, Some(std::time::Instant::now() + wait))
            }
        };
    }
}

/// Tiers hot tables into their Iceberg tables.
#[derive(Debug)]
pub struct Tierer {
    catalog: Catalog,
    tables: RwLock<HashMap<TableName, Arc<TableState>>>,
    /// Rows cycles must not write (pending deletion requests).
    suppression: RwLock<Option<Arc<dyn RowSuppression>>>,
    /// Where the sources writing each table have got to.
    progress: RwLock<Option<Arc<dyn SourceProgress>>>,
}

impl Tierer {
    pub fn new(catalog: Catalog) -> Self {
        Self {
            catalog,
            tables: RwLock::default(),
            suppression: RwLock::default(),
            progress: RwLock::default(),
        }
    }

    /// Installs what tells a cycle where each table's sources have got to.
    pub fn set_source_progress(&self, progress: Arc<dyn SourceProgress>) {
        *self.progress.write() = Some(progress);
    }

    /// Installs the filter of rows that tiering cycles drop from what they convert.
    pub fn set_suppression(&self, suppression: Arc<dyn RowSuppression>) {
        *self.suppression.write() = Some(suppression);
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    fn state(&self, name: &TableName) -> Arc<TableState> {
        if let Some(s) = self.tables.read().get(name) {
            return Arc::clone(s);
        }
        let mut tables = self.tables.write();
        Arc::clone(tables.entry(name.clone()).or_default())
    }

    /// Creates the Iceberg table of `hot` when it does not exist yet, loads its
    /// watermarks, and tells the hot table what the cold tier holds of each log
    /// ([`hotgate_store::LogFloor`]), so a hot tier that lost what it tiered (a new data
    /// directory) writes nothing twice. Idempotent: hotgate calls it for every table on
    /// start. Until it succeeds, the table is not ready: no cycle runs and no source
    /// writes it.
    pub async fn ensure_table(&self, hot: &HotTable) -> Result<Table> {
        let def = hot.def();
        let state = self.state(def.name());
        let opened = async {
            let table = self.open_table(&def, &state).await?;
            let lost = install_floors(hot, &table)?;
            crate::restore::restore_buckets(hot, &table, &lost).await?;
            state
                .ready
                .store(true, std::sync::atomic::Ordering::Release);
            Ok(table)
        }
        .await;
        state.note(&opened);
        opened
    }

    /// Creates the Iceberg table of `def` when it does not exist yet, or checks that
    /// the one there can be adopted, before its hot table exists;
    /// [`Tierer::ensure_table`] follows once it does.
    pub async fn prepare_table(&self, def: &TableDef) -> Result<()> {
        let state = self.state(def.name());
        let opened = self.open_table(def, &state).await.map(|_| ());
        state.note(&opened);
        opened
    }

    async fn open_table(&self, def: &TableDef, state: &TableState) -> Result<Table> {
        let name = def.name();
        let table = if self.catalog.exists(name).await? {
            let _busy = state.busy.lock().await;
            let table = self.catalog.load(name).await?;
            check_adoptable(def, &table)?;
            self.converge_schema(def, table).await?
        } else {
            self.catalog.create(name, table_creation(def)?).await?
        };
        let offsets = TieredOffsets::current(table.metadata())?;
        *state.watermarks.write() = offsets;
        *state.current.write() = Some(table.clone());
        Ok(table)
    }

    /// Per source and partition, the offset at or below which every record is in the
    /// cold tier of `name`, as of the last load or commit (see [`crate::source_offsets`]).
    pub fn cold_source_offsets(&self, name: &TableName) -> Result<SourcePartitions> {
        match self.state(name).current.read().as_ref() {
            Some(table) => Ok(ColdSources::current(table.metadata())?.complete),
            None => Ok(SourcePartitions::new()),
        }
    }

    /// Makes the Iceberg schema of `def`'s table equal to the schema `def` derives, in
    /// one metadata commit; nothing happens when they already agree. The hot table's
    /// definition is the source of truth: schema changes commit here first and in the
    /// hot table second, so after a crash between the two, this (run on start by
    /// [`Tierer::ensure_table`]) rolls Iceberg back to the hot table's schema.
    pub async fn sync_schema(&self, def: &TableDef) -> Result<()> {
        let state = self.state(def.name());
        let _busy = state.busy.lock().await;
        let table = self.catalog.load(def.name()).await?;
        let table = self.converge_schema(def, table).await?;
        *state.current.write() = Some(table);
        Ok(())
    }

    /// The highest field id the Iceberg table ever used: new columns get ids above it,
    /// so an id is never reused, even after a rolled-back change.
    pub async fn last_column_id(&self, name: &TableName) -> Result<i32> {
        Ok(self.catalog.load(name).await?.metadata().last_column_id())
    }

    async fn converge_schema(&self, def: &TableDef, table: Table) -> Result<Table> {
        let wanted = iceberg_schema(def)?;
        let current = table.metadata().current_schema();
        let same = current.as_struct() == wanted.as_struct()
            && current.identifier_field_ids().collect::<BTreeSet<_>>()
                == wanted.identifier_field_ids().collect::<BTreeSet<_>>();
        if same {
            return Ok(table);
        }
        tracing::info!(table = %def.name(), "committing the hot table's schema to Iceberg");
        commit_schema(&self.catalog, def.name(), &table, wanted, properties(def)).await
    }

    /// The cold snapshot a union read of `name` pairs with the hot tier: the current
    /// snapshot and its offsets. `None` when nothing was tiered yet.
    pub fn cold_snapshot(&self, name: &TableName) -> Result<Option<ColdSnapshot>> {
        let state = self.state(name);
        let current = state.current.read();
        let Some(table) = current.as_ref() else {
            return Err(TieringError::NotFound(format!(
                "the Iceberg table of {name} is not open yet"
            )));
        };
        let Some(snapshot) = table.metadata().current_snapshot() else {
            return Ok(None);
        };
        Ok(Some(ColdSnapshot {
            table: table.clone(),
            snapshot_id: snapshot.snapshot_id(),
            offsets: TieredOffsets::of_snapshot(table.metadata(), Some(snapshot))?,
            // Taken while `current` is read-locked: the snapshot cannot be replaced and
            // its files purged before the lease counts.
            lease: state.leases.acquire(snapshot.snapshot_id()),
        }))
    }

    /// Whether the scheduler should try `name` now: not while the backoff after its
    /// last failures runs (a forced cycle does not ask).
    pub fn retry_due(&self, name: &TableName) -> bool {
        let state = self.state(name);
        let backoff = state.backoff.read();
        backoff.1.is_none_or(|at| std::time::Instant::now() >= at)
    }

    /// Whether [`Tierer::ensure_table`] has succeeded for `name` since start.
    pub fn is_ready(&self, name: &TableName) -> bool {
        self.tables
            .read()
            .get(name)
            .is_some_and(|s| s.ready.load(std::sync::atomic::Ordering::Acquire))
    }

    /// The first untiered offset of each log of `name`, as of the last commit.
    pub fn watermarks(&self, name: &TableName) -> HashMap<LogId, u64> {
        self.state(name).watermarks.read().to_map()
    }

    /// Runs one cycle for `hot`. With `force`, every log with untiered rows is due.
    /// `now_micros` is the clock the cadence compares commit times with.
    pub async fn cycle(
        &self,
        hot: &Arc<HotTable>,
        now_micros: i64,
        force: bool,
    ) -> Result<CycleReport> {
        let def = hot.def();
        let name = def.name();
        if !def.tiering().enabled {
            return Err(TieringError::NotFound(format!(
                "tiering is off for table {name}"
            )));
        }
        let state = self.state(name);
        if !state.ready.load(std::sync::atomic::Ordering::Acquire) {
            // Never tier into a table that was not checked (another engine's, say).
            self.ensure_table(hot).await?;
        }
        let _busy = state.busy.lock().await;
        let mut retries = 0;
        loop {
            let result = self.cycle_once(hot, &state, now_micros, force).await;
            state.note(&result);
            match result {
                Err(TieringError::Conflict { table, detail }) if retries < CONFLICT_RETRIES => {
                    retries += 1;
                    tracing::info!(%table, %detail, retries, "tiering commit conflicted; reloading and trying again");
                    tokio::time::sleep(Duration::from_millis(50 << retries)).await;
                }
                result => {
                    // An idle cycle commits nothing: the last commit's retries stand.
                    if result.as_ref().map_or(true, |r| r.snapshot_id.is_some()) {
                        self.catalog.record_retries(name, retries);
                    }
                    return result;
                }
            }
        }
    }

    /// One attempt of [`Tierer::cycle`]: load, convert from the current snapshot's
    /// offsets, commit on that snapshot. A conflict deletes the data files it wrote; the
    /// next attempt re-derives everything from the new current snapshot, so rows another
    /// writer's commit carried (or did not) are counted from what it committed.
    async fn cycle_once(
        &self,
        hot: &Arc<HotTable>,
        state: &TableState,
        now_micros: i64,
        force: bool,
    ) -> Result<CycleReport> {
        let def = hot.def();
        let name = def.name();
        let base = self.catalog.load(name).await?;
        let committed = TieredOffsets::current(base.metadata())?;
        *state.current.write() = Some(base.clone());

        // Read before the logs' ends: every record below these positions is in a log.
        let consumed = self
            .progress
            .read()
            .as_ref()
            .map(|p| p.consumed(name))
            .unwrap_or_default();
        let due = due_logs(hot, &committed, now_micros, force);
        let mut report = CycleReport::default();
        if due.is_empty() {
            report.offsets = committed.by_log_name();
            *state.watermarks.write() = committed;
            return Ok(report);
        }

        let prefix = format!("hg-{}", uuid::Uuid::new_v4().simple());
        let mut converter = Converter::new(&base, def.tiering().target_file_size, prefix)?;
        let suppression = self.suppression.read().clone();
        if let Some(suppression) = suppression {
            converter = converter.with_suppression(name.clone(), suppression);
        }
        let (request, next) = if hot.is_primary_key() {
            dump_buckets(hot, &base, &converter, &committed, &due, &mut report).await?
        } else {
            append_logs(hot, &converter, &committed, due, &mut report).await?
        };
        let sources = cold_sources(hot, base.metadata(), &committed, &next, &consumed)?;
        fail::fail_point!("tier-before-commit");
        let request = sources.add_to(request.with_property(OFFSETS_PROP, next.to_json()));
        let committed_table = match commit(&self.catalog, name, &base, request).await {
            Ok(table) => table,
            Err(e @ TieringError::Conflict { .. }) => {
                for file in &report.files {
                    if let Err(cleanup) = base.file_io().delete(&file.path).await {
                        tracing::warn!(path = %file.path, error = %cleanup, "cannot delete a data file of a conflicted cycle; the purge will");
                    }
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        fail::fail_point!("tier-after-commit");
        report.snapshot_id = committed_table.metadata().current_snapshot_id();
        report.offsets = next.by_log_name();
        *state.current.write() = Some(committed_table);
        *state.watermarks.write() = next;
        Ok(report)
    }

    /// Rewrites the cold files of `def` that hold rows `matches` marks, without them
    /// (copy-on-write, one overwrite commit), holding the table's lock.
    pub async fn delete_matching(
        &self,
        def: &TableDef,
        matches: crate::cow::RowMatcher<'_>,
        prune: &[crate::cold_scan::ColdFilter],
    ) -> Result<CowReport> {
        let state = self.state(def.name());
        let _busy = state.busy.lock().await;
        let table = self.catalog.load(def.name()).await?;
        let (table, report) =
            crate::cow::delete_matching(&self.catalog, def, table, matches, prune).await?;
        *state.current.write() = Some(table);
        Ok(report)
    }

    /// Compacts small files, expires old snapshots and purges unreferenced files, in
    /// that order, holding the table's lock (no tiering cycle runs meanwhile).
    pub async fn maintain(
        &self,
        def: &TableDef,
        now_ms: i64,
        options: &MaintenanceOptions,
    ) -> Result<MaintenanceReport> {
        let name = def.name();
        let state = self.state(name);
        let _busy = state.busy.lock().await;
        let mut table = self.catalog.load(name).await?;
        let mut report = MaintenanceReport::default();
        if let Some(limit) = def.spec().cold_retention
            && def.time_index().is_some()
            && !matches!(def.kind(), hotgate_store::TableKind::PrimaryKey { .. })
        {
            let cutoff = now_ms.saturating_mul(1000).saturating_sub(micros(limit));
            let (after, mut retention) = drop_old_days(&self.catalog, name, table, cutoff).await?;
            table = after;
            if retention.files_removed > 0 {
                let (after, history) = self
                    .erase_history_locked(&state, name, table, options.read_wait)
                    .await?;
                table = after;
                retention.snapshots_expired = history.snapshots_expired;
                retention.files_deleted = history.files_deleted;
                retention.bytes_deleted = history.bytes_deleted;
                *state.last_retention.write() = Some((now_ms, retention.clone()));
            }
            report.cold_retention = Some(retention);
        }
        if options.compact {
            let (after, compaction) =
                compact(&self.catalog, name, table, def.tiering().target_file_size).await?;
            table = after;
            report.compaction = compaction;
        }
        let (table, expired) = expire(&self.catalog, table, now_ms, options).await?;
        report.snapshots_expired = expired;
        *state.current.write() = Some(table.clone());
        // Files of expired snapshots go only once no read streams from those snapshots.
        let live = table
            .metadata()
            .snapshots()
            .map(|s| s.snapshot_id())
            .collect();
        let reading = state.leases.drain_outside(&live, options.read_wait).await;
        if reading == 0 {
            let (files, bytes) =
                purge(&listing(&table), &table, now_ms, options.purge_min_age).await?;
            report.files_purged = files;
            report.bytes_purged = bytes;
        } else {
            tracing::info!(table = %name, reading, "purge deferred: reads of expired snapshots are still streaming");
        }
        Ok(report)
    }

    /// Erases the history of `def`'s table ([`crate::history`]): afterwards one
    /// snapshot is left, referenced by `main` only, and no file under the table
    /// location is unreferenced, unless reads of expired snapshots outlasted
    /// `read_wait` (`reads_waited_out`; run again later).
    pub async fn erase_history(
        &self,
        def: &TableDef,
        read_wait: Duration,
    ) -> Result<HistoryReport> {
        let state = self.state(def.name());
        let _busy = state.busy.lock().await;
        let table = self.catalog.load(def.name()).await?;
        let (_, report) = self
            .erase_history_locked(&state, def.name(), table, read_wait)
            .await?;
        Ok(report)
    }

    /// Searches every object under `def`'s table location for `needles`, leaving out the
    /// live data files of the buckets `buckets` excludes ([`crate::search`]).
    pub async fn search_location(
        &self,
        def: &TableDef,
        needles: &[Vec<u8>],
        buckets: Option<&crate::ColdBuckets>,
    ) -> Result<crate::search::LocationSearch> {
        let table = self.catalog.load(def.name()).await?;
        crate::search::search_location(&listing(&table), &table, needles, buckets).await
    }

    async fn erase_history_locked(
        &self,
        state: &TableState,
        name: &TableName,
        table: Table,
        read_wait: Duration,
    ) -> Result<(Table, HistoryReport)> {
        let mut report = HistoryReport::default();
        let table = expire_history(&self.catalog, name, table, &mut report).await?;
        // Published before the wait: reads from now on lease the current snapshot.
        *state.current.write() = Some(table.clone());
        let live = table.metadata().current_snapshot_id().into_iter().collect();
        report.reads_waited_out = state.leases.drain_outside(&live, read_wait).await;
        if report.reads_waited_out == 0 {
            let (files, bytes) = delete_unreferenced(&listing(&table), &table).await?;
            report.files_deleted = files;
            report.bytes_deleted = bytes;
        }
        Ok((table, report))
    }

    /// The watermarks and the live files of the current snapshot.
    ///
    /// When the catalog cannot be read, the status still answers: with the watermarks
    /// of the last commit, `ready: false` or the error in `last_error`.
    pub async fn status(&self, def: &TableDef) -> TieringStatus {
        let state = self.state(def.name());
        match self.cold_status(def).await {
            Ok(status) => status,
            Err(e) => TieringStatus {
                watermarks: state.watermarks.read().by_log_name(),
                target_file_size: def.tiering().target_file_size,
                last_error: Some(e.to_string()),
                last_error_ms: Some(chrono::Utc::now().timestamp_millis()),
                ..self.status_base(def, &state)
            },
        }
    }

    /// The parts of the status that need no catalog call.
    fn status_base(&self, def: &TableDef, state: &TableState) -> TieringStatus {
        let last_error = state.last_error.read().clone();
        let (failures, retry_at) = *state.backoff.read();
        TieringStatus {
            consecutive_failures: failures,
            retry_in_ms: retry_at.map(|at| {
                at.saturating_duration_since(std::time::Instant::now())
                    .as_millis() as u64
            }),
            catalog: self.catalog.kind(),
            ready: state.ready.load(std::sync::atomic::Ordering::Acquire),
            last_error_ms: last_error.as_ref().map(|(at, _)| *at),
            last_error: last_error.map(|(_, e)| e),
            commits: self.catalog.commit_stats(def.name()),
            ..TieringStatus::default()
        }
    }

    async fn cold_status(&self, def: &TableDef) -> Result<TieringStatus> {
        let state = self.state(def.name());
        if !state.ready.load(std::sync::atomic::Ordering::Acquire) {
            self.prepare_table(def).await?;
        }
        let table = self.catalog.load(def.name()).await?;
        let metadata = table.metadata();
        let target = def.tiering().target_file_size;
        let mut status = TieringStatus {
            watermarks: TieredOffsets::current(metadata)?.by_log_name(),
            snapshot_id: metadata.current_snapshot_id(),
            snapshot_timestamp_ms: metadata.current_snapshot().map(|s| s.timestamp_ms()),
            snapshots: metadata.snapshots().len(),
            target_file_size: target,
            ..self.status_base(def, &state)
        };
        for class in ["<1/8", "1/8-1/2", "1/2-1", ">=1"] {
            status.size_histogram.insert(class.to_owned(), 0);
        }
        status.cold_retention = def
            .spec()
            .cold_retention
            .map(|d| humantime::format_duration(d).to_string());
        if let Some((at, last)) = self.state(def.name()).last_retention.read().clone() {
            status.last_cold_retention_ms = Some(at);
            status.last_cold_retention = Some(last);
        }
        let mut oldest: Option<i32> = None;
        for file in crate::files::live_data_files(&table).await? {
            if def.time_index().is_some()
                && let Some(Some(iceberg::spec::Literal::Primitive(
                    iceberg::spec::PrimitiveLiteral::Int(day),
                ))) = file.partition().fields().first()
                && matches!(def.kind(), hotgate_store::TableKind::Log)
            {
                oldest = Some(oldest.map_or(*day, |o| o.min(*day)));
            }
            status.files += 1;
            status.bytes += file.file_size_in_bytes();
            status.records += file.record_count();
            *status
                .size_histogram
                .entry(size_class(file.file_size_in_bytes(), target).to_owned())
                .or_default() += 1;
        }
        status.oldest_day = oldest.map(crate::retention::day_name);
        Ok(status)
    }

    /// How long until a log of `hot` is due at the latest, for the scheduler's sleep.
    pub fn next_due_in(&self, hot: &HotTable, now_micros: i64) -> Option<Duration> {
        let committed = self.state(hot.def().name());
        let committed = committed.watermarks.read();
        let freshness = micros(hot.def().tiering().max_freshness);
        hot.logs()
            .iter()
            .filter_map(|log| log.pending(committed.get(&log.id())).oldest_commit_ts)
            .map(|oldest| (oldest + freshness - now_micros).max(0))
            .min()
            .map(|us| Duration::from_micros(us as u64))
    }
}

/// The source positions of the snapshot a cycle commits: the base's, advanced by the
/// logs it tiered (see [`crate::source_offsets`]).
fn cold_sources(
    hot: &HotTable,
    base: &TableMetadata,
    committed: &TieredOffsets,
    next: &TieredOffsets,
    consumed: &SourcePartitions,
) -> Result<ColdSources> {
    let previous = ColdSources::current(base)?;
    let mut tiered = Vec::new();
    for (log, offset) in &next.0 {
        if *offset == committed.get(log) {
            continue;
        }
        let below = match hot.log(*log) {
            Some(l) => l.source_marks_below(*offset)?,
            None => None,
        };
        tiered.push((*log, below));
    }
    let live: Vec<(LogId, SourceMarks)> = hot
        .logs()
        .iter()
        .map(|l| (l.id(), l.source_marks()))
        .collect();
    Ok(previous.advance(tiered, &live, consumed))
}

/// Tells `hot` what the cold tier of `table` holds of each log: a new log starts at
/// the tiered offset, and a source skips what the cold tier has. Returns the buckets of
/// a primary-key table whose state the hot tier lacks although the cold tier holds
/// them: they are rebuilt from the cold tier before the table is ready
/// ([`crate::restore`]), since a cycle would otherwise replace their cold rows with the
/// little a new state holds.
fn install_floors(hot: &HotTable, table: &Table) -> Result<Vec<u32>> {
    let metadata = table.metadata();
    let offsets = TieredOffsets::current(metadata)?;
    let sources = ColdSources::current(metadata)?;
    let name = hot.def().name().clone();
    let lost: Vec<u32> = if hot.is_primary_key() {
        offsets
            .0
            .iter()
            .filter(|(log, offset)| **offset > 0 && hot.log(**log).is_none())
            .map(|(log, _)| log.bucket)
            .collect()
    } else {
        Vec::new()
    };
    let mut floors: HashMap<LogId, LogFloor> = offsets
        .0
        .iter()
        .map(|(log, offset)| {
            (
                *log,
                LogFloor {
                    first_offset: *offset,
                    marks: SourceMarks::default(),
                },
            )
        })
        .collect();
    for (log, marks) in sources.marks {
        floors.entry(log).or_default().marks = marks;
    }
    hot.set_floors(floors).map_err(|e| {
        TieringError::Invalid(format!(
            "{e}; tiering of {name} stops, nothing is overwritten"
        ))
    })?;
    Ok(lost)
}

/// A log table's cycle: the new rows of each due log become files of its partition,
/// appended.
async fn append_logs(
    hot: &Arc<HotTable>,
    converter: &Converter,
    committed: &TieredOffsets,
    due: Vec<(LogId, std::ops::Range<u64>)>,
    report: &mut CycleReport,
) -> Result<(CommitRequest, TieredOffsets)> {
    let mut next = committed.clone();
    let mut files = Vec::new();
    for (log, rows) in due {
        let converted = converter.convert_log(hot, log, rows).await?;
        report.add_files(&converted.files, log);
        report.records += converted.records;
        next.0.insert(log, converted.rows.end);
        files.extend(converted.files);
    }
    Ok((CommitRequest::append(files), next))
}

/// Rows per batch of a primary-key dump.
const DUMP_BATCH_ROWS: usize = 8192;

/// A primary-key table's cycle: each due bucket's current state, read from one RocksDB
/// snapshot, replaces that bucket's files in one overwrite commit (no delete files).
/// The offsets recorded are those the snapshot reflects, which may be past the rows
/// that made the bucket due.
async fn dump_buckets(
    hot: &Arc<HotTable>,
    base: &Table,
    converter: &Converter,
    committed: &TieredOffsets,
    due: &[(LogId, std::ops::Range<u64>)],
    report: &mut CycleReport,
) -> Result<(CommitRequest, TieredOffsets)> {
    let buckets: Vec<u32> = due.iter().map(|(log, _)| log.bucket).collect();
    let mut snapshot = hot
        .snapshot_buckets(Some(buckets.clone()), DUMP_BATCH_ROWS)
        .await?;
    let mut files = Vec::new();
    let mut done = BTreeSet::new();
    let mut open: Option<(u32, crate::convert::PartitionSink<'_>)> = None;
    let log_of = |bucket| LogId { day: None, bucket };
    while let Some(item) = snapshot.batches.recv().await {
        let (bucket, batch) = item?;
        if open.as_ref().is_none_or(|(b, _)| *b != bucket) {
            if let Some((b, sink)) = open.take() {
                let (written, records) = sink.finish().await?;
                report.add_files(&written, log_of(b));
                report.records += records;
                files.extend(written);
                done.insert(b);
            }
            if done.contains(&bucket) {
                return Err(TieringError::Internal(format!(
                    "the state dump returned bucket {bucket} twice"
                )));
            }
            open = Some((
                bucket,
                converter.sink(converter.partition_key(log_of(bucket))?),
            ));
        }
        if let Some((_, sink)) = open.as_mut() {
            sink.push(batch).await?;
        }
    }
    if let Some((b, sink)) = open.take() {
        let (written, records) = sink.finish().await?;
        report.add_files(&written, log_of(b));
        report.records += records;
        files.extend(written);
    }
    // Every live file of a dumped bucket goes, including those of a bucket that is now
    // empty.
    let remove = crate::files::live_data_files(base)
        .await?
        .into_iter()
        .filter(|f| crate::files::bucket_of(f.partition()).is_some_and(|b| buckets.contains(&b)))
        .map(|f| f.file_path().to_owned())
        .collect();
    let mut next = committed.clone();
    for (log, offset) in snapshot.offsets {
        next.0.insert(log, offset);
    }
    Ok((CommitRequest::overwrite(remove, files), next))
}

impl CycleReport {
    fn add_files(&mut self, files: &[iceberg::spec::DataFile], log: LogId) {
        for f in files {
            self.files.push(WrittenFile {
                path: f.file_path().to_owned(),
                partition: log.dir_name(),
                records: f.record_count(),
                bytes: f.file_size_in_bytes(),
            });
        }
    }
}

/// The logs a cycle converts, with the offsets to convert.
fn due_logs(
    hot: &HotTable,
    committed: &TieredOffsets,
    now_micros: i64,
    force: bool,
) -> Vec<(LogId, std::ops::Range<u64>)> {
    let def = hot.def();
    let tiering = def.tiering();
    let freshness = micros(tiering.max_freshness);
    let mut due = Vec::new();
    for log in hot.logs() {
        let from = committed.get(&log.id()).max(log.start_offset());
        let end = log.end_offset();
        if from >= end {
            continue;
        }
        if from > committed.get(&log.id()) && !hot.is_primary_key() {
            tracing::warn!(log = %log.id(), from, "hot rows below this offset were purged before they were tiered");
        }
        let pending = log.pending(from);
        let stale = pending
            .oldest_commit_ts
            .is_some_and(|t| now_micros.saturating_sub(t) >= freshness);
        if force || stale || pending.bytes >= tiering.target_file_size {
            due.push((log.id(), from..end));
        }
    }
    due
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
