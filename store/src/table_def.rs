//! `TableDef`: the one table definition that drives the hot and the cold tier.
//!
//! A definition is written by users as a [`TableSpec`] (the JSON body of `POST /v1/tables`)
//! and becomes a [`TableDef`] only after validation. The stored Arrow schema carries the
//! facts other crates need as field metadata, so they never depend on this type:
//! Iceberg field id ([`FIELD_ID_KEY`]), classification tags ([`TAGS_KEY`]) and the write
//! rule ([`WRITE_KEY`]).
//!
//! Why one file of over 700 lines: the spec, its validation and the stored definition
//! are one contract (every rule a spec is refused for is checked where the definition is
//! built), and about 130 of the lines are the tests of those refusals.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Field metadata key of the Iceberg field id (the key Parquet and iceberg-rust use).
pub const FIELD_ID_KEY: &str = "PARQUET:field_id";
/// Field metadata key of the comma-separated classification tags, e.g. `pii,subject`.
pub const TAGS_KEY: &str = "hotgate.tags";
/// Field metadata key of the write rule: `keep`, `drop` or `hash`.
pub const WRITE_KEY: &str = "hotgate.write";
/// The time zone every stored timestamp carries; iceberg-rust maps it to `timestamptz`.
pub const UTC: &str = "+00:00";
/// The namespace of hotgate's own tables, such as the audit log.
pub const SYSTEM_NAMESPACE: &str = "_system";

const MAX_IDENT_LEN: usize = 64;
const MAX_COLUMNS: usize = 1000;
const MAX_BUCKETS: u32 = 4096;

/// Checks a user-chosen identifier: `[a-z][a-z0-9_]*`, at most 64 characters.
/// Table and namespace names become directory names, so nothing else may pass.
fn check_ident(what: &str, value: &str) -> Result<()> {
    let mut chars = value.chars();
    let ok = matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && value.len() <= MAX_IDENT_LEN;
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidDefinition(format!(
            "{what} {value:?} is not a valid identifier: use [a-z][a-z0-9_]*, at most {MAX_IDENT_LEN} characters"
        )))
    }
}

/// A validated `namespace.table` name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    namespace: String,
    name: String,
}

