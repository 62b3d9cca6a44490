//! Changelog reads: a table's rows in commit order from a start point, through the
//! caller's secure view, optionally following new commits; for primary-key tables with
//! change metadata and the snapshot-then-changelog handoff.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array};
use arrow_schema::{DataType, Field, SchemaRef};
use futures::StreamExt;
use hotgate_policy::{Principal, Privilege, SecureView};
use hotgate_store::{CHANGE_COLUMN, HotTable, LogId, ScanRequest, change_meta_fields};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::opened::BatchStream;
use crate::deletion::Suppression;
use crate::error::{GatewayError, Result};
use crate::planner::check_columns;
use crate::state::GatewayState;
use crate::ticket::{Changelog, ChangelogStart};

/// How often a live `follow` stream re-checks the caller's grants and policies.
const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Re-authorizes a long-lived read against the current mirror and policies.
pub(super) struct Recheck {
    pub(super) state: Arc<GatewayState>,
    pub(super) principal: Principal,
    pub(super) table: Arc<HotTable>,
}

impl Recheck {
    /// The suppression of pending deletion requests on the table, as of now.
    fn suppression(&self) -> Option<Suppression> {
        self.state.deletions.suppression(self.table.def().name())
    }

    fn view(&self) -> Result<Arc<SecureView>> {
        let governance = &self.state.governance;
        governance.authorize_table(
            &self.principal,
            Privilege::TableReadData,
            self.table.def().name(),
        )?;
        governance.view(&self.principal, &self.table)
    }

    /// Swaps in the current view. Revocation is `PermissionDenied`; a policy change that
    /// keeps the visible columns takes effect in place, one that changes them ends the
    /// stream, since a Flight stream cannot change its schema.
    fn refresh(&self, view: &mut Arc<SecureView>) -> Result<()> {
        let current = self.view()?;
        if current.schema() != view.schema() {
            return Err(GatewayError::Unavailable(
                "the policies on this table changed which columns you may see; reopen the stream"
                    .into(),
            ));
        }
        *view = current;
        Ok(())
    }
}

/// The schema a changelog sends: the caller's visible (or requested) columns, then for a
/// primary-key table `_change`, `_bucket`, `_offset` and `_commit_ts`.
pub(super) fn changelog_schema(
    table: &HotTable,
    view: &SecureView,
    columns: Option<&[String]>,
) -> Result<SchemaRef> {
    let visible = match columns {
        Some(cols) => check_columns(view, cols)?,
        None => Arc::clone(view.schema()),
    };
    if !table.is_primary_key() {
        return Ok(visible);
    }
    Ok(with_change_columns(&visible))
}

/// `schema` followed by the columns a primary-key changelog row carries after the
/// stored ones: `_change`, then the store's change metadata.
fn with_change_columns(schema: &arrow_schema::Schema) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(CHANGE_COLUMN, DataType::Utf8, false));
    fields.extend(change_meta_fields());
    Arc::new(arrow_schema::Schema::new(fields))
}

/// How many columns [`with_change_columns`] appends.
fn change_trailing() -> usize {
    1 + change_meta_fields().len()
}

/// Resolves a ticket's explicit start offsets to the table's logs.
fn start_offsets(
    table: &HotTable,
    named: &std::collections::BTreeMap<String, u64>,
) -> Result<HashMap<LogId, u64>> {
    let buckets = table.def().buckets();
    let mut out = HashMap::with_capacity(named.len());
    for (name, offset) in named {
        let (day, bucket) = match name.split_once('/') {
            Some((day, bucket)) => (day, bucket),
            None => ("none", name.as_str()),
        };
        let id = LogId::parse_dirs(&format!("day={day}"), &format!("bucket={bucket}"))
            .filter(|id| id.bucket < buckets && (id.day.is_none() == table.is_primary_key()))
            .ok_or_else(|| {
                GatewayError::InvalidArgument(format!(
                    "changelog.from: {name:?} names no log of {}; name logs {} (buckets 0..{buckets})",
                    table.def().name(),
                    if table.is_primary_key() {
                        "by bucket, e.g. \"3\""
                    } else {
                        "as \"<YYYY-MM-DD>/<bucket>\""
                    }
                ))
            })?;
        out.insert(id, *offset);
    }
    Ok(out)
}

/// The current rows of a snapshot in changelog form: `+I`, their bucket, no offset.
fn snapshot_rows(bucket: u32, rows: &RecordBatch) -> Result<RecordBatch> {
    let n = rows.num_rows();
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(StringArray::from(vec!["+I"; n])));
    columns.push(Arc::new(UInt32Array::from(vec![bucket; n])));
    columns.push(arrow_array::new_null_array(&DataType::Int64, n));
    columns.push(Arc::new(
        TimestampMicrosecondArray::from(vec![None::<i64>; n]).with_timezone(hotgate_store::UTC),
    ));
    Ok(RecordBatch::try_new(
        with_change_columns(&rows.schema()),
        columns,
    )?)
}

/// Rows per batch of a changelog's snapshot.
const SNAPSHOT_BATCH_ROWS: usize = 8192;

