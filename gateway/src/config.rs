//! Gateway configuration, loaded with figment: the defaults, then the TOML file, then
//! `HOTGATE_*` environment variables, then command-line flags (applied by the binary).
//! Every key has its variable: `HOTGATE_` and the key's path joined with `_`
//! (`HOTGATE_DATA_DIR`, `HOTGATE_AUTH_JWKS_REFRESH`). Durations are humantime text
//! (`30s`, `5m`). Unknown keys and unknown `HOTGATE_*` variables are errors, so a typo
//! never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// Environment variables read by hotgate that are not configuration keys (after the
/// `HOTGATE_` prefix).
const NON_CONFIG_ENV: [&str; 2] = ["LOG", "TOKEN"];

/// The tables of the configuration: `HOTGATE_<TABLE>_<KEY>` sets `<table>.<key>`.
const SECTIONS: [&str; 8] = [
    "auth", "grants", "audit", "tiering", "deletion", "store", "catalog", "sql",
];

/// The whole configuration. Every field has a default: the embedded, all-local setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where tables, segments and the embedded issuer's key live.
    pub data_dir: PathBuf,
    /// Arrow Flight (gRPC) listen address.
    pub flight_addr: SocketAddr,
    /// HTTP (JSON admin, health, metrics) listen address.
    pub http_addr: SocketAddr,
    pub auth: AuthConfig,
    pub grants: GrantsConfig,
    /// The HMAC key of `hash` write rules and masks (64 hex digits); created on first
    /// start. Default `<data_dir>/hash.key`.
    pub hash_key_file: Option<PathBuf>,
    pub audit: AuditConfig,
    /// The Iceberg catalog of the cold tier. Default: SQLite at `<data_dir>/catalog.db`,
    /// warehouse `<data_dir>/warehouse`.
    pub catalog: Option<hotgate_tiering::CatalogConfig>,
    pub tiering: TieringConfig,
    pub deletion: DeletionConfig,
    pub store: StoreConfig,
    pub sql: SqlConfig,
    /// Kafka topics consumed into tables, `[[sources]]` in the file (no environment
    /// variables: a list).
    pub sources: Vec<crate::sources::SourceConfig>,
}

/// Flight SQL statements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SqlConfig {
    /// Memory (MiB) one statement may use for its sorts, joins and aggregates; one that
    /// needs more fails with `ResourceExhausted` (nothing spills to disk).
    pub memory_limit_mb: u64,
    /// How long one statement may run, planning and streaming its rows included.
    #[serde(with = "humantime_serde")]
    pub statement_timeout: std::time::Duration,
    /// How long a prepared statement's handle lives unused before it is closed.
    #[serde(with = "humantime_serde")]
    pub prepared_idle: std::time::Duration,
    /// The namespace of a table named without one (`SELECT * FROM events`).
    pub default_namespace: String,
}

impl Default for SqlConfig {
    fn default() -> Self {
        Self {
            memory_limit_mb: 256,
            statement_timeout: std::time::Duration::from_secs(300),
            prepared_idle: std::time::Duration::from_secs(3600),
            default_namespace: "default".into(),
        }
    }
}

/// The hot store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Memory (MiB) for the current rows of primary-key tables, which serve lookups;
    /// writes fill it and it evicts the least used rows beyond this. 0 turns it off and
    /// lookups read RocksDB alone.
    pub state_cache_mb: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            state_cache_mb: hotgate_store::DEFAULT_STATE_CACHE_BYTES >> 20,
        }
    }
}

impl StoreConfig {
    pub fn options(&self) -> hotgate_store::StoreOptions {
        hotgate_store::StoreOptions {
            state_cache_bytes: self.state_cache_mb.saturating_mul(1 << 20),
            ..hotgate_store::StoreOptions::default()
        }
    }
}

/// Compliance deletion requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeletionConfig {
    /// How long a request may take from `accepted` to `verified` before it is overdue
    /// (shown in its status and in `/metrics`).
    #[serde(with = "humantime_serde")]
    pub time_bound: std::time::Duration,
}

