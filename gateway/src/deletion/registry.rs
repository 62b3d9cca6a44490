//! The registry of deletion requests: each request's record (state, history, receipt),
//! stored durably under `<data-dir>/deletions/<id>.json`, and the suppression of those
//! not yet verified.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use datafusion::logical_expr::Expr;
use hotgate_store::fs::write_file_durable;
use hotgate_store::{TableDef, TableName};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use super::ingest::{IngestBlock, IngestFilter};
use super::request::{DeletionTarget, parse_predicate};
use super::suppression::Suppression;
use crate::error::{GatewayError, Result};

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionState {
    Accepted,
    HotApplied,
    ColdApplied,
    Purged,
    Verified,
}

impl DeletionState {
    pub const ALL: [DeletionState; 5] = [
        DeletionState::Accepted,
        DeletionState::HotApplied,
        DeletionState::ColdApplied,
        DeletionState::Purged,
        DeletionState::Verified,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeletionState::Accepted => "accepted",
            DeletionState::HotApplied => "hot_applied",
            DeletionState::ColdApplied => "cold_applied",
            DeletionState::Purged => "purged",
            DeletionState::Verified => "verified",
        }
    }

    /// The state the next step leads to.
    pub fn next(self) -> Option<DeletionState> {
        match self {
            DeletionState::Accepted => Some(DeletionState::HotApplied),
            DeletionState::HotApplied => Some(DeletionState::ColdApplied),
            DeletionState::ColdApplied => Some(DeletionState::Purged),
            DeletionState::Purged => Some(DeletionState::Verified),
            DeletionState::Verified => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChange {
    pub state: DeletionState,
    /// RFC 3339, UTC.
    pub at: String,
}

/// A deletion request as stored and as `GET /v1/deletions/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionRecord {
    pub id: String,
    pub state: DeletionState,
    pub targets: Vec<DeletionTarget>,
    /// HMAC-SHA256 (hex) of the request's `subject`.
    pub subject_hmac: String,
    /// Values of subject-tagged columns that ingest keeps out, also once verified
    /// (HMACs only; see [`IngestFilter`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingest_blocks: Vec<IngestBlock>,
    pub reason: String,
    pub requested_by: String,
    pub history: Vec<StateChange>,
    /// When the request must be `verified` by (RFC 3339): acceptance plus the
    /// configured time bound.
    pub deadline: String,
    /// Past the deadline and not verified; computed when shown, not stored.
    #[serde(default, skip_deserializing)]
    pub overdue: bool,
    /// What is not done yet, in words.
    pub pending: Option<String>,
    /// What was done so far.
    #[serde(default)]
    pub receipt: DeletionReceipt,
    /// Failed attempts of the current step since it last succeeded (since the start);
    /// not stored.
    #[serde(default, skip_deserializing, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// The last failure of the current step, and whether it is retried; not stored.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The receipt: what each step did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeletionReceipt {
    /// Hot rows deleted by rewriting segments (log rows and changelog records).
    pub hot_rows_deleted: u64,
    pub hot_segments_rewritten: usize,
    /// Size of the rewritten segments before the rewrite.
    pub hot_bytes_rewritten: u64,
    /// Primary keys deleted (each with a `-D` record, then erased from the changelog).
    pub keys_erased: u64,
    pub hot_millis: u64,
    /// Cold rows removed by the copy-on-write.
    pub cold_rows_deleted: u64,
    /// Cold data files read (pruning could not rule them out).
    pub cold_files_read: usize,
    /// Cold data files replaced, and their size.
    pub cold_files_rewritten: usize,
    pub cold_bytes_rewritten: u64,
    /// Size of the tables' live cold files before, to put the rewrite in proportion.
    pub cold_bytes_total: u64,
    /// Paths of the replaced cold files.
    pub cold_files_removed: Vec<String>,
    pub cold_millis: u64,
    /// Tags and branches removed because they pinned older snapshots (`table:ref`).
    pub refs_removed: Vec<String>,
    /// Snapshots expired by the purge, whatever the snapshot retention said.
    pub snapshots_expired: usize,
    /// Files the purge deleted from the tables' locations (the replaced data files,
    /// old manifests, manifest lists and metadata files), and their size.
    pub cold_files_deleted: usize,
    pub cold_bytes_deleted: u64,
    pub purge_millis: u64,
    /// The proof: rows of each tier scanned and found free of matches...
    pub verify_hot_rows_scanned: u64,
    pub verify_cold_rows_scanned: u64,
    /// ...and the files and bytes searched for the predicate's string literals.
    pub verify_literals: usize,
    pub verify_files_searched: usize,
    pub verify_bytes_searched: u64,
    /// Files of other buckets' hot logs and live cold data files, not read: a
    /// predicate that fixes the bucket key matches rows of its buckets only.
    pub verify_files_skipped: usize,
    /// Per table, what the proof read, and why that is enough.
    pub verify_scope: Vec<String>,
    pub verify_millis: u64,
    /// The Kafka records that may still hold the subject: per source feeding a target
    /// table, each partition's records up to `through_offset` when it was verified.
    /// Kafka's retention removes them, not hotgate; later records that hold an erased
    /// value are dropped on ingest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kafka: Vec<KafkaRecords>,
    /// From `accepted` to `verified`.
    pub total_millis: u64,
}

/// The records of one topic partition that may hold a deleted subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaRecords {
    pub source: String,
    pub topic: String,
    pub partition: i32,
    /// The last offset hotgate had taken; every record up to it may hold the subject.
    pub through_offset: i64,
}

