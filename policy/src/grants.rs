//! The grants mirror: Polaris's model (principal → principal roles → catalog roles →
//! grants), loaded from a document in the shape of Polaris's management API and
//! evaluated with casbin.
//!
//! The casbin model:
//! - `p = catalog role, resource pattern, privilege` — one line per grant;
//! - `g = principal role, catalog role` — the role chain;
//! - `g2 = granted privilege, desired privilege` — Polaris's super-privilege table;
//! - resource ancestry by `keyMatch` on path-shaped names: a grant on namespace `a.b` is
//!   the pattern `hotgate/a/b/*`, which covers every table and sub-namespace under it, and
//!   a catalog grant is `hotgate/*`. Tables come and go between syncs, so ancestry lives
//!   in the names rather than in links the mirror would have to keep in step.
//!
//! The principal → principal role step is resolved outside casbin because a token
//! activates only some roles: the activated set is the token's requested roles ∩ the
//! roles granted, and each activated role is one enforce call. The default is deny.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use casbin::{CoreApi, DefaultModel, Enforcer, MemoryAdapter, MgmtApi};
use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::identity::{ActivatedRoles, Principal};
use crate::privilege::Privilege;

/// The catalog name of the embedded default.
pub const DEFAULT_CATALOG: &str = "hotgate";
/// The principal and role the embedded default bootstraps.
pub const BOOTSTRAP_PRINCIPAL: &str = "root";
pub const BOOTSTRAP_PRINCIPAL_ROLE: &str = "admin";
pub const BOOTSTRAP_CATALOG_ROLE: &str = "catalog_admin";

const MODEL: &str = r#"
[request_definition]
r = sub, obj, act

[policy_definition]
p = sub, obj, act

[role_definition]
g = _, _
g2 = _, _

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = g(r.sub, p.sub) && keyMatch(r.obj, p.obj) && g2(p.act, r.act)
"#;

/// The grants document: Polaris's management API shapes gathered into one file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrantsDocument {
    pub catalogs: Vec<CatalogDoc>,
    #[serde(default)]
    pub principal_roles: Vec<PrincipalRoleDoc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CatalogDoc {
    pub name: String,
    #[serde(default)]
    pub catalog_roles: Vec<CatalogRoleDoc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CatalogRoleDoc {
    pub name: String,
    /// The principal roles this catalog role is assigned to.
    #[serde(default)]
    pub principal_roles: Vec<String>,
    #[serde(default)]
    pub grants: Vec<GrantResource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrincipalRoleDoc {
    pub name: String,
    #[serde(default)]
    pub principals: Vec<String>,
}

/// One grant, exactly as Polaris's management API writes it (`GrantResource`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum GrantResource {
    Catalog {
        privilege: String,
    },
    Namespace {
        namespace: Vec<String>,
        privilege: String,
    },
    Table {
        namespace: Vec<String>,
        #[serde(rename = "tableName")]
        table_name: String,
        privilege: String,
    },
    View {
        namespace: Vec<String>,
        #[serde(rename = "viewName", alias = "tableName")]
        view_name: String,
        privilege: String,
    },
}

impl GrantResource {
    pub fn privilege(&self) -> &str {
        match self {
            GrantResource::Catalog { privilege }
            | GrantResource::Namespace { privilege, .. }
            | GrantResource::Table { privilege, .. }
            | GrantResource::View { privilege, .. } => privilege,
        }
    }

    /// The casbin object pattern of the grant in `catalog`.
    fn pattern(&self, catalog: &str) -> Result<String, String> {
        let path = |ns: &[String]| -> Result<String, String> {
            if ns.is_empty() {
                return Err("a namespace grant needs a non-empty namespace".into());
            }
            Ok(ns.iter().map(|s| escape(s)).collect::<Vec<_>>().join("/"))
        };
        let namespace = match self {
            GrantResource::Catalog { .. } => None,
            GrantResource::Namespace { namespace, .. }
            | GrantResource::Table { namespace, .. }
            | GrantResource::View { namespace, .. } => Some(namespace.as_slice()),
        };
        let catalog = root(catalog, namespace.unwrap_or_default());
        Ok(match self {
            GrantResource::Catalog { .. } => format!("{catalog}/*"),
            GrantResource::Namespace { namespace, .. } => {
                format!("{catalog}/{}/*", path(namespace)?)
            }
            GrantResource::Table {
                namespace,
                table_name,
                ..
            } => format!("{catalog}/{}/{}", path(namespace)?, escape(table_name)),
            // Views are not tables: a suffix keeps a view grant from matching a table.
            GrantResource::View {
                namespace,
                view_name,
                ..
            } => format!("{catalog}/{}/{}#view", path(namespace)?, escape(view_name)),
        })
    }
}

/// hotgate's own namespace (`_system`, holding the audit log). Catalog-wide grants do
/// not reach it: reading `_system.audit` takes a grant on namespace `_system` or on the
/// table itself, so that managing content does not imply reading the audit trail.
pub const SYSTEM_NAMESPACE: &str = "_system";

/// The path root of a resource: `_system` lives under its own root, which no catalog
/// pattern (`catalog/*`) matches. `#` cannot occur in an escaped name.
fn root(catalog: &str, namespace: &[String]) -> String {
    let catalog = escape(catalog);
    if namespace.first().is_some_and(|n| n == SYSTEM_NAMESPACE) {
        format!("{catalog}#system")
    } else {
        catalog
    }
}

/// Keeps `/`, `*` and `#` inside a name from acting as structure in a pattern.
fn escape(s: &str) -> String {
    s.replace('%', "%25")
        .replace('/', "%2F")
        .replace('*', "%2A")
        .replace('#', "%23")
}

/// How one catalog role reaches a table ([`GrantsMirror::table_access`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoleAccess {
    pub catalog_role: String,
    /// The principal roles that hold this catalog role.
    pub principal_roles: Vec<String>,
    /// The grants that let it read the table (a write grant among them).
    pub read_through: Vec<GrantResource>,
    /// The grants that let it write the table.
    pub write_through: Vec<GrantResource>,
}

