//! The Arrow Flight service. Each method authenticates through the interceptor (which
//! puts the [`Principal`] in the request extensions), decodes its ticket or descriptor,
//! then authorizes the privilege that command needs on that table.
//!
//! Scans and writes live here; [`changelog`] streams changes (and follows them), and
//! [`lookup`] answers batched key lookups of primary-key tables.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::SchemaRef;
use futures::stream::{BoxStream, FuturesOrdered};
use futures::{StreamExt, TryStreamExt};
use hotgate_policy::{Principal, Privilege};
use hotgate_store::{ChangeOp, HotTable, TableName};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::audit::{CallAudit, Completion};
use crate::error::{GatewayError, Result, catch_panic};
use crate::governance::Governance;
use crate::planner::{check_columns, choose_tiers, plan_scan};
use crate::state::GatewayState;
use crate::ticket::{self, Command, Scan, TicketJson};

mod changelog;
mod lookup;

use changelog::{Recheck, changelog, changelog_schema};
use lookup::{lookup, lookup_unsupported};

/// Most DoPut batches of one stream waiting for their sync at once.
const MAX_PUTS_IN_FLIGHT: usize = 64;
/// Most endpoints GetFlightInfo splits a table into.
const MAX_ENDPOINTS: u32 = 4;

pub(crate) type BatchStream = BoxStream<'static, Result<RecordBatch>>;

/// hotgate's `FlightService`.
#[derive(Debug, Clone)]
pub struct HotgateFlight {
    state: Arc<GatewayState>,
}

