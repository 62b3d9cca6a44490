//! The read path: DoGet (scans, changelogs, lookups), GetFlightInfo, GetSchema and
//! ListFlights. Every read is decoded, authorized, planned inside the caller's secure
//! view and put on record before anything, not even the schema, leaves.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::{Criteria, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use hotgate_policy::{Principal, Privilege};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Status};

use super::call::{new_audit, table_for};
use super::changelog::{Recheck, changelog, changelog_schema};
use super::descriptor::{descriptor_bytes, scan_ticket, table_of_path};
use super::lookup::{lookup, lookup_unsupported};
use super::opened::{OpenedRead, Outgoing, ReadBody};
use super::stored::stored_scan;
use crate::audit::CallAudit;
use crate::error::{GatewayError, Result, catch_panic};
use crate::planner::{check_columns, choose_tiers, plan_scan};
use crate::state::GatewayState;
use crate::ticket::{self, Command, Scan, TicketJson};

/// Most endpoints GetFlightInfo splits a table into.
const MAX_ENDPOINTS: u32 = 4;

/// DoGet: opens the read, puts it on record, then streams it.
pub(super) async fn do_get(
    state: &Arc<GatewayState>,
    principal: Principal,
    request: Request<Ticket>,
) -> Result<BoxStream<'static, Result<FlightData, Status>>> {
    let mut audit = new_audit(state, &principal, request.remote_addr(), "read");
    let ticket = request.into_inner().ticket;
    audit.set_request_later(ticket.clone());
    let started = Instant::now();
    let opened = match catch_panic(open_read(state, &principal, &ticket, &mut audit)).await {
        Ok(opened) => opened,
        Err(e) => {
            audit.deny(&e).await;
            return Err(e);
        }
    };
    send_read(state, audit, started, opened).await
}

/// Streams an opened read: its allow record is queued, and nothing (not even the
/// schema) leaves until that record is durable.
pub(super) async fn send_read(
    state: &Arc<GatewayState>,
    audit: CallAudit,
    started: Instant,
    opened: OpenedRead,
) -> Result<BoxStream<'static, Result<FlightData, Status>>> {
    let OpenedRead {
        schema,
        body,
        kind,
        trailer,
    } = opened;
    // The plan starts now, prefetching into a small buffer, while the allow record
    // is sealed and synced; nothing, not even the schema, leaves before the record
    // is durable, and a read whose record cannot be written fails with
    // `Unavailable` (its prefetch stops when the buffer is dropped).
    let body = match body {
        ReadBody::Rows(batches) => ReadBody::Rows(prefetch(batches)),
        ReadBody::Mixed(items) => ReadBody::Mixed(prefetch(items)),
    };
    let (completion, record) = audit.allow_queued().await?;
    let completion = Arc::new(completion);
    let unrecorded = Arc::clone(&completion);
    let timer = ReadTimer {
        histogram: state.metrics.read_seconds.with_label_values(&[kind]),
        started,
    };
    let errors = state.metrics.errors.clone();
    let (counted, ended) = (Arc::clone(&completion), Arc::clone(&completion));
    let finished = futures::stream::once(async move { ended.finished() });
    let encoded = match body {
        ReadBody::Rows(batches) => {
            let batches = batches
                .inspect_ok(move |b| counted.add_rows(b.num_rows() as u64))
                .chain(finished.filter_map(|()| async { None::<Result<RecordBatch>> }))
                .map_err(|e| FlightError::ExternalError(Box::new(e)));
            match trailer {
                None => FlightDataEncoderBuilder::new()
                    .with_schema(schema)
                    .build(batches)
                    .boxed(),
                Some(metadata) => with_metadata(schema, batches.boxed(), metadata),
            }
        }
        ReadBody::Mixed(items) => {
            let items = items
                .inspect_ok(move |item| counted.add_rows(item.rows() as u64))
                .chain(finished.filter_map(|()| async { None::<Result<Outgoing>> }));
            encode_mixed(schema, items.boxed())
        }
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
    let failed = state.metrics.errors.clone();
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

/// Runs `items` ahead into a buffer of two on its own task. A panic while reading
/// ends the stream with an error, never as if the read were complete.
fn prefetch<T: Send + 'static>(
    items: BoxStream<'static, Result<T>>,
) -> BoxStream<'static, Result<T>> {
    let (tx, rx) = mpsc::channel(2);
    tokio::spawn(async move {
        let mut items = items;
        loop {
            let next = catch_panic(async { Ok(items.next().await) }).await;
            let (item, last) = match next {
                Ok(None) => break,
                Ok(Some(item)) => (item, false),
                Err(e) => (Err(e), true),
            };
            if tx.send(item).await.is_err() || last {
                break;
            }
        }
    });
    ReceiverStream::new(rx).boxed()
}

