//! Flight SQL on the Flight port, next to hotgate's JSON tickets: arrow-flight's
//! [`FlightSqlService`] over [`crate::sql`]'s governed statements.
//!
//! arrow-flight's blanket `FlightService` of a `FlightSqlService` decodes every ticket
//! and descriptor as a protobuf `Any`, which a JSON ticket is not. So
//! [`super::HotgateFlight`] routes: bytes that decode as an `Any` of a Flight SQL type
//! ([`flight_sql_command`]) go to [`SqlService`], everything else to the JSON paths.
//! DoPut is routed by [`super::HotgateFlight`] itself, since its first message must be
//! read to know the command: ingest goes through the JSON path's write path, parameter
//! binding to [`prepared`].
//!
//! ```text
//! mod (SqlService) ─┬─ statement ── prepared
//!                   └─ metadata
//! ```

mod metadata;
mod prepared;
mod running;
mod statement;

use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, Command, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandPreparedStatementQuery, CommandStatementQuery, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{FlightData, FlightDescriptor, FlightInfo, Ticket};
use futures::Stream;
use prost::Message;
use tonic::{Request, Response, Status};

use crate::state::GatewayState;
use prepared::PreparedStatements;
use running::RunningStatements;

/// The type URLs of Flight SQL's messages share this prefix.
const FLIGHT_SQL_TYPE_PREFIX: &str = "type.googleapis.com/arrow.flight.protocol.sql.";

/// The Flight SQL command in a ticket or descriptor, if it holds one.
pub(super) fn flight_sql_command(bytes: &[u8]) -> Option<Command> {
    let any = Any::decode(bytes).ok()?;
    if !any.type_url.starts_with(FLIGHT_SQL_TYPE_PREFIX) {
        return None;
    }
    Command::try_from(any).ok()
}

/// Whether `bytes` are a Flight SQL message (an `Any` of one of its types), decodable
/// or not: those go to Flight SQL, which reports a bad one in its terms.
pub(super) fn is_flight_sql(bytes: &[u8]) -> bool {
    Any::decode(bytes).is_ok_and(|any| any.type_url.starts_with(FLIGHT_SQL_TYPE_PREFIX))
}

type DoGetStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send + 'static>>;

/// hotgate's Flight SQL service.
#[derive(Debug, Clone)]
pub(super) struct SqlService {
    state: Arc<GatewayState>,
    prepared: Arc<PreparedStatements>,
    running: Arc<RunningStatements>,
}

impl SqlService {
    /// `GetFlightInfo` of a metadata command: its answer's schema, and a ticket that is
    /// the command itself.
    async fn metadata_info<M: arrow_flight::sql::ProstMessageExt>(
        &self,
        request: Request<FlightDescriptor>,
        query: &M,
        schema: crate::error::Result<arrow_schema::SchemaRef>,
    ) -> Result<Response<FlightInfo>, Status> {
        let ticket = query.as_ticket();
        super::call::serve(&self.state, "sql_flight_info", request, |_, r| async move {
            metadata::info(r.into_inner(), schema?.as_ref(), ticket)
        })
        .await
    }

    /// `DoGet` of a metadata command: `what` answered as `answer` makes it for the caller.
    async fn metadata_get(
        &self,
        request: Request<Ticket>,
        what: &'static str,
        answer: impl FnOnce(
            &hotgate_policy::Principal,
        ) -> crate::error::Result<arrow_array::RecordBatch>,
    ) -> Result<Response<DoGetStream>, Status> {
        super::call::serve(&self.state, "sql_metadata", request, |p, r| {
            let batch = answer(&p);
            metadata::do_get(&self.state, p, r, what, batch)
        })
        .await
    }

    pub(super) fn new(state: Arc<GatewayState>) -> Self {
        Self {
            prepared: Arc::new(PreparedStatements::new(state.sql.prepared_idle)),
            running: Arc::new(RunningStatements::new(state.sql.statement_timeout)),
            state,
        }
    }

    /// DoPut of `CommandPreparedStatementQuery`: see [`prepared::bind_parameters`].
    pub(super) async fn bind_parameters(
        &self,
        principal: &hotgate_policy::Principal,
        query: arrow_flight::sql::CommandPreparedStatementQuery,
        first: FlightData,
        input: tonic::Streaming<FlightData>,
    ) -> crate::error::Result<
        futures::stream::BoxStream<'static, Result<arrow_flight::PutResult, Status>>,
    > {
        prepared::bind_parameters(&self.prepared, principal, query, first, input).await
    }