impl TableName {
    /// A user table name. The name is `[a-z][a-z0-9_]*`; the namespace is one or more
    /// such parts joined by `.` (`sales` or `sales.eu`), as Iceberg namespaces nest.
    pub fn new(namespace: &str, name: &str) -> Result<Self> {
        for part in namespace.split('.') {
            check_ident("namespace", part)?;
        }
        check_ident("table name", name)?;
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// A table in hotgate's reserved `_system` namespace.
    pub fn system(name: &str) -> Result<Self> {
        check_ident("table name", name)?;
        Ok(Self {
            namespace: SYSTEM_NAMESPACE.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Parses `namespace.table`; the table is the part after the last `.`.
    pub fn parse(qualified: &str) -> Result<Self> {
        let Some((ns, name)) = qualified.rsplit_once('.') else {
            return Err(StoreError::InvalidRequest(format!(
                "table {qualified:?} must be written as namespace.table"
            )));
        };
        if ns == SYSTEM_NAMESPACE {
            Self::system(name)
        } else {
            Self::new(ns, name)
        }
    }

    /// True for tables in the reserved `_system` namespace, which only hotgate writes.
    pub fn is_system(&self) -> bool {
        self.namespace == SYSTEM_NAMESPACE
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.namespace, self.name)
    }
}

/// The column types a table may declare. Each maps to exactly one Arrow type and one
/// Iceberg type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Bool,
    Int32,
    Int64,
    Float32,
    Float64,
    String,
    Binary,
    Date32,
    /// Microseconds since the epoch, UTC (Iceberg `timestamptz`).
    TimestampUs,
    Decimal {
        precision: u8,
        scale: i8,
    },
}

impl ColumnType {
    pub fn to_arrow(self) -> DataType {
        match self {
            ColumnType::Bool => DataType::Boolean,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float32 => DataType::Float32,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::String => DataType::Utf8,
            ColumnType::Binary => DataType::Binary,
            ColumnType::Date32 => DataType::Date32,
            ColumnType::TimestampUs => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            ColumnType::Decimal { precision, scale } => DataType::Decimal128(precision, scale),
        }
    }

    /// Whether Iceberg's `bucket[N]` transform is defined for this type.
    pub fn bucketable(self) -> bool {
        !matches!(
            self,
            ColumnType::Bool | ColumnType::Float32 | ColumnType::Float64
        )
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::Bool => f.write_str("bool"),
            ColumnType::Int32 => f.write_str("int32"),
            ColumnType::Int64 => f.write_str("int64"),
            ColumnType::Float32 => f.write_str("float32"),
            ColumnType::Float64 => f.write_str("float64"),
            ColumnType::String => f.write_str("string"),
            ColumnType::Binary => f.write_str("binary"),
            ColumnType::Date32 => f.write_str("date32"),
            ColumnType::TimestampUs => f.write_str("timestamp_us"),
            ColumnType::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
        }
    }
}

impl FromStr for ColumnType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        Ok(match t {
            "bool" => ColumnType::Bool,
            "int32" => ColumnType::Int32,
            "int64" => ColumnType::Int64,
            "float32" => ColumnType::Float32,
            "float64" => ColumnType::Float64,
            "string" => ColumnType::String,
            "binary" => ColumnType::Binary,
            "date32" => ColumnType::Date32,
            "timestamp_us" => ColumnType::TimestampUs,
            _ => {
                let bad = || {
                    format!(
                        "unknown type {s:?}: expected bool, int32, int64, float32, float64, string, \
                         binary, date32, timestamp_us or decimal(p,s) with 1 <= p <= 38 and 0 <= s <= p"
                    )
                };
                let inner = t
                    .strip_prefix("decimal(")
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(bad)?;
                let (p, s_) = inner.split_once(',').ok_or_else(bad)?;
                let precision: u8 = p.trim().parse().map_err(|_| bad())?;
                let scale: i8 = s_.trim().parse().map_err(|_| bad())?;
                if !(1..=38).contains(&precision) || scale < 0 || scale as u8 > precision {
                    return Err(bad());
                }
                ColumnType::Decimal { precision, scale }
            }
        })
    }
}

impl Serialize for ColumnType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ColumnType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What happens to a column's values before anything touches disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteRule {
    /// Stored as sent.
    #[default]
    Keep,
    /// Never persisted anywhere by hotgate: absent from the stored schema.
    Drop,
    /// Replaced by a keyed hash before storage (applied by the gateway's write path).
    Hash,
}

impl WriteRule {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteRule::Keep => "keep",
            WriteRule::Drop => "drop",
            WriteRule::Hash => "hash",
        }
    }
}

/// One column as users declare it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub column_type: ColumnType,
    #[serde(default = "default_true")]
    pub nullable: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub write: WriteRule,
    /// The Iceberg field id; assigned in column order when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_id: Option<i32>,
}

fn default_true() -> bool {
    true
}

/// Tiering settings of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TieringSpec {
    /// When false the table is hot-only: retention ignores the tiered watermark.
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default = "default_target_file_size")]
    pub target_file_size: u64,
    #[serde(default = "default_max_freshness", with = "humantime_serde_compat")]
    pub max_freshness: Duration,
}

fn default_target_file_size() -> u64 {
    128 * 1024 * 1024
}

fn default_max_freshness() -> Duration {
    Duration::from_secs(5 * 60)
}

impl Default for TieringSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            target_file_size: default_target_file_size(),
            max_freshness: default_max_freshness(),
        }
    }
}

