//! What the API changed about the sources, kept across restarts in
//! `<data_dir>/sources/managed.json`: the sources created with `POST /v1/sources`, and
//! which sources (of the config file or the API) are paused.
//!
//! The file is rewritten whole and durably (temporary file, fsync, rename) before a
//! management call changes anything in memory, so a call that fails changes nothing
//! and a call that returned survives a kill -9.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config::SourceConfig;
use crate::error::{GatewayError, Result};

const FILE: &str = "managed.json";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Managed {
    format: u32,
    /// Created through the API, in creation order.
    pub sources: Vec<SourceConfig>,
    /// Paused sources, by name.
    pub paused: BTreeSet<String>,
}

impl Managed {
    fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// Reads the file under `dir` (the sources directory); none yet is an empty one.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = Self::path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let managed: Managed = serde_json::from_slice(&bytes).map_err(|e| {
                    GatewayError::Internal(format!(
                        "the managed sources file ({}) is damaged: {e}; hotgate will not \
                         guess which sources should run",
                        path.display()
                    ))
                })?;
                if managed.format != FORMAT {
                    return Err(GatewayError::Internal(format!(
                        "the managed sources file ({}) has format {}, this hotgate reads {FORMAT}",
                        path.display(),
                        managed.format
                    )));
                }
                Ok(managed)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self {
                format: FORMAT,
                ..Self::default()
            }),
            Err(e) => Err(GatewayError::Internal(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// Writes the file durably under `dir`.
    pub fn store(&self, dir: &Path) -> Result<()> {
        let stored = Self {
            format: FORMAT,
            ..self.clone()
        };
        let bytes = serde_json::to_vec_pretty(&stored).expect("source settings serialize");
        hotgate_store::fs::create_dir_durable(dir)?;
        hotgate_store::fs::write_file_durable(&Self::path(dir), &bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str) -> SourceConfig {
        serde_json::from_value(serde_json::json!({
            "name": name, "brokers": ["127.0.0.1:9092"], "topic": "t", "table": "ns.t",
            "start": "2026-01-02T03:04:05Z", "fetch_max_wait": "250ms",
        }))
        .unwrap()
    }

    #[test]
    fn the_file_round_trips_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Managed::load(dir.path()).unwrap().sources, vec![]);
        let mut m = Managed::load(dir.path()).unwrap();
        m.sources.push(source("a"));
        m.paused.insert("cfg".into());
        m.store(dir.path()).unwrap();
        let again = Managed::load(dir.path()).unwrap();
        assert_eq!(again.sources, vec![source("a")]);
        assert_eq!(again.paused, ["cfg".to_owned()].into());

        std::fs::write(dir.path().join(FILE), b"{\"format\": 1, \"sources\": [").unwrap();
        let err = Managed::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
        std::fs::write(
            dir.path().join(FILE),
            b"{\"format\": 9, \"sources\": [], \"paused\": []}",
        )
        .unwrap();
        let err = Managed::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("format 9"), "{err}");
    }
}