impl Default for DeletionConfig {
    fn default() -> Self {
        Self {
            time_bound: std::time::Duration::from_secs(15 * 60),
        }
    }
}

/// The tiering scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TieringConfig {
    /// Off: no cycles run on a schedule (`POST /v1/tables/{id}/tier` still works) and
    /// hot retention waits, since nothing gets tiered.
    pub scheduler: bool,
    /// How often the scheduler looks for due logs and applies hot retention.
    #[serde(with = "humantime_serde")]
    pub tick: std::time::Duration,
    /// How often each table is compacted, expired and purged (`0s`: only on request).
    #[serde(with = "humantime_serde")]
    pub maintenance_interval: std::time::Duration,
    /// Snapshots older than this are expired (the newest one always stays).
    #[serde(with = "humantime_serde")]
    pub snapshot_retention: std::time::Duration,
    /// Unreferenced files younger than this are not purged.
    #[serde(with = "humantime_serde")]
    pub purge_min_age: std::time::Duration,
}

impl TieringConfig {
    pub fn maintenance_options(&self) -> hotgate_tiering::MaintenanceOptions {
        hotgate_tiering::MaintenanceOptions {
            compact: true,
            snapshot_retention: self.snapshot_retention,
            retain_last: 1,
            purge_min_age: self.purge_min_age,
            ..hotgate_tiering::MaintenanceOptions::default()
        }
    }
}

impl Default for TieringConfig {
    fn default() -> Self {
        Self {
            scheduler: true,
            tick: std::time::Duration::from_secs(5),
            maintenance_interval: std::time::Duration::from_secs(3600),
            snapshot_retention: std::time::Duration::from_secs(3600),
            purge_min_age: std::time::Duration::from_secs(3600),
        }
    }
}

/// The audit log (`_system.audit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Off only for benchmarks: with `false` nothing is recorded and reads do not wait
    /// for an audit sync. The server warns at start.
    pub enabled: bool,
    /// A signed checkpoint after this many records...
    pub checkpoint_every: u64,
    /// ...or after this long with unsigned records, whichever comes first.
    #[serde(with = "humantime_serde")]
    pub checkpoint_interval: std::time::Duration,
    /// How long records stay in the hot tier (never before they are tiered).
    #[serde(with = "humantime_serde")]
    pub hot_retention: std::time::Duration,
    /// The Ed25519 key (64 hex digits) that signs checkpoints; created on first start.
    /// Default `<data_dir>/audit.ed25519.key`.
    pub key_file: Option<PathBuf>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            checkpoint_every: 1000,
            checkpoint_interval: std::time::Duration::from_secs(60),
            hot_retention: std::time::Duration::from_secs(30 * 86_400),
            key_file: None,
        }
    }
}

/// Where the grant mirror comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantsSourceKind {
    /// A JSON document in Polaris's shapes (`grants.file`).
    File,
    /// A live Polaris management API (`grants.polaris_url`).
    Polaris,
}

/// The grant mirror: source, catalog and refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrantsConfig {
    pub source: GrantsSourceKind,
    /// The grants document; default `<data_dir>/grants.json`, written with the bootstrap
    /// grants (root / admin) when absent.
    pub file: Option<PathBuf>,
    /// The catalog whose grants govern hotgate's tables.
    pub catalog: String,
    /// How often the source is read again (`0s`: only on `POST /v1/grants/sync`).
    #[serde(with = "humantime_serde")]
    pub refresh: std::time::Duration,
    /// With no successful sync for this long, every check fails closed (`0s`: never).
    #[serde(with = "humantime_serde")]
    pub max_staleness: std::time::Duration,
    /// Base URL of the Polaris server, e.g. `http://polaris:8181`.
    pub polaris_url: Option<String>,
    /// Bearer token for the Polaris management API.
    pub polaris_token: Option<String>,
    /// A file holding that token (instead of `polaris_token`).
    pub polaris_token_file: Option<PathBuf>,
}