impl DeletionReceipt {
    pub(super) fn add_hot(&mut self, rewrite: &hotgate_store::RewriteReport) {
        self.hot_rows_deleted += rewrite.rows_deleted;
        self.hot_segments_rewritten += rewrite.segments_rewritten;
        self.hot_bytes_rewritten += rewrite.bytes_rewritten;
    }
}

impl DeletionRecord {
    fn is_overdue(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.state != DeletionState::Verified
            && chrono::DateTime::parse_from_rfc3339(&self.deadline).is_ok_and(|d| now > d)
    }
}

/// The `tables` field: a list of names, or `"all"`.

#[derive(Debug)]
pub struct Deletions {
    dir: PathBuf,
    time_bound: std::time::Duration,
    records: RwLock<BTreeMap<String, DeletionRecord>>,
    /// Per table, the parsed predicates of its requests that are not verified.
    active: RwLock<HashMap<TableName, Vec<Expr>>>,
    /// Per table and column, the HMACs of erased subject values, of every request.
    blocked: RwLock<HashMap<TableName, HashMap<String, HashSet<String>>>>,
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl Deletions {
    /// Loads every request under `<data_dir>/deletions`. The predicates are parsed
    /// against the tables in `defs`; a request whose table is gone is kept on record
    /// and suppresses nothing.
    pub fn open(
        data_dir: &Path,
        defs: &[Arc<TableDef>],
        time_bound: std::time::Duration,
    ) -> Result<Self> {
        let dir = data_dir.join("deletions");
        std::fs::create_dir_all(&dir)
            .map_err(|e| GatewayError::Internal(format!("cannot create {}: {e}", dir.display())))?;
        let mut records = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)
            .map_err(|e| GatewayError::Internal(format!("cannot read {}: {e}", dir.display())))?
        {
            let path = entry
                .map_err(|e| GatewayError::Internal(format!("{}: {e}", dir.display())))?
                .path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read(&path)
                .map_err(|e| GatewayError::Internal(format!("{}: {e}", path.display())))?;
            // Fail closed: a request that cannot be read might be hiding rows that must
            // stay hidden, so the server does not start without it.
            let record: DeletionRecord = serde_json::from_slice(&text).map_err(|e| {
                GatewayError::Internal(format!(
                    "deletion request {} is unreadable: {e}",
                    path.display()
                ))
            })?;
            records.insert(record.id.clone(), record);
        }
        let deletions = Self {
            dir,
            time_bound,
            records: RwLock::new(records),
            active: RwLock::default(),
            blocked: RwLock::default(),
        };
        deletions.rebuild_active(defs)?;
        Ok(deletions)
    }

