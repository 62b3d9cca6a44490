//! `_system.rejects`: the records a source could not turn into rows, one row each with
//! the source, topic, partition, offset and the reason, never the record's bytes (they
//! may hold restricted values). Written with the records' source positions, so a
//! replay records a reject once.

use std::sync::Arc;

use arrow_array::TimestampMicrosecondArray;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use hotgate_store::{ColumnType, HotTable, SourceRows, Store, TableName, TableSpec};

use super::decode::Reject;
use crate::error::Result;

pub const REJECTS_TABLE: &str = "rejects";

pub fn rejects_table_name() -> TableName {
    TableName::system(REJECTS_TABLE).expect("a valid identifier")
}

const COLUMNS: [(&str, ColumnType, bool); 6] = [
    ("time", ColumnType::TimestampUs, false),
    ("source", ColumnType::String, false),
    ("topic", ColumnType::String, false),
    ("partition", ColumnType::Int32, false),
    ("offset", ColumnType::Int64, false),
    ("reason", ColumnType::String, false),
];

fn rejects_table_spec() -> TableSpec {
    TableSpec::system_log(
        REJECTS_TABLE,
        &COLUMNS,
        "source",
        std::time::Duration::from_secs(7 * 24 * 3600),
    )
}

#[derive(Debug)]
pub struct Rejects {
    table: Arc<HotTable>,
}

impl Rejects {
    /// Opens `_system.rejects`, creating it on first use.
    pub async fn open(store: &Store) -> Result<Self> {
        let table = match store.table(&rejects_table_name()) {
            Ok(table) => table,
            Err(_) => store.create_table(rejects_table_spec()).await?,
        };
        Ok(Self { table })
    }

    /// Records `rejects` of `source` durably.
    pub async fn record(&self, source: &str, topic: &str, rejects: &[Reject]) -> Result<()> {
        let now = chrono::Utc::now().timestamp_micros();
        let n = rejects.len();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(
                TimestampMicrosecondArray::from(vec![now; n]).with_timezone(hotgate_store::UTC),
            ),
            Arc::new(StringArray::from(vec![source; n])),
            Arc::new(StringArray::from(vec![topic; n])),
            Arc::new(Int32Array::from_iter_values(
                rejects.iter().map(|r| r.partition),
            )),
            Arc::new(Int64Array::from_iter_values(
                rejects.iter().map(|r| r.offset),
            )),
            Arc::new(StringArray::from_iter_values(
                rejects.iter().map(|r| r.reason.as_str()),
            )),
        ];
        let batch = RecordBatch::try_new(self.table.def().stored_schema().clone(), columns)?;
        let positions: Vec<(i32, i64)> = rejects.iter().map(|r| (r.partition, r.offset)).collect();
        self.table
            .append_from_source(
                &batch,
                SourceRows {
                    source,
                    positions: &positions,
                },
            )
            .await?;
        Ok(())
    }
}
