//! Appending audit records to `_system.audit`, in chain order, with periodic signed
//! checkpoints.
//!
//! Sealing a record (giving it seq and hashes) and queueing it in the log happen under
//! one lock, so storage order is chain order. The wait for durability happens outside
//! the lock, so concurrent callers share group commits instead of paying one sync each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;
use hotgate_store::{HotTable, PendingAppend, ScanRequest, Store};
use tokio::sync::Mutex;

use super::chain::{AuditRecord, CHECKPOINT, Chain, CheckpointKey, DigestKey};
use super::table::{audit_table_name, audit_table_spec, format_time, from_batch, to_batch};
use crate::config::AuditConfig;
use crate::error::{GatewayError, Result};

/// The writer of the audit log.
pub struct AuditLog {
    /// `None` when auditing is switched off (benchmarks only).
    table: Option<Arc<HotTable>>,
    key: CheckpointKey,
    digest_key: DigestKey,
    checkpoint_every: u64,
    state: Mutex<WriterState>,
    /// One clone per detached write still running; [`AuditLog::flush`] waits for them.
    detached: Arc<()>,
    /// Records waiting to ride along with the next write; see [`AuditLog::defer`].
    deferred: parking_lot::Mutex<Vec<AuditRecord>>,
}

/// The longest a deferred record waits for a write to ride along with.
pub const DEFERRED_FLUSH: Duration = Duration::from_millis(20);

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("enabled", &self.table.is_some())
            .field("key", &self.key)
            .finish()
    }
}

struct WriterState {
    chain: Chain,
    /// Record times never go backwards, so day partitions follow chain order.
    last_micros: i64,
    since_checkpoint: u64,
    last_checkpoint: Instant,
}

/// A record queued in the audit log; [`PendingRecord::durable`] waits for its sync.
#[must_use = "a record that authorizes a read must be awaited before data leaves"]
#[derive(Debug)]
pub struct PendingRecord {
    pending: Option<PendingAppend>,
    pub seq: u64,
}

impl PendingRecord {
    pub async fn durable(self) -> Result<u64> {
        if let Some(p) = self.pending {
            p.durable().await.map_err(|e| unavailable(&e.to_string()))?;
        }
        Ok(self.seq)
    }
}

