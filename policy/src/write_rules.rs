//! Write rules per column (`hotgate.write`), applied before anything touches disk:
//! `drop` removes the column, `hash` replaces each value by HMAC-SHA256 (hex) under the
//! gateway key, `keep` stores it as sent.
//!
//! The same key serves the `hash` column mask, so a masked value equals the write-hash of
//! the same input and joins between the two still work.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use hmac::{KeyInit, Mac};
use sha2::Sha256;

use crate::error::PolicyError;

/// The gateway's HMAC key. Its bytes never appear in `Debug` output.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HashKey([u8; 32]);

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

impl HashKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Self {
        Self(rand::random())
    }

    /// Reads a key written by [`HashKey::to_hex`]: 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, PolicyError> {
        let bytes = hex::decode(s.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                PolicyError::Internal("the hash key must be 64 hex digits (32 bytes)".into())
            })?;
        Ok(Self(bytes))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// HMAC-SHA256 of `data`, lower-case hex.
    pub fn hmac_hex(&self, data: &[u8]) -> String {
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(data);
        hex::encode(mac.finalize().into_bytes())
    }

    /// HMAC of every value of a string array; nulls stay null.
    pub fn hmac_strings(&self, array: &dyn Array) -> Result<ArrayRef, String> {
        let hashed: StringArray = match array.data_type() {
            DataType::Utf8 => array
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(|s| self.hmac_hex(s.as_bytes())))
                .collect(),
            DataType::LargeUtf8 => array
                .as_string::<i64>()
                .iter()
                .map(|v| v.map(|s| self.hmac_hex(s.as_bytes())))
                .collect(),
            DataType::Utf8View => array
                .as_string_view()
                .iter()
                .map(|v| v.map(|s| self.hmac_hex(s.as_bytes())))
                .collect(),
            other => return Err(format!("hashing takes string values, got {other}")),
        };
        Ok(Arc::new(hashed))
    }
}

/// The write rules of one table.
#[derive(Debug, Clone, Default)]
pub struct WriteRules {
    drop: HashSet<String>,
    hash: HashSet<String>,
}

impl WriteRules {
    pub fn new(
        drop: impl IntoIterator<Item = String>,
        hash: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            drop: drop.into_iter().collect(),
            hash: hash.into_iter().collect(),
        }
    }

    pub fn is_noop(&self) -> bool {
        self.drop.is_empty() && self.hash.is_empty()
    }

    /// The batch as it may be stored: `drop` columns removed, `hash` columns replaced.
    /// A `hash` column sent as anything but a string is refused, naming the column.
    pub fn apply(&self, batch: &RecordBatch, key: &HashKey) -> Result<RecordBatch, PolicyError> {
        if self.is_noop() {
            return Ok(batch.clone());
        }
        let schema = batch.schema();
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            if self.drop.contains(field.name()) {
                continue;
            }
            if self.hash.contains(field.name()) {
                let hashed = key.hmac_strings(column.as_ref()).map_err(|e| {
                    PolicyError::WriteRule(format!(
                        "column {:?} is written hashed: {e}",
                        field.name()
                    ))
                })?;
                fields.push(Arc::new(
                    Field::new(field.name(), DataType::Utf8, field.is_nullable())
                        .with_metadata(field.metadata().clone()),
                ));
                columns.push(hashed);
                continue;
            }
            fields.push(Arc::clone(field));
            columns.push(Arc::clone(column));
        }
        let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        RecordBatch::try_new(schema, columns)
            .map_err(|e| PolicyError::WriteRule(format!("could not rebuild the batch: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    #[test]
    fn drop_removes_and_hash_replaces() {
        let key = HashKey::from_bytes([7; 32]);
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            (
                "email",
                Arc::new(StringArray::from(vec![Some("a@x.io"), None])) as ArrayRef,
            ),
            (
                "secret",
                Arc::new(StringArray::from(vec!["s1", "s2"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let rules = WriteRules::new(["secret".to_string()], ["email".to_string()]);
        let out = rules.apply(&batch, &key).unwrap();
        assert_eq!(out.schema().fields().len(), 2);
        assert!(out.column_by_name("secret").is_none());
        let email = out.column_by_name("email").unwrap().as_string::<i32>();
        assert_eq!(email.value(0), key.hmac_hex(b"a@x.io"));
        assert_eq!(email.value(0).len(), 64);
        assert!(email.is_null(1));
        // Another key gives another hash: the key is part of the function.
        assert_ne!(
            email.value(0),
            HashKey::from_bytes([8; 32]).hmac_hex(b"a@x.io")
        );
        let bad = WriteRules::new([], ["id".to_string()]).apply(&batch, &key);
        assert!(bad.unwrap_err().to_string().contains("\"id\""));
    }

    #[test]
    fn keys_round_trip_as_hex() {
        let k = HashKey::generate();
        assert_eq!(HashKey::from_hex(&k.to_hex()).unwrap(), k);
        assert!(HashKey::from_hex("abcd").is_err());
        assert_eq!(format!("{k:?}"), "HashKey(..)");
    }
}