    /// Recomputes the suppression from the requests not yet verified: a verified
    /// request stops hiding rows (there are none left to hide).
    pub(crate) fn rebuild_active(&self, defs: &[Arc<TableDef>]) -> Result<()> {
        let records = self.records.read();
        let mut active: HashMap<TableName, Vec<Expr>> = HashMap::new();
        for record in records
            .values()
            .filter(|r| r.state != DeletionState::Verified)
        {
            for target in &record.targets {
                let Some(def) = defs.iter().find(|d| d.name().to_string() == target.table) else {
                    continue;
                };
                let expr =
                    parse_predicate(&target.predicate, def.stored_schema()).map_err(|e| {
                        GatewayError::Internal(format!(
                            "deletion request {}: its predicate on {} no longer compiles: {e}",
                            record.id, target.table
                        ))
                    })?;
                active.entry(def.name().clone()).or_default().push(expr);
            }
        }
        let mut blocked: HashMap<TableName, HashMap<String, HashSet<String>>> = HashMap::new();
        for block in records.values().flat_map(|r| &r.ingest_blocks) {
            if let Ok(table) = TableName::parse(&block.table) {
                blocked
                    .entry(table)
                    .or_default()
                    .entry(block.column.clone())
                    .or_default()
                    .insert(block.value_hmac.clone());
            }
        }
        *self.active.write() = active;
        *self.blocked.write() = blocked;
        Ok(())
    }

    /// Records a new request as `accepted`, durably, and starts suppressing its rows.
    pub fn accept(
        &self,
        targets: Vec<DeletionTarget>,
        subject_hmac: String,
        ingest_blocks: Vec<IngestBlock>,
        reason: String,
        requested_by: String,
        defs: &[Arc<TableDef>],
    ) -> Result<DeletionRecord> {
        let now = chrono::Utc::now();
        let bound = chrono::Duration::from_std(self.time_bound).unwrap_or(chrono::Duration::MAX);
        let record = DeletionRecord {
            deadline: (now.checked_add_signed(bound).unwrap_or(now))
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            overdue: false,
            id: uuid::Uuid::new_v4().to_string(),
            state: DeletionState::Accepted,
            targets,
            subject_hmac,
            ingest_blocks,
            reason,
            requested_by,
            history: vec![StateChange {
                state: DeletionState::Accepted,
                at: now_rfc3339(),
            }],
            pending: Some(
                "rows are hidden from every read and from tiering; the hot tier is next".into(),
            ),
            receipt: DeletionReceipt::default(),
            attempts: 0,
            last_error: None,
        };
        let json = serde_json::to_vec_pretty(&record)
            .map_err(|e| GatewayError::Internal(format!("deletion record: {e}")))?;
        write_file_durable(&self.dir.join(format!("{}.json", record.id)), &json)?;
        self.records
            .write()
            .insert(record.id.clone(), record.clone());
        self.rebuild_active(defs)?;
        Ok(record)
    }

    /// The request `id`, with `overdue` as of now.
    pub fn get(&self, id: &str) -> Option<DeletionRecord> {
        let mut record = self.records.read().get(id).cloned()?;
        record.overdue = record.is_overdue(chrono::Utc::now());
        Some(record)
    }

    /// The ids of the requests in `state`.
    pub fn ids_in(&self, state: DeletionState) -> Vec<String> {
        self.records
            .read()
            .values()
            .filter(|r| r.state == state)
            .map(|r| r.id.clone())
            .collect()
    }