    /// `CancelFlightInfo`: cancels the statement runs the info's tickets name.
    pub(super) fn cancel_flight_info(
        &self,
        principal: &hotgate_policy::Principal,
        request: &arrow_flight::CancelFlightInfoRequest,
    ) -> crate::error::Result<arrow_flight::CancelStatus> {
        use crate::error::GatewayError;
        let info = request.info.as_ref().ok_or_else(|| {
            GatewayError::InvalidArgument(
                "CancelFlightInfo: the request holds no FlightInfo".into(),
            )
        })?;
        let ids: Vec<String> = info
            .endpoint
            .iter()
            .filter_map(|e| e.ticket.as_ref())
            .filter_map(|t| statement::run_id_of_ticket(&t.ticket))
            .collect();
        if ids.is_empty() {
            return Err(GatewayError::InvalidArgument(
                "CancelFlightInfo: the FlightInfo names no statement of this server; only \
                 Flight SQL statements can be cancelled"
                    .into(),
            ));
        }
        self.running.cancel(principal, &ids)
    }
}

#[tonic::async_trait]
impl FlightSqlService for SqlService {
    type FlightService = SqlService;

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        super::call::serve(&self.state, "sql_flight_info", request, |p, r| {
            statement::flight_info(&self.state, &self.running, p, r, query.query, None, None)
        })
        .await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        super::call::serve(&self.state, "sql_flight_info", request, |p, r| async move {
            let (sql, params) = self
                .prepared
                .for_execution(&p, &query.prepared_statement_handle)?;
            let ticket = query.as_ticket();
            statement::flight_info(&self.state, &self.running, p, r, sql, params, Some(ticket))
                .await
        })
        .await
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        super::call::serve(&self.state, "sql_do_get", request, |p, r| async move {
            let (run, sql) = statement::sql_of_ticket(&ticket)?;
            statement::do_get(&self.state, &self.running, p, r, run, sql, None).await
        })
        .await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        super::call::serve(&self.state, "sql_do_get", request, |p, r| async move {
            let handle = &query.prepared_statement_handle;
            let (sql, params) = self.prepared.for_execution(&p, handle)?;
            let run = statement::prepared_run_id(handle);
            statement::do_get(&self.state, &self.running, p, r, run, sql, params).await
        })
        .await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        super::call::serve(&self.state, "sql_prepare", request, |p, r| {
            prepared::create(&self.state, &self.prepared, p, r, query)
        })
        .await
        .map(Response::into_inner)
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        super::call::serve(&self.state, "sql_close", request, |p, _| async move {
            self.prepared.close(&p, &query.prepared_statement_handle)
        })
        .await
        .map(Response::into_inner)
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = metadata::sql_info_data().map(|d| d.schema());
        self.metadata_info(request, &query, schema).await
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.metadata_get(request, "sql_info", |_| {
            Ok(query.into_builder(&metadata::sql_info_data()?).build()?)
        })
        .await
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.metadata_info(request, &query, Ok(schema)).await
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.metadata_get(request, "catalogs", |_| {
            let mut builder = query.into_builder();
            builder.append(crate::sql::CATALOG);
            Ok(builder.build()?)
        })
        .await
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(request, &query, Ok(schema)).await
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.metadata_get(request, "db_schemas", |p| {
            metadata::db_schemas(&self.state, p, query)
        })
        .await
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.metadata_info(request, &query, Ok(schema)).await
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.metadata_get(request, "tables", |p| {
            metadata::tables(&self.state, p, query)
        })
        .await
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.metadata_info(request, &query, Ok(schema)).await
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.metadata_get(request, "table_types", |_| {
            let mut builder = query.into_builder();
            builder.append(metadata::TABLE_TYPE);
            Ok(builder.build()?)
        })
        .await
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = Arc::new(metadata::primary_keys_schema());
        self.metadata_info(request, &query, Ok(schema)).await
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.metadata_get(request, "primary_keys", |p| {
            metadata::primary_keys(&self.state, p, query)
        })
        .await
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// A command as the ticket of its own `DoGet` (how the metadata commands are answered).
trait AsTicket {
    fn as_ticket(&self) -> Ticket;
}

impl<M: arrow_flight::sql::ProstMessageExt> AsTicket for M {
    fn as_ticket(&self) -> Ticket {
        Ticket::new(self.as_any().encode_to_vec())
    }
}
