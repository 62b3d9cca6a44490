//! Kafka records → Arrow rows of a table: JSON objects, with fields matched to columns
//! by name or by an explicit mapping, converted to the columns' types by arrow-json.
//! A record that cannot become a row (not JSON, not an object, a value of the wrong
//! type, a missing non-nullable field) is a reject with its reason; the records around
//! it are kept.
//!
//! The decoding schema is the table's stored schema, so a field of a `drop` column is
//! never decoded: its value never reaches a batch, let alone a segment.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{Field, Schema, SchemaRef};
use hotgate_store::TableDef;

use super::config::TimeFrom;

/// A record refused on the way in: where it was, and why. Never its bytes, which may
/// hold restricted values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub partition: i32,
    pub offset: i64,
    pub reason: String,
}

/// One Kafka record, as the decoder needs it.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub partition: i32,
    pub offset: i64,
    /// µs since the epoch.
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// What a run of records became: the rows (with the source position of each) and the
/// rejects.
#[derive(Debug)]
pub struct Decoded {
    pub batch: Option<RecordBatch>,
    pub positions: Vec<(i32, i64)>,
    pub rejects: Vec<Reject>,
}

/// Decodes the records of one source into rows of its table.
#[derive(Debug)]
pub struct RowDecoder {
    /// The stored schema, fields named as the payload names them (the mapping).
    payload_schema: SchemaRef,
    /// The stored schema, as the table names its columns.
    table_schema: SchemaRef,
    /// With `time_from = "timestamp"`: where the record's timestamp goes; the payload
    /// schema then leaves that column out.
    timestamp_column: Option<usize>,
}