/// A table as users write it: the JSON body of `POST /v1/tables`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub namespace: String,
    pub name: String,
    pub columns: Vec<ColumnSpec>,
    /// The event time: day partitions and time filters of log tables (required there);
    /// optional for primary-key tables, where it serves only time filters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_column: Option<String>,
    pub bucket_key: String,
    pub buckets: u32,
    #[serde(default = "default_hot_retention", with = "humantime_serde_compat")]
    pub hot_retention: Duration,
    #[serde(
        default,
        with = "humantime_serde_compat::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub cold_retention: Option<Duration>,
    /// Present for primary-key tables; absent for append-only log tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_key: Option<Vec<String>>,
    #[serde(default)]
    pub tiering: TieringSpec,
}

fn default_hot_retention() -> Duration {
    Duration::from_secs(3600)
}

impl TableSpec {
    /// A log table of hotgate's own (`_system.<name>`): one bucket, so that its records
    /// keep a single total order; `time` is the time column. `columns` are
    /// (name, type, nullable), with no tags or write rules.
    pub fn system_log(
        name: &str,
        columns: &[(&str, ColumnType, bool)],
        bucket_key: &str,
        hot_retention: Duration,
    ) -> Self {
        TableSpec {
            namespace: SYSTEM_NAMESPACE.to_owned(),
            name: name.to_owned(),
            columns: columns
                .iter()
                .map(|(name, column_type, nullable)| ColumnSpec {
                    name: (*name).to_owned(),
                    column_type: *column_type,
                    nullable: *nullable,
                    tags: Vec::new(),
                    write: WriteRule::default(),
                    field_id: None,
                })
                .collect(),
            time_column: Some("time".into()),
            bucket_key: bucket_key.into(),
            buckets: 1,
            hot_retention,
            cold_retention: None,
            primary_key: None,
            tiering: TieringSpec::default(),
        }
    }
}

/// The kind of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKind {
    /// Append-only.
    Log,
    /// Current row per key, with a changelog.
    PrimaryKey { columns: Vec<String> },
}

/// A validated table definition. Construct it with [`TableDef::new`].
#[derive(Debug, Clone)]
pub struct TableDef {
    spec: TableSpec,
    name: TableName,
    kind: TableKind,
    /// The schema of what is persisted: every column whose write rule is not `drop`.
    stored_schema: SchemaRef,
    time_index: Option<usize>,
    bucket_index: usize,
}

