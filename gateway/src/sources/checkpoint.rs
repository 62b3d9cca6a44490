//! Where each partition of a source goes on: the next offset to fetch, kept in a small
//! file per source (`<data_dir>/sources/<name>.json`) and written durably about once a
//! second and on stop.
//!
//! The file is a lower bound, not the truth: rows and their source offsets are durable
//! together in the table's logs (`hotgate_store::source_marks`), so a resume from an
//! older position writes nothing twice. It only bounds how much a restart fetches
//! again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Stored {
    topic: String,
    /// Partition → next offset to fetch.
    next: BTreeMap<i32, i64>,
}

#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    state: Mutex<(Stored, bool)>,
}

impl Checkpoint {
    /// Reads the positions of `source` under `dir`, if it has any. Positions of another
    /// topic under the same source name are refused: they mean nothing for this one.
    pub fn open(dir: &Path, source: &str, topic: &str) -> Result<Self> {
        let path = dir.join(format!("{source}.json"));
        let stored = match std::fs::read(&path) {
            Ok(bytes) => {
                let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| {
                    GatewayError::Internal(format!(
                        "the positions of source {source} ({}) are damaged: {e}",
                        path.display()
                    ))
                })?;
                if stored.topic != topic {
                    return Err(GatewayError::InvalidArgument(format!(
                        "sources.{source}: it consumed topic {:?} before, not {topic:?}; a \
                         source keeps its topic (give the new topic a new source name)",
                        stored.topic
                    )));
                }
                stored
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Stored {
                topic: topic.to_owned(),
                next: BTreeMap::new(),
            },
            Err(e) => {
                return Err(GatewayError::Internal(format!(
                    "cannot read {}: {e}",
                    path.display()
                )));
            }
        };
        Ok(Self {
            path,
            state: Mutex::new((stored, false)),
        })
    }

    /// The next offset of `partition`, if hotgate has consumed or placed it.
    pub fn next(&self, partition: i32) -> Option<i64> {
        self.state.lock().0.next.get(&partition).copied()
    }

    /// Every partition's next offset.
    pub fn all(&self) -> BTreeMap<i32, i64> {
        self.state.lock().0.next.clone()
    }

    /// Moves `partition` on to `next` (in memory; [`Checkpoint::flush`] writes it).
    pub fn advance(&self, partition: i32, next: i64) {
        let mut state = self.state.lock();
        let slot = state.0.next.entry(partition).or_insert(next);
        if *slot != next {
            *slot = next;
        }
        state.1 = true;
    }

    /// Moves a partition's position to `next` unless it is at or past it already.
    pub fn raise(&self, partition: i32, next: i64) {
        let mut state = self.state.lock();
        let slot = state.0.next.entry(partition).or_insert(next);
        if *slot < next {
            *slot = next;
        }
        state.1 = true;
    }

    /// Writes the positions if they changed since the last write.
    pub fn flush(&self) -> Result<()> {
        let stored = {
            let mut state = self.state.lock();
            if !state.1 {
                return Ok(());
            }
            state.1 = false;
            state.0.clone()
        };
        let bytes = serde_json::to_vec_pretty(&stored).expect("positions serialize");
        if let Some(dir) = self.path.parent() {
            hotgate_store::fs::create_dir_durable(dir)?;
        }
        hotgate_store::fs::write_file_durable(&self.path, &bytes).inspect_err(|_| {
            self.state.lock().1 = true;
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_survive_a_reopen_and_keep_their_topic() {
        let dir = tempfile::tempdir().unwrap();
        let c = Checkpoint::open(dir.path(), "orders", "t1").unwrap();
        assert_eq!(c.next(0), None);
        c.advance(0, 10);
        c.advance(2, 7);
        c.flush().unwrap();
        c.advance(0, 12);
        let again = Checkpoint::open(dir.path(), "orders", "t1").unwrap();
        assert_eq!(
            again.all(),
            [(0, 10), (2, 7)].into(),
            "only what was flushed"
        );
        let err = Checkpoint::open(dir.path(), "orders", "t2").unwrap_err();
        assert!(err.to_string().contains("\"t1\""), "{err}");
        std::fs::write(dir.path().join("orders.json"), b"{").unwrap();
        assert!(Checkpoint::open(dir.path(), "orders", "t1").is_err());
    }
}