impl RowDecoder {
    /// `mapping` is column → payload field; a column not in it is matched by its own
    /// name. Refuses a mapping that names a column the table does not have.
    pub fn new(
        def: &TableDef,
        mapping: &BTreeMap<String, String>,
        time_from: TimeFrom,
        key_only: bool,
    ) -> Result<Self, String> {
        let stored = def.stored_schema();
        let names: Vec<&str> = stored.fields().iter().map(|f| f.name().as_str()).collect();
        if let Some(unknown) = mapping.keys().find(|c| !names.contains(&c.as_str())) {
            return Err(format!(
                "mapping names column {unknown:?}, which {} does not store",
                def.name()
            ));
        }
        let key_columns: Vec<String> = def.spec().primary_key.clone().unwrap_or_default();
        let timestamp_column = match time_from {
            TimeFrom::Payload => None,
            TimeFrom::Timestamp => Some(def.time_index().ok_or_else(|| {
                format!(
                    "time_from = \"timestamp\" needs a time column; {} has none",
                    def.name()
                )
            })?),
        };
        let table_fields: Vec<Field> = stored
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| !key_only || key_columns.contains(f.name()))
            .map(|(_, f)| Field::new(f.name(), f.data_type().clone(), f.is_nullable()))
            .collect();
        let table_schema = Arc::new(Schema::new(table_fields));
        let payload_fields: Vec<Field> = table_schema
            .fields()
            .iter()
            .filter(|f| {
                key_only || timestamp_column.is_none_or(|t| stored.field(t).name() != f.name())
            })
            .map(|f| {
                let name = mapping.get(f.name()).unwrap_or(f.name());
                Field::new(name, f.data_type().clone(), f.is_nullable())
            })
            .collect();
        let timestamp_column = timestamp_column.filter(|_| !key_only).map(|t| {
            table_schema
                .index_of(stored.field(t).name())
                .expect("the time column is stored")
        });
        Ok(Self {
            payload_schema: Arc::new(Schema::new(payload_fields)),
            table_schema,
            timestamp_column,
        })
    }

    /// Decodes the payloads `take` picks from `records` (their values, or their keys for
    /// tombstones) into rows in record order. The whole run is decoded at once; only when
    /// that fails is each record decoded alone, to keep the good ones and name the bad.
    pub fn decode(
        &self,
        records: &[Incoming],
        take: impl Fn(&Incoming) -> Option<&[u8]>,
    ) -> Decoded {
        let mut out = Decoded {
            batch: None,
            positions: Vec::with_capacity(records.len()),
            rejects: Vec::new(),
        };
        if records.is_empty() {
            return out;
        }
        let all_present = records.iter().all(|r| take(r).is_some());
        if all_present
            && let Ok(batch) = self.decode_bytes(records.iter().filter_map(&take), records.len())
        {
            out.positions = records.iter().map(|r| (r.partition, r.offset)).collect();
            out.batch = Some(batch);
            return out;
        }
        let mut batches = Vec::new();
        for r in records {
            let result = match take(r) {
                None => Err("the record has no payload".to_owned()),
                Some(bytes) => self.decode_bytes([bytes], 1),
            };
            match result {
                Ok(batch) => {
                    out.positions.push((r.partition, r.offset));
                    batches.push(batch);
                }
                Err(reason) => out.rejects.push(Reject {
                    partition: r.partition,
                    offset: r.offset,
                    reason,
                }),
            }
        }
        if !batches.is_empty() {
            out.batch = Some(
                arrow_select::concat::concat_batches(&batches[0].schema(), &batches)
                    .expect("batches of one schema concatenate"),
            );
        }
        out
    }

    /// The rows of `payloads`, which must hold exactly `expected` JSON objects between
    /// them, named as the payload names them (see [`RowDecoder::into_table_rows`]).
    /// Each payload goes to the decoder as it is, followed by a newline, and must add
    /// exactly one whole value; nothing is copied into a joined buffer.
    fn decode_bytes<'a>(
        &self,
        payloads: impl IntoIterator<Item = &'a [u8]>,
        expected: usize,
    ) -> Result<RecordBatch, String> {
        let mut decoder = arrow_json::ReaderBuilder::new(Arc::clone(&self.payload_schema))
            // One more than expected, so that an extra value shows as a wrong count.
            .with_batch_size(expected + 1)
            .with_strict_mode(false)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        for payload in payloads {
            let before = decoder.len();
            for bytes in [payload, b"\n".as_slice()] {
                let mut at = 0;
                while at < bytes.len() {
                    let n = decoder.decode(&bytes[at..]).map_err(|e| reason(&e))?;
                    if n == 0 {
                        break;
                    }
                    at += n;
                }
                if bytes[at..].iter().any(|b| !b.is_ascii_whitespace()) {
                    return Err("the record holds more than one JSON value".into());
                }
            }
            // Each payload is exactly one whole value: a value cut short must not be
            // completed by the next record's bytes.
            if decoder.has_partial_record() {
                return Err("the record ends inside a JSON value".into());
            }
            match decoder.len() - before {
                1 => {}
                0 => return Err("the record holds no JSON object".into()),
                n => return Err(format!("the record holds {n} JSON values, not one object")),
            }
        }
        let batch = decoder
            .flush()
            .map_err(|e| reason(&e))?
            .ok_or_else(|| "the record holds no JSON object".to_owned())?;
        if batch.num_rows() != expected {
            return Err(format!(
                "the record holds {} JSON values, not one object",
                batch.num_rows()
            ));
        }
        Ok(batch)
    }

    /// The decoded rows as the table's rows: columns renamed from the payload's names,
    /// and the time column from `timestamps` (µs, one per row) when it comes from the
    /// records.
    pub fn into_table_rows(&self, batch: RecordBatch, timestamps: &[i64]) -> RecordBatch {
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        if let Some(t) = self.timestamp_column {
            let array = TimestampMicrosecondArray::from(timestamps.to_vec())
                .with_timezone(hotgate_store::UTC);
            columns.insert(t, Arc::new(array));
        }
        RecordBatch::try_new(Arc::clone(&self.table_schema), columns)
            .expect("decoded columns match the table's")
    }

    /// Whether decoded rows need [`RowDecoder::into_table_rows`] to get their time.
    pub fn takes_timestamps(&self) -> bool {
        self.timestamp_column.is_some()
    }
}

/// arrow-json's message, which names the field and the problem, with every quoted piece of
/// the record's text cut: a parse failure quotes the bad value, which may be restricted.
fn reason(e: &arrow_schema::ArrowError) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("Json error: ").unwrap_or(&text);
    let text = text.strip_prefix("Parser error: ").unwrap_or(text);
    let mut out = String::with_capacity(text.len().min(200));
    let mut quoted = false;
    for c in text.chars() {
        match (c, quoted) {
            ('"', false) => {
                quoted = true;
                out.push_str("<value>");
            }
            ('"', true) => quoted = false,
            (c, false) => out.push(c),
            (_, true) => {}
        }
    }
    // Field names come in single quotes and stay; a lone quote must not hide the rest.
    out.chars().take(200).collect()
}