impl HotgateFlight {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }

    fn principal<T>(&self, request: &Request<T>) -> Result<Principal> {
        request
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| {
                GatewayError::Unauthenticated("no authenticated principal on the call".into())
            })
    }

    /// Starts the audit of a call by `principal`.
    fn audit<T>(&self, principal: &Principal, request: &Request<T>, action: &str) -> CallAudit {
        CallAudit::new(
            &self.state.audit,
            &self.state.governance,
            principal,
            request.remote_addr(),
            action,
        )
    }

    /// Authorizes `privilege` on the table, then opens it. The check comes first so a
    /// caller without access cannot probe which tables exist.
    fn table_for(
        &self,
        principal: &Principal,
        privilege: Privilege,
        name: &TableName,
    ) -> Result<Arc<HotTable>> {
        self.state
            .governance
            .authorize_table(principal, privilege, name)?;
        Ok(self.state.store.table(name)?)
    }

    /// Counts the error, logs it, and turns it into a status.
    fn fail(&self, method: &str, e: GatewayError) -> Status {
        self.state
            .metrics
            .errors
            .with_label_values(&[e.code()])
            .inc();
        tracing::debug!(method, code = e.code(), "request failed: {e}");
        e.into()
    }

    /// Decodes, authorizes and plans a read, filling in its audit record as it goes.
    async fn open_read(
        &self,
        principal: &Principal,
        ticket: &[u8],
        audit: &mut CallAudit,
    ) -> Result<OpenedRead> {
        let command = ticket::parse(ticket)?;
        // Lets a test make a read meet a bug (`FAILPOINTS=open-read=panic`).
        fail::fail_point!("open-read");
        audit.set_action(command.kind());
        audit.set_table(command.table());
        audit.set_columns_requested(command.columns().unwrap_or_default());
        let table = self.table_for(principal, Privilege::TableReadData, command.table())?;
        let view = self.state.governance.view(principal, &table)?;
        let opened = match command {
            Command::Scan(scan) => {
                let tiers = choose_tiers(&self.state.tierer, &table, &scan)?;
                audit.set_tiers(tiers.tiers);
                self.state.boundary.record(
                    table.def().name(),
                    tiers.tiers,
                    scan.since,
                    scan.until,
                    chrono::Utc::now().timestamp_micros(),
                );
                let suppression = self.state.deletions.suppression(table.def().name());
                let df = plan_scan(table, &view, &scan, &tiers, suppression.as_ref()).await?;
                let schema = Arc::new(df.schema().as_arrow().clone());
                let stream = df.execute_stream().await?;
                OpenedRead {
                    schema,
                    batches: stream.map_err(GatewayError::from).boxed(),
                    kind: "scan",
                    trailer: None,
                }
            }
            Command::Changelog(c) => {
                let recheck = Recheck {
                    state: Arc::clone(&self.state),
                    principal: principal.clone(),
                    table: Arc::clone(&table),
                };
                let (schema, stream) = changelog(
                    table,
                    Arc::clone(&view),
                    c,
                    recheck,
                    self.state.shutdown.clone(),
                )?;
                OpenedRead {
                    schema,
                    batches: stream,
                    kind: "changelog",
                    trailer: None,
                }
            }
            Command::Lookup(l) => {
                let suppression = self.state.deletions.suppression(table.def().name());
                lookup(
                    &self.state.governance,
                    table,
                    Arc::clone(&view),
                    l,
                    suppression,
                )
                .await?
            }
        };
        audit.set_view(&view, &opened.schema);
        Ok(opened)
    }

    async fn do_get_inner(
        &self,
        request: Request<Ticket>,
    ) -> Result<BoxStream<'static, Result<FlightData, Status>>> {
        let principal = self.principal(&request)?;
        let mut audit = self.audit(&principal, &request, "read");
        let ticket = request.into_inner().ticket;
        audit.set_request_later(ticket.clone());
        let started = Instant::now();
        let OpenedRead {
            schema,
            batches,
            kind,
            trailer,
        } = match catch_panic(self.open_read(&principal, &ticket, &mut audit)).await {
            Ok(opened) => opened,
            Err(e) => {
                audit.deny(&e).await;
                return Err(e);
            }
        };
        // The plan starts now, prefetching into a small buffer, while the allow record
        // is sealed and synced; nothing, not even the schema, leaves before the record
        // is durable, and a read whose record cannot be written fails with
        // `Unavailable` (its prefetch stops when the buffer is dropped).
        let (prefetch_tx, prefetch_rx) = mpsc::channel(2);
        tokio::spawn(async move {
            let mut batches = batches;
            loop {
                // A panic while reading ends the stream with an error, never as if the
                // read were complete.
                let next = catch_panic(async { Ok(batches.next().await) }).await;
                let (item, last) = match next {
                    Ok(None) => break,
                    Ok(Some(item)) => (item, false),
                    Err(e) => (Err(e), true),
                };
                if prefetch_tx.send(item).await.is_err() || last {
                    break;
                }
            }
        });
        let batches: BatchStream = ReceiverStream::new(prefetch_rx).boxed();
        let (completion, record) = audit.allow_queued().await?;
        let completion = Arc::new(completion);
        let unrecorded = Arc::clone(&completion);
        let timer = ReadTimer {
            histogram: self.state.metrics.read_seconds.with_label_values(&[kind]),
            started,
        };
        let errors = self.state.metrics.errors.clone();
        let (counted, ended) = (Arc::clone(&completion), Arc::clone(&completion));
        let batches = batches
            .inspect_ok(move |b| counted.add_rows(b.num_rows() as u64))
            .chain(
                futures::stream::once(async move { ended.finished() })
                    .filter_map(|()| async { None::<Result<RecordBatch>> }),
            );
        let batches = batches.map_err(|e| FlightError::ExternalError(Box::new(e)));
        let encoded = match trailer {
            None => FlightDataEncoderBuilder::new()
                .with_schema(schema)
                .build(batches)
                .boxed(),
            Some(metadata) => with_metadata(schema, batches.boxed(), metadata),
        };
        let encoded = encoded.map(move |item| {
            let _ = &timer; // observed when the stream is dropped
            match item {
                Ok(data) => {
                    completion.add_bytes((data.data_header.len() + data.data_body.len()) as u64);
                    Ok(data)
                }
                Err(e) => {
                    let e = flight_error_to_gateway(e);
                    errors.with_label_values(&[e.code()]).inc();
                    // Raised on rows, the message can quote a value: debug log only.
                    tracing::debug!(code = e.code(), "read stream failed: {e}");
                    completion.failed(&e);
                    Err(Status::from(e))
                }
            }
        });
        let failed = self.state.metrics.errors.clone();
        let gated = futures::stream::once(async move {
            match record.durable().await {
                Ok(_) => encoded.boxed(),
                Err(e) => {
                    failed.with_label_values(&[e.code()]).inc();
                    unrecorded.failed(&e);
                    futures::stream::iter([Err(Status::from(e))]).boxed()
                }
            }
        })
        .flatten();
        Ok(gated.boxed())
    }

    fn command_of(&self, descriptor: &FlightDescriptor) -> Result<Command> {
        match descriptor.r#type() {
            DescriptorType::Cmd => ticket::parse(&descriptor.cmd),
            DescriptorType::Path => {
                let name = table_of_path(&descriptor.path)?;
                Ok(Command::Scan(Scan {
                    table: name,
                    columns: None,
                    filter: None,
                    since: None,
                    until: None,
                    limit: None,
                    buckets: None,
                }))
            }
            DescriptorType::Unknown => Err(GatewayError::InvalidArgument(
                "descriptor: set a path [namespace, table] or a JSON command".into(),
            )),
        }
    }

    /// GetFlightInfo and GetSchema: the call is audited as `action`, and its record is
    /// durable before the answer leaves.
    async fn flight_info(
        &self,
        principal: &Principal,
        descriptor: FlightDescriptor,
        mut audit: CallAudit,
    ) -> Result<FlightInfo> {
        audit.set_request(&descriptor_bytes(&descriptor));
        match catch_panic(self.flight_info_inner(principal, descriptor, &mut audit)).await {
            Ok(info) => {
                audit.allow_once().await?;
                Ok(info)
            }
            Err(e) => {
                audit.deny(&e).await;
                Err(e)
            }
        }
    }

    async fn flight_info_inner(
        &self,
        principal: &Principal,
        descriptor: FlightDescriptor,
        audit: &mut CallAudit,
    ) -> Result<FlightInfo> {
        let command = self.command_of(&descriptor)?;
        audit.set_table(command.table());
        audit.set_columns_requested(command.columns().unwrap_or_default());
        let table = self.table_for(principal, Privilege::TableReadData, command.table())?;
        let view = self.state.governance.view(principal, &table)?;
        let (schema, tickets) = match command {
            Command::Scan(scan) => {
                let tiers = choose_tiers(&self.state.tierer, &table, &scan)?;
                let suppression = self.state.deletions.suppression(table.def().name());
                let df = plan_scan(
                    Arc::clone(&table),
                    &view,
                    &scan,
                    &tiers,
                    suppression.as_ref(),
                )
                .await?;
                let schema = df.schema().as_arrow().clone();
                let buckets: Vec<u32> = scan
                    .buckets
                    .clone()
                    .unwrap_or_else(|| (0..table.def().buckets()).collect());
                let groups = (buckets.len() as u32).clamp(1, MAX_ENDPOINTS) as usize;
                let tickets = (0..groups)
                    .map(|g| {
                        let mine: Vec<u32> =
                            buckets.iter().skip(g).step_by(groups).copied().collect();
                        scan_ticket(&scan, Some(mine))
                    })
                    .collect::<Result<Vec<_>>>()?;
                (schema, tickets)
            }
            Command::Changelog(c) => {
                let schema = changelog_schema(&table, &view, c.columns.as_deref())?;
                let cmd = match descriptor.r#type() {
                    DescriptorType::Cmd => descriptor.cmd.to_vec(),
                    _ => serde_json::to_vec(&TicketJson {
                        table: table.def().name().to_string(),
                        ..Default::default()
                    })
                    .map_err(|e| GatewayError::Internal(e.to_string()))?,
                };
                (schema.as_ref().clone(), vec![cmd])
            }
            Command::Lookup(l) => {
                if !table.is_primary_key() {
                    return Err(lookup_unsupported(&l.table));
                }
                let schema = match &l.columns {
                    Some(cols) => check_columns(&view, cols)?,
                    None => Arc::clone(view.schema()),
                };
                (schema.as_ref().clone(), vec![descriptor.cmd.to_vec()])
            }
        };
        audit.set_view(&view, &schema);
        let mut info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| GatewayError::Internal(e.to_string()))?
            .with_descriptor(descriptor);
        for t in tickets {
            info = info.with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(t)));
        }
        Ok(info)
    }

    async fn do_put_inner(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<BoxStream<'static, Result<PutResult, Status>>> {
        let principal = self.principal(&request)?;
        let mut audit = self.audit(&principal, &request, "write");
        let input = request.into_inner();
        let (table, op, first, input) =
            match catch_panic(self.open_write(&principal, input, &mut audit)).await {
                Ok(opened) => opened,
                Err(e) => {
                    audit.deny(&e).await;
                    return Err(e);
                }
            };
        // The write is on record before its first row is stored.
        let completion = audit.allow().await?;
        if table.is_primary_key() {
            self.run_changes(
                table,
                op.unwrap_or(ChangeOp::Upsert),
                first,
                input,
                completion,
            )
        } else {
            self.run_write(table, first, input, completion)
        }
    }

    /// Reads the descriptor of a DoPut and authorizes the write.
    async fn open_write(
        &self,
        principal: &Principal,
        mut input: Streaming<FlightData>,
        audit: &mut CallAudit,
    ) -> Result<(
        Arc<HotTable>,
        Option<ChangeOp>,
        FlightData,
        Streaming<FlightData>,
    )> {
        let first = input
            .message()
            .await
            .map_err(|s| GatewayError::InvalidArgument(format!("DoPut stream: {}", s.message())))?
            .ok_or_else(|| GatewayError::InvalidArgument("DoPut stream is empty".into()))?;
        let descriptor = first.flight_descriptor.clone().ok_or_else(|| {
            GatewayError::InvalidArgument(
                "descriptor: the first DoPut message must carry a descriptor: a path \
                 [namespace, table] or a command {\"table\":\"ns.t\",\"op\":\"upsert\"}"
                    .into(),
            )
        })?;
        audit.set_request(&descriptor_bytes(&descriptor));
        let (name, op) = match descriptor.r#type() {
            DescriptorType::Path => (table_of_path(&descriptor.path)?, None),
            DescriptorType::Cmd => {
                let cmd: PutCommand = serde_json::from_slice(&descriptor.cmd).map_err(|e| {
                    GatewayError::InvalidArgument(format!(
                        "descriptor: the DoPut command is not valid: {e}; expected \
                         {{\"table\":\"ns.t\",\"op\":\"upsert\"|\"delete\"}}"
                    ))
                })?;
                let name = TableName::parse(&cmd.table)
                    .map_err(|e| GatewayError::InvalidArgument(format!("table: {e}")))?;
                (name, cmd.op)
            }
            DescriptorType::Unknown => {
                return Err(GatewayError::InvalidArgument(
                    "descriptor: DoPut takes a path [namespace, table] or a JSON command".into(),
                ));
            }
        };
        audit.set_table(&name);
        if name.is_system() {
            return Err(GatewayError::PermissionDenied(format!(
                "{name} is written only by hotgate itself; no grant allows DoPut to _system"
            )));
        }
        let table = self.table_for(principal, Privilege::TableWriteData, &name)?;
        if op.is_some() && !table.is_primary_key() {
            return Err(GatewayError::InvalidArgument(format!(
                "descriptor: op applies to primary-key tables; {name} is a log table, which \
                 takes appends (leave op out)"
            )));
        }
        Ok((table, op, first, input))
    }

    /// Applies a DoPut's batches to a primary-key table one at a time, in order, each
    /// acknowledged once its changelog is durable and applied. A batch's result names
    /// the deletes that found no row.
    fn run_changes(
        &self,
        table: Arc<HotTable>,
        op: ChangeOp,
        first: FlightData,
        input: Streaming<FlightData>,
        completion: Completion,
    ) -> Result<BoxStream<'static, Result<PutResult, Status>>> {
        let rules = Governance::write_rules(&table.def());
        let governance = Arc::clone(&self.state.governance);
        let mut batches = put_batches(first, input);
        let (acks, responses) = PutAcks::new(&self.state, completion);
        // As for appends, a change in progress completes even if the caller goes away.
        tokio::spawn(async move {
            // A panic fails the stream with an error rather than leaving it unanswered.
            let failure = catch_panic(async {
                let mut failure: Option<GatewayError> = None;
                while let Some(item) = batches.next().await {
                    let batch = match item {
                        Ok(b) => b,
                        Err(e) => {
                            failure = Some(undecodable(e));
                            break;
                        }
                    };
                    acks.completion
                        .add_bytes(batch.get_array_memory_size() as u64);
                    let written = match rules.apply(&batch, governance.hash_key()) {
                        Ok(b) => table
                            .write_changes(&b, op)
                            .await
                            .map_err(GatewayError::from),
                        Err(e) => Err(e.into()),
                    };
                    match written {
                        Ok(r) => acks.ack(r.rows, &r).await,
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                Ok(failure)
            })
            .await
            .unwrap_or_else(Some);
            acks.finish(failure).await;
        });
        Ok(responses)
    }

    /// Streams a DoPut's batches into the table, acknowledging each once durable.
    fn run_write(
        &self,
        table: Arc<HotTable>,
        first: FlightData,
        input: Streaming<FlightData>,
        completion: Completion,
    ) -> Result<BoxStream<'static, Result<PutResult, Status>>> {
        // Drop and hash happen here, before the batch reaches the store.
        let rules = Governance::write_rules(&table.def());
        let governance = Arc::clone(&self.state.governance);
        let mut batches = put_batches(first, input);
        let (acks, responses) = PutAcks::new(&self.state, completion);
        // Appends run to completion even if the caller goes away, so an in-flight append
        // is never half-applied; shutdown waits for this task through the response stream.
        tokio::spawn(async move {
            let failure = catch_panic(async {
                // Batches are queued in order as they arrive and acknowledged in order once
                // durable; up to MAX_PUTS_IN_FLIGHT wait for their sync at once, so a stream
                // of small batches shares group commits instead of paying one sync each.
                let mut in_flight = FuturesOrdered::new();
                let mut failure: Option<GatewayError> = None;
                let mut input_done = false;
                loop {
                    tokio::select! {
                        biased;
                        Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                            let done: hotgate_store::Result<hotgate_store::AppendResult> = done;
                            match done {
                                // If the caller left, queued appends still complete.
                                Ok(r) => acks.ack(r.rows, &r).await,
                                Err(e) => {
                                    failure.get_or_insert(e.into());
                                    input_done = true;
                                }
                            }
                        }
                        item = batches.next(), if !input_done && in_flight.len() < MAX_PUTS_IN_FLIGHT => {
                            match item {
                                None => input_done = true,
                                Some(Ok(batch)) => {
                                    acks.completion.add_bytes(batch.get_array_memory_size() as u64);
                                    let stored = rules.apply(&batch, governance.hash_key());
                                    let queued = match stored {
                                        Ok(b) => table.begin_append(&b).await.map_err(GatewayError::from),
                                        Err(e) => Err(e.into()),
                                    };
                                    match queued {
                                        Ok(pending) => in_flight.push_back(pending.durable()),
                                        Err(e) => {
                                            failure = Some(e);
                                            input_done = true;
                                        }
                                    }
                                }
                                Some(Err(e)) => {
                                    failure = Some(undecodable(e));
                                    input_done = true;
                                }
                            }
                        }
                        else => break,
                    }
                    if input_done && in_flight.is_empty() {
                        break;
                    }
                }
                Ok(failure)
            })
            .await
            .unwrap_or_else(Some);
            acks.finish(failure).await;
        });
        Ok(responses)
    }
}

