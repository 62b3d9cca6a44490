//! hotgate's `FlightService`. Every method goes through [`HotgateFlight::call`], which
//! counts the call, resolves its principal and maps its error to a status in one
//! place; the read and write paths do the rest.

use std::future::Future;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use futures::StreamExt;
use futures::stream::BoxStream;
use hotgate_policy::Principal;
use tonic::{Request, Response, Status, Streaming};

use super::call::{fail, new_audit, principal};
use super::{read, write};
use crate::error::{GatewayError, Result};
use crate::state::GatewayState;

/// hotgate's `FlightService`.
#[derive(Debug, Clone)]
pub struct HotgateFlight {
    state: Arc<GatewayState>,
}

impl HotgateFlight {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }

    /// Runs one Flight method: counts it, hands `body` the principal the interceptor
    /// authenticated, and counts, logs and maps its error.
    async fn call<T, R, Fut>(
        &self,
        method: &'static str,
        request: Request<T>,
        body: impl FnOnce(Principal, Request<T>) -> Fut,
    ) -> Result<Response<R>, Status>
    where
        Fut: Future<Output = Result<R>>,
    {
        self.state
            .metrics
            .requests
            .with_label_values(&[method])
            .inc();
        let result = match principal(&request) {
            Ok(p) => body(p, request).await,
            Err(e) => Err(e),
        };
        result
            .map(Response::new)
            .map_err(|e| fail(&self.state, method, e))
    }
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
        self.call("handshake", request, |_, _| {
            unsupported(
                "Basic handshake is not supported: send `authorization: Bearer <jwt>` on each \
                 call (mint one with `hotgate token`)",
            )
        })
        .await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.call("list_flights", request, |p, r| {
            read::list_flights(&self.state, p, r)
        })
        .await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.call("get_flight_info", request, |p, r| async move {
            let audit = new_audit(&self.state, &p, r.remote_addr(), "flight_info");
            read::flight_info(&self.state, &p, r.into_inner(), audit).await
        })
        .await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        self.call("poll_flight_info", request, |_, _| {
            unsupported("PollFlightInfo is not supported; use GetFlightInfo")
        })
        .await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.call("get_schema", request, |p, r| async move {
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
        self.call("do_get", request, |p, r| read::do_get(&self.state, p, r))
            .await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.call("do_put", request, |p, r| write::do_put(&self.state, p, r))
            .await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.call("do_exchange", request, |_, _| {
            unsupported("DoExchange is not supported")
        })
        .await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        self.call("do_action", request, |_, _| {
            unsupported("no actions are defined yet")
        })
        .await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.call("list_actions", request, |_, _| async {
            Ok(futures::stream::empty().boxed())
        })
        .await
    }
}
