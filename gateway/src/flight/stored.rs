//! Zero-copy hot scans: a scan whose rows need no work in the planner is answered
//! with the hot tier's stored frames, each sent as its stored Arrow IPC (projected to
//! the scan's columns, header rebuilt) instead of being decoded, planned and encoded
//! again. Everything else goes through DataFusion ([`crate::planner::plan_scan`]).
//!
//! A scan qualifies when nothing between the stored rows and the caller changes them:
//! - hot tier only (the cold tier's Parquet is decoded in any case);
//! - a log table (a primary-key table's scan reads RocksDB state, not frames);
//! - no filter, no limit, and no pending deletion request on the table;
//! - a view with no row filter, and no mask on any column the scan returns (denied
//!   columns are refused or absent either way).
//!
//! Within a qualifying scan, a frame that still needs row work (a time range that cuts
//! it, deleted rows, columns added after it was written, a body too large for one
//! message) is decoded and encoded as usual: the rows are the same either way.

use std::sync::Arc;

use futures::StreamExt;
use hotgate_policy::SecureView;
use hotgate_store::{HotTable, ScanRequest, ScannedItem};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::opened::{OpenedRead, Outgoing, ReadBody};
use crate::deletion::Suppression;
use crate::error::{GatewayError, Result};
use crate::planner::{TierChoice, check_columns};
use crate::ticket::Scan;

/// The largest stored body sent as one message: the Flight encoder's own target size
/// for the messages it splits batches into, well under the 4 MiB clients accept.
const MAX_STORED_BODY: usize = 2 << 20;

/// `scan` answered with stored frames, or `None` when it does not qualify.
pub(super) fn stored_scan(
    table: &Arc<HotTable>,
    view: &SecureView,
    scan: &Scan,
    tiers: &TierChoice,
    suppression: Option<&Suppression>,
    frames_sent: &prometheus::IntCounterVec,
) -> Result<Option<OpenedRead>> {
    let returned: Vec<String> = match &scan.columns {
        Some(columns) => {
            check_columns(view, columns)?;
            columns.clone()
        }
        None => view
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    };
    let untouched =
        view.row_filter().is_none() && returned.iter().all(|c| !view.masks().contains_key(c));
    let timed = scan.since.is_some() || scan.until.is_some();
    if tiers.cold.is_some()
        || table.is_primary_key()
        || !untouched
        || suppression.is_some()
        || scan.filter.is_some()
        || scan.limit.is_some()
        // The planner names this error.
        || (timed && table.def().time_index().is_none())
    {
        return Ok(None);
    }
    let request = ScanRequest {
        columns: Some(returned),
        since: scan.since,
        until: scan.until,
        buckets: scan.buckets.clone(),
        ..Default::default()
    };
    let mut frames = table.scan(&request)?;
    let schema = Arc::clone(frames.schema());
    let (tx, rx) = mpsc::channel(2);
    let stored = frames_sent.with_label_values(&["stored"]);
    let decoded = frames_sent.with_label_values(&["decoded"]);
    tokio::task::spawn_blocking(move || {
        while let Some(item) = frames.next_item(MAX_STORED_BODY) {
            let item = item.map_err(GatewayError::from).map(|item| match item {
                ScannedItem::Ipc { frame, .. } => {
                    stored.inc();
                    Outgoing::Stored(frame)
                }
                ScannedItem::Batch(b) => {
                    decoded.inc();
                    Outgoing::Rows(b.batch)
                }
            });
            let last = item.is_err();
            if tx.blocking_send(item).is_err() || last {
                break;
            }
        }
    });
    Ok(Some(OpenedRead {
        schema,
        body: ReadBody::Mixed(ReceiverStream::new(rx).boxed()),
        kind: "scan",
        trailer: None,
    }))
}
