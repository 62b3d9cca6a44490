//! Grants documents (the Polaris-shaped file the gateway's file source reads).

use std::path::Path;

/// Grants for tests that are not about authorization: principals alice, ingest, py and
/// bob hold CATALOG_MANAGE_CONTENT on the catalog (through principal roles `writer` and
/// `analyst`); root / admin is the bootstrap administrator and may read `_system`;
/// ann / auditors may read `_system.audit` and nothing else.
pub fn content_grants() -> serde_json::Value {
    serde_json::json!({
        "catalogs": [{"name": "hotgate", "catalogRoles": [
            {"name": "content", "principalRoles": ["writer", "analyst"],
             "grants": [{"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"}]},
            {"name": "catalog_admin", "principalRoles": ["admin"],
             "grants": [{"type": "catalog", "privilege": "CATALOG_MANAGE_CONTENT"},
                        {"type": "catalog", "privilege": "CATALOG_MANAGE_ACCESS"},
                        {"type": "namespace", "namespace": ["_system"], "privilege": "TABLE_READ_DATA"}]},
            {"name": "auditor", "principalRoles": ["auditors"],
             "grants": [{"type": "table", "namespace": ["_system"], "tableName": "audit",
                         "privilege": "TABLE_READ_DATA"}]}
        ]}],
        "principalRoles": [
            {"name": "writer", "principals": ["alice", "ingest", "py", "bob"]},
            {"name": "analyst", "principals": ["alice"]},
            {"name": "admin", "principals": ["root"]},
            {"name": "auditors", "principals": ["ann"]}
        ]
    })
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
        .push(
            serde_json::json!({"name": role, "principalRoles": [principal_role], "grants": grants}),
        );
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