impl PartialEq for TableDef {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl TableDef {
    /// Validates a spec, assigns missing field ids, and derives the stored schema.
    pub fn new(mut spec: TableSpec) -> Result<Self> {
        let name = if spec.namespace == SYSTEM_NAMESPACE {
            TableName::system(&spec.name)?
        } else {
            TableName::new(&spec.namespace, &spec.name)?
        };
        let invalid = |msg: String| Err(StoreError::InvalidDefinition(format!("{name}: {msg}")));

        if spec.columns.is_empty() {
            return invalid("a table needs at least one column".into());
        }
        if spec.columns.len() > MAX_COLUMNS {
            return invalid(format!("at most {MAX_COLUMNS} columns are allowed"));
        }
        let mut seen = HashSet::new();
        let mut next_id = spec
            .columns
            .iter()
            .filter_map(|c| c.field_id)
            .max()
            .unwrap_or(0)
            .max(0)
            + 1;
        // Stored columns take the ids first, in order, and `drop` columns after them: a
        // catalog assigns fresh ids 1..n to the columns of a new table (iceberg-rust and
        // REST catalogs alike), and the stored schema's ids must be those ids.
        for stored in [true, false] {
            for c in spec.columns.iter_mut() {
                if (c.write != WriteRule::Drop) == stored && c.field_id.is_none() {
                    c.field_id = Some(next_id);
                    next_id += 1;
                }
            }
        }
        let mut ids = HashSet::new();
        for c in &mut spec.columns {
            check_ident("column name", &c.name)
                .map_err(|e| StoreError::InvalidDefinition(format!("{name}: {e}")))?;
            if !seen.insert(c.name.clone()) {
                return invalid(format!("column {} is declared twice", c.name));
            }
            if c.write == WriteRule::Hash && c.column_type != ColumnType::String {
                return invalid(format!(
                    "column {} has write rule hash, which stores HMAC-SHA256 hex: declare it \
                     \"type\": \"string\", not {}",
                    c.name, c.column_type
                ));
            }
            for tag in &c.tags {
                let ok = matches!(tag.chars().next(), Some('a'..='z'))
                    && tag
                        .chars()
                        .all(|ch| matches!(ch, 'a'..='z' | '0'..='9' | '_' | '-'));
                if !ok {
                    return invalid(format!(
                        "tag {tag:?} of column {} is not valid: use [a-z][a-z0-9_-]*",
                        c.name
                    ));
                }
            }
            let id = c.field_id.unwrap_or_default();
            if id <= 0 || !ids.insert(id) {
                return invalid(format!(
                    "field id {id} of column {} is not a unique positive number",
                    c.name
                ));
            }
        }
        let column = |what: &str, col: &str| -> Result<(usize, &ColumnSpec)> {
            spec.columns
                .iter()
                .enumerate()
                .find(|(_, c)| c.name == col)
                .ok_or_else(|| {
                    StoreError::InvalidDefinition(format!(
                        "{name}: {what} {col:?} is not a declared column"
                    ))
                })
        };

        match &spec.time_column {
            Some(time_column) => {
                let (_, time) = column("time_column", time_column)?;
                if time.column_type != ColumnType::TimestampUs {
                    return invalid(format!(
                        "time_column {} must have type timestamp_us, not {}",
                        time.name, time.column_type
                    ));
                }
                if time.nullable || time.write != WriteRule::Keep {
                    return invalid(format!(
                        "time_column {} must be declared \"nullable\": false with write rule keep",
                        time.name
                    ));
                }
            }
            None if spec.primary_key.is_none() => {
                return invalid(
                    "time_column is required: a log table is partitioned by day of its event \
                     time (only primary-key tables may omit it)"
                        .into(),
                );
            }
            None => {}
        }
        let (_, key) = column("bucket_key", &spec.bucket_key)?;
        if !key.column_type.bucketable() {
            return invalid(format!(
                "bucket_key {} has type {}, which Iceberg cannot bucket: use int32, int64, \
                 string, binary, date32, timestamp_us or decimal",
                key.name, key.column_type
            ));
        }
        if key.nullable || key.write == WriteRule::Drop {
            return invalid(format!(
                "bucket_key {} must be declared \"nullable\": false and must not be dropped",
                key.name
            ));
        }
        if spec.buckets == 0 || spec.buckets > MAX_BUCKETS {
            return invalid(format!(
                "buckets must be between 1 and {MAX_BUCKETS}, got {}",
                spec.buckets
            ));
        }
        if spec.hot_retention.is_zero() {
            return invalid("hot_retention must be positive".into());
        }
        let kind = match &spec.primary_key {
            None => TableKind::Log,
            Some(cols) => {
                if cols.is_empty() {
                    return invalid("primary_key must name at least one column".into());
                }
                for c in cols {
                    let (_, col) = column("primary_key column", c)?;
                    if col.nullable || col.write == WriteRule::Drop {
                        return invalid(format!(
                            "primary_key column {c} must be non-nullable and not dropped"
                        ));
                    }
                }
                if !cols.contains(&spec.bucket_key) {
                    return invalid(format!(
                        "the primary key must contain the bucket_key {}",
                        spec.bucket_key
                    ));
                }
                TableKind::PrimaryKey {
                    columns: cols.clone(),
                }
            }
        };

        let fields: Vec<Field> = spec
            .columns
            .iter()
            .filter(|c| c.write != WriteRule::Drop)
            .map(|c| {
                let mut md = HashMap::new();
                md.insert(
                    FIELD_ID_KEY.to_owned(),
                    c.field_id.unwrap_or_default().to_string(),
                );
                if !c.tags.is_empty() {
                    md.insert(TAGS_KEY.to_owned(), c.tags.join(","));
                }
                md.insert(WRITE_KEY.to_owned(), c.write.as_str().to_owned());
                Field::new(&c.name, c.column_type.to_arrow(), c.nullable).with_metadata(md)
            })
            .collect();
        let stored_schema = Arc::new(Schema::new(fields));
        let index_of = |col: &str| stored_schema.index_of(col).unwrap_or_default();
        let time_index = spec.time_column.as_deref().map(index_of);
        let bucket_index = index_of(&spec.bucket_key);
        Ok(Self {
            name,
            kind,
            stored_schema,
            time_index,
            bucket_index,
            spec,
        })
    }

