//! The write path: DoPut into log tables (appends, group-committed, acknowledged in
//! order once durable) and primary-key tables (upserts and deletes). The write rules
//! drop and hash restricted columns here, before a batch reaches the store.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::sql::CommandStatementIngest;
use arrow_flight::{FlightData, PutResult};
use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesOrdered};
use futures::{StreamExt, TryStreamExt};
use hotgate_policy::{Principal, Privilege, WriteRules};
use hotgate_store::{ChangeOp, HotTable, TableName};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::call::{new_audit, table_for};
use super::descriptor::{descriptor_bytes, table_of_path};
use crate::audit::{CallAudit, Completion};
use crate::error::{GatewayError, Result, catch_panic};
use crate::governance::Governance;
use crate::state::GatewayState;

/// Most DoPut batches of one stream waiting for their sync at once.
const MAX_PUTS_IN_FLIGHT: usize = 64;

/// The first message of a DoPut stream (it carries the descriptor), and the rest.
pub(super) async fn first_message(
    mut input: Streaming<FlightData>,
) -> Result<(FlightData, Streaming<FlightData>)> {
    let first = input
        .message()
        .await
        .map_err(|s| GatewayError::InvalidArgument(format!("DoPut stream: {}", s.message())))?
        .ok_or_else(|| GatewayError::InvalidArgument("DoPut stream is empty".into()))?;
    Ok((first, input))
}

/// DoPut: reads the descriptor (or the Flight SQL `ingest` command), authorizes and
/// records the write, then stores its batches, acknowledging each once durable; an
/// ingest is acknowledged once, with its row count, when all of them are.
pub(super) async fn do_put(
    state: &Arc<GatewayState>,
    principal: Principal,
    addr: Option<std::net::SocketAddr>,
    first: FlightData,
    input: Streaming<FlightData>,
    ingest: Option<CommandStatementIngest>,
) -> Result<BoxStream<'static, Result<PutResult, Status>>> {
    let mut audit = new_audit(state, &principal, addr, "write");
    let is_ingest = ingest.is_some();
    let opened = catch_panic(open_write(state, &principal, &first, ingest, &mut audit)).await;
    let (table, op) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            audit.deny(&e).await;
            return Err(e);
        }
    };
    // The write is on record before its first row is stored.
    let completion = audit.allow().await?;
    let acks = if is_ingest {
        AckMode::Total
    } else {
        AckMode::PerBatch
    };
    Ok(if table.is_primary_key() {
        let op = op.unwrap_or(ChangeOp::Upsert);
        run_changes(state, table, op, first, input, completion, acks)
    } else {
        run_write(state, table, first, input, completion, acks)
    })
}

