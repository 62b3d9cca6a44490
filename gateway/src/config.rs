//! Gateway configuration: TOML, then `HOTGATE_*` environment overrides, then command-line
//! flags. Unknown keys and unknown `HOTGATE_*` variables are errors, so a typo never
//! silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Environment variables read by hotgate that are not configuration keys.
const NON_CONFIG_ENV: [&str; 2] = ["HOTGATE_LOG", "HOTGATE_TOKEN"];

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
    #[serde(with = "duration_text")]
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
    #[serde(with = "duration_text")]
    pub tick: std::time::Duration,
    /// How often each table is compacted, expired and purged (`0s`: only on request).
    #[serde(with = "duration_text")]
    pub maintenance_interval: std::time::Duration,
    /// Snapshots older than this are expired (the newest one always stays).
    #[serde(with = "duration_text")]
    pub snapshot_retention: std::time::Duration,
    /// Unreferenced files younger than this are not purged.
    #[serde(with = "duration_text")]
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
    #[serde(with = "duration_text")]
    pub checkpoint_interval: std::time::Duration,
    /// How long records stay in the hot tier (never before they are tiered).
    #[serde(with = "duration_text")]
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
    #[serde(with = "duration_text")]
    pub refresh: std::time::Duration,
    /// With no successful sync for this long, every check fails closed (`0s`: never).
    #[serde(with = "duration_text")]
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
    #[serde(with = "duration_text")]
    pub jwks_refresh: std::time::Duration,
}

mod duration_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
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

/// A configuration problem, naming the file, key or variable.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(String);

