//! Flight descriptors and tickets: the table a descriptor path names, the bytes an
//! audit digest covers, and the tickets GetFlightInfo hands out.

use arrow_flight::FlightDescriptor;
use arrow_flight::flight_descriptor::DescriptorType;
use hotgate_store::TableName;

use crate::error::{GatewayError, Result};
use crate::ticket::{Scan, TicketJson};

pub(super) fn scan_ticket(scan: &Scan, buckets: Option<Vec<u32>>) -> Result<Vec<u8>> {
    let micros = |v: Option<i64>| {
        v.and_then(chrono::DateTime::from_timestamp_micros)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
    };
    let json = TicketJson {
        table: scan.table.to_string(),
        columns: scan.columns.clone(),
        filter: scan.filter.clone(),
        since: micros(scan.since),
        until: micros(scan.until),
        limit: scan.limit,
        buckets,
        ..Default::default()
    };
    serde_json::to_vec(&json).map_err(|e| GatewayError::Internal(e.to_string()))
}

/// The bytes a descriptor's audit digest covers: its command, or its path.
pub(super) fn descriptor_bytes(descriptor: &FlightDescriptor) -> Vec<u8> {
    match descriptor.r#type() {
        DescriptorType::Cmd => descriptor.cmd.to_vec(),
        _ => serde_json::to_vec(&descriptor.path).unwrap_or_default(),
    }
}

pub(super) fn table_of_path(path: &[String]) -> Result<TableName> {
    match path {
        [namespace @ .., t] if !namespace.is_empty() => {
            TableName::parse(&format!("{}.{t}", namespace.join(".")))
                .map_err(|e| GatewayError::InvalidArgument(format!("descriptor path: {e}")))
        }
        _ => Err(GatewayError::InvalidArgument(format!(
            "descriptor path must be [namespace..., table], got {} element(s)",
            path.len()
        ))),
    }
}
