//! What a decoded read streams, whichever command it was (scan, changelog, lookup).

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;

use crate::error::Result;

pub(crate) type BatchStream = BoxStream<'static, Result<RecordBatch>>;

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