impl Config {
    /// Loads `file` (or the defaults without one), then applies the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config = match file {
            None => Config::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
                toml::from_str(&text)
                    .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?
            }
        };
        config.apply_env(std::env::vars())?;
        Ok(config)
    }

    /// Applies `HOTGATE_<KEY>` overrides; nested keys join with `_`
    /// (`HOTGATE_AUTH_ISSUER`).
    pub fn apply_env(
        &mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), ConfigError> {
        for (key, value) in vars {
            let Some(name) = key.strip_prefix("HOTGATE_") else {
                continue;
            };
            if NON_CONFIG_ENV.contains(&key.as_str()) {
                continue;
            }
            let duration = |v: &str| {
                humantime::parse_duration(v)
                    .map_err(|e| ConfigError(format!("{key}={v:?} is not a duration ({e})")))
            };
            let addr = |v: &str| {
                v.parse::<SocketAddr>()
                    .map_err(|e| ConfigError(format!("{key}={v:?} is not HOST:PORT ({e})")))
            };
            match name {
                "DATA_DIR" => self.data_dir = PathBuf::from(&value),
                "FLIGHT_ADDR" => self.flight_addr = addr(&value)?,
                "HTTP_ADDR" => self.http_addr = addr(&value)?,
                "AUTH_ISSUER" => self.auth.issuer = value,
                "AUTH_AUDIENCE" => self.auth.audience = value,
                "AUTH_JWKS_FILE" => self.auth.jwks_file = Some(PathBuf::from(value)),
                "AUTH_JWKS_URL" => self.auth.jwks_url = Some(value),
                "GRANTS_SOURCE" => {
                    self.grants.source = match value.as_str() {
                        "file" => GrantsSourceKind::File,
                        "polaris" => GrantsSourceKind::Polaris,
                        other => {
                            return Err(ConfigError(format!(
                                "{key}={other:?}: use file or polaris"
                            )));
                        }
                    }
                }
                "GRANTS_FILE" => self.grants.file = Some(PathBuf::from(value)),
                "GRANTS_CATALOG" => self.grants.catalog = value,
                "GRANTS_REFRESH" => self.grants.refresh = duration(&value)?,
                "GRANTS_MAX_STALENESS" => self.grants.max_staleness = duration(&value)?,
                "GRANTS_POLARIS_URL" => self.grants.polaris_url = Some(value),
                "GRANTS_POLARIS_TOKEN" => self.grants.polaris_token = Some(value),
                "HASH_KEY_FILE" => self.hash_key_file = Some(PathBuf::from(value)),
                "AUDIT_ENABLED" => {
                    self.audit.enabled = value
                        .parse()
                        .map_err(|_| ConfigError(format!("{key}={value:?}: use true or false")))?
                }
                "AUDIT_CHECKPOINT_EVERY" => {
                    self.audit.checkpoint_every = value
                        .parse()
                        .map_err(|_| ConfigError(format!("{key}={value:?} is not a count")))?
                }
                "AUDIT_CHECKPOINT_INTERVAL" => self.audit.checkpoint_interval = duration(&value)?,
                "AUDIT_KEY_FILE" => self.audit.key_file = Some(PathBuf::from(value)),
                "TIERING_SCHEDULER" => {
                    self.tiering.scheduler = value
                        .parse()
                        .map_err(|_| ConfigError(format!("{key}={value:?}: use true or false")))?
                }
                "TIERING_TICK" => self.tiering.tick = duration(&value)?,
                "TIERING_MAINTENANCE_INTERVAL" => {
                    self.tiering.maintenance_interval = duration(&value)?
                }
                "DELETION_TIME_BOUND" => self.deletion.time_bound = duration(&value)?,
                "STORE_STATE_CACHE_MB" => {
                    self.store.state_cache_mb = value.parse().map_err(|_| {
                        ConfigError(format!("{key}={value:?} is not a whole number of MiB"))
                    })?
                }
                _ => {
                    return Err(ConfigError(format!(
                        "unknown environment variable {key}; known: HOTGATE_DATA_DIR, \
                         HOTGATE_FLIGHT_ADDR, HOTGATE_HTTP_ADDR, HOTGATE_AUTH_ISSUER, \
                         HOTGATE_AUTH_AUDIENCE, HOTGATE_AUTH_JWKS_FILE, HOTGATE_AUTH_JWKS_URL, \
                         HOTGATE_GRANTS_SOURCE, HOTGATE_GRANTS_FILE, HOTGATE_GRANTS_CATALOG, \
                         HOTGATE_GRANTS_REFRESH, HOTGATE_GRANTS_MAX_STALENESS, HOTGATE_GRANTS_POLARIS_URL, \
                         HOTGATE_GRANTS_POLARIS_TOKEN, HOTGATE_HASH_KEY_FILE, HOTGATE_AUDIT_ENABLED, \
                         HOTGATE_AUDIT_CHECKPOINT_EVERY, HOTGATE_AUDIT_CHECKPOINT_INTERVAL, \
                         HOTGATE_AUDIT_KEY_FILE, HOTGATE_TIERING_SCHEDULER, HOTGATE_TIERING_TICK, \
                         HOTGATE_TIERING_MAINTENANCE_INTERVAL, HOTGATE_DELETION_TIME_BOUND, \
                         HOTGATE_STORE_STATE_CACHE_MB, HOTGATE_LOG, HOTGATE_TOKEN"
                    )));
                }
            }
        }
        Ok(())
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
    use super::*;

    #[test]
    fn toml_env_and_unknown_keys() {
        let c: Config = toml::from_str(
            "data_dir = \"/d\"\nflight_addr = \"0.0.0.0:1\"\n[auth]\nissuer = \"idp\"\n",
        )
        .unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/d"));
        assert_eq!(c.auth.issuer, "idp");
        assert_eq!(c.auth.audience, "hotgate");
        assert_eq!(c.http_addr, Config::default().http_addr);
        let err = toml::from_str::<Config>("data_dri = \"/d\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `data_dri`"), "{err}");

        let mut c = Config::default();
        c.apply_env([
            ("HOTGATE_HTTP_ADDR".to_owned(), "127.0.0.1:9".to_owned()),
            ("HOTGATE_LOG".to_owned(), "debug".to_owned()),
            ("PATH".to_owned(), "/bin".to_owned()),
        ])
        .unwrap();
        assert_eq!(c.http_addr.port(), 9);
        let err = c
            .apply_env([("HOTGATE_HTTP_ADRR".to_owned(), "x".to_owned())])
            .unwrap_err();
        assert!(err.to_string().contains("HOTGATE_HTTP_ADRR"));
        let err = c
            .apply_env([("HOTGATE_FLIGHT_ADDR".to_owned(), "nope".to_owned())])
            .unwrap_err();
        assert!(err.to_string().contains("not HOST:PORT"));
    }
}