/// What a privilege is checked on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Resource {
    Catalog,
    Namespace(Vec<String>),
    Table {
        namespace: Vec<String>,
        name: String,
    },
}

impl Resource {
    pub fn table(namespace: &str, name: &str) -> Self {
        Resource::Table {
            namespace: namespace.split('.').map(str::to_owned).collect(),
            name: name.to_owned(),
        }
    }

    fn object(&self, catalog: &str) -> String {
        let ns = |n: &[String]| n.iter().map(|s| escape(s)).collect::<Vec<_>>().join("/");
        let catalog = match self {
            Resource::Catalog => escape(catalog),
            Resource::Namespace(n) | Resource::Table { namespace: n, .. } => root(catalog, n),
        };
        match self {
            // Containers end in `/` so that `x/*` covers `x/` itself.
            Resource::Catalog => format!("{catalog}/"),
            Resource::Namespace(n) => format!("{catalog}/{}/", ns(n)),
            Resource::Table { namespace, name } => {
                format!("{catalog}/{}/{}", ns(namespace), escape(name))
            }
        }
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resource::Catalog => f.write_str("the catalog"),
            Resource::Namespace(n) => write!(f, "namespace {}", n.join(".")),
            Resource::Table { namespace, name } => {
                write!(f, "table {}.{name}", namespace.join("."))
            }
        }
    }
}

/// A loaded, immutable mirror of one catalog's grants. Swapped whole on sync.
pub struct GrantsMirror {
    catalog: String,
    version: u64,
    document: GrantsDocument,
    /// principal → principal roles granted to it.
    principal_roles: HashMap<String, BTreeSet<String>>,
    /// principal role → catalog roles (of this catalog) assigned to it.
    catalog_roles: HashMap<String, BTreeSet<String>>,
    enforcer: Enforcer,
    /// casbin's answers, by (principal role, object, privilege).
    decisions: Mutex<HashMap<(String, String, Privilege), bool>>,
}

/// Most cached decisions per mirror; past it the cache starts over.
const MAX_CACHED_DECISIONS: usize = 65_536;

impl std::fmt::Debug for GrantsMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantsMirror")
            .field("catalog", &self.catalog)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

const PRINCIPAL_ROLE_PREFIX: &str = "principal_role:";
const CATALOG_ROLE_PREFIX: &str = "catalog_role:";