/// The Arrow batches of a DoPut stream, its first message (which carried the
/// descriptor) included.
fn put_batches(first: FlightData, input: Streaming<FlightData>) -> FlightRecordBatchStream {
    let data = futures::stream::once(async { Ok(first) })
        .chain(input)
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    FlightRecordBatchStream::new_from_flight_data(data)
}

fn undecodable(e: FlightError) -> GatewayError {
    GatewayError::InvalidArgument(format!(
        "DoPut stream could not be decoded as Arrow IPC: {e}"
    ))
}

/// The response side of a DoPut: one PutResult per batch once it is stored, counted in
/// the metrics and the call's audit completion, then the failure that ended the stream.
struct PutAcks {
    tx: mpsc::Sender<Result<PutResult, Status>>,
    metrics: Arc<crate::metrics::GatewayMetrics>,
    completion: Completion,
}

impl PutAcks {
    fn new(
        state: &GatewayState,
        completion: Completion,
    ) -> (Self, BoxStream<'static, Result<PutResult, Status>>) {
        let (tx, rx) = mpsc::channel(16);
        let acks = Self {
            tx,
            metrics: Arc::clone(&state.metrics),
            completion,
        };
        (acks, ReceiverStream::new(rx).boxed())
    }

    /// Acknowledges a stored batch of `rows` rows with `result` as its `app_metadata`.
    async fn ack(&self, rows: u64, result: &impl serde::Serialize) {
        self.metrics.put_rows.inc_by(rows);
        self.completion.add_rows(rows);
        let message = serde_json::to_vec(result)
            .map(|m| PutResult {
                app_metadata: m.into(),
            })
            .map_err(|e| Status::internal(e.to_string()));
        // A caller that went away no longer reads acknowledgements.
        let _ = self.tx.send(message).await;
    }

