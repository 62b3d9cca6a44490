//! Cold reads: iceberg-rust's scan of one snapshot, with projection and predicate
//! pushdown, yielding batches in the hot tier's Arrow types.
//!
//! A union read pairs a [`ColdSnapshot`] with the hot logs read from its offsets, so
//! every acknowledged row is read exactly once: from the cold tier if the snapshot holds
//! it, from the hot tier otherwise.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::expr::{Bind, Predicate, Reference};
use iceberg::scan::FileScanTask;
use iceberg::spec::Datum;
use iceberg::table::Table;

use crate::convert::conform;
use crate::error::{Result, TieringError};
use crate::files::ColdBuckets;
use crate::offsets::TieredOffsets;

/// A committed snapshot of a table's cold tier and the hot offsets it covers.
#[derive(Debug, Clone)]
pub struct ColdSnapshot {
    pub table: Table,
    pub snapshot_id: i64,
    pub offsets: TieredOffsets,
    /// Held for as long as a read uses the snapshot: its files are not deleted meanwhile.
    pub lease: std::sync::Arc<crate::leases::SnapshotLease>,
}

/// What a cold scan reads.
#[derive(Debug, Clone, Default)]
pub struct ColdScanRequest {
    /// The output schema: the columns to read, in the hot tier's Arrow types.
    pub schema: Option<SchemaRef>,
    /// Event-time bounds, pushed down to manifest and row-group pruning.
    pub time_column: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Comparisons to prune with, ANDed. Pruning only: the caller still applies its
    /// filters to what comes back, so a filter that cannot be pushed is dropped.
    pub filters: Vec<ColdFilter>,
    /// Read only one share of the snapshot's files, so that several scans side by side
    /// read each file once. A single scan's batches are decoded by whoever polls it,
    /// on one core.
    pub part: Option<ColdPart>,
    /// Only the data files of these buckets (see [`ColdBuckets`]).
    pub buckets: Option<ColdBuckets>,
}

/// One of `of` shares of a scan's files: those whose place in the file list is `index`
/// modulo `of`. The parts of one scan share `files`, so the first of them to run plans
/// the file list (manifests read, pruning applied) for all.
#[derive(Debug, Clone, Default)]
pub struct ColdPart {
    pub index: usize,
    pub of: usize,
    pub files: ColdFiles,
}

/// A scan's planned file list, made once by whichever part needs it first.
#[derive(Debug, Clone, Default)]
pub struct ColdFiles(std::sync::Arc<tokio::sync::OnceCell<Vec<FileScanTask>>>);