impl Default for GrantsConfig {
    fn default() -> Self {
        Self {
            source: GrantsSourceKind::File,
            file: None,
            catalog: hotgate_policy::DEFAULT_CATALOG.into(),
            refresh: std::time::Duration::from_secs(30),
            max_staleness: std::time::Duration::from_secs(600),
            polaris_url: None,
            polaris_token: None,
            polaris_token_file: None,
        }
    }
}

/// How callers are authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Expected `iss` claim.
    pub issuer: String,
    /// Expected `aud` claim.
    pub audience: String,
    /// A JWKS file of an external issuer (RS256/ES256 keys). When set, tokens are checked
    /// against it instead of the embedded HS256 issuer.
    pub jwks_file: Option<PathBuf>,
    /// A JWKS URL of an external issuer, fetched at start (the server refuses to start
    /// without it) and again every `jwks_refresh`.
    pub jwks_url: Option<String>,
    /// How often the JWKS URL is fetched again, e.g. `5m`.
    #[serde(with = "humantime_serde")]
    pub jwks_refresh: std::time::Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./hotgate-data"),
            flight_addr: SocketAddr::from(([127, 0, 0, 1], 50051)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            auth: AuthConfig::default(),
            grants: GrantsConfig::default(),
            hash_key_file: None,
            audit: AuditConfig::default(),
            catalog: None,
            tiering: TieringConfig::default(),
            deletion: DeletionConfig::default(),
            store: StoreConfig::default(),
            sql: SqlConfig::default(),
            sources: Vec::new(),
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            issuer: "hotgate".into(),
            audience: "hotgate".into(),
            jwks_file: None,
            jwks_url: None,
            jwks_refresh: std::time::Duration::from_secs(300),
        }
    }
}

/// The configuration key of the variable `HOTGATE_<name>` (`name` lowercased by
/// figment): `auth_jwks_refresh` is `auth.jwks_refresh`, `data_dir` stays `data_dir`.
fn config_key(name: &str) -> String {
    SECTIONS
        .iter()
        .find_map(|section| {
            name.strip_prefix(section)
                .and_then(|rest| rest.strip_prefix('_'))
                .map(|rest| format!("{section}.{rest}"))
        })
        .unwrap_or_else(|| name.to_owned())
}

/// A configuration problem, naming the file, key or variable.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(String);