    /// Ends the call's record, and sends the failure that stopped the stream, if any.
    async fn finish(self, failure: Option<GatewayError>) {
        self.completion.finished();
        if let Some(e) = failure {
            self.metrics.errors.with_label_values(&[e.code()]).inc();
            self.completion.failed(&e);
            let _ = self.tx.send(Err(e.into())).await;
        }
    }
}

/// Encodes a lookup's result with `metadata` as the `app_metadata` of its last batch
/// message (a metadata-only message is not decodable by every Flight client; a batch
/// message's metadata is). Batches are split to gRPC-sized messages as usual; a result
/// without rows is sent as one empty batch, so the metadata always arrives.
fn with_metadata(
    schema: SchemaRef,
    batches: BoxStream<'static, std::result::Result<RecordBatch, FlightError>>,
    metadata: Arc<std::sync::OnceLock<bytes::Bytes>>,
) -> BoxStream<'static, std::result::Result<FlightData, FlightError>> {
    futures::stream::once(async move {
        let mut data: Vec<FlightData> = FlightDataEncoderBuilder::new()
            .with_schema(Arc::clone(&schema))
            .build(batches)
            .try_collect()
            .await?;
        // Only the schema message: no rows were found.
        if data.len() <= 1 {
            data = arrow_flight::utils::batches_to_flight_data(
                &schema,
                vec![RecordBatch::new_empty(Arc::clone(&schema))],
            )?;
        }
        if let Some(last) = data.last_mut() {
            last.app_metadata = metadata.get().cloned().unwrap_or_default();
        }
        Ok::<_, FlightError>(futures::stream::iter(data.into_iter().map(Ok)))
    })
    .try_flatten()
    .boxed()
}

