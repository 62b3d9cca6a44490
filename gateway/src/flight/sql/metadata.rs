//! Flight SQL's catalog metadata: what the server is (`GetSqlInfo`), and the catalogs,
//! schemas (namespaces), tables, table types and primary keys the caller may list.
//! A table's schema is the caller's view of it: denied columns are absent, and a
//! table the caller may list but not read shows no columns at all.

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTables, SqlInfo,
    SqlSupportedCaseSensitivity, SqlSupportedTransaction,
};
use arrow_flight::{FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use hotgate_policy::Principal;
use hotgate_store::HotTable;
use tonic::{Request, Status};

use super::super::call::new_audit;
use crate::error::{GatewayError, Result};
use crate::sql::CATALOG;
use crate::state::GatewayState;

/// The one table type: every hotgate table is a base table (log or primary-key).
pub(super) const TABLE_TYPE: &str = "TABLE";

/// What `GetSqlInfo` reports.
pub(super) fn sql_info_data() -> Result<SqlInfoData> {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "hotgate");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "58");
    info.append(SqlInfo::FlightSqlServerReadOnly, true);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    info.append(SqlInfo::FlightSqlServerCancel, true);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    info.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, false);
    info.append(SqlInfo::SqlDdlTable, false);
    info.append(
        SqlInfo::SqlIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32,
    );
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(
        SqlInfo::SqlQuotedIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32,
    );
    info.append(SqlInfo::SqlAllTablesAreSelectable, false);
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    info.append(SqlInfo::SqlSupportsExpressionsInOrderBy, true);
    info.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    info.append(SqlInfo::SqlCorrelatedSubqueriesSupported, true);
    info.append(SqlInfo::SqlSchemaTerm, "namespace");
    info.append(SqlInfo::SqlCatalogTerm, "catalog");
    info.append(SqlInfo::SqlCatalogAtStart, true);
    info.append(SqlInfo::SqlSelectForUpdateSupported, false);
    info.append(SqlInfo::SqlStoredProceduresSupported, false);
    info.append(SqlInfo::SqlTransactionsSupported, false);
    info.append(SqlInfo::SqlBatchUpdatesSupported, false);
    info.append(SqlInfo::SqlSavepointsSupported, false);
    info.append(SqlInfo::SqlNamedParametersSupported, false);
    info.append(
        SqlInfo::SqlMaxStatementLength,
        crate::sql::SqlLimits::DEFAULT.max_bytes as i64,
    );
    Ok(info.build()?)
}

/// The `FlightInfo` of a metadata command: its schema, and a ticket that is the command.
pub(super) fn info(
    descriptor: FlightDescriptor,
    schema: &Schema,
    ticket: Ticket,
) -> Result<FlightInfo> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)?
        .with_descriptor(descriptor)
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket)))
}

/// Answers a metadata `DoGet`: the call is on record before its batch leaves.
pub(super) async fn do_get(
    state: &Arc<GatewayState>,
    principal: Principal,
    request: Request<Ticket>,
    what: &str,
    batch: Result<RecordBatch>,
) -> Result<BoxStream<'static, Result<FlightData, Status>>> {
    let mut audit = new_audit(state, &principal, request.remote_addr(), "sql_metadata");
    audit.set_reason(format!("Flight SQL {what}"));
    let batch = match batch {
        Ok(b) => b,
        Err(e) => {
            audit.deny(&e).await;
            return Err(e);
        }
    };
    audit.set_rows(batch.num_rows() as u64);
    audit.allow_once().await?;
    let schema = batch.schema();
    Ok(FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter([Ok::<_, FlightError>(batch)]))
        .map_err(Status::from)
        .boxed())
}

/// The tables the caller may list, with their view schema, in name order.
fn listed(state: &GatewayState, principal: &Principal) -> Vec<(Arc<HotTable>, SchemaRef)> {
    let mut tables = state.governance.listed(principal, state.store.tables());
    tables.sort_by_key(|(t, _)| t.def().name().to_string());
    tables
}

/// Whether a Flight SQL `catalog` argument names hotgate's (unset or empty: any).
fn our_catalog(catalog: Option<&str>) -> bool {
    catalog.is_none_or(|c| c.is_empty() || c == CATALOG)
}

pub(super) fn db_schemas(
    state: &GatewayState,
    principal: &Principal,
    query: CommandGetDbSchemas,
) -> Result<RecordBatch> {
    let ours = our_catalog(query.catalog.as_deref());
    let mut builder = query.into_builder();
    if ours {
        let mut namespaces: Vec<String> = listed(state, principal)
            .into_iter()
            .map(|(t, _)| t.def().name().namespace().to_owned())
            .collect();
        namespaces.dedup();
        for ns in namespaces {
            builder.append(CATALOG, ns);
        }
    }
    Ok(builder.build()?)
}

pub(super) fn tables(
    state: &GatewayState,
    principal: &Principal,
    query: CommandGetTables,
) -> Result<RecordBatch> {
    let ours = our_catalog(query.catalog.as_deref());
    let mut builder = query.into_builder();
    if ours {
        for (table, schema) in listed(state, principal) {
            let def = table.def();
            let name = def.name();
            builder.append(CATALOG, name.namespace(), name.name(), TABLE_TYPE, &schema)?;
        }
    }
    Ok(builder.build()?)
}

/// The schema Flight SQL defines for `GetPrimaryKeys`.
pub(super) fn primary_keys_schema() -> Schema {
    Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ])
}

/// The key columns of a primary-key table the caller may read, where they are visible.
pub(super) fn primary_keys(
    state: &GatewayState,
    principal: &Principal,
    query: CommandGetPrimaryKeys,
) -> Result<RecordBatch> {
    let (mut catalogs, mut schemas, mut tables, mut columns, mut keys, mut sequence) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        Int32Builder::new(),
    );
    if our_catalog(query.catalog.as_deref()) {
        for (table, schema) in listed(state, principal) {
            let def = table.def();
            let name = def.name();
            let namespace_matches = query
                .db_schema
                .as_deref()
                .is_none_or(|ns| ns == name.namespace());
            if name.name() != query.table || !namespace_matches {
                continue;
            }
            for (i, key) in def.spec().primary_key.iter().flatten().enumerate() {
                // A denied key column is not shown.
                if schema.index_of(key).is_err() {
                    continue;
                }
                catalogs.append_value(CATALOG);
                schemas.append_value(name.namespace());
                tables.append_value(name.name());
                columns.append_value(key);
                keys.append_null();
                sequence.append_value(i32::try_from(i + 1).unwrap_or(i32::MAX));
            }
        }
    }
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(catalogs.finish()),
        Arc::new(schemas.finish()),
        Arc::new(tables.finish()),
        Arc::new(columns.finish()),
        Arc::new(keys.finish()),
        Arc::new(sequence.finish()),
    ];
    RecordBatch::try_new(Arc::new(primary_keys_schema()), arrays)
        .map_err(|e| GatewayError::Internal(e.to_string()))
}
