//! Flight SQL statements: `GetFlightInfo` plans one (its schema, audited), `DoGet`
//! plans it again for the caller's grants at that moment and streams it, audited like
//! any read before its first byte leaves.
//!
//! A statement's ticket carries its text, not server state: it survives a restart,
//! and it is worth no more than the text itself, since `DoGet` re-plans and
//! re-authorizes it as whoever presents it.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_flight::sql::{ProstMessageExt, TicketStatementQuery};
use arrow_flight::{FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_schema::Schema;
use futures::StreamExt;
use futures::stream::BoxStream;
use hotgate_policy::Principal;
use prost::Message;
use tonic::{Request, Status};

use super::super::call::new_audit;
use super::super::opened::{OpenedRead, ReadBody};
use super::super::read::send_read;
use super::running::RunningStatements;
use crate::audit::CallAudit;
use crate::error::{GatewayError, Result, catch_panic};
use crate::sql::{PlannedStatement, Touched, plan_statement};
use crate::state::GatewayState;

/// What a statement ticket's handle holds: the run's id (for `CancelFlightInfo`) and
/// the statement.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StatementHandle {
    run: String,
    sql: String,
}

/// The ticket that runs `sql` as run `run`.
fn statement_ticket(run: &str, sql: &str) -> Result<Ticket> {
    let handle = serde_json::to_vec(&StatementHandle {
        run: run.to_owned(),
        sql: sql.to_owned(),
    })
    .map_err(|e| GatewayError::Internal(e.to_string()))?;
    let ticket = TicketStatementQuery {
        statement_handle: handle.into(),
    };
    Ok(Ticket::new(ticket.as_any().encode_to_vec()))
}

/// The run id of a prepared statement's executions.
pub(super) fn prepared_run_id(handle: &[u8]) -> String {
    format!("prepared:{}", hex::encode(handle))
}

/// The run a Flight SQL ticket starts, if it is one of a statement.
pub(super) fn run_id_of_ticket(ticket: &[u8]) -> Option<String> {
    match super::flight_sql_command(ticket)? {
        arrow_flight::sql::Command::TicketStatementQuery(t) => {
            serde_json::from_slice::<StatementHandle>(&t.statement_handle)
                .ok()
                .map(|h| h.run)
        }
        arrow_flight::sql::Command::CommandPreparedStatementQuery(q) => {
            Some(prepared_run_id(&q.prepared_statement_handle))
        }
        _ => None,
    }
}

/// The run and the statement a ticket holds.
pub(super) fn sql_of_ticket(ticket: &TicketStatementQuery) -> Result<(String, String)> {
    serde_json::from_slice::<StatementHandle>(&ticket.statement_handle)
        .map(|h| (h.run, h.sql))
        .map_err(|_| {
            GatewayError::InvalidArgument(
                "statement handle: not one this server issued; get one from GetFlightInfo \
                 with CommandStatementQuery"
                    .into(),
            )
        })
}

/// Plans `sql` within `state`'s limits, recording what it reads in `audit`.
async fn plan(
    state: &Arc<GatewayState>,
    principal: &Principal,
    sql: &str,
    params: Option<&RecordBatch>,
    audit: &mut CallAudit,
) -> Result<PlannedStatement> {
    let referenced = crate::sql::Referenced::default();
    let planned = plan_statement(
        state,
        principal,
        sql,
        params,
        crate::sql::SqlLimits::of(&state.sql),
        &referenced,
    )
    .await;
    let planned = match planned {
        Ok(p) => p,
        Err(e) => {
            audit.set_table_names(referenced.lock().iter());
            return Err(e);
        }
    };
    record_tables(audit, &planned.touched, &planned.schema);
    Ok(planned)
}

/// Puts the tables a statement reads, with the caller's view of each, and the columns
/// it returns on its record.
pub(super) fn record_tables(audit: &mut CallAudit, touched: &[Touched], returned: &Schema) {
    audit.set_tables(
        touched.iter().map(|t| (&t.name, t.view.as_ref(), t.tiers)),
        returned,
    );
}

/// `GetFlightInfo` of a statement: its schema and the one endpoint that runs it. A
/// prepared statement's `ticket` is its command; a statement's is made here, naming a
/// new run that may be cancelled from now on.
pub(super) async fn flight_info(
    state: &Arc<GatewayState>,
    running: &RunningStatements,
    principal: Principal,
    request: Request<FlightDescriptor>,
    sql: String,
    params: Option<RecordBatch>,
    ticket: Option<Ticket>,
) -> Result<FlightInfo> {
    let mut audit = new_audit(state, &principal, request.remote_addr(), "sql_info");
    audit.set_request(sql.as_bytes());
    let descriptor = request.into_inner();
    let planned = catch_panic(plan(state, &principal, &sql, params.as_ref(), &mut audit)).await;
    let schema = match planned {
        Ok(planned) => Arc::clone(&planned.schema),
        Err(e) => {
            audit.deny(&e).await;
            return Err(e);
        }
    };
    audit.allow_once().await?;
    let ticket = match ticket {
        Some(t) => t,
        None => statement_ticket(&uuid::Uuid::new_v4().simple().to_string(), &sql)?,
    };
    if let Some(run) = run_id_of_ticket(&ticket.ticket) {
        running.token(&principal, &run);
    }
    Ok(FlightInfo::new()
        .try_with_schema(&schema)?
        .with_descriptor(descriptor)
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket)))
}

/// `DoGet` of a statement, as run `run` (cancelled through `running`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn do_get(
    state: &Arc<GatewayState>,
    running: &Arc<RunningStatements>,
    principal: Principal,
    request: Request<Ticket>,
    run: String,
    sql: String,
    params: Option<RecordBatch>,
) -> Result<BoxStream<'static, Result<FlightData, Status>>> {
    let cancel = running.token(&principal, &run);
    let ended = RunEnded {
        running: Arc::clone(running),
        run,
    };
    let mut audit = new_audit(state, &principal, request.remote_addr(), "sql");
    audit.set_request(sql.as_bytes());
    let started = Instant::now();
    let opened = catch_panic(async {
        let planned = plan(state, &principal, &sql, params.as_ref(), &mut audit).await?;
        for t in &planned.touched {
            state.boundary.record(
                &t.name,
                t.tiers,
                None,
                None,
                chrono::Utc::now().timestamp_micros(),
            );
        }
        let batches = planned.execute(cancel)?.inspect(move |_| {
            let _ = &ended; // forgets the run when the stream is dropped
        });
        Ok(OpenedRead {
            schema: Arc::clone(&planned.schema),
            body: ReadBody::Rows(batches.boxed()),
            kind: "sql",
            trailer: None,
        })
    })
    .await;
    match opened {
        Ok(opened) => send_read(state, audit, started, opened).await,
        Err(e) => {
            audit.deny(&e).await;
            Err(e)
        }
    }
}

/// Forgets a run when its stream ends or is dropped: nothing is left to cancel.
struct RunEnded {
    running: Arc<RunningStatements>,
    run: String,
}

impl Drop for RunEnded {
    fn drop(&mut self) {
        self.running.finished(&self.run);
    }
}
