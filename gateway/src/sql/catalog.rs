//! The catalog a statement sees: `hotgate`, one schema per namespace, and for each
//! table reference the caller's secure view of that table ([`ViewTable`]).
//!
//! Tables are resolved lazily, one reference at a time, as DataFusion plans the
//! statement, and each is authorized then: a table the caller may not read fails the
//! statement with the same error as a JSON read of it, whether or not it exists. Every
//! table resolved is remembered for the statement's audit record.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DfResult};
use hotgate_policy::{Principal, Privilege, SecureView};
use hotgate_store::TableName;
use parking_lot::Mutex;

use super::view_table::ViewTable;
use crate::error::{GatewayError, Result};
use crate::planner::choose_tiers;
use crate::state::GatewayState;
use crate::ticket::Scan;
use crate::tiers::Tiers;

/// The one catalog's name, as Flight SQL's `GetCatalogs` reports it.
pub const CATALOG: &str = "hotgate";

/// A table a statement read, for its audit record.
#[derive(Debug, Clone)]
pub struct Touched {
    pub name: TableName,
    pub view: Arc<SecureView>,
    pub tiers: Tiers,
}

/// The tables a statement named (`namespace.table`), whether or not it may read them:
/// what the audit record of a refused statement lists.
pub type Referenced = Arc<Mutex<std::collections::BTreeSet<String>>>;

/// One statement's access to the store: the caller, and what it has resolved so far.
#[derive(Debug)]
pub(crate) struct StatementAccess {
    state: Arc<GatewayState>,
    principal: Principal,
    touched: Mutex<BTreeMap<TableName, Touched>>,
    referenced: Referenced,
    /// The session's table functions (`generate_series`, `range`): DataFusion resolves
    /// `FROM f(…)` as a table reference first, and takes the function when no table
    /// answers.
    table_functions: std::sync::OnceLock<std::collections::BTreeSet<String>>,
}

impl StatementAccess {
    pub(crate) fn new(
        state: Arc<GatewayState>,
        principal: Principal,
        referenced: Referenced,
    ) -> Arc<Self> {
        Arc::new(Self {
            state,
            principal,
            touched: Mutex::new(BTreeMap::new()),
            referenced,
            table_functions: std::sync::OnceLock::new(),
        })
    }

    /// Names the session's table functions.
    pub(crate) fn set_table_functions(&self, names: impl IntoIterator<Item = String>) {
        let _ = self.table_functions.set(names.into_iter().collect());
    }

    /// Whether `namespace.name` is a table function's call rather than a table: an
    /// unqualified function name that no table of the default namespace has.
    fn is_table_function(&self, namespace: &str, name: &str) -> bool {
        namespace == self.state.sql.default_namespace
            && self.table_functions.get().is_some_and(|f| f.contains(name))
            && TableName::parse(&format!("{namespace}.{name}"))
                .map_or(true, |n| self.state.store.table(&n).is_err())
    }

    /// The tables resolved, in name order.
    pub(crate) fn touched(&self) -> Vec<Touched> {
        self.touched.lock().values().cloned().collect()
    }

    /// The caller's view of `namespace.name` as a table, authorized first (as
    /// [`crate::flight`]'s reads do, so a caller without access cannot probe which
    /// tables exist).
    fn open(&self, namespace: &str, name: &str) -> Result<Arc<ViewTable>> {
        self.referenced.lock().insert(format!("{namespace}.{name}"));
        let table_name = TableName::parse(&format!("{namespace}.{name}")).map_err(|_| {
            GatewayError::NotFound(format!(
                "table {namespace}.{name}: not a hotgate table name, so no such table exists"
            ))
        })?;
        let governance = &self.state.governance;
        governance.authorize_table(&self.principal, Privilege::TableReadData, &table_name)?;
        let table = self.state.store.table(&table_name)?;
        let view = governance.view(&self.principal, &table)?;
        let tiers = choose_tiers(&self.state.tierer, &table, &Scan::whole(table_name.clone()))?;
        let suppression = self.state.deletions.suppression(&table_name);
        let provider = ViewTable::try_new(table, Arc::clone(&view), tiers.clone(), suppression)?;
        self.touched.lock().insert(
            table_name.clone(),
            Touched {
                name: table_name,
                view,
                tiers: tiers.tiers,
            },
        );
        Ok(Arc::new(provider))
    }

    /// The tables of `namespace` the caller may list.
    fn listable(&self, namespace: Option<&str>) -> Vec<TableName> {
        let tables = self.state.store.tables();
        self.state
            .governance
            .listed(&self.principal, tables)
            .into_iter()
            .map(|(t, _)| t.def().name().clone())
            .filter(|n| namespace.is_none_or(|ns| n.namespace() == ns))
            .collect()
    }
}

/// The `hotgate` catalog of one statement.
#[derive(Debug)]
pub(crate) struct StatementCatalog(pub(crate) Arc<StatementAccess>);

impl CatalogProvider for StatementCatalog {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .0
            .listable(None)
            .into_iter()
            .map(|n| n.namespace().to_owned())
            .collect();
        names.dedup();
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        // Every namespace exists to the planner: whether a table does is decided, and
        // authorized, per table reference.
        Some(Arc::new(NamespaceSchema {
            access: Arc::clone(&self.0),
            namespace: name.to_owned(),
        }))
    }
}

/// One namespace of the `hotgate` catalog.
#[derive(Debug)]
struct NamespaceSchema {
    access: Arc<StatementAccess>,
    namespace: String,
}

#[async_trait::async_trait]
impl SchemaProvider for NamespaceSchema {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn table_names(&self) -> Vec<String> {
        self.access
            .listable(Some(&self.namespace))
            .into_iter()
            .map(|n| n.name().to_owned())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if self.access.is_table_function(&self.namespace, name) {
            return Ok(None);
        }
        match self.access.open(&self.namespace, name) {
            Ok(table) => Ok(Some(table)),
            Err(e) => Err(DataFusionError::External(Box::new(e))),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.access
            .listable(Some(&self.namespace))
            .iter()
            .any(|n| n.name() == name)
    }
}
