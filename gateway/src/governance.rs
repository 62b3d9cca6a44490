//! Governance wiring: where the grant mirror and the data policies come from, how they
//! are swapped, and the checks every handler calls.
//!
//! The decisions themselves are `hotgate-policy`'s; this module does the I/O around them:
//! reading `grants.json` or polling Polaris, persisting `policies.json`, holding the
//! gateway's HMAC key, and failing closed when the mirror is too stale to trust.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use hotgate_policy::grants::{Drift, drift};
use hotgate_policy::{
    DataPolicy, GrantsDocument, GrantsMirror, HashKey, PolicyError, PolicySet, Principal,
    Privilege, Resource, SecureView, SecureViewCache, ViewTable, WriteRules,
};
use hotgate_store::{HotTable, Store, TableDef, TableName, WriteRule};
use serde::Serialize;

use crate::config::{Config, GrantsSourceKind};
use crate::error::{GatewayError, Result};
use crate::polaris::PolarisClient;

/// Where the grants mirror is loaded from.
#[derive(Debug)]
pub enum GrantsSource {
    /// One JSON document in Polaris's shapes.
    File(PathBuf),
    /// A live Polaris management API.
    Polaris(PolarisClient),
}

impl GrantsSource {
    pub fn describe(&self) -> String {
        match self {
            GrantsSource::File(p) => format!("file {}", p.display()),
            GrantsSource::Polaris(c) => format!("polaris {}", c.base_url()),
        }
    }

    /// Reads the source's document now.
    pub async fn fetch(&self) -> Result<GrantsDocument> {
        match self {
            GrantsSource::File(path) => {
                let text = tokio::fs::read_to_string(path).await.map_err(|e| {
                    GatewayError::Unavailable(format!(
                        "cannot read grants file {}: {e}",
                        path.display()
                    ))
                })?;
                serde_json::from_str(&text).map_err(|e| {
                    GatewayError::InvalidArgument(format!("grants file {}: {e}", path.display()))
                })
            }
            GrantsSource::Polaris(client) => client.fetch_document().await,
        }
    }
}

/// The state of the last sync, shown by `GET /v1/grants`.
#[derive(Debug, Clone, Serialize)]
pub struct SyncStatus {
    pub version: u64,
    pub source: String,
    /// When the mirror last matched the source (a successful sync, changed or not).
    #[serde(with = "humantime_serde_opt")]
    pub last_success: Option<SystemTime>,
    pub last_error: Option<String>,
}

mod humantime_serde_opt {
    use serde::Serializer;
    use std::time::SystemTime;

    pub(super) fn serialize<S: Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.collect_str(&humantime::format_rfc3339_millis(*t)),
            None => s.serialize_none(),
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Serialize)]
pub struct SyncReport {
    pub version: u64,
    pub changed: bool,
}

/// The grant mirror, the data policies and the write key, shared by every handler.
#[derive(Debug)]
pub struct Governance {
    catalog: String,
    source: GrantsSource,
    mirror: RwLock<Arc<GrantsMirror>>,
    /// Serializes syncs so versions move in order.
    sync_lock: tokio::sync::Mutex<()>,
    status: Mutex<SyncStatus>,
    /// Monotonic time of the last successful sync, for the staleness limit.
    last_success: Mutex<Instant>,
    max_staleness: Option<Duration>,
    policies: RwLock<Arc<PolicySet>>,
    policies_path: PathBuf,
    policy_lock: tokio::sync::Mutex<()>,
    views: SecureViewCache,
    hash_key: HashKey,
}