/// Streams a table's rows in commit order per log, from a start point, through the
/// caller's secure view; with `follow` it then waits for each new commit (woken by the
/// store, no polling) until the caller disconnects or the server shuts down. A follow
/// stream re-checks its authorization every [`RECHECK_EVERY`] and ends with
/// `PermissionDenied` once the grant is gone.
///
/// A primary-key table's changelog carries `_change`, `_bucket`, `_offset` and
/// `_commit_ts`; `from: snapshot` first sends its current rows as `+I`, read at a point
/// consistent with the offsets the changes then continue from.
pub(super) fn changelog(
    table: Arc<HotTable>,
    view: Arc<SecureView>,
    c: Changelog,
    recheck: Recheck,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(SchemaRef, BatchStream)> {
    let pk = table.is_primary_key();
    // Resolved up front so a bad column or start fails the call, not the stream.
    let schema = changelog_schema(&table, &view, c.columns.as_deref())?;
    let trailing = if pk { change_trailing() } else { 0 };
    let projection: Option<Vec<usize>> = match &c.columns {
        Some(cols) => {
            let visible = view.schema().fields().len();
            let mut indices = cols
                .iter()
                .map(|n| view.schema().index_of(n))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            indices.extend(visible..visible + trailing);
            Some(indices)
        }
        None => None,
    };
    let mut offsets: HashMap<LogId, u64> = match &c.from {
        ChangelogStart::Latest => table.end_offsets(),
        ChangelogStart::Earliest | ChangelogStart::Time(_) | ChangelogStart::Snapshot => {
            HashMap::new()
        }
        ChangelogStart::Offsets(named) => start_offsets(&table, named)?,
    };
    if matches!(c.from, ChangelogStart::Time(_)) && table.def().time_index().is_none() {
        return Err(GatewayError::InvalidArgument(format!(
            "changelog.from: {} has no time_column, so it cannot start at a time",
            table.def().name()
        )));
    }
    if c.from == ChangelogStart::Snapshot && !pk {
        return Err(GatewayError::InvalidArgument(format!(
            "changelog.from: snapshot needs a primary-key table; {} is a log table (use earliest)",
            table.def().name()
        )));
    }
    let since = match c.from {
        ChangelogStart::Time(t) => Some(t),
        _ => None,
    };
    let visible = move |view: &SecureView, batch: &RecordBatch| -> Result<RecordBatch> {
        let shown = view.apply_with_trailing(batch, trailing)?;
        Ok(match &projection {
            Some(p) => shown.project(p)?,
            None => shown,
        })
    };
    let (tx, rx) = mpsc::channel::<Result<RecordBatch>>(16);
    tokio::spawn(async move {
        let mut commits = table.watch_commits();
        let mut view = view;
        if c.from == ChangelogStart::Snapshot {
            let snapshot = match table.snapshot_state(SNAPSHOT_BATCH_ROWS).await {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            };
            offsets = snapshot.offsets;
            let mut rows = snapshot.batches;
            let suppression = recheck.suppression();
            while let Some(item) = rows.recv().await {
                let batch = item.map_err(GatewayError::from).and_then(|(bucket, rows)| {
                    let rows = match &suppression {
                        Some(s) => s.apply(&rows)?,
                        None => rows,
                    };
                    visible(view.as_ref(), &snapshot_rows(bucket, &rows)?)
                });
                let failed = batch.is_err();
                let empty = matches!(&batch, Ok(b) if b.num_rows() == 0);
                if !empty && tx.send(batch).await.is_err() || failed {
                    return;
                }
            }
        }
        let mut tick = tokio::time::interval(RECHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            commits.borrow_and_update();
            let ends = table.end_offsets();
            // A restricted view (or a changelog with its trailing columns) reads whole
            // stored rows, since its row filter and masks may need any column; an
            // unrestricted log table's reads just the requested columns.
            // Rows of pending deletion requests are dropped before the view, so those
            // reads need whole rows too.
            let suppression = recheck.suppression();
            let direct = view.is_unrestricted() && !pk && suppression.is_none();
            let request = ScanRequest {
                columns: if direct { c.columns.clone() } else { None },
                since,
                start_offsets: offsets.clone(),
                end_offsets: ends.clone(),
                change_meta: pk,
                ..Default::default()
            };
            let (reader_table, reader_tx) = (Arc::clone(&table), tx.clone());
            let (reader_view, reader_visible) = (Arc::clone(&view), visible.clone());
            let read = tokio::task::spawn_blocking(move || -> bool {
                let scan = match reader_table.scan(&request) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = reader_tx.blocking_send(Err(e.into()));
                        return false;
                    }
                };
                for item in scan {
                    let batch = item.map_err(GatewayError::from).and_then(|b| {
                        if direct {
                            return Ok(b.batch);
                        }
                        let rows = match &suppression {
                            Some(s) => s.apply(&b.batch)?,
                            None => b.batch,
                        };
                        reader_visible(reader_view.as_ref(), &rows)
                    });
                    let failed = batch.is_err();
                    let empty = matches!(&batch, Ok(b) if b.num_rows() == 0);
                    if !empty && reader_tx.blocking_send(batch).is_err() || failed {
                        return false;
                    }
                }
                true
            })
            .await;
            if !matches!(read, Ok(true)) || !c.follow {
                break;
            }
            // Logs that did not exist when `ends` was taken start at their beginning.
            offsets = ends;
            loop {
                let committed = tokio::select! {
                    changed = commits.changed() => if changed.is_err() { return } else { true },
                    _ = tick.tick() => false,
                    _ = shutdown.changed() => return,
                    _ = tx.closed() => return,
                };
                if let Err(e) = recheck.refresh(&mut view) {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                if committed {
                    break;
                }
            }
        }
    });
    Ok((schema, ReceiverStream::new(rx).boxed()))
}
