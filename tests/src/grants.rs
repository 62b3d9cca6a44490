//! Grants documents (the Polaris-shaped file the gateway's file source reads).

use std::path::Path;

/// Grants for tests that are not about authorization: principals alice, ingest, py and
/// bob hold CATALOG_MANAGE_CONTENT on the catalog (through principal roles `writer` and
/// `analyst`); root / admin is the bootstrap administrator and may read `_system`;
/// ann / auditors may read `_system.audit` and nothing else.
pub fn content_grants() -> serde_json::Value {
    let mut doc = grants_document();
    let content = serde_json::json!([{"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"}]);
    add_role(
        &mut doc,
        "content",
        content,
        "writer",
        &["alice", "ingest", "py", "bob"],
    );
    // alice also holds the role through `analyst`.
    add_principal_role(&mut doc, "analyst", "content", &["alice"]);
    add_admin(&mut doc);
    let audit = serde_json::json!([{"type": "table", "namespace": ["_system"], "tableName": "audit",
                                    "privilege": "TABLE_READ_DATA"}]);
    add_role(&mut doc, "auditor", audit, "auditors", &["ann"]);
    doc
}

/// A grants document of the catalog `hotgate` that grants nothing yet.
pub fn grants_document() -> serde_json::Value {
    serde_json::json!({"catalogs": [{"name": "hotgate", "catalogRoles": []}], "principalRoles": []})
}

/// Adds the administrator: root, through principal role `admin`, holds catalog role
/// `catalog_admin` (CATALOG_MANAGE_CONTENT, CATALOG_MANAGE_ACCESS, and reading `_system`).
pub fn add_admin(doc: &mut serde_json::Value) {
    let grants = serde_json::json!([
        {"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"},
        {"type": "catalog", "privilege": "CATALOG_MANAGE_ACCESS"},
        {"type": "namespace", "namespace": ["_system"], "privilege": "TABLE_READ_DATA"}
    ]);
    add_role(doc, "catalog_admin", grants, "admin", &["root"]);
}

/// Adds catalog role `role` with `grants` to a grants document, held by a new principal
/// role `principal_role` of `principals`.
pub fn add_role(
    doc: &mut serde_json::Value,
    role: &str,
    grants: serde_json::Value,
    principal_role: &str,
    principals: &[&str],
) {
    doc["catalogs"][0]["catalogRoles"]
        .as_array_mut()
        .expect("a grants document")
        .push(serde_json::json!({"name": role, "principalRoles": [], "grants": grants}));
    add_principal_role(doc, principal_role, role, principals);
}

/// Adds principal role `principal_role` of `principals`, holding the existing catalog
/// role `role`.
pub fn add_principal_role(
    doc: &mut serde_json::Value,
    principal_role: &str,
    role: &str,
    principals: &[&str],
) {
    let held = doc["catalogs"][0]["catalogRoles"]
        .as_array_mut()
        .expect("a grants document")
        .iter_mut()
        .find(|r| r["name"] == role)
        .unwrap_or_else(|| panic!("no catalog role {role} in the grants document"));
    held["principalRoles"]
        .as_array_mut()
        .expect("a catalog role")
        .push(principal_role.into());
    doc["principalRoles"]
        .as_array_mut()
        .expect("a grants document")
        .push(serde_json::json!({"name": principal_role, "principals": principals}));
}

/// Writes the grants document the file source reads, whole (through a rename).
pub fn write_grants(data_dir: &Path, doc: &serde_json::Value) {
    std::fs::create_dir_all(data_dir).unwrap();
    let tmp = data_dir.join("grants.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
    std::fs::rename(tmp, data_dir.join("grants.json")).unwrap();
}
