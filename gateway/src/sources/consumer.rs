//! One source at run time: a task per partition that fetches from the broker (rskafka),
//! turns records into governed rows, and writes them with their source positions.
//!
//! A partition's writes are strictly sequential: it writes the rows of one fetch (one
//! commit group), waits until they are durable, and only then writes the next. Fetching
//! and decoding run ahead of the commits, as stages of a pipeline: a fetch from a broker
//! mostly waits, decoding JSON is most of ingest's CPU work (on a blocking thread), and
//! a commit mostly waits on syncs. Memory stays bounded by four fetches per partition,
//! and consumption slows by itself when the store's group commit falls behind
//! (backpressure).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use hotgate_policy::WriteRules;
use hotgate_store::{ChangeOp, HotTable, SourceRows};
use parking_lot::Mutex;
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::RecordAndOffset;
use tokio_util::sync::CancellationToken;

use super::avro::AvroReader;
use super::checkpoint::Checkpoint;
use super::config::{OnError, PayloadFormat, SourceConfig, StartAt};
use super::decode::{Decoded, Incoming, Reject, RowDecoder};
use super::rejects::Rejects;
use super::status::{Origin, PartitionStatus, SourceState, SourceStatus};
use crate::audit::CallAudit;
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

/// One fetch: the partition's high watermark, and the task decoding its records (none
/// when the fetch held no record at or past the offset asked for).
struct Fetched {
    high_watermark: i64,
    decoding: Option<tokio::task::JoinHandle<Result<DecodedGroup>>>,
}

/// The rows of one fetch, decoded but not yet governed or written: one commit group.
struct DecodedGroup {
    table: Arc<HotTable>,
    /// Records fetched, and the first and last offsets among them.
    fetched: u64,
    first: i64,
    last: i64,
    runs: Vec<DecodedRun>,
    rejects: Vec<Reject>,
    /// `on_error = "stop"` met this bad record: the runs hold only the rows before it.
    stopped: Option<Reject>,
}

/// Rows of consecutive records of one kind: upserts (or appends), or tombstones.
struct DecodedRun {
    tombstones: bool,
    batch: RecordBatch,
    positions: Vec<(i32, i64)>,
}

/// Waits after a failure: the first, doubling up to the last.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// How often the positions file is written while records flow.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// What every partition task of one source shares.
#[derive(Debug)]
pub struct SourceRuntime {
    pub config: SourceConfig,
    pub checkpoint: Checkpoint,
    pub status: Mutex<SourceStatus>,
    /// With `format = "avro"`: its reader (and the registry's schemas, cached).
    avro: Option<AvroReader>,
}

impl SourceRuntime {
    pub fn new(config: SourceConfig, checkpoint: Checkpoint, origin: Origin) -> Result<Self> {
        let status = SourceStatus::new(&config, origin);
        let avro = match config.format {
            PayloadFormat::Json => None,
            PayloadFormat::Avro => Some(
                AvroReader::new(
                    config.avro_schema.as_ref(),
                    config.avro_schema_file.as_deref(),
                    config.schema_registry.as_deref(),
                )
                .map_err(|e| {
                    GatewayError::InvalidArgument(format!("sources.{}: {e}", config.name))
                })?,
            ),
        };
        Ok(Self {
            config,
            checkpoint,
            status: Mutex::new(status),
            avro,
        })
    }

    pub(super) fn set_state(&self, state: SourceState, error: Option<String>) {
        let mut status = self.status.lock();
        status.state = state;
        if error.is_some() || state == SourceState::Running {
            status.last_error = error;
        }
    }

    fn partition(&self, partition: i32, f: impl FnOnce(&mut PartitionStatus)) {
        let mut status = self.status.lock();
        let slot = match status
            .partitions
            .iter()
            .position(|p| p.partition == partition)
        {
            Some(i) => i,
            None => {
                status.partitions.push(PartitionStatus::new(partition));
                status.partitions.sort_by_key(|p| p.partition);
                status
                    .partitions
                    .iter()
                    .position(|p| p.partition == partition)
                    .expect("just added")
            }
        };
        f(&mut status.partitions[slot]);
    }
}