fn unavailable(detail: &str) -> GatewayError {
    GatewayError::Unavailable(format!(
        "the audit log cannot be written ({detail}); the call is refused because it could not be audited"
    ))
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl AuditLog {
    /// Opens (creating on first start) `_system.audit` and resumes the chain after its
    /// last record.
    pub async fn open(store: &Store, config: &AuditConfig, key: CheckpointKey) -> Result<Self> {
        let mut state = WriterState {
            chain: Chain::default(),
            last_micros: i64::MIN,
            since_checkpoint: 0,
            last_checkpoint: Instant::now(),
        };
        if !config.enabled {
            tracing::warn!(
                "auditing is OFF (audit.enabled = false): reads are not recorded; \
                 this setting exists for benchmarks only"
            );
            return Ok(Self {
                table: None,
                digest_key: key.digest_key(),
                key,
                checkpoint_every: config.checkpoint_every,
                state: Mutex::new(state),
                detached: Arc::new(()),
                deferred: Default::default(),
            });
        }
        let name = audit_table_name();
        let table = match store.table(&name) {
            Ok(t) => t,
            Err(_) => {
                store
                    .create_table(audit_table_spec(config.hot_retention))
                    .await?
            }
        };
        if let Some(last) = last_record(&table)? {
            state.last_micros = chrono::DateTime::parse_from_rfc3339(&last.time)
                .map(|t| t.timestamp_micros())
                .unwrap_or(i64::MIN);
            tracing::info!(seq = last.seq, "audit chain resumed");
            state.chain = Chain::resume(&last);
        }
        Ok(Self {
            table: Some(table),
            digest_key: key.digest_key(),
            key,
            checkpoint_every: config.checkpoint_every.max(1),
            state: Mutex::new(state),
            detached: Arc::new(()),
            deferred: Default::default(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.table.is_some()
    }

    /// The key request digests are taken under.
    pub fn digest_key(&self) -> &DigestKey {
        &self.digest_key
    }

    pub fn public_key_hex(&self) -> String {
        self.key.public_hex()
    }

    /// The audit table, when auditing is on.
    pub fn table(&self) -> Option<&Arc<HotTable>> {
        self.table.as_ref()
    }

    /// Seals `record` and queues it (after any deferred records, and with a checkpoint
    /// after it when one is due). The returned handle waits for its sync. If the record
    /// cannot be queued, nothing of it is in the chain and the error is `Unavailable`.
    pub async fn append(&self, record: AuditRecord) -> Result<PendingRecord> {
        let Some(table) = &self.table else {
            return Ok(PendingRecord {
                pending: None,
                seq: 0,
            });
        };
        fail::fail_point!("audit-append", |_| Err(unavailable("injected fault")));
        let mut state = self.state.lock().await;
        self.queue(table, &mut state, Some(record), false).await
    }

    /// Keeps a record that nothing waits on (a completion) to be sealed and written with
    /// the next record, or within [`DEFERRED_FLUSH`]: it then shares that record's sync
    /// instead of costing one of its own. A crash can lose the deferred records of that
    /// last moment; records that authorize anything are never deferred.
    pub fn defer(&self, record: AuditRecord) {
        if self.enabled() {
            self.deferred.lock().push(record);
        }
    }

    /// Queues a checkpoint now if records were written since the last one.
    pub async fn checkpoint(&self) -> Result<()> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        let mut state = self.state.lock().await;
        if state.since_checkpoint == 0 && self.deferred.lock().is_empty() {
            return Ok(());
        }
        let pending = self.queue(table, &mut state, None, true).await?;
        drop(state);
        pending.durable().await.map(|_| ())
    }

    /// Writes the deferred records now, without waiting for their sync.
    async fn flush_deferred(&self) -> Result<()> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        if self.deferred.lock().is_empty() {
            return Ok(());
        }
        let mut state = self.state.lock().await;
        self.queue(table, &mut state, None, false).await.map(|_| ())
    }

    /// Seals the deferred records, then `record`, then a checkpoint if one is due (or
    /// `checkpoint` asks for one), and queues them as one batch. On failure the chain
    /// is as it was and the deferred records wait for the next try.
    async fn queue(
        &self,
        table: &Arc<HotTable>,
        state: &mut WriterState,
        record: Option<AuditRecord>,
        checkpoint: bool,
    ) -> Result<PendingRecord> {
        let deferred = std::mem::take(&mut *self.deferred.lock());
        let before = (state.chain.clone(), state.last_micros);
        let micros = now_micros().max(state.last_micros);
        let mut rows: Vec<AuditRecord> = deferred
            .iter()
            .cloned()
            .chain(record)
            .map(|mut r| {
                r.time = format_time(micros);
                state.chain.seal(r)
            })
            .collect();
        let seq = rows.last().map_or(0, |r| r.seq);
        let due = state.since_checkpoint + rows.len() as u64 >= self.checkpoint_every;
        if checkpoint || due {
            rows.push(state.chain.checkpoint(&self.key, format_time(micros)));
        }
        if rows.is_empty() {
            return Ok(PendingRecord { pending: None, seq });
        }
        match write_rows(table.def().stored_schema(), table, &rows).await {
            Ok(pending) => {
                state.last_micros = micros;
                if rows.last().is_some_and(|r| r.action == CHECKPOINT) {
                    state.since_checkpoint = 0;
                    state.last_checkpoint = Instant::now();
                } else {
                    state.since_checkpoint += rows.len() as u64;
                }
                Ok(PendingRecord {
                    pending: Some(pending),
                    seq,
                })
            }
            Err(e) => {
                // Nothing was queued: the chain continues from where it was.
                (state.chain, state.last_micros) = before;
                let mut kept = self.deferred.lock();
                let newer = std::mem::take(&mut *kept);
                *kept = deferred.into_iter().chain(newer).collect();
                Err(e)
            }
        }
    }

    /// Seals and queues a record without waiting for its sync, for where the caller
    /// cannot wait (an interceptor). A failure is logged.
    pub fn append_detached(self: &Arc<Self>, record: AuditRecord) {
        if !self.enabled() {
            return;
        }
        let log = Arc::clone(self);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(action = %record.action, "audit record lost: no runtime to write it");
            return;
        };
        let running = Arc::clone(&self.detached);
        runtime.spawn(async move {
            let _running = running;
            let action = record.action.clone();
            let written = match log.append(record).await {
                Ok(p) => p.durable().await.map(|_| ()),
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                tracing::error!(%action, "audit record not written: {e}");
            }
        });
    }

    /// Writes what is still pending, as at shutdown: detached records (waiting up to
    /// 5 s) and deferred ones.
    pub async fn flush(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&self.detached) > 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Err(e) = self.flush_deferred().await {
            tracing::error!("deferred audit records not written: {e}");
        }
    }

    /// Writes deferred records every [`DEFERRED_FLUSH`], and a checkpoint every
    /// `interval` when records arrived since the last one.
    pub async fn run_background(
        self: Arc<Self>,
        interval: Duration,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        if !self.enabled() {
            return;
        }
        let mut tick = tokio::time::interval(DEFERRED_FLUSH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => break,
            }
            if let Err(e) = self.flush_deferred().await {
                tracing::error!("deferred audit records not written: {e}");
            }
            let stale = !interval.is_zero()
                && self.state.lock().await.last_checkpoint.elapsed() >= interval;
            if stale && let Err(e) = self.checkpoint().await {
                tracing::error!("audit checkpoint not written: {e}");
            }
        }
    }
}

async fn write_rows(
    schema: &SchemaRef,
    table: &Arc<HotTable>,
    rows: &[AuditRecord],
) -> Result<PendingAppend> {
    let batch = to_batch(schema, rows).map_err(|e| unavailable(&e))?;
    table
        .begin_append(&batch)
        .await
        .map_err(|e| unavailable(&e.to_string()))
}

/// The last record in storage order, if any.
fn last_record(table: &HotTable) -> Result<Option<AuditRecord>> {
    let ends = table.end_offsets();
    let mut logs: Vec<_> = ends.iter().filter(|(_, end)| **end > 0).collect();
    logs.sort();
    let Some((log, end)) = logs.last() else {
        return Ok(None);
    };
    let request = ScanRequest {
        logs: Some(vec![**log]),
        start_offsets: [(**log, **end - 1)].into(),
        end_offsets: [(**log, **end)].into(),
        ..Default::default()
    };
    let mut last = None;
    for item in table.scan(&request)? {
        let records = from_batch(&item?.batch).map_err(|e| {
            GatewayError::Internal(format!("the last audit record is unreadable: {e}"))
        })?;
        last = records.into_iter().last().or(last);
    }
    Ok(last)
}
