//! Prepared statements: a handle for a statement's text and its bound parameters,
//! held in memory for the principal that created it.
//!
//! A handle is 16 random bytes, opaque to the client. It is bound to its principal:
//! another principal's call with it is denied, and an unknown, closed or expired one
//! (unused for `[sql] prepared_idle`, or made before a restart) is refused as invalid.
//! Each execution plans the statement again, so it is authorized with the caller's
//! grants at that moment, never with those it had when it was prepared.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    CommandPreparedStatementQuery, DoPutPreparedStatementResult,
};
use arrow_flight::{Action, FlightData, IpcMessage, PutResult, SchemaAsIpc};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::Schema;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use hotgate_policy::Principal;
use parking_lot::Mutex;
use prost::Message;
use tonic::{Request, Status, Streaming};

use super::super::call::new_audit;
use crate::error::{GatewayError, Result, catch_panic};
use crate::sql::describe_statement;
use crate::state::GatewayState;

/// Most prepared statements held at once, over all principals.
const MAX_PREPARED: usize = 10_000;

#[derive(Debug)]
struct Prepared {
    owner: String,
    sql: String,
    params: Option<RecordBatch>,
    last_used: Instant,
}

/// The prepared statements of the server.
#[derive(Debug)]
pub(super) struct PreparedStatements {
    entries: Mutex<HashMap<Vec<u8>, Prepared>>,
    idle: Duration,
}

impl PreparedStatements {
    pub(super) fn new(idle: Duration) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            idle,
        }
    }

    fn insert(&self, principal: &Principal, sql: String) -> Result<Vec<u8>> {
        let mut entries = self.entries.lock();
        let idle = self.idle;
        entries.retain(|_, p| p.last_used.elapsed() < idle);
        if entries.len() >= MAX_PREPARED {
            return Err(GatewayError::ResourceExhausted(format!(
                "{MAX_PREPARED} prepared statements are open, the server's limit; close \
                 some (ClosePreparedStatement) or wait for idle ones to expire"
            )));
        }
        let handle = uuid::Uuid::new_v4().as_bytes().to_vec();
        entries.insert(
            handle.clone(),
            Prepared {
                owner: principal.name.clone(),
                sql,
                params: None,
                last_used: Instant::now(),
            },
        );
        Ok(handle)
    }

    /// Runs `f` on the caller's live prepared statement `handle`.
    fn with<T>(
        &self,
        principal: &Principal,
        handle: &[u8],
        f: impl FnOnce(&mut Prepared) -> T,
    ) -> Result<T> {
        let mut entries = self.entries.lock();
        let idle = self.idle;
        let live = entries
            .get_mut(handle)
            .filter(|p| p.last_used.elapsed() < idle);
        let Some(prepared) = live else {
            entries.remove(handle);
            return Err(GatewayError::InvalidArgument(
                "prepared statement handle: unknown, closed or expired; create the \
                 prepared statement again"
                    .into(),
            ));
        };
        if prepared.owner != principal.name {
            return Err(GatewayError::PermissionDenied(
                "prepared statement handle: it belongs to another principal".into(),
            ));
        }
        prepared.last_used = Instant::now();
        Ok(f(prepared))
    }

    /// The statement and parameters an execution of `handle` runs.
    pub(super) fn for_execution(
        &self,
        principal: &Principal,
        handle: &[u8],
    ) -> Result<(String, Option<RecordBatch>)> {
        self.with(principal, handle, |p| (p.sql.clone(), p.params.clone()))
    }

    pub(super) fn close(&self, principal: &Principal, handle: &[u8]) -> Result<()> {
        self.with(principal, handle, |_| ())?;
        self.entries.lock().remove(handle);
        Ok(())
    }
}

/// `CreatePreparedStatement`: plans the statement for the caller (so a statement it
/// may not run fails now, audited), and returns its handle, its result's schema and
/// the schema of its parameters (`$1`, `$2`, …).
pub(super) async fn create(
    state: &Arc<GatewayState>,
    prepared: &PreparedStatements,
    principal: Principal,
    request: Request<Action>,
    query: ActionCreatePreparedStatementRequest,
) -> Result<ActionCreatePreparedStatementResult> {
    let mut audit = new_audit(state, &principal, request.remote_addr(), "sql_prepare");
    audit.set_request(query.query.as_bytes());
    let referenced = crate::sql::Referenced::default();
    let described = catch_panic(describe_statement(
        state,
        &principal,
        &query.query,
        crate::sql::SqlLimits::of(&state.sql),
        &referenced,
    ))
    .await;
    let described = match described {
        Ok(d) => d,
        Err(e) => {
            audit.set_table_names(referenced.lock().iter());
            audit.deny(&e).await;
            return Err(e);
        }
    };
    super::statement::record_tables(&mut audit, &described.touched, &described.dataset);
    audit.allow_once().await?;
    let handle = prepared.insert(&principal, query.query)?;
    Ok(ActionCreatePreparedStatementResult {
        prepared_statement_handle: handle.into(),
        dataset_schema: schema_bytes(&described.dataset)?,
        parameter_schema: schema_bytes(&described.parameters)?,
    })
}

fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default()).try_into()?;
    Ok(bytes)
}

/// DoPut of `CommandPreparedStatementQuery`: binds the parameters sent (one row, one
/// column per parameter) to the caller's prepared statement, for its next executions.
pub(super) async fn bind_parameters(
    prepared: &PreparedStatements,
    principal: &Principal,
    query: CommandPreparedStatementQuery,
    first: FlightData,
    input: Streaming<FlightData>,
) -> Result<BoxStream<'static, Result<PutResult, Status>>> {
    let handle = query.prepared_statement_handle;
    // The handle is checked before the parameters are read.
    prepared.with(principal, &handle, |_| ())?;
    let batches: Vec<RecordBatch> = super::super::write::put_batches(first, input)
        .try_collect()
        .await
        .map_err(|e| GatewayError::InvalidArgument(format!("parameters: {e}")))?;
    let params = match batches.as_slice() {
        [] => None,
        [only] => Some(only.clone()),
        _ => Some(
            arrow_select::concat::concat_batches(&batches[0].schema(), &batches)
                .map_err(|e| GatewayError::InvalidArgument(format!("parameters: {e}")))?,
        ),
    };
    prepared.with(principal, &handle, |p| p.params = params)?;
    let result = DoPutPreparedStatementResult {
        prepared_statement_handle: Some(handle),
    };
    let message = PutResult {
        app_metadata: result.encode_to_vec().into(),
    };
    Ok(Box::pin(futures::stream::iter([Ok(message)])))
}
