//! Avro record values → the JSON objects [`super::decode`] turns into rows. Two framings:
//! a bare datum written with one configured writer schema, or the Confluent wire format
//! (magic byte 0, a big-endian 4-byte schema id, the datum) with writer schemas fetched
//! from a schema registry by id and cached. Types then follow the table's columns as
//! for JSON; timestamps become µs, dates days.
//!
//! A record that cannot be read (a wrong magic byte, an id the registry does not know,
//! a datum that does not fit its schema) is a bad record with its reason; a registry
//! that cannot be reached is an error of the whole fetch, which is retried.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::types::Value;

use crate::error::{GatewayError, Result};

/// The writer schema of `inline` or `file` (one of them), checked.
pub fn writer_schema(
    inline: Option<&serde_json::Value>,
    file: Option<&Path>,
) -> std::result::Result<Schema, String> {
    let text = match (inline, file) {
        (Some(v), _) => v.to_string(),
        (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
            format!(
                "avro_schema_file: cannot read {}: {}",
                path.display(),
                e.kind()
            )
        })?,
        (None, None) => return Err("no Avro writer schema".into()),
    };
    let schema = Schema::parse_str(&text).map_err(|e| format!("avro schema: {e}"))?;
    if !matches!(schema, Schema::Record(_)) {
        return Err("avro schema: a record schema (its fields become columns)".into());
    }
    Ok(schema)
}

/// Reads one source's Avro values.
#[derive(Debug)]
pub enum AvroReader {
    Fixed(Arc<Schema>),
    Registry {
        url: String,
        http: reqwest::Client,
        schemas: parking_lot::Mutex<HashMap<u32, Arc<Schema>>>,
    },
}

/// What became of one value.
pub type Converted = std::result::Result<Vec<u8>, String>;

impl AvroReader {
    pub fn new(
        inline: Option<&serde_json::Value>,
        file: Option<&Path>,
        registry: Option<&str>,
    ) -> std::result::Result<Self, String> {
        match registry {
            Some(url) => Ok(Self::Registry {
                url: url.trim_end_matches('/').to_owned(),
                http: reqwest::Client::builder()
                    .timeout(std::time::Duration::from_secs(10))
                    .build()
                    .map_err(|e| format!("schema_registry: {e}"))?,
                schemas: Default::default(),
            }),
            None => Ok(Self::Fixed(Arc::new(writer_schema(inline, file)?))),
        }
    }

    /// The value as a JSON object, or why it is a bad record.
    pub async fn to_json(&self, value: &[u8]) -> Result<Converted> {
        let (schema, mut datum) = match self {
            Self::Fixed(schema) => (Arc::clone(schema), value),
            Self::Registry { .. } => {
                let Some((&[0], rest)) = value.split_first_chunk::<1>() else {
                    return Ok(Err(
                        "not in the Confluent wire format (magic byte 0, schema id, datum)".into(),
                    ));
                };
                let Some((id, datum)) = rest.split_first_chunk::<4>() else {
                    return Ok(Err("the value ends inside its schema id".into()));
                };
                match self.registry_schema(u32::from_be_bytes(*id)).await? {
                    Ok(schema) => (schema, datum),
                    Err(reason) => return Ok(Err(reason)),
                }
            }
        };
        let decoded = match apache_avro::from_avro_datum(&schema, &mut datum, None) {
            Ok(v) => v,
            // The error names the schema's expectation, not the record's bytes.
            Err(e) => return Ok(Err(format!("not an Avro datum of its schema: {e}"))),
        };
        if !datum.is_empty() {
            return Ok(Err(format!(
                "{} bytes after the Avro datum of its schema",
                datum.len()
            )));
        }
        let json = match plain(decoded) {
            Ok(j) => j,
            Err(e) => return Ok(Err(format!("an Avro value without a JSON form: {e}"))),
        };
        Ok(Ok(serde_json::to_vec(&json).expect("JSON serializes")))
    }

    /// The writer schema of `id`: cached, else fetched. An id the registry does not know
    /// is a bad record; a registry that does not answer is an error (retried).
    async fn registry_schema(&self, id: u32) -> Result<std::result::Result<Arc<Schema>, String>> {
        let Self::Registry { url, http, schemas } = self else {
            return Err(GatewayError::Internal("not a registry reader".into()));
        };
        if let Some(s) = schemas.lock().get(&id) {
            return Ok(Ok(Arc::clone(s)));
        }
        let unavailable =
            |e: String| GatewayError::Unavailable(format!("schema_registry: schema id {id}: {e}"));
        let response = http
            .get(format!("{url}/schemas/ids/{id}"))
            .send()
            .await
            .map_err(|e| unavailable(e.without_url().to_string()))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(Err(format!("schema id {id} is not in the schema registry")));
        }
        if !response.status().is_success() {
            return Err(unavailable(format!(
                "the registry answered {}",
                response.status()
            )));
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| unavailable(e.without_url().to_string()))?;
        let Some(text) = body["schema"].as_str() else {
            return Err(unavailable("the answer has no \"schema\"".into()));
        };
        if body
            .get("schemaType")
            .and_then(|t| t.as_str())
            .is_some_and(|t| t != "AVRO")
        {
            return Ok(Err(format!("schema id {id} is not an Avro schema")));
        }
        let schema = match Schema::parse_str(text) {
            Ok(s) => Arc::new(s),
            Err(e) => return Ok(Err(format!("schema id {id} does not parse: {e}"))),
        };
        schemas.lock().insert(id, Arc::clone(&schema));
        Ok(Ok(schema))
    }
}

/// An Avro value as JSON, with logical types in the units the columns take: timestamps
/// in µs, dates in days, UUIDs as text.
fn plain(value: Value) -> std::result::Result<serde_json::Value, String> {
    Ok(match value {
        Value::TimestampMillis(v) | Value::LocalTimestampMillis(v) => (v * 1_000).into(),
        Value::TimestampMicros(v) | Value::LocalTimestampMicros(v) => v.into(),
        Value::TimestampNanos(v) | Value::LocalTimestampNanos(v) => (v / 1_000).into(),
        Value::Uuid(u) => u.to_string().into(),
        Value::Union(_, inner) => plain(*inner)?,
        Value::Record(fields) => serde_json::Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| plain(v).map(|v| (k, v)))
                .collect::<std::result::Result<_, _>>()?,
        ),
        other => serde_json::Value::try_from(other).map_err(|e| e.to_string())?,
    })
}
