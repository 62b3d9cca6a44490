//! hotgate's `FlightService`. Every method goes through [`super::call::serve`], which
//! counts the call, resolves its principal and maps its error to a status in one
//! place; the read and write paths do the rest. Flight SQL messages are routed to
//! [`super::sql::SqlService`] (see that module for why the routing is done here).

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use futures::StreamExt;
use futures::stream::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::call::{new_audit, serve};
use super::sql::{SqlService, flight_sql_command, is_flight_sql};
use super::{read, write};
use crate::auth::Authenticator;
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

/// hotgate's `FlightService`.
#[derive(Debug, Clone)]
pub struct HotgateFlight {
    state: Arc<GatewayState>,
    sql: SqlService,
}

impl HotgateFlight {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self {
            sql: SqlService::new(Arc::clone(&state)),
            state,
        }
    }
}

/// Whether a descriptor carries a Flight SQL command.
fn is_sql_descriptor(descriptor: &FlightDescriptor) -> bool {
    descriptor.r#type() == arrow_flight::flight_descriptor::DescriptorType::Cmd
        && is_flight_sql(&descriptor.cmd)
}

/// The answer of a method hotgate does not offer.
async fn unsupported<R>(what: &str) -> Result<R> {
    Err(GatewayError::Unimplemented(what.to_owned()))
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
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        // The interceptor authenticated the call (a Bearer JWT, or Basic with the JWT as
        // the password); the answer hands the client that token as its bearer token.
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let value = serve(&self.state, "handshake", request, |_, _| async move {
            let token = Authenticator::bearer_token(header.as_deref().unwrap_or_default())?;
            format!("Bearer {token}")
                .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
                .map_err(|_| {
                    GatewayError::Unauthenticated("the token cannot be sent as a header".into())
                })
        })
        .await?
        .into_inner();
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: bytes::Bytes::new(),
        };
        let mut response = Response::new(futures::stream::iter([Ok(answer)]).boxed());
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        serve(&self.state, "list_flights", request, |p, r| {
            read::list_flights(&self.state, p, r)
        })
        .await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        if is_sql_descriptor(request.get_ref()) {
            return FlightService::get_flight_info(&self.sql, request).await;
        }
        serve(&self.state, "get_flight_info", request, |p, r| async move {
            let audit = new_audit(&self.state, &p, r.remote_addr(), "flight_info");
            read::flight_info(&self.state, &p, r.into_inner(), audit).await
        })
        .await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        serve(&self.state, "poll_flight_info", request, |_, _| {
            unsupported("PollFlightInfo is not supported; use GetFlightInfo")
        })
        .await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        if is_sql_descriptor(request.get_ref()) {
            let (metadata, extensions, descriptor) = request.into_parts();
            let info = FlightService::get_flight_info(
                &self.sql,
                Request::from_parts(metadata, extensions, descriptor),
            )
            .await?
            .into_inner();
            let schema = info
                .try_decode_schema()
                .map_err(|e| GatewayError::Internal(e.to_string()))?;
            let result: SchemaResult = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
                .try_into()
                .map_err(|e: arrow_schema::ArrowError| GatewayError::Internal(e.to_string()))?;
            return Ok(Response::new(result));
        }
        serve(&self.state, "get_schema", request, |p, r| async move {
            let audit = new_audit(&self.state, &p, r.remote_addr(), "get_schema");
            let info = read::flight_info(&self.state, &p, r.into_inner(), audit).await?;
            let schema = info.try_decode_schema()?;
            let result: SchemaResult =
                SchemaAsIpc::new(&schema, &IpcWriteOptions::default()).try_into()?;
            Ok(result)
        })
        .await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        if is_flight_sql(&request.get_ref().ticket) {
            return FlightService::do_get(&self.sql, request).await;
        }
        serve(&self.state, "do_get", request, |p, r| {
            read::do_get(&self.state, p, r)
        })
        .await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        serve(&self.state, "do_put", request, |p, r| async move {
            let addr = r.remote_addr();
            let (first, input) = write::first_message(r.into_inner()).await?;
            let command = first
                .flight_descriptor
                .as_ref()
                .filter(|d| is_sql_descriptor(d))
                .map(|d| {
                    flight_sql_command(&d.cmd).ok_or_else(|| {
                        GatewayError::InvalidArgument(
                            "descriptor: a Flight SQL command that does not decode".into(),
                        )
                    })
                })
                .transpose()?;
            use arrow_flight::sql::Command;
            match command {
                None => write::do_put(&self.state, p, addr, first, input, None).await,
                Some(Command::CommandStatementIngest(ingest)) => {
                    write::do_put(&self.state, p, addr, first, input, Some(ingest)).await
                }
                Some(Command::CommandPreparedStatementQuery(query)) => {
                    self.sql.bind_parameters(&p, query, first, input).await
                }
                Some(
                    Command::CommandStatementUpdate(_)
                    | Command::CommandPreparedStatementUpdate(_)
                    | Command::CommandStatementSubstraitPlan(_),
                ) => Err(GatewayError::InvalidArgument(crate::sql::READ_ONLY.into())),
                Some(other) => Err(GatewayError::InvalidArgument(format!(
                    "DoPut does not take the Flight SQL command {}",
                    other.type_url()
                ))),
            }
        })
        .await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        serve(&self.state, "do_exchange", request, |_, _| {
            unsupported("DoExchange is not supported")
        })
        .await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        // Flight's own CancelFlightInfo cancels a Flight SQL statement; every other
        // action is Flight SQL's (prepared statements). The JSON path has none.
        if request.get_ref().r#type == "CancelFlightInfo" {
            return serve(
                &self.state,
                "cancel_flight_info",
                request,
                |p, r| async move {
                    let cancel = <arrow_flight::CancelFlightInfoRequest as prost::Message>::decode(
                        r.into_inner().body,
                    )
                    .map_err(|e| GatewayError::InvalidArgument(format!("CancelFlightInfo: {e}")))?;
                    let status = self.sql.cancel_flight_info(&p, &cancel)?;
                    let result = arrow_flight::CancelFlightInfoResult::new(status);
                    let body = prost::Message::encode_to_vec(&result);
                    Ok(
                        futures::stream::iter([Ok(arrow_flight::Result { body: body.into() })])
                            .boxed(),
                    )
                },
            )
            .await;
        }
        FlightService::do_action(&self.sql, request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        FlightService::list_actions(&self.sql, request).await
    }
}