/// Encodes a stream of rows and stored frames: the schema message first, then each
/// stored frame as one message, its header and body as they are, and each batch of
/// rows as the Flight encoder splits it.
fn encode_mixed(
    schema: SchemaRef,
    items: BoxStream<'static, Result<Outgoing>>,
) -> BoxStream<'static, std::result::Result<FlightData, FlightError>> {
    let schema_message = FlightDataEncoderBuilder::new()
        .with_schema(Arc::clone(&schema))
        .build(futures::stream::empty());
    let messages = items.flat_map(move |item| match item {
        Ok(Outgoing::Stored(frame)) => futures::stream::once(async move {
            Ok(FlightData {
                data_header: frame.header,
                data_body: frame.body,
                ..Default::default()
            })
        })
        .boxed(),
        // The encoder's first message is the schema, already sent.
        Ok(Outgoing::Rows(batch)) => FlightDataEncoderBuilder::new()
            .with_schema(Arc::clone(&schema))
            .build(futures::stream::once(async move { Ok(batch) }))
            .skip(1)
            .boxed(),
        Err(e) => {
            futures::stream::once(async move { Err(FlightError::ExternalError(Box::new(e))) })
                .boxed()
        }
    });
    schema_message.chain(messages).boxed()
}

/// Decodes, authorizes and plans a read, filling in its audit record as it goes.
async fn open_read(
    state: &Arc<GatewayState>,
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
    let table = table_for(state, principal, Privilege::TableReadData, command.table())?;
    let view = state.governance.view(principal, &table)?;
    let opened = match command {
        Command::Scan(scan) => {
            let tiers = choose_tiers(&state.tierer, &table, &scan)?;
            audit.set_tiers(tiers.tiers);
            state.boundary.record(
                table.def().name(),
                tiers.tiers,
                scan.since,
                scan.until,
                chrono::Utc::now().timestamp_micros(),
            );
            let suppression = state.deletions.suppression(table.def().name());
            if let Some(opened) = stored_scan(
                &table,
                &view,
                &scan,
                &tiers,
                suppression.as_ref(),
                &state.metrics.scan_frames,
            )? {
                audit.set_view(&view, &opened.schema);
                return Ok(opened);
            }
            let df = plan_scan(table, &view, &scan, &tiers, suppression.as_ref()).await?;
            let schema = Arc::new(df.schema().as_arrow().clone());
            let stream = df.execute_stream().await?;
            OpenedRead {
                schema,
                body: ReadBody::Rows(stream.map_err(GatewayError::from).boxed()),
                kind: "scan",
                trailer: None,
            }
        }
        Command::Changelog(c) => {
            let recheck = Recheck {
                state: Arc::clone(state),
                principal: principal.clone(),
                table: Arc::clone(&table),
            };
            let (schema, stream) =
                changelog(table, Arc::clone(&view), c, recheck, state.shutdown.clone())?;
            OpenedRead {
                schema,
                body: ReadBody::Rows(stream),
                kind: "changelog",
                trailer: None,
            }
        }
        Command::Lookup(l) => {
            let suppression = state.deletions.suppression(table.def().name());
            lookup(&state.governance, table, Arc::clone(&view), l, suppression).await?
        }
    };
    audit.set_view(&view, &opened.schema);
    Ok(opened)
}

fn command_of(descriptor: &FlightDescriptor) -> Result<Command> {
    match descriptor.r#type() {
        DescriptorType::Cmd => ticket::parse(&descriptor.cmd),
        DescriptorType::Path => {
            let name = table_of_path(&descriptor.path)?;
            Ok(Command::Scan(Scan::whole(name)))
        }
        DescriptorType::Unknown => Err(GatewayError::InvalidArgument(
            "descriptor: set a path [namespace, table] or a JSON command".into(),
        )),
    }
}

/// GetFlightInfo and GetSchema: the call is audited as `action`, and its record is
/// durable before the answer leaves.
pub(super) async fn flight_info(
    state: &Arc<GatewayState>,
    principal: &Principal,
    descriptor: FlightDescriptor,
    mut audit: CallAudit,
) -> Result<FlightInfo> {
    audit.set_request(&descriptor_bytes(&descriptor));
    match catch_panic(flight_info_inner(state, principal, descriptor, &mut audit)).await {
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

pub(super) async fn flight_info_inner(
    state: &Arc<GatewayState>,
    principal: &Principal,
    descriptor: FlightDescriptor,
    audit: &mut CallAudit,
) -> Result<FlightInfo> {
    let command = command_of(&descriptor)?;
    audit.set_table(command.table());
    audit.set_columns_requested(command.columns().unwrap_or_default());
    let table = table_for(state, principal, Privilege::TableReadData, command.table())?;
    let view = state.governance.view(principal, &table)?;
    let (schema, tickets) = match command {
        Command::Scan(scan) => {
            let tiers = choose_tiers(&state.tierer, &table, &scan)?;
            let suppression = state.deletions.suppression(table.def().name());
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
                    let mine: Vec<u32> = buckets.iter().skip(g).step_by(groups).copied().collect();
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

/// ListFlights: the tables the caller may list, each with the schema of their view
/// (empty when they may list but not read it).
pub(super) async fn list_flights(
    state: &Arc<GatewayState>,
    principal: Principal,
    request: Request<Criteria>,
) -> Result<BoxStream<'static, Result<FlightInfo, Status>>> {
    let audit = new_audit(state, &principal, request.remote_addr(), "list_flights");
    let mut infos = Vec::new();
    for (table, schema) in state.governance.listed(&principal, state.store.tables()) {
        let def = table.def();
        let name = def.name();
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
        .map_err(|e| GatewayError::Internal(e.to_string()))?;
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| GatewayError::Internal(e.to_string()))?
            .with_descriptor(descriptor)
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)));
        infos.push(Ok(info));
    }
    audit.allow_once().await?;
    Ok(futures::stream::iter(infos).boxed())
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