impl GrantsMirror {
    /// Builds the mirror of `catalog` from a document. Every grant in every catalog is
    /// checked, so a bad document is refused whole and the caller keeps its last mirror.
    pub async fn build(
        document: GrantsDocument,
        catalog: &str,
        version: u64,
    ) -> Result<Self, PolicyError> {
        let bad = |detail: String| PolicyError::InvalidGrants(detail);
        let mut seen_catalogs = BTreeSet::new();
        let mut p_lines: BTreeSet<Vec<String>> = BTreeSet::new();
        let mut g_lines: BTreeSet<Vec<String>> = BTreeSet::new();
        let mut catalog_roles: HashMap<String, BTreeSet<String>> = HashMap::new();
        for cat in &document.catalogs {
            if cat.name.is_empty() || !seen_catalogs.insert(cat.name.as_str()) {
                return Err(bad(format!(
                    "catalog names must be non-empty and unique, got {:?}",
                    cat.name
                )));
            }
            let mut seen_roles = BTreeSet::new();
            for role in &cat.catalog_roles {
                if role.name.is_empty() || !seen_roles.insert(role.name.as_str()) {
                    return Err(bad(format!(
                        "catalog {}: catalog role names must be non-empty and unique, got {:?}",
                        cat.name, role.name
                    )));
                }
                for grant in &role.grants {
                    let privilege: Privilege = grant.privilege().parse().map_err(|e| {
                        bad(format!(
                            "catalog {} catalog role {}: {e}",
                            cat.name, role.name
                        ))
                    })?;
                    let pattern = grant.pattern(&cat.name).map_err(|e| {
                        bad(format!(
                            "catalog {} catalog role {}: {e}",
                            cat.name, role.name
                        ))
                    })?;
                    if cat.name == catalog {
                        p_lines.insert(vec![
                            format!("{CATALOG_ROLE_PREFIX}{}", role.name),
                            pattern,
                            privilege.as_str().to_owned(),
                        ]);
                    }
                }
                if cat.name == catalog {
                    for pr in &role.principal_roles {
                        g_lines.insert(vec![
                            format!("{PRINCIPAL_ROLE_PREFIX}{pr}"),
                            format!("{CATALOG_ROLE_PREFIX}{}", role.name),
                        ]);
                        catalog_roles
                            .entry(pr.clone())
                            .or_default()
                            .insert(role.name.clone());
                    }
                }
            }
        }
        let mut principal_roles: HashMap<String, BTreeSet<String>> = HashMap::new();
        let mut seen = BTreeSet::new();
        for pr in &document.principal_roles {
            if pr.name.is_empty() || pr.name == "ALL" || !seen.insert(pr.name.as_str()) {
                return Err(bad(format!(
                    "principal role names must be non-empty, unique and not ALL, got {:?}",
                    pr.name
                )));
            }
            for principal in &pr.principals {
                principal_roles
                    .entry(principal.clone())
                    .or_default()
                    .insert(pr.name.clone());
            }
        }
        let g2_lines: Vec<Vec<String>> = Privilege::ALL
            .iter()
            .flat_map(|desired| {
                desired
                    .satisfied_by()
                    .iter()
                    .filter(move |granted| *granted != desired)
                    .map(move |granted| {
                        vec![granted.as_str().to_owned(), desired.as_str().to_owned()]
                    })
            })
            .collect();

        let casbin_err = |e: casbin::Error| PolicyError::Internal(format!("casbin: {e}"));
        let model = DefaultModel::from_str(MODEL).await.map_err(casbin_err)?;
        let mut enforcer = Enforcer::new(model, MemoryAdapter::default())
            .await
            .map_err(casbin_err)?;
        if !p_lines.is_empty() {
            enforcer
                .add_policies(p_lines.into_iter().collect())
                .await
                .map_err(casbin_err)?;
        }
        if !g_lines.is_empty() {
            enforcer
                .add_named_grouping_policies("g", g_lines.into_iter().collect())
                .await
                .map_err(casbin_err)?;
        }
        enforcer
            .add_named_grouping_policies("g2", g2_lines)
            .await
            .map_err(casbin_err)?;
        Ok(Self {
            catalog: catalog.to_owned(),
            version,
            document,
            principal_roles,
            catalog_roles,
            enforcer,
            decisions: Mutex::new(HashMap::new()),
        })
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    fn lock_decisions(
        &self,
    ) -> parking_lot::MutexGuard<'_, HashMap<(String, String, Privilege), bool>> {
        self.decisions.lock()
    }