/// Observes the read latency histogram when a read stream ends or is dropped.
struct ReadTimer {
    histogram: prometheus::Histogram,
    started: Instant,
}

impl Drop for ReadTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

fn scan_ticket(scan: &Scan, buckets: Option<Vec<u32>>) -> Result<Vec<u8>> {
    let micros = |v: Option<i64>| {
        v.and_then(chrono::DateTime::from_timestamp_micros)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
    };
    let json = TicketJson {
        table: scan.table.to_string(),
        columns: scan.columns.clone(),
        filter: scan.filter.clone(),
        since: micros(scan.since),
        until: micros(scan.until),
        limit: scan.limit,
        buckets,
        ..Default::default()
    };
    serde_json::to_vec(&json).map_err(|e| GatewayError::Internal(e.to_string()))
}

/// The bytes a descriptor's audit digest covers: its command, or its path.
fn descriptor_bytes(descriptor: &FlightDescriptor) -> Vec<u8> {
    match descriptor.r#type() {
        DescriptorType::Cmd => descriptor.cmd.to_vec(),
        _ => serde_json::to_vec(&descriptor.path).unwrap_or_default(),
    }
}

fn table_of_path(path: &[String]) -> Result<TableName> {
    match path {
        [namespace @ .., t] if !namespace.is_empty() => {
            TableName::parse(&format!("{}.{t}", namespace.join(".")))
                .map_err(|e| GatewayError::InvalidArgument(format!("descriptor path: {e}")))
        }
        _ => Err(GatewayError::InvalidArgument(format!(
            "descriptor path must be [namespace..., table], got {} element(s)",
            path.len()
        ))),
    }
}