/// Runs the source until `cancel`: connects, finds the topic's partitions, and runs a
/// loop per partition. A failure to reach the broker or find the topic is retried with
/// backoff and shown in the status.
pub async fn run_source(
    state: Arc<GatewayState>,
    source: Arc<SourceRuntime>,
    rejects: Arc<Rejects>,
    cancel: CancellationToken,
) {
    let mut wait = FIRST_RETRY;
    let partitions = loop {
        match table_ready(&state, &source.config).and(Ok(())) {
            Err(e @ GatewayError::InvalidArgument(_)) => {
                tracing::error!(source = %source.config.name, "the source cannot run: {e}");
                source.set_state(SourceState::Failed, Some(e.to_string()));
                return;
            }
            Err(e) => {
                source.set_state(SourceState::Waiting, Some(e.to_string()));
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(Duration::from_secs(2));
                continue;
            }
            Ok(()) => {}
        }
        match connect(&source.config).await {
            Ok(found) => break found,
            Err(e) => {
                tracing::warn!(source = %source.config.name, "cannot start the source: {e}");
                source.set_state(SourceState::Waiting, Some(e.to_string()));
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_RETRY);
    };
    let (client, partitions) = partitions;
    source.set_state(SourceState::Running, None);
    let client = Arc::new(client);
    let mut tasks = tokio::task::JoinSet::new();
    for partition in partitions {
        let task = PartitionTask {
            state: Arc::clone(&state),
            source: Arc::clone(&source),
            rejects: Arc::clone(&rejects),
            client: Arc::clone(&client),
            partition,
        };
        let cancel = cancel.clone();
        tasks.spawn(async move { task.run(cancel).await });
    }
    let mut flush = tokio::time::interval(CHECKPOINT_EVERY);
    loop {
        tokio::select! {
            _ = flush.tick() => flush_positions(&source),
            done = tasks.join_next() => match done {
                None => break,
                Some(Err(e)) => {
                    tracing::error!(source = %source.config.name, "a partition task failed: {e}");
                    source.set_state(SourceState::Failed, Some(format!("a partition task failed: {e}")));
                }
                Some(Ok(())) => {}
            },
        }
    }
    flush_positions(&source);
    let mut status = source.status.lock();
    if status.state == SourceState::Running {
        status.state = SourceState::Stopped;
    }
}

fn flush_positions(source: &SourceRuntime) {
    if let Err(e) = source.checkpoint.flush() {
        // Not fatal: the positions file only bounds what a restart fetches again.
        tracing::warn!(source = %source.config.name, "cannot write the source's positions: {e}");
    }
}

/// The source's table, if it exists and its records can become its rows.
pub(super) fn table_ready(state: &GatewayState, config: &SourceConfig) -> Result<Arc<HotTable>> {
    let name = hotgate_store::TableName::parse(&config.table).map_err(|e| {
        GatewayError::InvalidArgument(format!("sources.{}: table: {e}", config.name))
    })?;
    let table = state.store.table(&name).map_err(|_| {
        GatewayError::NotFound(format!(
            "sources.{}: table {name} does not exist yet",
            config.name
        ))
    })?;
    RowDecoder::new(&table.def(), &config.mapping, config.time_from, false)
        .map_err(|e| GatewayError::InvalidArgument(format!("sources.{}: {e}", config.name)))?;
    // The cold tier says where a source goes on and what the hot tier must not write
    // again (after a lost data directory): nothing is written before it is read.
    if table.def().tiering().enabled && !state.tierer.is_ready(&name) {
        return Err(GatewayError::Unavailable(format!(
            "sources.{}: waiting for the Iceberg table of {name} to open (see its tiering status)",
            config.name
        )));
    }
    Ok(table)
}

/// The client, and the topic's partitions.
async fn connect(config: &SourceConfig) -> Result<(Client, Vec<i32>)> {
    let unavailable = |what: &str, e: rskafka::client::error::Error| {
        GatewayError::Unavailable(format!(
            "sources.{}: {what} ({}): {e}",
            config.name,
            config.brokers.join(",")
        ))
    };
    let client = ClientBuilder::new(config.brokers.clone())
        .client_id("hotgate")
        .build()
        .await
        .map_err(|e| unavailable("cannot reach the brokers", e))?;
    let topics = client
        .list_topics()
        .await
        .map_err(|e| unavailable("cannot list the topics", e))?;
    let topic = topics
        .into_iter()
        .find(|t| t.name == config.topic)
        .ok_or_else(|| {
            GatewayError::NotFound(format!(
                "sources.{}: topic {:?} does not exist",
                config.name, config.topic
            ))
        })?;
    Ok((client, topic.partitions.into_iter().collect()))
}

struct PartitionTask {
    state: Arc<GatewayState>,
    source: Arc<SourceRuntime>,
    rejects: Arc<Rejects>,
    client: Arc<Client>,
    partition: i32,
}

/// How a commit group ended.
enum Group {
    Written,
    /// `on_error = "stop"` met a bad record: the rows before it are written, the
    /// partition stops at it.
    StoppedAt(Reject),
}

impl PartitionTask {
    async fn run(self, cancel: CancellationToken) {
        let name = self.source.config.name.clone();
        let mut wait = FIRST_RETRY;
        let mut client = None;
        loop {
            if cancel.is_cancelled() {
                return;
            }
            let mut progressed = false;
            let step = async {
                if client.is_none() {
                    client = Some(self.partition_client().await?);
                }
                let pc = client.as_ref().expect("set above");
                let from = self.first_offset(pc).await?;
                self.consume_from(pc, from, &mut progressed).await
            };
            let result = tokio::select! {
                _ = cancel.cancelled() => return,
                r = step => r,
            };
            match result {
                Ok(reject) => {
                    let reason = format!(
                        "stopped at partition {} offset {}: {}",
                        reject.partition, reject.offset, reject.reason
                    );
                    tracing::error!(source = %name, "{reason}");
                    self.source.set_state(SourceState::Failed, Some(reason));
                    return;
                }
                Err(e) => {
                    tracing::warn!(source = %name, partition = self.partition, "retrying: {e}");
                    // Go on from the stored position (moved past records the broker
                    // deleted, where that was the failure).
                    self.source.partition(self.partition, |p| {
                        p.last_error = Some(e.to_string());
                    });
                    if matches!(e, GatewayError::Unavailable(_)) {
                        client = None;
                    }
                    if progressed {
                        wait = FIRST_RETRY;
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(MAX_RETRY);
                }
            }
        }
    }

    /// Consumes the partition from `from` until a failure (returned; the caller goes on
    /// from the stored position) or, under `on_error = "stop"`, a bad record (returned
    /// as `Ok`). Three stages overlap: fetching, decoding (a task per fetch) and
    /// committing, which is strictly sequential. The channel between them holds one
    /// fetch, so a partition holds at most four fetches in memory (one arriving, one
    /// queued, one decoding or waiting, one committing), and a commit that falls behind
    /// stops the fetching (backpressure).
    async fn consume_from(
        &self,
        pc: &PartitionClient,
        from: i64,
        progressed: &mut bool,
    ) -> Result<Reject> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(i64, Result<Fetched>)>(1);
        let fetcher = async {
            let mut at = from;
            loop {
                let item = self.fetch(pc, at).await.map(|(records, high_watermark)| {
                    let records: Vec<RecordAndOffset> =
                        records.into_iter().filter(|r| r.offset >= at).collect();
                    let next = records.last().map_or(at, |r| r.offset + 1);
                    let decoding = (!records.is_empty()).then(|| {
                        tokio::spawn(decode_group(
                            Arc::clone(&self.state),
                            Arc::clone(&self.source),
                            self.partition,
                            records,
                        ))
                    });
                    (
                        next,
                        Fetched {
                            high_watermark,
                            decoding,
                        },
                    )
                });
                let (next, item) = match item {
                    Ok((next, fetched)) => (Some(next), Ok(fetched)),
                    Err(e) => (None, Err(e)),
                };
                if tx.send((at, item)).await.is_err() {
                    return;
                }
                match next {
                    Some(next) => at = next,
                    // The committer returns with the failure; this stage is dropped.
                    None => std::future::pending::<()>().await,
                }
            }
        };
        // The fetch stage ends only once the commit stage has gone, and the commit stage
        // runs out of fetches only once the fetch stage has gone: neither happens while
        // both run, but neither is left to a panic.
        let ended = || GatewayError::Internal("the fetch stage of a source ended".into());
        let committer = async {
            while let Some((at, item)) = rx.recv().await {
                let fetched = item?;
                let high_watermark = fetched.high_watermark;
                self.source.partition(self.partition, |p| {
                    p.high_watermark = Some(high_watermark);
                    p.next_offset = Some(at);
                    p.lag = Some((high_watermark - at).max(0));
                });
                let Some(decoding) = fetched.decoding else {
                    continue;
                };
                let group = decoding
                    .await
                    .map_err(|e| GatewayError::Internal(format!("decoding records: {e}")))??;
                let last = group.last;
                let outcome = self.commit_group(group).await?;
                *progressed = true;
                let moved_to = match &outcome {
                    Group::Written => last + 1,
                    Group::StoppedAt(r) => r.offset,
                };
                // Never lowered: the fetch stage may have moved it past offsets the
                // broker deleted.
                self.source.checkpoint.raise(self.partition, moved_to);
                self.source.partition(self.partition, |p| {
                    p.next_offset = Some(moved_to);
                    p.lag = Some((high_watermark - moved_to).max(0));
                });
                if let Group::StoppedAt(reject) = outcome {
                    return Ok(reject);
                }
            }
            Err(ended())
        };
        tokio::select! {
            r = committer => r,
            () = fetcher => Err(ended()),
        }
    }

    async fn partition_client(&self) -> Result<PartitionClient> {
        self.client
            .partition_client(
                self.source.config.topic.clone(),
                self.partition,
                UnknownTopicHandling::Retry,
            )
            .await
            .map_err(|e| {
                GatewayError::Unavailable(format!(
                    "sources.{}: partition {}: {e}",
                    self.source.config.name, self.partition
                ))
            })
    }

    /// Where the partition goes on: its stored position, else the configured start,
    /// which is stored before anything is fetched (a restart must not start again
    /// from `latest` and skip what came in between).
    ///
    /// Records the cold tier holds already are not fetched again: a stored position
    /// below the cold tier's complete offset (a positions file older than the last
    /// tiering, or none at all after the data directory was lost) moves up to it.
    async fn first_offset(&self, pc: &PartitionClient) -> Result<i64> {
        let cold_next = self.cold_complete()?.map(|complete| complete + 1);
        let stored = self.source.checkpoint.next(self.partition);
        if let Some(next) = stored.max(cold_next) {
            if stored != Some(next) {
                tracing::info!(
                    source = %self.source.config.name, partition = self.partition,
                    "going on from offset {next}: the cold tier holds every record below it"
                );
                self.source.checkpoint.advance(self.partition, next);
                self.source.checkpoint.flush()?;
            }
            return Ok(next);
        }
        let at = match self.source.config.start {
            StartAt::Earliest => OffsetAt::Earliest,
            StartAt::Latest => OffsetAt::Latest,
            StartAt::Time(us) => {
                OffsetAt::Timestamp(chrono::DateTime::from_timestamp_micros(us).unwrap_or_default())
            }
        };
        let next = pc.get_offset(at).await.map_err(|e| self.broker_error(e))?;
        self.source.checkpoint.advance(self.partition, next);
        self.source.checkpoint.flush()?;
        Ok(next)
    }

    /// The offset of this partition at or below which the cold tier holds every record.
    fn cold_complete(&self) -> Result<Option<i64>> {
        let table = source_table(&self.source.config)?;
        if !self
            .state
            .store
            .table(&table)
            .is_ok_and(|t| t.def().tiering().enabled)
        {
            return Ok(None);
        }
        let cold = self.state.tierer.cold_source_offsets(&table)?;
        Ok(cold
            .get(&self.source.config.name)
            .and_then(|p| p.get(&self.partition))
            .copied())
    }

    async fn fetch(&self, pc: &PartitionClient, from: i64) -> Result<(Vec<RecordAndOffset>, i64)> {
        let config = &self.source.config;
        let max_bytes = i32::try_from(config.fetch_max_bytes).unwrap_or(i32::MAX);
        let wait_ms = i32::try_from(config.fetch_max_wait.as_millis()).unwrap_or(i32::MAX);
        match pc.fetch_records(from, 1..max_bytes, wait_ms).await {
            Ok(fetched) => Ok(fetched),
            Err(rskafka::client::error::Error::ServerError {
                protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
                ..
            }) => {
                // The broker no longer has `from` (retention ran past it), or never had
                // it. Records below its earliest offset are gone from Kafka: go on from
                // there, and say how many were lost.
                let earliest = pc
                    .get_offset(OffsetAt::Earliest)
                    .await
                    .map_err(|e| self.broker_error(e))?;
                if earliest > from {
                    let lost = earliest - from;
                    tracing::error!(
                        source = %config.name, partition = self.partition,
                        "offsets {from}..{earliest} were deleted by the broker before hotgate read them"
                    );
                    self.source.partition(self.partition, |p| {
                        p.lost_offsets += lost as u64;
                        p.last_error = Some(format!(
                            "offsets {from}..{earliest} were deleted by the broker before hotgate read them"
                        ));
                    });
                    self.source.checkpoint.advance(self.partition, earliest);
                    self.source.checkpoint.flush()?;
                    return Err(GatewayError::NotFound(format!(
                        "offset {from} is below the partition's earliest ({earliest}); going on from there"
                    )));
                }
                Err(GatewayError::InvalidArgument(format!(
                    "sources.{}: partition {} has no offset {from}: the topic was recreated or \
                     truncated; hotgate will not guess where to go on",
                    config.name, self.partition
                )))
            }
            Err(e) => Err(self.broker_error(e)),
        }
    }

    fn broker_error(&self, e: rskafka::client::error::Error) -> GatewayError {
        GatewayError::Unavailable(format!(
            "sources.{}: partition {}: {e}",
            self.source.config.name, self.partition
        ))
    }

    /// Writes the rows of one fetch (and its rejects) and returns once they are
    /// durable. A failure leaves the partition's position where it was: the retry
    /// fetches the same records, and the source marks skip what was written.
    async fn commit_group(&self, group: DecodedGroup) -> Result<Group> {
        let config = &self.source.config;
        let table = &group.table;
        let rules = crate::governance::Governance::write_rules(&table.def());
        let mut written = 0u64;
        for run in group.runs {
            written += self
                .write_rows(table, &rules, run.batch, &run.positions, run.tombstones)
                .await?;
        }
        if !group.rejects.is_empty() {
            self.rejects
                .record(&config.name, &config.topic, &group.rejects)
                .await?;
        }
        let (first, last) = (group.first, group.last);
        self.source.partition(self.partition, |p| {
            p.took(group.fetched);
            p.rows += written;
            p.rejected += group.rejects.len() as u64;
            p.last_error = None;
        });
        tracing::debug!(source = %config.name, partition = self.partition, first, last, written, "commit group");
        Ok(match group.stopped {
            Some(reject) => Group::StoppedAt(reject),
            None => Group::Written,
        })
    }

    /// Applies the write rules, records the write, and writes the rows with their
    /// positions; returns the rows written (those not written before).
    async fn write_rows(
        &self,
        table: &Arc<HotTable>,
        rules: &WriteRules,
        batch: RecordBatch,
        positions: &[(i32, i64)],
        tombstones: bool,
    ) -> Result<u64> {
        let config = &self.source.config;
        let key = self.state.governance.hash_key();
        let mut governed = rules.apply(&batch, key)?;
        // What a deletion request erased stays out, also when a replay brings it again.
        let kept_positions;
        let mut positions = positions;
        let filter = (!tombstones)
            .then(|| self.state.deletions.ingest_filter(table.def().name()))
            .flatten();
        if let Some(filter) = filter
            && let Some(keep) = filter
                .keep(&governed, |v| key.hmac_hex(v))
                .map_err(|e| GatewayError::Internal(format!("deletion filter on ingest: {e}")))?
        {
            let erased = keep.false_count() as u64;
            if erased > 0 {
                governed =
                    arrow_select::filter::filter_record_batch(&governed, &keep).map_err(|e| {
                        GatewayError::Internal(format!("deletion filter on ingest: {e}"))
                    })?;
                kept_positions = positions
                    .iter()
                    .zip(keep.iter())
                    .filter(|(_, k)| k.unwrap_or(false))
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>();
                positions = &kept_positions;
                self.source
                    .partition(self.partition, |p| p.erased += erased);
                if governed.num_rows() == 0 {
                    return Ok(0);
                }
            }
        }
        let rows = SourceRows {
            source: &config.name,
            positions,
        };
        // The write is on record before its rows are stored; an audit that cannot be
        // written stops the write (the group is retried).
        let mut audit = CallAudit::source(&self.state.audit, &config.name, "write");
        audit.set_table(table.def().name());
        audit.set_rows(positions.len() as u64);
        audit.set_reason(format!(
            "topic {} partition {} offsets {}..={}",
            config.topic,
            self.partition,
            positions.first().map_or(0, |p| p.1),
            positions.last().map_or(0, |p| p.1)
        ));
        audit.allow_once().await?;
        let started = Instant::now();
        let written = if !table.is_primary_key() {
            table.append_from_source(&governed, rows).await?.rows
        } else if tombstones {
            table
                .write_changes_from_source(&governed, ChangeOp::Delete, rows)
                .await?
                .rows
        } else {
            table
                .write_changes_from_source(&governed, ChangeOp::Upsert, rows)
                .await?
                .rows
        };
        self.source.partition(self.partition, |p| {
            p.duplicates_skipped += positions.len() as u64 - written;
            p.last_commit_ms = Some(started.elapsed().as_secs_f64() * 1e3);
        });
        Ok(written)
    }
}

/// Turns the records of one fetch into rows of the table and rejects. Decoding is
/// the costly part of ingest, so it runs on a blocking thread, beside the commit
/// of the group before (which waits on syncs). Nothing here depends on governance
/// state that may change before the commit: the write rules and the deletion
/// filter apply in `PartitionTask::commit_group`.
async fn decode_group(
    state: Arc<GatewayState>,
    source: Arc<SourceRuntime>,
    partition: i32,
    records: Vec<RecordAndOffset>,
) -> Result<DecodedGroup> {
    let table = state.store.table(&source_table(&source.config)?)?;
    let def = table.def();
    let config = &source.config;
    let (fetched, first, last) = (
        records.len() as u64,
        records.first().map_or(0, |r| r.offset),
        records.last().map_or(0, |r| r.offset),
    );
    // The records' bytes move into the decoder's input; nothing is copied.
    let mut incoming: Vec<Incoming> = records
        .into_iter()
        .map(|r| Incoming {
            partition,
            offset: r.offset,
            timestamp: r.record.timestamp.timestamp_micros(),
            key: r.record.key,
            value: r.record.value,
        })
        .collect();
    let mut rejects = Vec::new();
    if let Some(avro) = &source.avro {
        // Avro values become the JSON objects the decoder reads; those that cannot
        // are bad records (a tombstone's null value stays null).
        let mut kept = Vec::with_capacity(incoming.len());
        for mut r in incoming {
            if let Some(value) = &r.value {
                match avro.to_json(value).await? {
                    Ok(json) => r.value = Some(json),
                    Err(reason) => {
                        rejects.push(Reject {
                            partition: r.partition,
                            offset: r.offset,
                            reason,
                        });
                        continue;
                    }
                }
            }
            kept.push(r);
        }
        incoming = kept;
    }
    // Under `on_error = "stop"`, the partition stops at its first bad record.
    let mut avro_stop = None;
    if config.on_error == OnError::Stop
        && let Some(first) = rejects.first().cloned()
    {
        incoming.retain(|r| r.offset < first.offset);
        rejects.clear();
        avro_stop = Some(first);
    }
    let values = RowDecoder::new(&def, &config.mapping, config.time_from, false)
        .map_err(GatewayError::InvalidArgument)?;
    let keys = if table.is_primary_key() {
        Some(
            RowDecoder::new(&def, &config.mapping, config.time_from, true)
                .map_err(GatewayError::InvalidArgument)?,
        )
    } else {
        None
    };
    let on_error = config.on_error;
    let (runs, run_rejects, stopped) = tokio::task::spawn_blocking(move || {
        decode_runs(&incoming, &values, keys.as_ref(), on_error)
    })
    .await
    .map_err(|e| GatewayError::Internal(format!("decoding records: {e}")))?;
    rejects.extend(run_rejects);
    Ok(DecodedGroup {
        table,
        fetched,
        first,
        last,
        runs,
        rejects,
        stopped: stopped.or(avro_stop),
    })
}

fn source_table(config: &SourceConfig) -> Result<hotgate_store::TableName> {
    hotgate_store::TableName::parse(&config.table)
        .map_err(|e| GatewayError::InvalidArgument(format!("table: {e}")))
}

/// Decodes a group's records into runs of rows: a primary-key table takes runs of
/// upserts and of tombstones, in record order; a log table one run. Returns the runs,
/// the rejects, and, under `on_error = "stop"`, the bad record the group stops at.
fn decode_runs(
    incoming: &[Incoming],
    values: &RowDecoder,
    keys: Option<&RowDecoder>,
    on_error: OnError,
) -> (Vec<DecodedRun>, Vec<Reject>, Option<Reject>) {
    let runs: Vec<(bool, &[Incoming])> = if keys.is_some() {
        incoming
            .chunk_by(|a, b| a.value.is_some() == b.value.is_some())
            .map(|run| (run[0].value.is_none(), run))
            .collect()
    } else {
        vec![(false, incoming)]
    };
    let mut out = Vec::with_capacity(runs.len());
    let mut all_rejects = Vec::new();
    let mut stopped = None;
    for (tombstones, run) in runs {
        // A tombstone's Kafka key holds the key columns, as a JSON object.
        let (decoder, decoded) = match (keys, tombstones) {
            (Some(keys), true) => (keys, keys.decode(run, |r| r.key.as_deref())),
            _ => (values, values.decode(run, |r| r.value.as_deref())),
        };
        let Decoded {
            mut batch,
            mut positions,
            mut rejects,
        } = decoded;
        if on_error == OnError::Stop
            && let Some(first) = rejects.first().cloned()
        {
            // Only the rows before the bad record.
            let keep = positions.iter().take_while(|p| p.1 < first.offset).count();
            positions.truncate(keep);
            batch = batch.map(|b| b.slice(0, keep));
            rejects.clear();
            stopped = Some(first);
        }
        all_rejects.extend(rejects);
        if let Some(batch) = batch.filter(|b| b.num_rows() > 0) {
            let stamps = if decoder.takes_timestamps() {
                timestamps_of(run, &positions)
            } else {
                Vec::new()
            };
            out.push(DecodedRun {
                tombstones,
                batch: decoder.into_table_rows(batch, &stamps),
                positions,
            });
        }
        if stopped.is_some() {
            break;
        }
    }
    (out, all_rejects, stopped)
}

/// The record timestamps of the rows at `positions` (a subsequence of `run`, in order).
fn timestamps_of(run: &[Incoming], positions: &[(i32, i64)]) -> Vec<i64> {
    let mut out = Vec::with_capacity(positions.len());
    let mut records = run.iter();
    for (_, offset) in positions {
        for r in records.by_ref() {
            if r.offset == *offset {
                out.push(r.timestamp);
                break;
            }
        }
    }
    out
}