    pub fn catalog(&self) -> &str {
        &self.catalog
    }

    pub fn document(&self) -> &GrantsDocument {
        &self.document
    }

    /// The principal roles a caller activated: requested ∩ granted.
    pub fn activated_roles(&self, principal: &Principal) -> BTreeSet<String> {
        let Some(granted) = self.principal_roles.get(&principal.name) else {
            return BTreeSet::new();
        };
        match &principal.roles {
            ActivatedRoles::All => granted.clone(),
            ActivatedRoles::Only(requested) => granted.intersection(requested).cloned().collect(),
        }
    }

    /// The catalog roles a caller holds through its activated principal roles.
    pub fn catalog_roles(&self, principal: &Principal) -> BTreeSet<String> {
        self.activated_roles(principal)
            .iter()
            .filter_map(|pr| self.catalog_roles.get(pr))
            .flatten()
            .cloned()
            .collect()
    }

    /// Passes if any activated principal role reaches a grant of `privilege` (or a
    /// super-privilege) on the resource, an ancestor namespace, or the catalog.
    /// Decisions are cached per (principal role, resource, privilege) for the life of
    /// this mirror, which never changes: a sync builds a new mirror with an empty cache.
    pub fn check(
        &self,
        principal: &Principal,
        privilege: Privilege,
        resource: &Resource,
    ) -> Result<(), PolicyError> {
        self.check_with(principal, privilege, resource, true)
    }

    /// [`GrantsMirror::check`] without the decision cache: every call asks casbin.
    pub fn check_uncached(
        &self,
        principal: &Principal,
        privilege: Privilege,
        resource: &Resource,
    ) -> Result<(), PolicyError> {
        self.check_with(principal, privilege, resource, false)
    }

    fn check_with(
        &self,
        principal: &Principal,
        privilege: Privilege,
        resource: &Resource,
        cached: bool,
    ) -> Result<(), PolicyError> {
        let activated = self.activated_roles(principal);
        let object = resource.object(&self.catalog);
        for role in &activated {
            let key = (role.clone(), object.clone(), privilege);
            let hit = cached
                .then(|| self.lock_decisions().get(&key).copied())
                .flatten();
            let allowed = match hit {
                Some(allowed) => allowed,
                None => {
                    let allowed = self
                        .enforcer
                        .enforce((
                            format!("{PRINCIPAL_ROLE_PREFIX}{role}"),
                            object.clone(),
                            privilege.as_str().to_owned(),
                        ))
                        .map_err(|e| PolicyError::Internal(format!("casbin: {e}")))?;
                    if cached {
                        let mut decisions = self.lock_decisions();
                        if decisions.len() >= MAX_CACHED_DECISIONS {
                            decisions.clear();
                        }
                        decisions.insert(key, allowed);
                    }
                    allowed
                }
            };
            if allowed {
                return Ok(());
            }
        }
        let why = if !self.principal_roles.contains_key(&principal.name) {
            format!(
                "principal {:?} has no principal roles in the grant mirror",
                principal.name
            )
        } else if activated.is_empty() {
            format!(
                "the token activates none of principal {:?}'s roles (scope asks for {})",
                principal.name,
                principal.role_names().join(", ")
            )
        } else {
            format!(
                "principal {:?} with activated roles [{}] lacks {privilege} on {resource}",
                principal.name,
                activated.into_iter().collect::<Vec<_>>().join(", ")
            )
        };
        Err(PolicyError::Denied(why))
    }

