//! The JSON commands of DoGet tickets and GetFlightInfo descriptors.
//!
//! ```json
//! {"table":"ns.t","columns":["a"],"filter":"a > 1","since":"2026-11-30T00:00:00Z","until":"…","limit":10}
//! {"table":"ns.t","changelog":{"from":"earliest|latest|snapshot|<RFC 3339>","follow":true}}
//! {"table":"ns.t","changelog":{"from":{"0":17,"2026-11-30/3":40}}}
//! {"table":"ns.t","lookup":[{"k":1}],"columns":["k","v"]}
//! ```
//! `from` as an object gives, per log, the first offset to read (the last `_offset` seen
//! plus one); a log is named `<bucket>` for primary-key tables and `<YYYY-MM-DD>/<bucket>`
//! for log tables. Logs it does not name are read from their start.
//! A scan may also carry `"buckets":[..]`: the endpoints of GetFlightInfo use it to split
//! a table for parallel fetches.

use std::collections::BTreeMap;

use hotgate_store::TableName;
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

/// The raw JSON shape, shared by every command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketJson {
    pub table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup: Option<LookupKeys>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog: Option<ChangelogJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangelogJson {
    #[serde(default = "earliest")]
    pub from: FromJson,
    #[serde(default)]
    pub follow: bool,
}

/// Where a changelog starts: a name or time, or explicit per-log offsets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FromJson {
    Named(String),
    Offsets(BTreeMap<String, u64>),
}

fn earliest() -> FromJson {
    FromJson::Named("earliest".into())
}

/// The keys of a lookup as the ticket wrote them: a JSON array, kept raw so that many
/// keys are decoded once, straight into Arrow, instead of into a JSON tree first.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct LookupKeys {
    raw: Box<serde_json::value::RawValue>,
    /// Where each key's text lies in `raw`, found when the ticket was decoded.
    #[serde(skip)]
    spans: Vec<std::ops::Range<usize>>,
}

impl LookupKeys {
    /// How many keys the lookup asks for.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Each key's JSON text, in request order.
    pub fn elements(&self) -> impl ExactSizeIterator<Item = &str> {
        let raw = self.raw.get();
        self.spans.iter().map(move |span| &raw[span.clone()])
    }
}

impl PartialEq for LookupKeys {
    fn eq(&self, other: &Self) -> bool {
        self.raw.get() == other.raw.get()
    }
}

impl<'de> Deserialize<'de> for LookupKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        let text = raw.get();
        // Each element borrows from `text`, so its position is an address difference.
        let spans = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text)
            .map_err(|_| serde::de::Error::custom("lookup must be an array of key objects"))?
            .iter()
            .map(|e| {
                let start = e.get().as_ptr() as usize - text.as_ptr() as usize;
                start..start + e.get().len()
            })
            .collect();
        Ok(Self { raw, spans })
    }
}

/// Most keys one lookup may ask for.
pub const MAX_LOOKUP_KEYS: usize = 100_000;

/// A decoded command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Scan(Scan),
    Changelog(Changelog),
    Lookup(Lookup),
}

impl Command {
    pub fn table(&self) -> &TableName {
        match self {
            Command::Scan(s) => &s.table,
            Command::Changelog(c) => &c.table,
            Command::Lookup(l) => &l.table,
        }
    }

