//! The JSON commands of DoGet tickets and GetFlightInfo descriptors.
//!
//! ```json
//! {"table":"ns.t","columns":["a"],"filter":"a > 1","since":"2026-11-30T00:00:00Z","until":"…","limit":10}
//! {"table":"ns.t","changelog":{"from":"earliest|latest|<RFC 3339>","follow":true}}
//! {"table":"ns.t","lookup":[{"k":1}]}
//! ```
//! A scan may also carry `"buckets":[..]`: the endpoints of GetFlightInfo use it to split
//! a table for parallel fetches.

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
    pub lookup: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog: Option<ChangelogJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangelogJson {
    #[serde(default = "earliest")]
    pub from: String,
    #[serde(default)]
    pub follow: bool,
}

fn earliest() -> String {
    "earliest".into()
}

/// A decoded command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Scan(Scan),
    Changelog(Changelog),
    Lookup { table: TableName },
}

impl Command {
    pub fn table(&self) -> &TableName {
        match self {
            Command::Scan(s) => &s.table,
            Command::Changelog(c) => &c.table,
            Command::Lookup { table } => table,
        }
    }

    /// The audit action of the command.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Scan(_) => "scan",
            Command::Changelog(_) => "changelog",
            Command::Lookup { .. } => "lookup",
        }
    }

    /// The columns the caller asked for, if it named any.
    pub fn columns(&self) -> Option<&[String]> {
        match self {
            Command::Scan(s) => s.columns.as_deref(),
            Command::Changelog(c) => c.columns.as_deref(),
            Command::Lookup { .. } => None,
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

#[derive(Debug, Clone, PartialEq)]
pub struct Changelog {
    pub table: TableName,
    pub columns: Option<Vec<String>>,
    pub from: ChangelogStart,
    pub follow: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangelogStart {
    Earliest,
    Latest,
    /// Rows whose event time is at or after this instant (µs).
    Time(i64),
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
                let from = match c.from.as_str() {
                    "earliest" => ChangelogStart::Earliest,
                    "latest" => ChangelogStart::Latest,
                    t => ChangelogStart::Time(parse_time("changelog.from", t)?),
                };
                Ok(Command::Changelog(Changelog {
                    table,
                    columns: self.columns,
                    from,
                    follow: c.follow,
                }))
            }
            (None, Some(_)) => Ok(Command::Lookup { table }),
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
        let err = parse(b"not json").unwrap_err().to_string();
        assert!(err.contains("not a valid hotgate JSON command"), "{err}");
    }
}