    /// Every catalog role of this mirror's catalog that can read or write the table
    /// `namespace.table`, with the grants that give it that access. Write implies read
    /// (Polaris's super-privileges: `TABLE_WRITE_DATA` satisfies `TABLE_READ_DATA`), so a
    /// writer appears as a reader too. Grants are matched as [`GrantsMirror::check`]
    /// matches them: on the catalog (except for `_system`), an ancestor namespace, or
    /// the table itself.
    pub fn table_access(&self, namespace: &[String], table: &str) -> Vec<RoleAccess> {
        let covers = |grant: &GrantResource| match grant {
            GrantResource::Catalog { .. } => {
                namespace.first().map(String::as_str) != Some(SYSTEM_NAMESPACE)
            }
            GrantResource::Namespace { namespace: ns, .. } => {
                !ns.is_empty() && namespace.starts_with(ns)
            }
            GrantResource::Table {
                namespace: ns,
                table_name,
                ..
            } => ns == namespace && table_name == table,
            GrantResource::View { .. } => false,
        };
        let gives = |grant: &GrantResource, wanted: Privilege| {
            grant
                .privilege()
                .parse::<Privilege>()
                .is_ok_and(|p| wanted.satisfied_by().contains(&p))
        };
        let Some(catalog) = self
            .document
            .catalogs
            .iter()
            .find(|c| c.name == self.catalog)
        else {
            return Vec::new();
        };
        catalog
            .catalog_roles
            .iter()
            .filter_map(|role| {
                let through = |wanted| -> Vec<GrantResource> {
                    role.grants
                        .iter()
                        .filter(|g| covers(g) && gives(g, wanted))
                        .cloned()
                        .collect()
                };
                let access = RoleAccess {
                    catalog_role: role.name.clone(),
                    principal_roles: role.principal_roles.clone(),
                    read_through: through(Privilege::TableReadData),
                    write_through: through(Privilege::TableWriteData),
                };
                (!access.read_through.is_empty()).then_some(access)
            })
            .collect()
    }

    /// The embedded default: principal `root` with principal role `admin`, which holds a
    /// catalog role with CATALOG_MANAGE_CONTENT and CATALOG_MANAGE_ACCESS on the catalog.
    pub fn bootstrap_document(catalog: &str) -> GrantsDocument {
        GrantsDocument {
            catalogs: vec![CatalogDoc {
                name: catalog.to_owned(),
                catalog_roles: vec![CatalogRoleDoc {
                    name: BOOTSTRAP_CATALOG_ROLE.to_owned(),
                    principal_roles: vec![BOOTSTRAP_PRINCIPAL_ROLE.to_owned()],
                    grants: vec![
                        GrantResource::Catalog {
                            privilege: Privilege::CatalogManageContent.as_str().to_owned(),
                        },
                        GrantResource::Catalog {
                            privilege: Privilege::CatalogManageAccess.as_str().to_owned(),
                        },
                        // Catalog grants do not reach _system; the admin reads the audit.
                        GrantResource::Namespace {
                            namespace: vec![SYSTEM_NAMESPACE.to_owned()],
                            privilege: Privilege::TableReadData.as_str().to_owned(),
                        },
                    ],
                }],
            }],
            principal_roles: vec![PrincipalRoleDoc {
                name: BOOTSTRAP_PRINCIPAL_ROLE.to_owned(),
                principals: vec![BOOTSTRAP_PRINCIPAL.to_owned()],
            }],
        }
    }
}

/// One difference between the mirror and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// `only_in_mirror` or `only_in_source`.
    pub side: &'static str,
    /// `grant`, `catalog_role_assignment`, `principal_assignment`, `catalog` …
    pub kind: &'static str,
    pub detail: serde_json::Value,
}

/// Every fact of a document as comparable items, for the drift report.
fn facts(doc: &GrantsDocument) -> BTreeMap<String, (&'static str, serde_json::Value)> {
    let mut out = BTreeMap::new();
    let mut add = |kind: &'static str, detail: serde_json::Value| {
        out.insert(format!("{kind}:{detail}"), (kind, detail));
    };
    for cat in &doc.catalogs {
        add("catalog", serde_json::json!({"catalog": cat.name}));
        for role in &cat.catalog_roles {
            add(
                "catalog_role",
                serde_json::json!({"catalog": cat.name, "catalogRole": role.name}),
            );
            for pr in &role.principal_roles {
                add(
                    "catalog_role_assignment",
                    serde_json::json!({"catalog": cat.name, "catalogRole": role.name, "principalRole": pr}),
                );
            }
            for g in &role.grants {
                add(
                    "grant",
                    serde_json::json!({"catalog": cat.name, "catalogRole": role.name, "grant": g}),
                );
            }
        }
    }
    for pr in &doc.principal_roles {
        add(
            "principal_role",
            serde_json::json!({"principalRole": pr.name}),
        );
        for p in &pr.principals {
            add(
                "principal_assignment",
                serde_json::json!({"principalRole": pr.name, "principal": p}),
            );
        }
    }
    out
}