impl Governance {
    /// Loads the key, the policies and the first mirror. A source that cannot be read
    /// or parsed at start stops the server: it never serves without a mirror.
    pub async fn open(config: &Config) -> Result<Self> {
        let catalog = config.grants.catalog.clone();
        let source = match config.grants.source {
            GrantsSourceKind::File => {
                let path = config.grants_file_path();
                if config.grants.file.is_none() && !path.exists() {
                    // The embedded default bootstraps root/admin and nothing else.
                    let doc = GrantsMirror::bootstrap_document(&catalog);
                    let bytes = serde_json::to_vec_pretty(&doc)
                        .map_err(|e| GatewayError::Internal(e.to_string()))?;
                    write_durable(&path, &bytes)?;
                    tracing::info!(path = %path.display(), "wrote the bootstrap grants (root / admin)");
                }
                GrantsSource::File(path)
            }
            GrantsSourceKind::Polaris => {
                GrantsSource::Polaris(PolarisClient::from_config(&config.grants)?)
            }
        };
        let document = source.fetch().await.map_err(|e| {
            GatewayError::Unavailable(format!(
                "the grant mirror could not be loaded from {}: {e}",
                source.describe()
            ))
        })?;
        let mirror = GrantsMirror::build(document, &catalog, 1)
            .await
            .map_err(GatewayError::from)?;
        let policies_path = config.data_dir.join("policies.json");
        let policies = match std::fs::read(&policies_path) {
            Ok(bytes) => serde_json::from_slice::<PolicySet>(&bytes)
                .map_err(|e| GatewayError::Internal(format!("{}: {e}", policies_path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => PolicySet::default(),
            Err(e) => {
                return Err(GatewayError::Internal(format!(
                    "cannot read {}: {e}",
                    policies_path.display()
                )));
            }
        };
        let hash_key = load_or_create_key(&config.hash_key_path())?;
        let status = SyncStatus {
            version: 1,
            source: source.describe(),
            last_success: Some(SystemTime::now()),
            last_error: None,
        };
        Ok(Self {
            catalog,
            source,
            mirror: RwLock::new(Arc::new(mirror)),
            sync_lock: tokio::sync::Mutex::new(()),
            status: Mutex::new(status),
            last_success: Mutex::new(Instant::now()),
            max_staleness: (!config.grants.max_staleness.is_zero())
                .then_some(config.grants.max_staleness),
            policies: RwLock::new(Arc::new(policies)),
            policies_path,
            policy_lock: tokio::sync::Mutex::new(()),
            views: SecureViewCache::default(),
            hash_key,
        })
    }

    pub fn mirror(&self) -> Arc<GrantsMirror> {
        Arc::clone(&self.mirror.read())
    }

    pub fn policies(&self) -> Arc<PolicySet> {
        Arc::clone(&self.policies.read())
    }

    pub fn status(&self) -> SyncStatus {
        self.status.lock().clone()
    }

    pub fn hash_key(&self) -> &HashKey {
        &self.hash_key
    }

    /// The mirror, unless it is older than the staleness limit (then every check fails
    /// closed with `Unavailable`).
    fn fresh_mirror(&self) -> Result<Arc<GrantsMirror>> {
        if let Some(limit) = self.max_staleness {
            let age = self.last_success.lock().elapsed();
            if age > limit {
                return Err(GatewayError::Unavailable(format!(
                    "the grant mirror has not synced with {} for {}s (limit {}s); \
                     access is refused until it does",
                    self.source.describe(),
                    age.as_secs(),
                    limit.as_secs()
                )));
            }
        }
        Ok(self.mirror())
    }

    /// Checks a privilege on a resource.
    pub fn authorize(
        &self,
        principal: &Principal,
        privilege: Privilege,
        resource: &Resource,
    ) -> Result<()> {
        self.fresh_mirror()?
            .check(principal, privilege, resource)
            .map_err(GatewayError::from)
    }

    pub fn authorize_table(
        &self,
        principal: &Principal,
        privilege: Privilege,
        table: &TableName,
    ) -> Result<()> {
        self.authorize(principal, privilege, &table_resource(table))
    }

    /// The secure view of `table` for `principal` (cached).
    pub fn view(&self, principal: &Principal, table: &HotTable) -> Result<Arc<SecureView>> {
        let roles = self.fresh_mirror()?.catalog_roles(principal);
        let def = table.def();
        self.views
            .get_or_compile(
                ViewTable {
                    namespace: def.name().namespace(),
                    name: def.name().name(),
                    schema: def.stored_schema(),
                },
                &roles,
                &self.policies(),
                &self.hash_key,
            )
            .map_err(GatewayError::from)
    }

    /// The tables of `tables` that `principal` may list, each with the schema of its
    /// view: denied columns absent, and no columns at all where the principal may list
    /// the table but not read it. What every listing (Flight, Flight SQL) shows.
    pub fn listed(
        &self,
        principal: &Principal,
        tables: Vec<Arc<HotTable>>,
    ) -> Vec<(Arc<HotTable>, arrow_schema::SchemaRef)> {
        tables
            .into_iter()
            .filter(|t| {
                self.authorize_table(principal, Privilege::TableList, t.def().name())
                    .is_ok()
            })
            .map(|t| {
                let schema = self
                    .authorize_table(principal, Privilege::TableReadData, t.def().name())
                    .and_then(|()| self.view(principal, &t))
                    .map(|v| Arc::clone(v.schema()))
                    .unwrap_or_else(|_| Arc::new(arrow_schema::Schema::empty()));
                (t, schema)
            })
            .collect()
    }

    /// Who can read or write `table`, and what each catalog role's secure view of it is:
    /// the effective-access report of `GET /v1/tables/{id}/access`.
    pub fn access_report(&self, table: &HotTable) -> AccessReport {
        let mirror = self.mirror();
        let policies = self.policies();
        let def = table.def();
        let name = def.name();
        let namespace: Vec<String> = name.namespace().split('.').map(str::to_owned).collect();
        let roles: Vec<RoleReport> = mirror
            .table_access(&namespace, name.name())
            .into_iter()
            .map(|access| {
                let view = SecureView::compile(
                    ViewTable {
                        namespace: name.namespace(),
                        name: name.name(),
                        schema: def.stored_schema(),
                    },
                    &BTreeSet::from([access.catalog_role.clone()]),
                    &policies,
                    &self.hash_key,
                );
                let (view, error) = match view {
                    Ok(v) => (Some(v), None),
                    // Fail closed: such a role reads nothing until the policy is fixed.
                    Err(e) => (
                        None,
                        Some(format!("its reads are denied: {}", GatewayError::from(e))),
                    ),
                };
                let policies = view
                    .as_ref()
                    .map(|v| v.applied().to_vec())
                    .unwrap_or_default();
                RoleReport {
                    writes: !access.write_through.is_empty(),
                    unfiltered_read: view.as_ref().is_some_and(|v| v.row_filter().is_none()),
                    row_filters: policies
                        .iter()
                        .filter(|p| p.kind == "row_filter")
                        .map(|p| p.to_string())
                        .collect(),
                    masks: view.as_ref().map(|v| v.masks().clone()).unwrap_or_default(),
                    denies: view
                        .as_ref()
                        .map(|v| v.denies().clone())
                        .unwrap_or_default(),
                    policies,
                    error,
                    access,
                }
            })
            .collect();
        AccessReport {
            table: name.to_string(),
            mirror_version: mirror.version(),
            policy_set_version: policies.version,
            unfiltered_readers: roles
                .iter()
                .filter(|r| r.unfiltered_read)
                .map(|r| r.access.catalog_role.clone())
                .collect(),
            roles,
        }
    }

    /// The catalog roles a caller holds now, for logs and audit.
    pub fn catalog_roles(&self, principal: &Principal) -> BTreeSet<String> {
        self.mirror().catalog_roles(principal)
    }

    /// Reloads the mirror from its source. A failed fetch or a bad document keeps the
    /// last good mirror and is reported; the version moves only when the content does.
    pub async fn sync(&self) -> Result<SyncReport> {
        let _guard = self.sync_lock.lock().await;
        let outcome: Result<SyncReport> = async {
            let document = self.source.fetch().await?;
            let current = self.mirror();
            if *current.document() == document {
                return Ok(SyncReport {
                    version: current.version(),
                    changed: false,
                });
            }
            let next = GrantsMirror::build(document, &self.catalog, current.version() + 1)
                .await
                .map_err(GatewayError::from)?;
            let version = next.version();
            *self.mirror.write() = Arc::new(next);
            Ok(SyncReport {
                version,
                changed: true,
            })
        }
        .await;
        let mut status = self.status.lock();
        match &outcome {
            Ok(report) => {
                *self.last_success.lock() = Instant::now();
                status.version = report.version;
                status.last_success = Some(SystemTime::now());
                status.last_error = None;
                if report.changed {
                    tracing::info!(version = report.version, "grant mirror updated");
                }
            }
            Err(e) => {
                tracing::warn!("grant sync failed, the last good mirror keeps serving: {e}");
                status.last_error = Some(e.to_string());
            }
        }
        outcome
    }

    /// Every difference between the mirror and the source right now.
    pub async fn drift(&self) -> Result<Vec<Drift>> {
        let source = self.source.fetch().await?;
        Ok(drift(self.mirror().document(), &source))
    }

    /// Applies a change to the policy set: the result is checked against every table it
    /// names, persisted, then swapped in. On any error nothing changes.
    pub async fn change_policies(
        &self,
        store: &Store,
        change: impl FnOnce(&PolicySet) -> std::result::Result<PolicySet, PolicyError>,
    ) -> Result<Arc<PolicySet>> {
        let _guard = self.policy_lock.lock().await;
        let current = self.policies();
        let next = change(&current).map_err(GatewayError::from)?;
        for p in &next.policies {
            if current.get(&p.id) == Some(p) {
                continue;
            }
            check_policy_targets(store, p, &self.hash_key)?;
        }
        let bytes =
            serde_json::to_vec_pretty(&next).map_err(|e| GatewayError::Internal(e.to_string()))?;
        write_durable(&self.policies_path, &bytes)?;
        let next = Arc::new(next);
        *self.policies.write() = Arc::clone(&next);
        tracing::info!(version = next.version, "data policies updated");
        Ok(next)
    }

    /// The write rules of a table, from its definition.
    pub fn write_rules(def: &TableDef) -> WriteRules {
        let cols = &def.spec().columns;
        let named = |rule: WriteRule| {
            cols.iter()
                .filter(move |c| c.write == rule)
                .map(|c| c.name.clone())
        };
        WriteRules::new(named(WriteRule::Drop), named(WriteRule::Hash))
    }

    /// Spawns the periodic sync. It stops when `shutdown` flips.
    pub async fn run_refresh(
        self: Arc<Self>,
        every: Duration,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        if every.is_zero() {
            return;
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => { let _ = self.sync().await; }
                () = cancel.cancelled() => break,
            }
        }
    }
}

/// Effective access to one table ([`Governance::access_report`]).
#[derive(Debug, Serialize)]
pub struct AccessReport {
    pub table: String,
    pub mirror_version: u64,
    pub policy_set_version: u64,
    /// The catalog roles that read every row: no row filter applies to them. A writer
    /// is among them unless a policy names it, since writing implies reading.
    pub unfiltered_readers: Vec<String>,
    pub roles: Vec<RoleReport>,
}

/// One catalog role's access to a table and the view its reads go through.
#[derive(Debug, Serialize)]
pub struct RoleReport {
    #[serde(flatten)]
    pub access: hotgate_policy::RoleAccess,
    pub writes: bool,
    /// Reads see every row (no row filter applies).
    pub unfiltered_read: bool,
    /// `id@version` of each row filter that applies.
    pub row_filters: Vec<String>,
    /// Masked column → the policy that masks it.
    pub masks: std::collections::BTreeMap<String, String>,
    /// Denied column → the policy that denies it.
    pub denies: std::collections::BTreeMap<String, String>,
    /// Every policy the role's view applies.
    pub policies: Vec<hotgate_policy::AppliedPolicy>,
    /// Why the role's view cannot be compiled, if it cannot (its reads are denied).
    pub error: Option<String>,
}

/// A table's grant resource: `hotgate / ns / t`.
pub fn table_resource(table: &TableName) -> Resource {
    Resource::table(table.namespace(), table.name())
}

/// Refuses a policy on a missing table, or one that cannot be compiled against the table
/// it names (unknown column, non-boolean filter, mistyped mask).
fn check_policy_targets(store: &Store, p: &DataPolicy, key: &HashKey) -> Result<()> {
    use hotgate_policy::data_policy::PolicyScope;
    let PolicyScope::Table(t) = &p.scope else {
        return Ok(());
    };
    let name = TableName::parse(t).map_err(|e| {
        GatewayError::InvalidArgument(format!("policy {:?}: scope table: {e}", p.id))
    })?;
    let table = store.table(&name).map_err(|_| {
        GatewayError::InvalidArgument(format!("policy {:?}: table {name} does not exist", p.id))
    })?;
    let def = table.def();
    let single = PolicySet {
        version: 0,
        policies: vec![DataPolicy {
            to: vec!["*".into()],
            except: Vec::new(),
            ..p.clone()
        }],
    };
    SecureView::compile(
        ViewTable {
            namespace: def.name().namespace(),
            name: def.name().name(),
            schema: def.stored_schema(),
        },
        &BTreeSet::new(),
        &single,
        key,
    )
    .map(|_| ())
    .map_err(|e| GatewayError::InvalidArgument(format!("invalid policy: {e}")))
}

fn write_durable(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(hotgate_store::fs::write_file_durable(path, bytes)?)
}

/// The gateway's HMAC key: created on first start (0600), then reused, so hashes stay
/// stable across restarts.
fn load_or_create_key(path: &Path) -> Result<HashKey> {
    let text = crate::secret_file::load_or_create(path, || HashKey::generate().to_hex())
        .map_err(GatewayError::Internal)?;
    HashKey::from_hex(&text)
        .map_err(|e| GatewayError::Internal(format!("hash key {}: {e}", path.display())))
}
