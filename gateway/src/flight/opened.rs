//! What a decoded read streams, whichever command it was (scan, changelog, lookup).

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use hotgate_store::IpcFrame;

use crate::error::Result;

pub(crate) type BatchStream = BoxStream<'static, Result<RecordBatch>>;

/// One message of a read that may send stored frames: rows to encode, or a hot frame's
/// stored IPC to send as it is.
pub(crate) enum Outgoing {
    Rows(RecordBatch),
    Stored(IpcFrame),
}

impl Outgoing {
    pub(crate) fn rows(&self) -> usize {
        match self {
            Self::Rows(batch) => batch.num_rows(),
            Self::Stored(frame) => frame.rows,
        }
    }
}

/// What a read streams.
pub(crate) enum ReadBody {
    /// Rows, encoded as they leave.
    Rows(BatchStream),
    /// Rows and stored frames (a zero-copy hot scan, [`super::stored`]).
    Mixed(BoxStream<'static, Result<Outgoing>>),
}

/// What DoGet streams for one decoded ticket.
pub(crate) struct OpenedRead {
    pub(crate) schema: SchemaRef,
    pub(crate) body: ReadBody,
    /// The audit and metrics name of the read.
    pub(crate) kind: &'static str,
    /// `app_metadata` of the result's one batch message (a lookup's missing keys), set
    /// by the batch stream before it ends. Only with [`ReadBody::Rows`].
    pub(crate) trailer: Option<Arc<std::sync::OnceLock<bytes::Bytes>>>,
}