/// How many of `batch`'s rows are null in column `name`, for tests of the mapping.
#[cfg(test)]
fn nulls(batch: &RecordBatch, name: &str) -> usize {
    use arrow_array::Array;
    batch.column_by_name(name).unwrap().null_count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotgate_store::TableSpec;

    fn def() -> TableDef {
        let spec: TableSpec = serde_json::from_value(serde_json::json!({
            "namespace": "app", "name": "orders",
            "columns": [
                {"name": "id", "type": "int64", "nullable": false},
                {"name": "customer", "type": "string", "nullable": false},
                {"name": "card", "type": "string", "write": "drop"},
                {"name": "amount", "type": "float64"},
                {"name": "ts", "type": "timestamp_us", "nullable": false}
            ],
            "time_column": "ts", "bucket_key": "customer", "buckets": 2
        }))
        .unwrap();
        TableDef::new(spec).unwrap()
    }

    fn record(offset: i64, value: &str) -> Incoming {
        Incoming {
            partition: 3,
            offset,
            timestamp: 1_700_000_000_000_000 + offset,
            key: None,
            value: Some(value.as_bytes().to_vec()),
        }
    }

    #[test]
    fn good_records_decode_at_once_and_bad_ones_are_named() {
        let decoder = RowDecoder::new(&def(), &BTreeMap::new(), TimeFrom::Payload, false).unwrap();
        let ts = "\"2026-12-05T10:00:00Z\"";
        let records = vec![
            record(
                10,
                &format!(r#"{{"id":1,"customer":"a","card":"4111","amount":2.5,"ts":{ts}}}"#),
            ),
            record(11, &format!(r#"{{"id":"seven","customer":"b","ts":{ts}}}"#)),
            record(12, r#"{"id":3,"ts":"2026-12-05T10:00:00Z"}"#),
            record(13, "not json"),
            record(
                14,
                &format!(r#"{{"id":5,"customer":"e","ts":{ts},"extra":true}}"#),
            ),
            record(15, "[1,2]"),
        ];
        let decoded = decoder.decode(&records, |r| r.value.as_deref());
        let batch = decoded.batch.unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(decoded.positions, vec![(3, 10), (3, 14)]);
        assert!(
            batch.column_by_name("card").is_none(),
            "a drop column is never decoded"
        );
        let offsets: Vec<i64> = decoded.rejects.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![11, 12, 13, 15]);
        for r in &decoded.rejects {
            assert!(!r.reason.is_empty());
            assert!(!r.reason.contains("4111"), "{}", r.reason);
            assert!(!r.reason.contains("seven"), "{}", r.reason);
        }
        assert!(
            decoded.rejects[0].reason.contains("'id'"),
            "{}",
            decoded.rejects[0].reason
        );
        // A value cut short is not completed by the next record's bytes.
        let split = vec![
            record(20, r#"{"id":20,"customer":"a","#),
            record(
                21,
                &format!(r#""ts":{ts}}}{{"id":21,"customer":"b","ts":{ts}}}"#),
            ),
        ];
        let decoded = decoder.decode(&split, |r| r.value.as_deref());
        assert!(decoded.batch.is_none_or(|b| b.num_rows() == 0));
        let offsets: Vec<i64> = decoded.rejects.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![20, 21]);
        // All good: one decode, every position.
        let good = vec![records[0].clone(), records[4].clone()];
        let decoded = decoder.decode(&good, |r| r.value.as_deref());
        assert_eq!(decoded.batch.unwrap().num_rows(), 2);
        assert!(decoded.rejects.is_empty());
    }

    #[test]
    fn a_mapping_renames_fields_and_the_record_timestamp_can_be_the_time() {
        let mapping: BTreeMap<String, String> = [("customer".to_owned(), "cust".to_owned())].into();
        let decoder = RowDecoder::new(&def(), &mapping, TimeFrom::Timestamp, false).unwrap();
        assert!(decoder.takes_timestamps());
        let records = vec![record(1, r#"{"id":1,"cust":"a","amount":1}"#)];
        let decoded = decoder.decode(&records, |r| r.value.as_deref());
        assert!(decoded.rejects.is_empty(), "{:?}", decoded.rejects);
        let batch = decoder.into_table_rows(decoded.batch.unwrap(), &[records[0].timestamp]);
        assert_eq!(nulls(&batch, "customer"), 0);
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, vec!["id", "customer", "amount", "ts"]);
        let err = RowDecoder::new(
            &def(),
            &[("nope".to_owned(), "x".to_owned())].into(),
            TimeFrom::Payload,
            false,
        )
        .unwrap_err();
        assert!(err.contains("\"nope\""), "{err}");
    }
}