/// Reads the descriptor of a DoPut (or its ingest command) and authorizes the write.
async fn open_write(
    state: &Arc<GatewayState>,
    principal: &Principal,
    first: &FlightData,
    ingest: Option<CommandStatementIngest>,
    audit: &mut CallAudit,
) -> Result<(Arc<HotTable>, Option<ChangeOp>)> {
    let descriptor = first.flight_descriptor.clone().ok_or_else(|| {
        GatewayError::InvalidArgument(
            "descriptor: the first DoPut message must carry a descriptor: a path \
             [namespace, table] or a command {\"table\":\"ns.t\",\"op\":\"upsert\"}"
                .into(),
        )
    })?;
    audit.set_request(&descriptor_bytes(&descriptor));
    let (name, op) = match (ingest, descriptor.r#type()) {
        (Some(ingest), _) => (ingest_table(state, &ingest)?, None),
        (None, DescriptorType::Path) => (table_of_path(&descriptor.path)?, None),
        (None, DescriptorType::Cmd) => {
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
        (None, DescriptorType::Unknown) => {
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
    let table = table_for(state, principal, Privilege::TableWriteData, &name)?;
    if op.is_some() && !table.is_primary_key() {
        return Err(GatewayError::InvalidArgument(format!(
            "descriptor: op applies to primary-key tables; {name} is a log table, which \
             takes appends (leave op out)"
        )));
    }
    Ok((table, op))
}

/// The table a Flight SQL ingest writes: an existing one, appended to (a primary-key
/// table takes the rows as upserts). Creating, replacing, temporary tables and
/// transactions are refused.
fn ingest_table(state: &GatewayState, ingest: &CommandStatementIngest) -> Result<TableName> {
    use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
    let refuse = |what: &str| {
        Err(GatewayError::InvalidArgument(format!(
            "ingest: {what}; hotgate ingests only by appending to an existing table \
             (ADBC mode \"append\"); create tables with POST /v1/tables"
        )))
    };
    if let Some(options) = &ingest.table_definition_options {
        let if_not_exist = TableNotExistOption::try_from(options.if_not_exist)
            .unwrap_or(TableNotExistOption::Unspecified);
        let if_exists = TableExistsOption::try_from(options.if_exists)
            .unwrap_or(TableExistsOption::Unspecified);
        if if_not_exist == TableNotExistOption::Create {
            return refuse("the command would create the table");
        }
        if matches!(
            if_exists,
            TableExistsOption::Replace | TableExistsOption::Fail
        ) {
            return refuse("the command would replace the table, or fail because it exists");
        }
    }
    if ingest.temporary {
        return refuse("temporary tables do not exist in hotgate");
    }
    if ingest.transaction_id.is_some() {
        return refuse("hotgate has no transactions");
    }
    if ingest
        .catalog
        .as_deref()
        .is_some_and(|c| !c.is_empty() && c != crate::sql::CATALOG)
    {
        return refuse("the catalog is not hotgate's");
    }
    let namespace = ingest
        .schema
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or(&state.sql.default_namespace);
    TableName::parse(&format!("{namespace}.{}", ingest.table))
        .map_err(|e| GatewayError::InvalidArgument(format!("ingest: table: {e}")))
}

/// Applies a DoPut's batches to a primary-key table one at a time, in order, each
/// acknowledged once its changelog is durable and applied. A batch's result names
/// the deletes that found no row.
fn run_changes(
    state: &Arc<GatewayState>,
    table: Arc<HotTable>,
    op: ChangeOp,
    first: FlightData,
    input: Streaming<FlightData>,
    completion: Completion,
    acks: AckMode,
) -> BoxStream<'static, Result<PutResult, Status>> {
    PutTask::spawn(state, table, first, input, completion, acks, move |task| {
        Box::pin(async move {
            while let Some(item) = task.batches.next().await {
                let written = match item.map_err(undecodable).and_then(|b| task.governed(&b)) {
                    Ok(b) => task.table.write_changes(&b, op).await,
                    Err(e) => return Some(e),
                };
                match written {
                    Ok(r) => task.acks.ack(r.rows, &r).await,
                    Err(e) => return Some(e.into()),
                }
            }
            None
        })
    })
}

/// Streams a DoPut's batches into the table, acknowledging each once durable.
fn run_write(
    state: &Arc<GatewayState>,
    table: Arc<HotTable>,
    first: FlightData,
    input: Streaming<FlightData>,
    completion: Completion,
    acks: AckMode,
) -> BoxStream<'static, Result<PutResult, Status>> {
    PutTask::spawn(state, table, first, input, completion, acks, |task| {
        Box::pin(async move {
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
                            Ok(r) => task.acks.ack(r.rows, &r).await,
                            Err(e) => {
                                failure.get_or_insert(e.into());
                                input_done = true;
                            }
                        }
                    }
                    item = task.batches.next(), if !input_done && in_flight.len() < MAX_PUTS_IN_FLIGHT => {
                        let Some(item) = item else {
                            input_done = true;
                            continue;
                        };
                        let queued = match item.map_err(undecodable).and_then(|b| task.governed(&b)) {
                            Ok(b) => task.table.begin_append(&b).await.map_err(GatewayError::from),
                            Err(e) => Err(e),
                        };
                        match queued {
                            Ok(pending) => in_flight.push_back(pending.durable()),
                            Err(e) => {
                                failure = Some(e);
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
            failure
        })
    })
}

/// One DoPut stream being stored: the table, its write rules, the decoded batches and
/// the acknowledgements.
struct PutTask {
    table: Arc<HotTable>,
    rules: WriteRules,
    governance: Arc<Governance>,
    batches: FlightRecordBatchStream,
    acks: PutAcks,
}

impl PutTask {
    /// Runs `store` over the stream in a task of its own: a write in progress completes
    /// even if the caller goes away, so an append is never half-applied (shutdown waits
    /// for the task through the response stream), and a panic fails the stream with an
    /// error rather than leaving it unanswered. `store` returns the failure that ended it.
    fn spawn<F>(
        state: &Arc<GatewayState>,
        table: Arc<HotTable>,
        first: FlightData,
        input: Streaming<FlightData>,
        completion: Completion,
        mode: AckMode,
        store: F,
    ) -> BoxStream<'static, Result<PutResult, Status>>
    where
        F: for<'a> FnOnce(&'a mut PutTask) -> BoxFuture<'a, Option<GatewayError>> + Send + 'static,
    {
        let (acks, responses) = PutAcks::new(state, completion, mode);
        let mut task = PutTask {
            rules: Governance::write_rules(&table.def()),
            table,
            governance: Arc::clone(&state.governance),
            batches: put_batches(first, input),
            acks,
        };
        tokio::spawn(async move {
            let failure = catch_panic(async { Ok(store(&mut task).await) })
                .await
                .unwrap_or_else(Some);
            task.acks.finish(failure).await;
        });
        responses
    }

    /// Counts a decoded batch and applies the write rules: drop and hash happen here,
    /// before the batch reaches the store.
    fn governed(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        self.acks
            .completion
            .add_bytes(batch.get_array_memory_size() as u64);
        Ok(self.rules.apply(batch, self.governance.hash_key())?)
    }
}

/// The Arrow batches of a DoPut stream, its first message (which carried the
/// descriptor) included.
pub(super) fn put_batches(
    first: FlightData,
    input: Streaming<FlightData>,
) -> FlightRecordBatchStream {
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

/// How a DoPut is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AckMode {
    /// One PutResult per batch once it is stored, its result as JSON.
    PerBatch,
    /// One PutResult when every batch is stored: Flight SQL's `DoPutUpdateResult` with
    /// the rows written (an ingest).
    Total,
}

/// The response side of a DoPut: PutResults as batches are stored, counted in the
/// metrics and the call's audit completion, then the failure that ended the stream.
struct PutAcks {
    tx: mpsc::Sender<Result<PutResult, Status>>,
    metrics: Arc<crate::metrics::GatewayMetrics>,
    completion: Completion,
    mode: AckMode,
    rows: u64,
}

impl PutAcks {
    fn new(
        state: &GatewayState,
        completion: Completion,
        mode: AckMode,
    ) -> (Self, BoxStream<'static, Result<PutResult, Status>>) {
        let (tx, rx) = mpsc::channel(16);
        let acks = Self {
            tx,
            metrics: Arc::clone(&state.metrics),
            completion,
            mode,
            rows: 0,
        };
        (acks, ReceiverStream::new(rx).boxed())
    }

    /// Acknowledges a stored batch of `rows` rows with `result` as its `app_metadata`.
    async fn ack(&mut self, rows: u64, result: &impl serde::Serialize) {
        self.metrics.put_rows.inc_by(rows);
        self.completion.add_rows(rows);
        self.rows += rows;
        if self.mode == AckMode::Total {
            return;
        }
        let message = serde_json::to_vec(result)
            .map(|m| PutResult {
                app_metadata: m.into(),
            })
            .map_err(|e| GatewayError::Internal(e.to_string()).into_status());
        // A caller that went away no longer reads acknowledgements.
        let _ = self.tx.send(message).await;
    }

    /// Ends the call's record, and sends the failure that stopped the stream, if any
    /// (or, acknowledging in total, the rows written).
    async fn finish(self, failure: Option<GatewayError>) {
        self.completion.finished();
        if let Some(e) = failure {
            self.metrics.errors.with_label_values(&[e.code()]).inc();
            self.completion.failed(&e);
            let _ = self.tx.send(Err(e.into())).await;
        } else if self.mode == AckMode::Total {
            use prost::Message;
            let result = arrow_flight::sql::DoPutUpdateResult {
                record_count: i64::try_from(self.rows).unwrap_or(i64::MAX),
            };
            let message = PutResult {
                app_metadata: result.encode_to_vec().into(),
            };
            let _ = self.tx.send(Ok(message)).await;
        }
    }
}

/// The command of a DoPut descriptor: `{"table":"ns.t","op":"upsert"|"delete"}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PutCommand {
    table: String,
    #[serde(default)]
    op: Option<ChangeOp>,
}
