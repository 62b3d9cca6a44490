//! A source's settings, as `[[sources]]` in the config file declares them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One topic into one hot table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `[a-z][a-z0-9_-]*`; the audit names the writer `source:<name>`.
    pub name: String,
    /// Bootstrap brokers, `host:port`.
    pub brokers: Vec<String>,
    pub topic: String,
    /// `namespace.table`; the table must exist.
    pub table: String,
    #[serde(default)]
    pub format: PayloadFormat,
    /// With `format = "avro"`: the writer schema of every record (Avro JSON), inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avro_schema: Option<serde_json::Value>,
    /// With `format = "avro"`, in the config file only: the writer schema from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avro_schema_file: Option<std::path::PathBuf>,
    /// With `format = "avro"`: a Confluent-compatible schema registry; each record is in
    /// the Confluent wire format (magic byte 0, a 4-byte schema id, the datum) and its
    /// writer schema is fetched by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_registry: Option<String>,
    /// Column → payload field, for fields not named as their column.
    #[serde(default)]
    pub mapping: BTreeMap<String, String>,
    /// Where a row's time comes from: its time column's field, or the record timestamp.
    #[serde(default)]
    pub time_from: TimeFrom,
    /// Where a partition starts when hotgate has no position for it yet.
    #[serde(default)]
    pub start: StartAt,
    #[serde(default)]
    pub on_error: OnError,
    /// Most bytes one fetch asks of a partition.
    #[serde(default = "default_fetch_max_bytes")]
    pub fetch_max_bytes: u32,
    /// How long the broker may hold a fetch while it has nothing new.
    #[serde(default = "default_fetch_max_wait", with = "humantime_serde")]
    pub fetch_max_wait: Duration,
}

fn default_fetch_max_bytes() -> u32 {
    4 << 20
}

fn default_fetch_max_wait() -> Duration {
    Duration::from_millis(100)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadFormat {
    /// One JSON object per record value.
    #[default]
    Json,
    /// One Avro record per value: a bare datum with the writer schema of
    /// `avro_schema` / `avro_schema_file`, or the Confluent wire format with
    /// `schema_registry`.
    Avro,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFrom {
    /// The time column's field in the payload.
    #[default]
    Payload,
    /// The Kafka record's timestamp.
    Timestamp,
}

/// `earliest`, `latest`, or an RFC 3339 time (the first record at or after it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartAt {
    #[default]
    Earliest,
    Latest,
    /// µs since the epoch.
    Time(i64),
}

impl Serialize for StartAt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StartAt::Earliest => s.serialize_str("earliest"),
            StartAt::Latest => s.serialize_str("latest"),
            StartAt::Time(us) => s.serialize_str(&crate::audit::table::format_time(*us)),
        }
    }
}

impl<'de> Deserialize<'de> for StartAt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_str() {
            "earliest" => Ok(StartAt::Earliest),
            "latest" => Ok(StartAt::Latest),
            other => chrono::DateTime::parse_from_rfc3339(other)
                .map(|t| StartAt::Time(t.timestamp_micros()))
                .map_err(|_| {
                    serde::de::Error::custom(format!(
                        "start: expected \"earliest\", \"latest\" or an RFC 3339 time, got {other:?}"
                    ))
                }),
        }
    }
}

/// What a bad record does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Recorded in `_system.rejects`; the source goes on.
    #[default]
    Skip,
    /// The source stops at the record, with the reason in its status.
    Stop,
}

impl SourceConfig {
    /// Refuses what cannot work, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = self
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase())
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !name_ok || self.name.len() > 64 {
            return Err(format!(
                "sources: name {:?} must match [a-z][a-z0-9_-]* (at most 64 characters)",
                self.name
            ));
        }
        let at = |what: &str| format!("sources.{}: {what}", self.name);
        if self.brokers.is_empty() {
            return Err(at("brokers: at least one host:port"));
        }
        if self.topic.is_empty() {
            return Err(at("topic is empty"));
        }
        if self.fetch_max_bytes == 0 || self.fetch_max_bytes > 256 << 20 {
            return Err(at("fetch_max_bytes must be between 1 and 256 MiB"));
        }
        hotgate_store::TableName::parse(&self.table).map_err(|e| at(&format!("table: {e}")))?;
        let schemas = [
            self.avro_schema.is_some(),
            self.avro_schema_file.is_some(),
            self.schema_registry.is_some(),
        ];
        match self.format {
            PayloadFormat::Json if schemas.iter().any(|s| *s) => {
                return Err(at(
                    "avro_schema, avro_schema_file and schema_registry go with format = \"avro\"",
                ));
            }
            PayloadFormat::Avro if schemas.iter().filter(|s| **s).count() != 1 => {
                return Err(at(
                    "format = \"avro\" needs exactly one of avro_schema, avro_schema_file and \
                     schema_registry",
                ));
            }
            PayloadFormat::Avro => {
                if let Some(url) = &self.schema_registry
                    && !(url.starts_with("http://") || url.starts_with("https://"))
                {
                    return Err(at("schema_registry: an http:// or https:// URL"));
                }
                if self.schema_registry.is_none() {
                    super::avro::writer_schema(
                        self.avro_schema.as_ref(),
                        self.avro_schema_file.as_deref(),
                    )
                    .map_err(|e| at(&e))?;
                }
            }
            PayloadFormat::Json => {}
        }
        Ok(())
    }
}