/// `column <op> value`: a comparison a cold scan can push down to Iceberg's manifest,
/// row-group and row pruning.
#[derive(Debug, Clone, PartialEq)]
pub struct ColdFilter {
    pub column: String,
    pub op: CmpOp,
    pub value: ColdValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

/// A literal of a pushable comparison. Floating point is absent on purpose: NaN orders
/// differently in SQL engines and in Iceberg's metrics.
#[derive(Debug, Clone, PartialEq)]
pub enum ColdValue {
    Bool(bool),
    Int(i32),
    Long(i64),
    String(String),
    /// Days since the epoch.
    Date(i32),
    /// µs since the epoch, UTC.
    TimestampMicros(i64),
}

impl ColdFilter {
    fn predicate(&self) -> Predicate {
        let datum = match &self.value {
            ColdValue::Bool(v) => Datum::bool(*v),
            ColdValue::Int(v) => Datum::int(*v),
            ColdValue::Long(v) => Datum::long(*v),
            ColdValue::String(v) => Datum::string(v),
            ColdValue::Date(v) => Datum::date(*v),
            ColdValue::TimestampMicros(v) => Datum::timestamptz_micros(*v),
        };
        let r = Reference::new(&self.column);
        match self.op {
            CmpOp::Eq => r.equal_to(datum),
            CmpOp::NotEq => r.not_equal_to(datum),
            CmpOp::Lt => r.less_than(datum),
            CmpOp::LtEq => r.less_than_or_equal_to(datum),
            CmpOp::Gt => r.greater_than(datum),
            CmpOp::GtEq => r.greater_than_or_equal_to(datum),
        }
    }
}

impl ColdSnapshot {
    /// Streams the snapshot's rows. Files the time bounds exclude are never opened.
    pub async fn scan(
        &self,
        request: ColdScanRequest,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let metadata = self.table.metadata();
        let snapshot_schema = metadata
            .snapshot_by_id(self.snapshot_id)
            .ok_or_else(|| {
                TieringError::NotFound(format!("snapshot {} is gone", self.snapshot_id))
            })?
            .schema(metadata)?;
        let mut builder = self.table.scan().snapshot_id(self.snapshot_id);
        let schema = request.schema.clone();
        builder = match &schema {
            // iceberg-rust scans with the snapshot's schema: columns added after the
            // snapshot are not read but filled with nulls by `conform`.
            Some(s) => builder.select(
                s.fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .filter(|n| snapshot_schema.field_by_name(n).is_some()),
            ),
            None => builder.select_all(),
        };
        let predicate = pushdown(
            time_predicate(&request)
                .into_iter()
                .chain(request.filters.iter().map(ColdFilter::predicate)),
            &snapshot_schema,
        );
        if let Some(predicate) = predicate {
            builder = builder.with_filter(predicate);
        }
        let scan = builder.build()?;
        let stream = match (&request.part, &request.buckets) {
            (None, None) => scan.to_arrow().await?,
            (part, buckets) => {
                let planned: Vec<FileScanTask>;
                let files = match part {
                    Some(part) => {
                        part.files
                            .0
                            .get_or_try_init(|| async {
                                scan.plan_files().await?.try_collect().await
                            })
                            .await?
                    }
                    None => {
                        planned = scan.plan_files().await?.try_collect().await?;
                        &planned
                    }
                };
                let (index, of) = part.as_ref().map_or((0, 1), |p| (p.index, p.of.max(1)));
                let others = match buckets {
                    Some(b) => b.other_buckets_files(&self.table, self.snapshot_id).await?,
                    None => Default::default(),
                };
                let mine: Vec<iceberg::Result<FileScanTask>> = files
                    .iter()
                    .enumerate()
                    .filter(|(i, task)| i % of == index && !others.contains(&task.data_file_path))
                    .map(|(_, task)| Ok(task.clone()))
                    .collect();
                ArrowReaderBuilder::new(self.table.file_io().clone(), iceberg::Runtime::current())
                    .build()
                    .read(futures::stream::iter(mine).boxed())?
                    .stream()
            }
        };
        Ok(stream
            .map_err(TieringError::from)
            .and_then(move |batch| {
                let out = match &schema {
                    Some(s) => conform(&batch, s),
                    None => Ok(batch),
                };
                futures::future::ready(out)
            })
            .boxed())
    }
}

/// The AND of the `predicates` that bind to `schema`: a column added later, or a
/// literal of another type, does not bind, and is left out (pruning only).
pub(crate) fn pushdown(
    predicates: impl IntoIterator<Item = Predicate>,
    schema: &iceberg::spec::SchemaRef,
) -> Option<Predicate> {
    predicates
        .into_iter()
        .filter(|p| p.bind(schema.clone(), true).is_ok())
        .reduce(Predicate::and)
}

/// The predicate of ANDed `filters`, for pruning by partition and column statistics.
pub(crate) fn filters_predicate(
    filters: &[ColdFilter],
    schema: &iceberg::spec::SchemaRef,
) -> Option<Predicate> {
    pushdown(filters.iter().map(ColdFilter::predicate), schema)
}

fn time_predicate(request: &ColdScanRequest) -> Option<Predicate> {
    let column = request.time_column.as_deref()?;
    let lower = request
        .since
        .map(|s| Reference::new(column).greater_than_or_equal_to(Datum::timestamptz_micros(s)));
    let upper = request
        .until
        .map(|u| Reference::new(column).less_than(Datum::timestamptz_micros(u)));
    match (lower, upper) {
        (Some(l), Some(u)) => Some(l.and(u)),
        (l, u) => l.or(u),
    }
}