/// The gateway error behind a failed encoding stream: the read's own error, passed
/// through the encoder, or one of the encoder's.
fn flight_error_to_gateway(e: FlightError) -> GatewayError {
    match e {
        FlightError::ExternalError(inner) => match inner.downcast::<GatewayError>() {
            Ok(g) => *g,
            Err(other) => GatewayError::Internal(other.to_string()),
        },
        FlightError::Tonic(status) => match status.code() {
            tonic::Code::Unavailable => GatewayError::Unavailable(status.message().to_owned()),
            _ => GatewayError::Internal(status.message().to_owned()),
        },
        other => GatewayError::Internal(other.to_string()),
    }
}

/// What DoGet streams for one decoded ticket.
pub(crate) struct OpenedRead {
    pub(crate) schema: SchemaRef,
    pub(crate) batches: BatchStream,
    /// The audit and metrics name of the read.
    pub(crate) kind: &'static str,
    /// `app_metadata` of the result's one batch message (a lookup's missing keys), set
    /// by the batch stream before it ends.
    pub(crate) trailer: Option<Arc<std::sync::OnceLock<bytes::Bytes>>>,
}

/// The command of a DoPut descriptor: `{"table":"ns.t","op":"upsert"|"delete"}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PutCommand {
    table: String,
    #[serde(default)]
    op: Option<ChangeOp>,
}

