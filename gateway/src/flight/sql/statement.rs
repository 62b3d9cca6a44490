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
use futures::stream::BoxStream;
use hotgate_policy::Principal;
use prost::Message;
use tonic::{Request, Status};

use super::super::call::new_audit;
use super::super::opened::OpenedRead;
use super::super::read::send_read;
use crate::audit::CallAudit;
use crate::error::{GatewayError, Result, catch_panic};
use crate::sql::{PlannedStatement, plan_statement};
use crate::state::GatewayState;

/// What a statement ticket's handle holds.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StatementHandle {
    sql: String,
}

/// The ticket that runs `sql`.
pub(super) fn statement_ticket(sql: &str) -> Result<Ticket> {
    let handle = serde_json::to_vec(&StatementHandle {
        sql: sql.to_owned(),
    })
    .map_err(|e| GatewayError::Internal(e.to_string()))?;
    let ticket = TicketStatementQuery {
        statement_handle: handle.into(),
    };
    Ok(Ticket::new(ticket.as_any().encode_to_vec()))
}

/// The statement a ticket runs.
pub(super) fn sql_of_ticket(ticket: &TicketStatementQuery) -> Result<String> {
    serde_json::from_slice::<StatementHandle>(&ticket.statement_handle)
        .map(|h| h.sql)
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
    let planned = plan_statement(state, principal, sql, params, state.sql.limits()).await?;
    audit.set_tables(
        planned
            .touched
            .iter()
            .map(|t| (&t.name, t.view.as_ref(), t.tiers)),
        &planned.schema,
    );
    Ok(planned)
}

/// `GetFlightInfo` of a statement: its schema and the one endpoint that runs it.
pub(super) async fn flight_info(
    state: &Arc<GatewayState>,
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
        None => statement_ticket(&sql)?,
    };
    Ok(FlightInfo::new()
        .try_with_schema(&schema)?
        .with_descriptor(descriptor)
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket)))
}

/// `DoGet` of a statement.
pub(super) async fn do_get(
    state: &Arc<GatewayState>,
    principal: Principal,
    request: Request<Ticket>,
    sql: String,
    params: Option<RecordBatch>,
) -> Result<BoxStream<'static, Result<FlightData, Status>>> {
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
        Ok(OpenedRead {
            schema: Arc::clone(&planned.schema),
            batches: planned.execute()?,
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