/// Every difference between the mirror's document and the source's, sorted.
pub fn drift(mirror: &GrantsDocument, source: &GrantsDocument) -> Vec<Drift> {
    let (m, s) = (facts(mirror), facts(source));
    let mut out = Vec::new();
    for (k, (kind, detail)) in &m {
        if !s.contains_key(k) {
            out.push(Drift {
                side: "only_in_mirror",
                kind,
                detail: detail.clone(),
            });
        }
    }
    for (k, (kind, detail)) in &s {
        if !m.contains_key(k) {
            out.push(Drift {
                side: "only_in_source",
                kind,
                detail: detail.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(name: &str, roles: ActivatedRoles) -> Principal {
        Principal {
            name: name.into(),
            id: None,
            roles,
            token_id: None,
        }
    }

    fn only(r: &[&str]) -> ActivatedRoles {
        ActivatedRoles::Only(r.iter().map(|s| s.to_string()).collect())
    }

    fn doc(json: serde_json::Value) -> GrantsDocument {
        serde_json::from_value(json).unwrap()
    }

    /// Whether the mirror grants `privilege` on the table `namespace.table`.
    fn may(
        m: &GrantsMirror,
        p: &Principal,
        privilege: Privilege,
        namespace: &str,
        table: &str,
    ) -> bool {
        m.check(p, privilege, &Resource::table(namespace, table))
            .is_ok()
    }

    #[tokio::test]
    async fn casbin_privilege_links_equal_the_super_privilege_table() {
        // casbin's role links are transitive; the table is not necessarily closed. Check
        // every (granted, desired) pair against the table through a catalog grant.
        for granted in Privilege::ALL {
            let d = doc(serde_json::json!({
                "catalogs":[{"name":"hotgate","catalogRoles":[{"name":"r","principalRoles":["pr"],
                    "grants":[{"type":"catalog","privilege":granted.as_str()}]}]}],
                "principalRoles":[{"name":"pr","principals":["p"]}]}));
            let m = GrantsMirror::build(d, "hotgate", 1).await.unwrap();
            let p = principal("p", ActivatedRoles::All);
            for desired in Privilege::ALL {
                let expect = desired.satisfied_by().contains(granted);
                let got = m.check(&p, *desired, &Resource::Catalog).is_ok();
                assert_eq!(got, expect, "granted {granted}, desired {desired}");
                let again = m.check(&p, *desired, &Resource::Catalog).is_ok();
                let uncached = m.check_uncached(&p, *desired, &Resource::Catalog).is_ok();
                assert_eq!((again, uncached), (expect, expect), "cache disagrees");
            }
        }
    }

    #[tokio::test]
    async fn ancestry_activation_and_default_deny() {
        let d = doc(serde_json::json!({
            "catalogs":[
              {"name":"hotgate","catalogRoles":[
                {"name":"ns_reader","principalRoles":["analyst"],
                 "grants":[{"type":"namespace","namespace":["sales"],"privilege":"TABLE_READ_DATA"}]},
                {"name":"writer","principalRoles":["etl"],
                 "grants":[{"type":"table","namespace":["sales"],"tableName":"orders","privilege":"TABLE_WRITE_DATA"}]}]},
              {"name":"other","catalogRoles":[
                {"name":"all","principalRoles":["analyst"],
                 "grants":[{"type":"catalog","privilege":"CATALOG_MANAGE_CONTENT"}]}]}],
            "principalRoles":[{"name":"analyst","principals":["alice"]},{"name":"etl","principals":["alice","bob"]}]}));
        let m = GrantsMirror::build(d, "hotgate", 7).await.unwrap();
        let orders = Resource::table("sales", "orders");
        let alice = principal("alice", ActivatedRoles::All);
        assert!(m.check(&alice, Privilege::TableReadData, &orders).is_ok());
        assert!(may(&m, &alice, Privilege::TableReadData, "sales", "x"));
        // `sales` does not cover `salesx`.
        assert!(!may(
            &m,
            &alice,
            Privilege::TableReadData,
            "salesx",
            "orders"
        ));
        // Another catalog's grants do not leak into this one.
        assert!(m.check(&alice, Privilege::TableCreate, &orders).is_err());
        // Write via etl satisfies read; bob has only etl.
        let bob = principal("bob", only(&["etl"]));
        assert!(m.check(&bob, Privilege::TableReadData, &orders).is_ok());
        assert!(m.check(&bob, Privilege::TableWriteData, &orders).is_ok());
        assert!(!may(&m, &bob, Privilege::TableReadData, "sales", "x"));
        // A role not activated by the scope does not count.
        let alice_analyst = principal("alice", only(&["analyst", "admin"]));
        assert!(
            m.check(&alice_analyst, Privilege::TableWriteData, &orders)
                .is_err()
        );
        assert_eq!(
            m.activated_roles(&alice_analyst),
            BTreeSet::from(["analyst".to_string()])
        );
        let e = m
            .check(
                &principal("mallory", ActivatedRoles::All),
                Privilege::TableList,
                &orders,
            )
            .unwrap_err();
        assert!(e.to_string().contains("no principal roles"), "{e}");
        let e = m
            .check(&alice_analyst, Privilege::TableWriteData, &orders)
            .unwrap_err();
        assert!(e.to_string().contains("TABLE_WRITE_DATA"), "{e}");
    }

    #[tokio::test]
    async fn table_access_agrees_with_casbin_for_every_role() {
        let d = doc(serde_json::json!({
            "catalogs":[
              {"name":"hotgate","catalogRoles":[
                {"name":"ns_reader","principalRoles":["analyst"],
                 "grants":[{"type":"namespace","namespace":["sales"],"privilege":"TABLE_READ_DATA"}]},
                {"name":"writer","principalRoles":["etl"],
                 "grants":[{"type":"table","namespace":["sales"],"tableName":"orders","privilege":"TABLE_WRITE_DATA"}]},
                {"name":"content","principalRoles":["ops"],
                 "grants":[{"type":"catalog","privilege":"CATALOG_MANAGE_CONTENT"}]},
                {"name":"lister","principalRoles":["browser"],
                 "grants":[{"type":"catalog","privilege":"TABLE_LIST"}]},
                {"name":"auditor","principalRoles":["audit"],
                 "grants":[{"type":"table","namespace":["_system"],"tableName":"audit","privilege":"TABLE_READ_DATA"}]},
                {"name":"viewer","principalRoles":["views"],
                 "grants":[{"type":"view","namespace":["sales"],"viewName":"orders","privilege":"TABLE_READ_DATA"}]}]},
              {"name":"other","catalogRoles":[
                {"name":"elsewhere","principalRoles":["analyst"],
                 "grants":[{"type":"catalog","privilege":"CATALOG_MANAGE_CONTENT"}]}]}],
            "principalRoles":[]}));
        let m = GrantsMirror::build(d.clone(), "hotgate", 1).await.unwrap();
        let tables = [
            (vec!["sales".to_string()], "orders"),
            (vec!["sales".to_string(), "eu".to_string()], "orders"),
            (vec!["salesx".to_string()], "orders"),
            (vec!["_system".to_string()], "audit"),
        ];
        for (ns, t) in &tables {
            let access = m.table_access(ns, t);
            let resource = Resource::Table {
                namespace: ns.clone(),
                name: t.to_string(),
            };
            // One principal per catalog role, through a principal role of its own.
            for role in &d.catalogs[0].catalog_roles {
                let mut single = d.clone();
                single.catalogs[0].catalog_roles = vec![CatalogRoleDoc {
                    principal_roles: vec!["only".into()],
                    ..role.clone()
                }];
                single.principal_roles = vec![PrincipalRoleDoc {
                    name: "only".into(),
                    principals: vec!["p".into()],
                }];
                let m1 = GrantsMirror::build(single, "hotgate", 1).await.unwrap();
                let p = principal("p", ActivatedRoles::All);
                let found = access.iter().find(|a| a.catalog_role == role.name);
                let reads = m1.check(&p, Privilege::TableReadData, &resource).is_ok();
                let writes = m1.check(&p, Privilege::TableWriteData, &resource).is_ok();
                assert_eq!(found.is_some(), reads, "{} reads {ns:?}.{t}", role.name);
                assert_eq!(
                    found.is_some_and(|a| !a.write_through.is_empty()),
                    writes,
                    "{} writes {ns:?}.{t}",
                    role.name
                );
            }
        }
        let orders = m.table_access(&["sales".to_string()], "orders");
        let names: Vec<&str> = orders.iter().map(|a| a.catalog_role.as_str()).collect();
        assert_eq!(names, ["ns_reader", "writer", "content"]);
        assert_eq!(orders[1].principal_roles, ["etl"]);
    }

    #[tokio::test]
    async fn catalog_grants_do_not_reach_the_system_namespace() {
        let d = doc(serde_json::json!({
            "catalogs":[{"name":"hotgate","catalogRoles":[
                {"name":"content","principalRoles":["engineer"],
                 "grants":[{"type":"catalog","privilege":"CATALOG_MANAGE_CONTENT"}]},
                {"name":"auditor","principalRoles":["auditor"],
                 "grants":[{"type":"table","namespace":["_system"],"tableName":"audit","privilege":"TABLE_READ_DATA"}]}]}],
            "principalRoles":[{"name":"engineer","principals":["eve"]},{"name":"auditor","principals":["ann"]}]}));
        let m = GrantsMirror::build(d, "hotgate", 1).await.unwrap();
        let audit = Resource::table(SYSTEM_NAMESPACE, "audit");
        let eve = principal("eve", ActivatedRoles::All);
        let ann = principal("ann", ActivatedRoles::All);
        assert!(may(&m, &eve, Privilege::TableReadData, "sales", "t"));
        assert!(m.check(&eve, Privilege::TableReadData, &audit).is_err());
        assert!(m.check(&ann, Privilege::TableReadData, &audit).is_ok());
        assert!(m.check(&ann, Privilege::TableWriteData, &audit).is_err());
        assert!(!may(&m, &ann, Privilege::TableReadData, "sales", "t"));
        // The bootstrap admin holds read on _system explicitly.
        let boot = GrantsMirror::build(GrantsMirror::bootstrap_document("hotgate"), "hotgate", 1)
            .await
            .unwrap();
        let root = principal(BOOTSTRAP_PRINCIPAL, ActivatedRoles::All);
        assert!(boot.check(&root, Privilege::TableReadData, &audit).is_ok());
    }

    #[tokio::test]
    async fn bad_documents_are_refused_whole() {
        let d = doc(serde_json::json!({
            "catalogs":[{"name":"hotgate","catalogRoles":[{"name":"r","grants":[
                {"type":"catalog","privilege":"TABLE_READ"}]}]}]}));
        let e = GrantsMirror::build(d, "hotgate", 1).await.unwrap_err();
        assert!(
            e.to_string().contains("unknown privilege \"TABLE_READ\""),
            "{e}"
        );
        let bad: Result<GrantsDocument, _> = serde_json::from_value(serde_json::json!({
            "catalogs":[{"name":"hotgate","catalogRoles":[{"name":"r","grants":[
                {"type":"bucket","privilege":"TABLE_READ_DATA"}]}]}]}));
        assert!(bad.is_err());
    }

    #[test]
    fn drift_lists_both_sides() {
        let a = GrantsMirror::bootstrap_document("hotgate");
        let mut b = a.clone();
        b.principal_roles[0].principals.push("eve".into());
        b.catalogs[0].catalog_roles[0].grants.pop();
        let d = drift(&a, &b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d.iter()
                .any(|x| x.side == "only_in_mirror" && x.kind == "grant")
        );
        assert!(
            d.iter()
                .any(|x| x.side == "only_in_source" && x.kind == "principal_assignment")
        );
        assert!(drift(&a, &a).is_empty());
    }
}