impl Config {
    /// Loads `file` (or the defaults without one), then applies the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(file, Env::prefixed("HOTGATE_"))
    }

    /// [`Config::load`] with the variables of `env` instead of the process's.
    fn load_from(file: Option<&Path>, env: Env) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            // A missing file would read as empty; a file that was named must exist.
            std::fs::metadata(path)
                .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
            figment = figment.merge(Toml::file_exact(path));
        }
        let env = env
            .ignore(&NON_CONFIG_ENV)
            // Keys keep the variable's case; the configuration's are lower case.
            .map(|key| config_key(&key.as_str().to_ascii_lowercase()).into());
        figment.merge(env).extract().map_err(|errors| {
            // Each problem names its key first (`flight_addr: invalid socket address
            // ...`), then where the value came from (the file or the variable).
            let problems: Vec<String> = errors
                .into_iter()
                .map(|e| match e.path.join(".") {
                    key if key.is_empty() => e.to_string(),
                    key => format!("{key}: {e}"),
                })
                .collect();
            ConfigError(problems.join("; "))
        })
    }

    /// The catalog configured, or the embedded SQLite one under the data dir.
    pub fn catalog_config(&self) -> hotgate_tiering::CatalogConfig {
        self.catalog
            .clone()
            .unwrap_or_else(|| hotgate_tiering::CatalogConfig::embedded(&self.data_dir))
    }

    /// The grants document of the file source.
    pub fn grants_file_path(&self) -> PathBuf {
        self.grants
            .file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("grants.json"))
    }

    /// The HMAC key of `hash` write rules and masks.
    pub fn hash_key_path(&self) -> PathBuf {
        self.hash_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("hash.key"))
    }

    /// The Ed25519 key that signs audit checkpoints.
    pub fn audit_key_path(&self) -> PathBuf {
        self.audit
            .key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("audit.ed25519.key"))
    }

    /// The embedded issuer's key file.
    pub fn issuer_key_path(&self) -> PathBuf {
        self.data_dir.join("issuer.hs256.key")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Loads `toml` (if any) and the variables `vars` as the only environment.
    /// A jail (a temp directory and a private environment, one test at a time) keeps
    /// the tests' variables from meeting each other's.
    // The jail's closure returns figment's own (large) error type.
    #[allow(clippy::result_large_err)]
    fn load(toml: Option<&str>, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut loaded = None;
        figment::Jail::expect_with(|jail| {
            jail.clear_env();
            for (k, v) in vars {
                jail.set_env(k, v);
            }
            if let Some(text) = toml {
                jail.create_file("hotgate.toml", text)?;
            }
            let file = toml.map(|_| Path::new("hotgate.toml"));
            loaded = Some(Config::load_from(file, Env::prefixed("HOTGATE_")));
            Ok(())
        });
        loaded.expect("the jail ran")
    }

    fn load_ok(toml: Option<&str>, vars: &[(&str, &str)]) -> Config {
        load(toml, vars).unwrap()
    }

    #[test]
    fn defaults_then_file_then_environment() {
        let c = load_ok(
            Some("data_dir = \"/d\"\nflight_addr = \"0.0.0.0:1\"\n[auth]\nissuer = \"idp\"\n"),
            &[
                ("HOTGATE_AUTH_ISSUER", "from-env"),
                ("HOTGATE_LOG", "debug"),
                ("PATH", "/bin"),
            ],
        );
        assert_eq!(c.data_dir, PathBuf::from("/d"));
        assert_eq!(c.flight_addr.port(), 1);
        assert_eq!(
            c.auth.issuer, "from-env",
            "the environment overrides the file"
        );
        assert_eq!(
            c.auth.audience, "hotgate",
            "defaults fill what neither sets"
        );
        assert_eq!(c.http_addr, Config::default().http_addr);
    }

    #[test]
    fn unknown_keys_and_variables_and_bad_values_are_errors_that_name_them() {
        let err = load(Some("data_dri = \"/d\""), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("data_dri"), "{err}");
        let err = load(None, &[("HOTGATE_HTTP_ADRR", "x")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("http_adrr"), "{err}");
        let err = load(None, &[("HOTGATE_AUTH_ISSUR", "x")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("issur"), "{err}");
        let err = load(None, &[("HOTGATE_FLIGHT_ADDR", "nope")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("flight_addr"), "{err}");
        let err = load(None, &[("HOTGATE_TIERING_TICK", "soon")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("tick"), "{err}");
        let missing = Config::load_from(
            Some(Path::new("/no/such/hotgate.toml")),
            Env::raw().only(&[]),
        );
        assert!(missing.unwrap_err().to_string().contains("cannot read"));
    }

    /// A configuration variable, a value for it, and the effect it must have.
    type Variable = (&'static str, &'static str, Box<dyn Fn(&Config) -> bool>);

    fn var(name: &'static str, value: &'static str, effect: fn(&Config) -> bool) -> Variable {
        (name, value, Box::new(effect))
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    /// Every configuration variable, a value for it, and the effect it must have.
    fn every_variable() -> Vec<Variable> {
        vec![
            var("HOTGATE_DATA_DIR", "/srv/hg", |c| {
                c.data_dir == Path::new("/srv/hg")
            }),
            var("HOTGATE_FLIGHT_ADDR", "0.0.0.0:7001", |c| {
                c.flight_addr.port() == 7001
            }),
            var("HOTGATE_HTTP_ADDR", "0.0.0.0:7002", |c| {
                c.http_addr.port() == 7002
            }),
            var("HOTGATE_HASH_KEY_FILE", "/k/hash", |c| {
                c.hash_key_file.as_deref() == Some(Path::new("/k/hash"))
            }),
            var("HOTGATE_AUTH_ISSUER", "idp", |c| c.auth.issuer == "idp"),
            var("HOTGATE_AUTH_AUDIENCE", "aud", |c| c.auth.audience == "aud"),
            var("HOTGATE_AUTH_JWKS_FILE", "/k/jwks.json", |c| {
                c.auth.jwks_file.as_deref() == Some(Path::new("/k/jwks.json"))
            }),
            var("HOTGATE_AUTH_JWKS_URL", "http://idp/jwks", |c| {
                c.auth.jwks_url.as_deref() == Some("http://idp/jwks")
            }),
            var("HOTGATE_AUTH_JWKS_REFRESH", "7m", |c| {
                c.auth.jwks_refresh == s(420)
            }),
            var("HOTGATE_GRANTS_SOURCE", "polaris", |c| {
                c.grants.source == GrantsSourceKind::Polaris
            }),
            var("HOTGATE_GRANTS_FILE", "/g.json", |c| {
                c.grants.file.as_deref() == Some(Path::new("/g.json"))
            }),
            var("HOTGATE_GRANTS_CATALOG", "prod", |c| {
                c.grants.catalog == "prod"
            }),
            var("HOTGATE_GRANTS_REFRESH", "9s", |c| c.grants.refresh == s(9)),
            var("HOTGATE_GRANTS_MAX_STALENESS", "11s", |c| {
                c.grants.max_staleness == s(11)
            }),
            var("HOTGATE_GRANTS_POLARIS_URL", "http://p:8181", |c| {
                c.grants.polaris_url.as_deref() == Some("http://p:8181")
            }),
            var("HOTGATE_GRANTS_POLARIS_TOKEN", "tok", |c| {
                c.grants.polaris_token.as_deref() == Some("tok")
            }),
            var("HOTGATE_GRANTS_POLARIS_TOKEN_FILE", "/t", |c| {
                c.grants.polaris_token_file.as_deref() == Some(Path::new("/t"))
            }),
            var("HOTGATE_AUDIT_ENABLED", "false", |c| !c.audit.enabled),
            var("HOTGATE_AUDIT_CHECKPOINT_EVERY", "77", |c| {
                c.audit.checkpoint_every == 77
            }),
            var("HOTGATE_AUDIT_CHECKPOINT_INTERVAL", "13s", |c| {
                c.audit.checkpoint_interval == s(13)
            }),
            var("HOTGATE_AUDIT_HOT_RETENTION", "2days", |c| {
                c.audit.hot_retention == s(2 * 86_400)
            }),
            var("HOTGATE_AUDIT_KEY_FILE", "/k/a", |c| {
                c.audit.key_file.as_deref() == Some(Path::new("/k/a"))
            }),
            var("HOTGATE_TIERING_SCHEDULER", "false", |c| {
                !c.tiering.scheduler
            }),
            var("HOTGATE_TIERING_TICK", "3s", |c| c.tiering.tick == s(3)),
            var("HOTGATE_TIERING_MAINTENANCE_INTERVAL", "17s", |c| {
                c.tiering.maintenance_interval == s(17)
            }),
            var("HOTGATE_TIERING_SNAPSHOT_RETENTION", "19s", |c| {
                c.tiering.snapshot_retention == s(19)
            }),
            var("HOTGATE_TIERING_PURGE_MIN_AGE", "23s", |c| {
                c.tiering.purge_min_age == s(23)
            }),
            var("HOTGATE_DELETION_TIME_BOUND", "29s", |c| {
                c.deletion.time_bound == s(29)
            }),
            var("HOTGATE_STORE_STATE_CACHE_MB", "31", |c| {
                c.store.state_cache_mb == 31
            }),
            var("HOTGATE_SQL_MEMORY_LIMIT_MB", "64", |c| {
                c.sql.memory_limit_mb == 64
            }),
            var("HOTGATE_SQL_STATEMENT_TIMEOUT", "90s", |c| {
                c.sql.statement_timeout == std::time::Duration::from_secs(90)
            }),
            var("HOTGATE_SQL_PREPARED_IDLE", "10m", |c| {
                c.sql.prepared_idle == std::time::Duration::from_secs(600)
            }),
            var("HOTGATE_SQL_DEFAULT_NAMESPACE", "sales", |c| {
                c.sql.default_namespace == "sales"
            }),
        ]
    }

    #[test]
    fn the_catalog_comes_from_the_file_or_the_environment() {
        use hotgate_tiering::CatalogConfig;
        let c = load_ok(
            None,
            &[
                ("HOTGATE_CATALOG_TYPE", "rest"),
                ("HOTGATE_CATALOG_URI", "http://polaris:8181/api/catalog"),
                ("HOTGATE_CATALOG_WAREHOUSE", "lake"),
                ("HOTGATE_CATALOG_CREDENTIAL", "client:s3cret"),
                ("HOTGATE_CATALOG_SCOPE", "PRINCIPAL_ROLE:ALL"),
                ("HOTGATE_CATALOG_VENDED_CREDENTIALS", "true"),
            ],
        );
        let Some(CatalogConfig::Rest(rest)) = &c.catalog else {
            panic!("{:?}", c.catalog)
        };
        assert_eq!(rest.uri, "http://polaris:8181/api/catalog");
        assert_eq!(rest.warehouse.as_deref(), Some("lake"));
        assert_eq!(
            rest.credential.as_ref().map(|s| s.expose()),
            Some("client:s3cret")
        );
        assert_eq!(rest.scope, "PRINCIPAL_ROLE:ALL");
        assert!(rest.vended_credentials);
        assert_eq!(c.catalog_config().kind(), "rest");
        // The secret never shows in the config's debug output.
        assert!(!format!("{c:?}").contains("s3cret"));

        let c = load_ok(
            Some(
                "[catalog]\ntype = \"sql\"\nuri = \"postgres://hotgate@db:5432/lake\"\nwarehouse = \"s3://lake/wh\"\n",
            ),
            &[],
        );
        assert_eq!(c.catalog_config().kind(), "postgres");
        let c = load_ok(
            Some("[catalog]\ntype = \"rest\"\nuri = \"http://c\"\ntoken_file = \"/run/token\"\n"),
            &[],
        );
        let Some(CatalogConfig::Rest(rest)) = &c.catalog else {
            panic!("{:?}", c.catalog)
        };
        assert_eq!(rest.token_file.as_deref(), Some(Path::new("/run/token")));
        // A misspelt key is an error, not a silent default.
        let err = load(
            Some("[catalog]\ntype = \"rest\"\nuri = \"http://c\"\ncredentials = \"a:b\"\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("credentials"), "{err}");
        assert!(load_ok(None, &[]).catalog_config().kind() == "sqlite");
    }

    #[test]
    fn every_variable_is_read_and_has_its_effect() {
        for (name, value, effect) in every_variable() {
            let c = load(None, &[(name, value)]).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
            assert!(effect(&c), "{name}={value} had no effect");
            assert!(
                !effect(&Config::default()),
                "{name}: the check passes on the defaults"
            );
        }
    }

    #[test]
    fn every_variable_the_readme_names_is_read() {
        let readme = include_str!("../../README.md");
        let known: Vec<&str> = every_variable().iter().map(|(n, _, _)| *n).collect();
        let mut named = std::collections::BTreeSet::new();
        for (i, _) in readme.match_indices("HOTGATE_") {
            let name: String = readme[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            named.insert(name);
        }
        assert!(named.len() > 5, "{named:?}");
        for name in named {
            if NON_CONFIG_ENV
                .iter()
                .any(|n| name == format!("HOTGATE_{n}"))
            {
                continue;
            }
            // `HOTGATE_AUTH_*` names a family: at least one variable must be in it.
            assert!(
                known
                    .iter()
                    .any(|k| *k == name || (name.ends_with('_') && k.starts_with(&name))),
                "README names {name}, which no test sets"
            );
        }
        // And every key the README lists for the file has its variable.
        for key in [
            "jwks_refresh",
            "polaris_token_file",
            "state_cache_mb",
            "max_staleness",
        ] {
            assert!(
                known.iter().any(|k| k.to_lowercase().ends_with(key)),
                "{key}"
            );
        }
    }
}