#[tonic::async_trait]
impl FlightService for HotgateFlight {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;
    type DoExchangeStream = BoxStream<'static, Result<FlightData, Status>>;

    async fn handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(
            "Basic handshake is not supported: send `authorization: Bearer <jwt>` on each call \
             (mint one with `hotgate token`)",
        ))
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.state
            .metrics
            .requests
            .with_label_values(&["list_flights"])
            .inc();
        let principal = self
            .principal(&request)
            .map_err(|e| self.fail("list_flights", e))?;
        let audit = self.audit(&principal, &request, "list_flights");
        let mut infos = Vec::new();
        for table in self.state.store.tables() {
            let def = table.def();
            let name = def.name();
            let governance = &self.state.governance;
            if governance
                .authorize_table(&principal, Privilege::TableList, name)
                .is_err()
            {
                continue;
            }
            // Listing shows only what the caller may read, with denied columns absent.
            let readable = governance
                .authorize_table(&principal, Privilege::TableReadData, name)
                .and_then(|()| governance.view(&principal, &table));
            let schema = match readable {
                Ok(view) => view.schema().as_ref().clone(),
                Err(_) => arrow_schema::Schema::empty(),
            };
            let descriptor = FlightDescriptor::new_path(
                name.namespace()
                    .split('.')
                    .chain([name.name()])
                    .map(str::to_owned)
                    .collect(),
            );
            let ticket = serde_json::to_vec(&TicketJson {
                table: name.to_string(),
                ..Default::default()
            })
            .map_err(|e| Status::internal(e.to_string()))?;
            let info = FlightInfo::new()
                .try_with_schema(&schema)
                .map_err(|e| Status::internal(e.to_string()))?
                .with_descriptor(descriptor)
                .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)));
            infos.push(Ok(info));
        }
        audit
            .allow_once()
            .await
            .map_err(|e| self.fail("list_flights", e))?;
        Ok(Response::new(futures::stream::iter(infos).boxed()))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.state
            .metrics
            .requests
            .with_label_values(&["get_flight_info"])
            .inc();
        let principal = self
            .principal(&request)
            .map_err(|e| self.fail("get_flight_info", e))?;
        let audit = self.audit(&principal, &request, "flight_info");
        self.flight_info(&principal, request.into_inner(), audit)
            .await
            .map(Response::new)
            .map_err(|e| self.fail("get_flight_info", e))
    }

    async fn poll_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "PollFlightInfo is not supported; use GetFlightInfo",
        ))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.state
            .metrics
            .requests
            .with_label_values(&["get_schema"])
            .inc();
        let principal = self
            .principal(&request)
            .map_err(|e| self.fail("get_schema", e))?;
        let audit = self.audit(&principal, &request, "get_schema");
        let info = self
            .flight_info(&principal, request.into_inner(), audit)
            .await
            .map_err(|e| self.fail("get_schema", e))?;
        let schema = info
            .try_decode_schema()
            .map_err(|e| Status::internal(e.to_string()))?;
        let result: SchemaResult = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e: arrow_schema::ArrowError| Status::internal(e.to_string()))?;
        Ok(Response::new(result))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        self.state
            .metrics
            .requests
            .with_label_values(&["do_get"])
            .inc();
        self.do_get_inner(request)
            .await
            .map(Response::new)
            .map_err(|e| self.fail("do_get", e))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.state
            .metrics
            .requests
            .with_label_values(&["do_put"])
            .inc();
        self.do_put_inner(request)
            .await
            .map(Response::new)
            .map_err(|e| self.fail("do_put", e))
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("DoExchange is not supported"))
    }

    async fn do_action(
        &self,
        _request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("no actions are defined yet"))
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Ok(Response::new(futures::stream::empty().boxed()))
    }
}
