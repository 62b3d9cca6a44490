//! The baseline of the Flight read benchmark: a bare arrow-flight server.

use std::pin::Pin;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{FlightData, FlightDescriptor, Ticket};
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::gateway::BenchResult;

/// A Flight server with no store, no auth and no planner: it serves batches held in
/// memory, projected by the `columns` of the same JSON ticket. The baseline.
#[derive(Debug, Clone)]
pub(crate) struct BareFlight {
    batches: Arc<Vec<RecordBatch>>,
}

type Bs<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl FlightService for BareFlight {
    type HandshakeStream = Bs<arrow_flight::HandshakeResponse>;
    type ListFlightsStream = Bs<arrow_flight::FlightInfo>;
    type DoGetStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoPutStream = Bs<arrow_flight::PutResult>;
    type DoActionStream = Bs<arrow_flight::Result>;
    type ListActionsStream = Bs<arrow_flight::ActionType>;
    type DoExchangeStream = Bs<FlightData>;

    async fn handshake(
        &self,
        _: Request<Streaming<arrow_flight::HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn list_flights(
        &self,
        _: Request<arrow_flight::Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<arrow_flight::FlightInfo>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<arrow_flight::PollInfo>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<arrow_flight::SchemaResult>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let ticket: serde_json::Value = serde_json::from_slice(&request.get_ref().ticket)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let schema: SchemaRef = self.batches[0].schema();
        let projection: Vec<usize> = match ticket["columns"].as_array() {
            Some(cols) => cols
                .iter()
                .map(|c| {
                    schema
                        .index_of(c.as_str().unwrap_or_default())
                        .map_err(|e| Status::invalid_argument(e.to_string()))
                })
                .collect::<Result<_, _>>()?,
            None => (0..schema.fields().len()).collect(),
        };
        let batches: Vec<Result<RecordBatch, FlightError>> = self
            .batches
            .iter()
            .map(|b| b.project(&projection).map_err(FlightError::from))
            .collect();
        let stream = FlightDataEncoderBuilder::new()
            .build(futures::stream::iter(batches))
            .map_err(|e| Status::internal(e.to_string()));
        Ok(Response::new(stream.boxed()))
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn do_action(
        &self,
        _: Request<arrow_flight::Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
    async fn list_actions(
        &self,
        _: Request<arrow_flight::Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("bare"))
    }
}

impl BareFlight {
    /// Serves `batches` on `addr` until the process ends.
    pub(crate) async fn serve(
        batches: Vec<RecordBatch>,
        addr: std::net::SocketAddr,
    ) -> BenchResult<()> {
        let bare = BareFlight {
            batches: Arc::new(batches),
        };
        let listener = tokio::net::TcpListener::bind(addr).await?;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(FlightServiceServer::new(bare).max_encoding_message_size(256 << 20))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Ok(())
    }
}
