//! Arrow → Parquet, one hot log at a time, with the writers iceberg-rust uses.
//!
//! A hot log (day, bucket) is exactly one Iceberg partition (see the store's `bucket`
//! module), so each log converts alone: no shuffle, one partition key, files rolled at
//! the table's target size.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef as ArrowSchemaRef;
use hotgate_store::{HotTable, LogId, ScanRequest, TableName};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFile, DataFileFormat, Literal, PartitionKey, Struct, TableMetadata};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use tokio::sync::mpsc;

use crate::error::{Result, TieringError};

/// The table property prefix that sets a column's metrics mode.
const METRICS_COLUMN_PREFIX: &str = "write.metadata.metrics.column.";

/// Batches in flight between the blocking segment reader and the Parquet writer.
const READ_AHEAD: usize = 4;

/// The batch under `schema`, matching columns by name: relabelled (Iceberg's Arrow
/// schema carries field ids), cast where the two tiers' Arrow types differ (Iceberg
/// reads and writes `binary` as `LargeBinary`; the hot tier stores `Binary`), and with
/// nulls for nullable columns the batch lacks (added to the table after it was
/// written). A batch column that `schema` lacks is an error, never silently dropped.
pub fn conform(batch: &RecordBatch, schema: &ArrowSchemaRef) -> Result<RecordBatch> {
    let input = batch.schema();
    if let Some(extra) = input
        .fields()
        .iter()
        .find(|f| schema.index_of(f.name()).is_err())
    {
        return Err(TieringError::Invalid(format!(
            "column {} is not in the Iceberg schema; the schemas of the tiers disagree",
            extra.name()
        )));
    }
    let columns = schema
        .fields()
        .iter()
        .map(|field| match input.index_of(field.name()) {
            Ok(i) if batch.column(i).data_type() == field.data_type() => {
                Ok(Arc::clone(batch.column(i)))
            }
            Ok(i) => Ok(arrow_cast::cast(batch.column(i), field.data_type())?),
            Err(_) if field.is_nullable() => Ok(arrow_array::new_null_array(
                field.data_type(),
                batch.num_rows(),
            )),
            Err(_) => Err(TieringError::Invalid(format!(
                "required column {} is missing",
                field.name()
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

type PartitionWriter =
    DataFileWriter<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// Batches of one partition on their way into rolled Parquet files. The first file is
/// opened by the first non-empty batch.
#[derive(Debug)]
pub struct PartitionSink<'a> {
    converter: &'a Converter,
    key: PartitionKey,
    writer: Option<PartitionWriter>,
    records: u64,
}

impl PartitionSink<'_> {
    pub async fn push(&mut self, batch: RecordBatch) -> Result<()> {
        let batch = match &self.converter.suppression {
            Some((table, suppression)) => match suppression
                .keep(table, &batch)
                .map_err(|e| TieringError::Internal(format!("suppression filter: {e}")))?
            {
                Some(keep) => arrow_select::filter::filter_record_batch(&batch, &keep)?,
                None => batch,
            },
            None => batch,
        };
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.records += batch.num_rows() as u64;
        let batch = conform(&batch, &self.converter.arrow_schema)?;
        let writer = match self.writer.as_mut() {
            Some(w) => w,
            None => self
                .writer
                .insert(self.converter.writer(self.key.clone()).await?),
        };
        Ok(writer.write(batch).await?)
    }

    /// Closes the open file; returns the data files written and the rows they hold.
    pub async fn finish(self) -> Result<(Vec<DataFile>, u64)> {
        match self.writer {
            Some(mut w) => Ok((w.close().await?, self.records)),
            None => Ok((Vec::new(), 0)),
        }
    }
}

/// What converting one log produced.
#[derive(Debug, Clone)]
pub struct ConvertedLog {
    pub log: LogId,
    /// The offsets converted: `rows.end` is the log's new tiered offset.
    pub rows: Range<u64>,
    pub files: Vec<DataFile>,
    pub records: u64,
}

/// Rows tiering must not write: the suppression filters of pending deletion requests.
/// The gateway implements it (it owns SQL); tiering only asks, per batch.
pub trait RowSuppression: Send + Sync + std::fmt::Debug {
    /// Which rows of `batch` (rows of `table`, by column name) to keep; `None` keeps
    /// every row.
    fn keep(
        &self,
        table: &TableName,
        batch: &RecordBatch,
    ) -> std::result::Result<Option<BooleanArray>, String>;
}

/// Writes Parquet data files for one table, partition by partition.
#[derive(Debug, Clone)]
pub struct Converter {
    table: Table,
    arrow_schema: ArrowSchemaRef,
    target_file_size: usize,
    file_prefix: String,
    /// Applied to every batch before it is written (tiering cycles, not compaction).
    suppression: Option<(TableName, Arc<dyn RowSuppression>)>,
}

impl Converter {
    /// A converter for `table`'s current schema and partition spec. File names start
    /// with `prefix` (unique per cycle), so a cycle's files are recognizable.
    pub fn new(table: &Table, target_file_size: u64, prefix: String) -> Result<Self> {
        let schema = table.metadata().current_schema();
        Ok(Self {
            table: table.clone(),
            arrow_schema: Arc::new(schema_to_arrow_schema(schema)?),
            target_file_size: usize::try_from(target_file_size).unwrap_or(usize::MAX),
            file_prefix: prefix,
            suppression: None,
        })
    }

    /// Drops the rows `suppression` hides from everything this converter writes.
    pub fn with_suppression(
        mut self,
        table: TableName,
        suppression: Arc<dyn RowSuppression>,
    ) -> Self {
        self.suppression = Some((table, suppression));
        self
    }

    fn metadata(&self) -> &TableMetadata {
        self.table.metadata()
    }

    /// The Iceberg partition of a hot log: `(day, bucket)`, or `(bucket)` for tables
    /// without a day partition.
    pub fn partition_key(&self, log: LogId) -> Result<PartitionKey> {
        let spec = self.metadata().default_partition_spec();
        let bucket = i32::try_from(log.bucket)
            .map_err(|_| TieringError::Internal(format!("bucket {} out of range", log.bucket)))?;
        let mut values = Vec::with_capacity(2);
        if spec.fields().len() == 2 {
            let day = log.day.ok_or_else(|| {
                TieringError::Internal(format!("log {log} has no day for a day partition"))
            })?;
            values.push(Some(Literal::date(day)));
        }
        values.push(Some(Literal::int(bucket)));
        Ok(PartitionKey::new(
            (**spec).clone(),
            self.metadata().current_schema().clone(),
            Struct::from_iter(values),
        ))
    }

    /// A fresh writer for one partition.
    async fn writer(&self, key: PartitionKey) -> Result<PartitionWriter> {
        // iceberg's rolling writer counts the open row group at its uncompressed size,
        // so with one row group per file a file would roll at the target *before*
        // compression and land several times smaller. Row groups of an eighth of the
        // target flush as they fill, so the count is mostly compressed bytes and files
        // land near the target.
        let row_group_bytes = (self.target_file_size / 8).clamp(64 << 10, 128 << 20);
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_bytes(Some(row_group_bytes));
        // iceberg-rust does not read `write.metadata.metrics.column.<c>=none`; it takes
        // a file's bounds from the Parquet statistics, so those are not written for
        // such columns (the `pii` ones): no value of theirs lands in a manifest.
        for (key, value) in self.metadata().properties() {
            if let Some(column) = key.strip_prefix(METRICS_COLUMN_PREFIX)
                && value == "none"
            {
                props = props.set_column_statistics_enabled(
                    ColumnPath::from(column),
                    EnabledStatistics::None,
                );
            }
        }
        let props = props.build();
        let parquet = ParquetWriterBuilder::new(props, self.metadata().current_schema().clone());
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            self.target_file_size,
            self.table.file_io().clone(),
            DefaultLocationGenerator::new(self.metadata())?,
            DefaultFileNameGenerator::new(self.file_prefix.clone(), None, DataFileFormat::Parquet),
        );
        Ok(DataFileWriterBuilder::new(rolling).build(Some(key)).await?)
    }

    /// A sink for the batches of one partition.
    pub fn sink(&self, key: PartitionKey) -> PartitionSink<'_> {
        PartitionSink {
            converter: self,
            key,
            writer: None,
            records: 0,
        }
    }

    /// Writes batches that all belong to the partition `key`. Empty input writes nothing.
    pub async fn write_batches(
        &self,
        key: PartitionKey,
        batches: impl IntoIterator<Item = RecordBatch>,
    ) -> Result<Vec<DataFile>> {
        let mut sink = self.sink(key);
        for batch in batches {
            sink.push(batch).await?;
        }
        Ok(sink.finish().await?.0)
    }

    /// Converts the rows `rows` of one hot log into data files. Segment reads run on a
    /// blocking thread, a few batches ahead of the writer.
    pub async fn convert_log(
        &self,
        hot: &Arc<HotTable>,
        log: LogId,
        rows: Range<u64>,
    ) -> Result<ConvertedLog> {
        let request = ScanRequest {
            logs: Some(vec![log]),
            start_offsets: [(log, rows.start)].into(),
            end_offsets: [(log, rows.end)].into(),
            ..ScanRequest::default()
        };
        let scan = hot.scan(&request)?;
        let (tx, mut rx) = mpsc::channel(READ_AHEAD);
        let reader = tokio::task::spawn_blocking(move || {
            for item in scan {
                let stop = item.is_err();
                if tx.blocking_send(item).is_err() || stop {
                    break;
                }
            }
        });
        let mut sink = self.sink(self.partition_key(log)?);
        while let Some(item) = rx.recv().await {
            sink.push(item?.batch).await?;
        }
        reader
            .await
            .map_err(|e| TieringError::Internal(format!("segment reader failed: {e}")))?;
        let (files, records) = sink.finish().await?;
        Ok(ConvertedLog {
            log,
            rows,
            files,
            records,
        })
    }
}