    pub fn name(&self) -> &TableName {
        &self.name
    }

    /// This definition with `columns` added at the end: the one schema change hotgate
    /// supports. Rows written before have no value for them, so each must be nullable.
    /// Field ids are assigned here, from `first_field_id` up (or above the highest id in
    /// use, if that is higher): the cold tier passes its highest id ever used, so an id
    /// is never given to two columns.
    pub fn with_added_columns(
        &self,
        columns: Vec<ColumnSpec>,
        first_field_id: i32,
    ) -> Result<TableDef> {
        let invalid = |msg: String| {
            Err(StoreError::InvalidDefinition(format!(
                "{}: {msg}",
                self.name
            )))
        };
        if columns.is_empty() {
            return invalid("name at least one column to add".into());
        }
        let mut spec = self.spec.clone();
        let first = spec
            .columns
            .iter()
            .filter_map(|c| c.field_id)
            .max()
            .unwrap_or(0)
            .saturating_add(1)
            .max(first_field_id);
        for (mut column, id) in columns.into_iter().zip(first..) {
            if !column.nullable {
                return invalid(format!(
                    "added column {} must be nullable: the rows already written have no value for it",
                    column.name
                ));
            }
            if column.field_id.is_some() {
                return invalid(format!(
                    "column {}: hotgate assigns the field ids of added columns",
                    column.name
                ));
            }
            column.field_id = Some(id);
            spec.columns.push(column);
        }
        TableDef::new(spec)
    }

    /// True when `next` is this definition with columns added at the end and nothing
    /// else changed.
    pub fn evolves_to(&self, next: &TableDef) -> bool {
        let (a, b) = (&self.spec, &next.spec);
        b.columns.len() > a.columns.len()
            && b.columns.starts_with(&a.columns)
            && TableSpec {
                columns: a.columns.clone(),
                ..b.clone()
            } == *a
    }

    /// The definition as written, with field ids filled in.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    pub fn kind(&self) -> &TableKind {
        &self.kind
    }

    /// The persisted columns (write rule `keep` or `hash`), with field metadata.
    pub fn stored_schema(&self) -> &SchemaRef {
        &self.stored_schema
    }

    /// Index of the time column in the stored schema; `None` for a primary-key table
    /// declared without one.
    pub fn time_index(&self) -> Option<usize> {
        self.time_index
    }

    /// Index of the bucket key in the stored schema.
    pub fn bucket_index(&self) -> usize {
        self.bucket_index
    }

    pub fn buckets(&self) -> u32 {
        self.spec.buckets
    }

    pub fn hot_retention(&self) -> Duration {
        self.spec.hot_retention
    }

    pub fn tiering(&self) -> &TieringSpec {
        &self.spec.tiering
    }
}