    /// Moves request `id` to `state`, durably, with its receipt and what is pending.
    pub fn advance(
        &self,
        id: &str,
        state: DeletionState,
        receipt: DeletionReceipt,
        pending: Option<String>,
    ) -> Result<DeletionRecord> {
        let mut records = self.records.write();
        let record = records.get_mut(id).ok_or_else(|| {
            GatewayError::NotFound(format!("deletion request {id} does not exist"))
        })?;
        let mut next = record.clone();
        next.state = state;
        next.receipt = receipt;
        next.pending = pending;
        next.attempts = 0;
        next.last_error = None;
        next.history.push(StateChange {
            state,
            at: now_rfc3339(),
        });
        let json = serde_json::to_vec_pretty(&next)
            .map_err(|e| GatewayError::Internal(format!("deletion record: {e}")))?;
        write_file_durable(&self.dir.join(format!("{id}.json")), &json)?;
        *record = next.clone();
        Ok(next)
    }

    /// Marks request `id` verified, durably, with its predicates erased (only their
    /// HMACs stay), then lifts its suppression.
    pub fn verified(
        &self,
        id: &str,
        receipt: DeletionReceipt,
        hash: impl Fn(&[u8]) -> String,
        defs: &[Arc<TableDef>],
    ) -> Result<DeletionRecord> {
        let record = {
            let mut records = self.records.write();
            let record = records.get_mut(id).ok_or_else(|| {
                GatewayError::NotFound(format!("deletion request {id} does not exist"))
            })?;
            let mut next = record.clone();
            for target in &mut next.targets {
                if target.predicate_hmac.is_none() {
                    target.predicate_hmac = Some(hash(target.predicate.as_bytes()));
                }
                target.predicate.clear();
            }
            next.state = DeletionState::Verified;
            next.receipt = receipt;
            next.pending = None;
            next.attempts = 0;
            next.last_error = None;
            next.history.push(StateChange {
                state: DeletionState::Verified,
                at: now_rfc3339(),
            });
            let json = serde_json::to_vec_pretty(&next)
                .map_err(|e| GatewayError::Internal(format!("deletion record: {e}")))?;
            write_file_durable(&self.dir.join(format!("{id}.json")), &json)?;
            *record = next.clone();
            next
        };
        self.rebuild_active(defs)?;
        Ok(record)
    }

    /// Records a failed attempt of request `id`'s next step (not durable: a note on
    /// progress, shown by the status).
    pub fn note_failure(
        &self,
        id: &str,
        step: &str,
        attempts: u32,
        retried: bool,
        error: &GatewayError,
    ) {
        if let Some(r) = self.records.write().get_mut(id) {
            r.attempts = attempts;
            let then = if retried {
                "retried with backoff"
            } else {
                "parked until the next start; an operator must look"
            };
            r.last_error = Some(format!("{step}: {}; {then}", error.public_message()));
        }
    }

    /// Requests by state, and how many of them are overdue, for `/metrics`.
    pub fn counts(&self) -> (BTreeMap<DeletionState, u64>, u64) {
        let now = chrono::Utc::now();
        let records = self.records.read();
        let mut by_state = BTreeMap::new();
        let mut overdue = 0;
        for r in records.values() {
            *by_state.entry(r.state).or_default() += 1;
            overdue += u64::from(r.is_overdue(now));
        }
        (by_state, overdue)
    }

    /// The suppression of `table`, if any request on it is not verified.
    pub fn suppression(&self, table: &TableName) -> Option<Suppression> {
        self.active
            .read()
            .get(table)
            .map(|predicates| Suppression::new(predicates.clone()))
    }
}

impl Deletions {
    /// What ingest into `table` drops, if anything: see [`IngestFilter`].
    pub fn ingest_filter(&self, table: &TableName) -> Option<IngestFilter> {
        let pending = self.suppression(table);
        let blocked = self.blocked.read().get(table).cloned().unwrap_or_default();
        (pending.is_some() || !blocked.is_empty()).then_some(IngestFilter { pending, blocked })
    }
}

impl hotgate_tiering::RowSuppression for Deletions {
    fn keep(
        &self,
        table: &TableName,
        batch: &RecordBatch,
    ) -> std::result::Result<Option<BooleanArray>, String> {
        match self.suppression(table) {
            Some(s) => s.keep(batch).map(Some),
            None => Ok(None),
        }
    }
}