    /// The audit action of the command.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Scan(_) => "scan",
            Command::Changelog(_) => "changelog",
            Command::Lookup(_) => "lookup",
        }
    }

    /// The columns the caller asked for, if it named any.
    pub fn columns(&self) -> Option<&[String]> {
        match self {
            Command::Scan(s) => s.columns.as_deref(),
            Command::Changelog(c) => c.columns.as_deref(),
            Command::Lookup(l) => l.columns.as_deref(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scan {
    pub table: TableName,
    pub columns: Option<Vec<String>>,
    pub filter: Option<String>,
    /// Event-time bounds in µs: `[since, until)`.
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub limit: Option<usize>,
    pub buckets: Option<Vec<u32>>,
}

impl Scan {
    /// A scan of the whole table: every column, row, time and bucket.
    pub fn whole(table: TableName) -> Self {
        Self {
            table,
            columns: None,
            filter: None,
            since: None,
            until: None,
            limit: None,
            buckets: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Changelog {
    pub table: TableName,
    pub columns: Option<Vec<String>>,
    pub from: ChangelogStart,
    pub follow: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangelogStart {
    Earliest,
    Latest,
    /// Rows whose event time is at or after this instant (µs).
    Time(i64),
    /// A primary-key table's current rows (as `+I`), then every change after them.
    Snapshot,
    /// Per log (as named in the ticket), the first offset to read.
    Offsets(BTreeMap<String, u64>),
}

/// A batched point read of a primary-key table.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    pub table: TableName,
    /// One JSON object of key column values per key, in request order.
    pub keys: LookupKeys,
    pub columns: Option<Vec<String>>,
}

fn invalid(msg: String) -> GatewayError {
    GatewayError::InvalidArgument(msg)
}

fn parse_time(field: &str, value: &str) -> Result<i64> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| t.timestamp_micros())
        .map_err(|e| {
            invalid(format!(
                "{field}: {value:?} is not an RFC 3339 time such as 2026-11-30T12:00:00Z ({e})"
            ))
        })
}

impl TicketJson {
    /// Decodes ticket or command bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| {
            invalid(format!(
                "the ticket is not a valid hotgate JSON command: {e}; expected e.g. \
                 {{\"table\":\"ns.t\",\"columns\":[..],\"filter\":\"..\"}}"
            ))
        })
    }

    pub fn into_command(self) -> Result<Command> {
        let table = TableName::parse(&self.table).map_err(|e| invalid(format!("table: {e}")))?;
        let scan_only = self.filter.is_some()
            || self.since.is_some()
            || self.until.is_some()
            || self.limit.is_some()
            || self.buckets.is_some();
        match (self.changelog, self.lookup) {
            (Some(_), Some(_)) => Err(invalid(
                "a ticket holds either changelog or lookup, not both".into(),
            )),
            (Some(c), None) => {
                if scan_only {
                    return Err(invalid(
                        "changelog tickets take only table, columns and changelog \
                         (filter, since, until, limit and buckets are for scans)"
                            .into(),
                    ));
                }
                let from = match c.from {
                    FromJson::Offsets(offsets) => ChangelogStart::Offsets(offsets),
                    FromJson::Named(name) => match name.as_str() {
                        "earliest" => ChangelogStart::Earliest,
                        "latest" => ChangelogStart::Latest,
                        "snapshot" => ChangelogStart::Snapshot,
                        t => ChangelogStart::Time(parse_time("changelog.from", t)?),
                    },
                };
                Ok(Command::Changelog(Changelog {
                    table,
                    columns: self.columns,
                    from,
                    follow: c.follow,
                }))
            }
            (None, Some(keys)) => {
                if scan_only {
                    return Err(invalid(
                        "lookup tickets take only table, columns and lookup \
                         (filter, since, until, limit and buckets are for scans)"
                            .into(),
                    ));
                }
                if keys.len() > MAX_LOOKUP_KEYS {
                    return Err(invalid(format!(
                        "lookup: {} keys in one call; at most {MAX_LOOKUP_KEYS}",
                        keys.len()
                    )));
                }
                Ok(Command::Lookup(Lookup {
                    table,
                    keys,
                    columns: self.columns,
                }))
            }
            (None, None) => {
                let since = self
                    .since
                    .as_deref()
                    .map(|s| parse_time("since", s))
                    .transpose()?;
                let until = self
                    .until
                    .as_deref()
                    .map(|s| parse_time("until", s))
                    .transpose()?;
                if let (Some(s), Some(u)) = (since, until)
                    && s >= u
                {
                    return Err(invalid("since must be before until".into()));
                }
                Ok(Command::Scan(Scan {
                    table,
                    columns: self.columns,
                    filter: self.filter,
                    since,
                    until,
                    limit: self.limit,
                    buckets: self.buckets,
                }))
            }
        }
    }
}

/// Decodes ticket bytes into a command.
pub fn parse(bytes: &[u8]) -> Result<Command> {
    TicketJson::from_bytes(bytes)?.into_command()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_decode_and_name_bad_fields() {
        let c = parse(
            br#"{"table":"app.events","columns":["id"],"since":"2026-11-30T00:00:00Z","limit":5}"#,
        )
        .unwrap();
        let Command::Scan(s) = c else {
            panic!("not a scan")
        };
        assert_eq!(s.since, Some(1_795_996_800_000_000));
        assert_eq!(s.limit, Some(5));
        let c = parse(br#"{"table":"app.events","changelog":{"from":"latest","follow":true}}"#)
            .unwrap();
        assert!(matches!(
            c,
            Command::Changelog(Changelog {
                from: ChangelogStart::Latest,
                follow: true,
                ..
            })
        ));

        let err = parse(br#"{"table":"app.events","colums":["id"]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `colums`"), "{err}");
        let err = parse(br#"{"table":"app.events","since":"yesterday"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("since:"), "{err}");
        let err = parse(br#"{"table":"events"}"#).unwrap_err().to_string();
        assert!(err.contains("namespace.table"), "{err}");
        let c = parse(br#"{"table":"app.kv","changelog":{"from":{"3":17}}}"#).unwrap();
        let Command::Changelog(c) = c else {
            panic!("not a changelog")
        };
        assert_eq!(
            c.from,
            ChangelogStart::Offsets([("3".to_owned(), 17)].into())
        );
        let c =
            parse(br#"{"table":"app.kv","lookup":[{"k":1}, {"k":2}],"columns":["v"]}"#).unwrap();
        assert_eq!(c.columns(), Some(&["v".to_owned()][..]));
        let Command::Lookup(l) = c else {
            panic!("not a lookup")
        };
        assert_eq!(l.keys.len(), 2);
        let keys: Vec<&str> = l.keys.elements().collect();
        assert_eq!(keys, [r#"{"k":1}"#, r#"{"k":2}"#]);
        // Spacing inside and between keys stays out of their text.
        let c = parse(br#"{"table":"app.kv","lookup":[ {"k": "a,]"} ,{"k":[2]}]}"#).unwrap();
        let Command::Lookup(l) = c else {
            panic!("not a lookup")
        };
        let keys: Vec<&str> = l.keys.elements().collect();
        assert_eq!(keys, [r#"{"k": "a,]"}"#, r#"{"k":[2]}"#]);
        let err = parse(br#"{"table":"app.kv","lookup":{"k":1}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("lookup must be an array"), "{err}");
        let err = parse(br#"{"table":"app.kv","lookup":[{"k":1}],"limit":3}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("lookup tickets take only"), "{err}");
        let err = parse(b"not json").unwrap_err().to_string();
        assert!(err.contains("not a valid hotgate JSON command"), "{err}");
    }
}