/// Serde support for durations written as `1h`, `15m`, `90s` (humantime).
mod humantime_serde_compat {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!(
                "bad duration {text:?} ({e}); write it like 15m, 1h or 7days"
            ))
        })
    }

    pub(super) mod option {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(
            d: &Option<Duration>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Duration>, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec_json() -> serde_json::Value {
        serde_json::json!({
            "namespace": "sales", "name": "orders",
            "columns": [
                {"name": "order_id", "type": "string", "nullable": false},
                {"name": "customer_id", "type": "int64", "nullable": false},
                {"name": "email", "type": "string", "tags": ["pii"], "write": "drop"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "ts", "type": "timestamp_us", "nullable": false}
            ],
            "time_column": "ts", "bucket_key": "customer_id", "buckets": 8, "hot_retention": "1h"
        })
    }

    #[test]
    fn spec_round_trips_and_assigns_field_ids() {
        let spec: TableSpec = serde_json::from_value(spec_json()).unwrap();
        let def = TableDef::new(spec).unwrap();
        let ids: Vec<_> = def.spec().columns.iter().map(|c| c.field_id).collect();
        // The stored columns take 1..n, as a catalog assigns them on create; the dropped
        // one comes after.
        assert_eq!(ids, vec![Some(1), Some(2), Some(5), Some(3), Some(4)]);
        // The dropped column is not stored.
        let names: Vec<_> = def
            .stored_schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["order_id", "customer_id", "amount", "ts"]);
        assert_eq!(def.time_index(), Some(3));
        assert_eq!(def.bucket_index(), 1);
        let stored_ids: Vec<_> = def
            .stored_schema()
            .fields()
            .iter()
            .map(|f| f.metadata()[FIELD_ID_KEY].clone())
            .collect();
        assert_eq!(stored_ids, ["1", "2", "3", "4"]);
        let json = serde_json::to_string(def.spec()).unwrap();
        let again = TableDef::new(serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(again, def);
    }

    #[test]
    fn bad_definitions_name_the_problem() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                serde_json::json!({"name": "../etc"}),
                "not a valid identifier",
            ),
            (
                serde_json::json!({"namespace": "Sales"}),
                "not a valid identifier",
            ),
            (
                serde_json::json!({"time_column": "nope"}),
                "time_column \"nope\"",
            ),
            (
                serde_json::json!({"time_column": "order_id"}),
                "must have type timestamp_us",
            ),
            (
                serde_json::json!({"bucket_key": "amount"}),
                "must be declared \"nullable\": false",
            ),
            (serde_json::json!({"buckets": 0}), "buckets must be between"),
            (
                serde_json::json!({"primary_key": ["order_id"]}),
                "must contain the bucket_key",
            ),
            (
                serde_json::json!({"namespace": "sales..eu"}),
                "not a valid identifier",
            ),
            (
                serde_json::json!({"columns": [
                    {"name": "customer_id", "type": "int64", "nullable": false, "write": "hash"},
                    {"name": "ts", "type": "timestamp_us", "nullable": false}]}),
                "write rule hash",
            ),
        ];
        for (patch, expected) in cases {
            let mut v = spec_json();
            for (k, val) in patch.as_object().unwrap() {
                v[k] = val.clone();
            }
            let spec: TableSpec = serde_json::from_value(v).unwrap();
            let err = TableDef::new(spec).unwrap_err().to_string();
            assert!(err.contains(expected), "{err} should contain {expected}");
        }
    }

    #[test]
    fn namespaces_nest_and_the_table_is_the_last_part() {
        let n = TableName::parse("corp.eu.orders").unwrap();
        assert_eq!((n.namespace(), n.name()), ("corp.eu", "orders"));
        assert_eq!(n.to_string(), "corp.eu.orders");
        assert!(TableName::parse("corp.Eu.orders").is_err());
        assert!(TableName::parse("orders").is_err());
        let mut v = spec_json();
        v["namespace"] = "sales.eu".into();
        let def = TableDef::new(serde_json::from_value(v).unwrap()).unwrap();
        assert_eq!(def.name().namespace(), "sales.eu");
    }

    #[test]
    fn column_types_parse() {
        assert_eq!(
            "decimal(10, 2)".parse::<ColumnType>().unwrap(),
            ColumnType::Decimal {
                precision: 10,
                scale: 2
            }
        );
        assert!("decimal(40,2)".parse::<ColumnType>().is_err());
        assert!(
            "varchar"
                .parse::<ColumnType>()
                .unwrap_err()
                .contains("unknown type")
        );
        let mut v = spec_json();
        v["hot_retention"] = "soon".into();
        let err = serde_json::from_value::<TableSpec>(v)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad duration"), "{err}");
    }
}
