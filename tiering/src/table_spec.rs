//! The Iceberg table that mirrors a hotgate [`TableDef`]: schema, partition spec and
//! properties, all derived from the one definition.
//!
//! - Field ids are the `PARQUET:field_id` of the stored schema, so both tiers agree.
//! - Log tables are partitioned `day(time), bucket(N, key)`; primary-key tables
//!   `bucket(N, key)` alone. The hot tier routes rows with the same transforms.
//! - Columns tagged `pii` get `write.metadata.metrics.column.<c>=none`, so no value of
//!   theirs lands in manifest bounds.

use std::collections::HashMap;

use hotgate_store::table_def::TAGS_KEY;
use hotgate_store::{TableDef, TableKind};
use iceberg::TableCreation;
use iceberg::spec::{FormatVersion, Schema, Transform, UnboundPartitionSpec};

use crate::error::{Result, TieringError};

/// The tag whose columns keep no column statistics in Iceberg metadata.
pub const PII_TAG: &str = "pii";
/// Table property: the hotgate table this Iceberg table mirrors.
pub const HOTGATE_TABLE_PROP: &str = "hotgate.table";

/// The Iceberg schema of a table: the stored columns with their field ids; the primary
/// key, if any, as identifier fields.
pub fn iceberg_schema(def: &TableDef) -> Result<Schema> {
    let schema = iceberg::arrow::arrow_schema_to_schema(def.stored_schema())?;
    match def.kind() {
        TableKind::Log => Ok(schema),
        TableKind::PrimaryKey { columns } => {
            let ids = columns
                .iter()
                .map(|c| field_id(&schema, c))
                .collect::<Result<Vec<_>>>()?;
            Ok(schema
                .into_builder()
                .with_identifier_field_ids(ids)
                .build()?)
        }
    }
}

fn field_id(schema: &Schema, column: &str) -> Result<i32> {
    schema
        .field_by_name(column)
        .map(|f| f.id)
        .ok_or_else(|| TieringError::Internal(format!("column {column} has no Iceberg field")))
}

/// `day(time), bucket(N, key)`, or `bucket(N, key)` for primary-key tables.
pub fn partition_spec(def: &TableDef, schema: &Schema) -> Result<UnboundPartitionSpec> {
    let spec = def.spec();
    let mut builder = UnboundPartitionSpec::builder().with_spec_id(0);
    if let (TableKind::Log, Some(time)) = (def.kind(), spec.time_column.as_deref()) {
        builder = builder.add_partition_field(
            field_id(schema, time)?,
            format!("{time}_day"),
            Transform::Day,
        )?;
    }
    builder = builder.add_partition_field(
        field_id(schema, &spec.bucket_key)?,
        format!("{}_bucket", spec.bucket_key),
        Transform::Bucket(spec.buckets),
    )?;
    Ok(builder.build())
}

/// Table properties: the target file size, no statistics for `pii` columns, and the
/// name of the hotgate table.
pub fn properties(def: &TableDef) -> HashMap<String, String> {
    let mut props = HashMap::from([
        (
            "write.target-file-size-bytes".to_owned(),
            def.tiering().target_file_size.to_string(),
        ),
        (HOTGATE_TABLE_PROP.to_owned(), def.name().to_string()),
    ]);
    for field in def.stored_schema().fields() {
        let pii = field
            .metadata()
            .get(TAGS_KEY)
            .is_some_and(|tags| tags.split(',').any(|t| t == PII_TAG));
        if pii {
            props.insert(
                format!("write.metadata.metrics.column.{}", field.name()),
                "none".to_owned(),
            );
        }
    }
    props
}

/// Everything the catalog needs to create the Iceberg table of `def`.
pub fn table_creation(def: &TableDef) -> Result<TableCreation> {
    let schema = iceberg_schema(def)?;
    let spec = partition_spec(def, &schema)?;
    Ok(TableCreation::builder()
        .name(def.name().name().to_owned())
        .schema(schema)
        .partition_spec(spec)
        .properties(properties(def))
        .format_version(FormatVersion::V2)
        .build())
}
