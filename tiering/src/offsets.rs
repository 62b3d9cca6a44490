//! `hotgate.offsets`: which hot rows a snapshot holds.
//!
//! Every snapshot hotgate commits carries, in its summary, the next untiered offset of
//! each hot log it has ever tiered: `{"day=2026-11-30/bucket=3": 1742, ...}` (log
//! directories as the hot store names them). A union read of snapshot S reads the hot
//! tier from S's offsets; tiering resumes from the latest snapshot's offsets after a
//! crash, so no row is written twice or skipped.

use std::collections::{BTreeMap, HashMap};

use hotgate_store::LogId;
use iceberg::spec::{SnapshotRef, TableMetadata};

use crate::error::{Result, TieringError};

/// The snapshot summary key.
pub const OFFSETS_PROP: &str = "hotgate.offsets";

/// Per hot log, the first offset not yet in the cold tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TieredOffsets(pub BTreeMap<LogId, u64>);

impl TieredOffsets {
    pub fn get(&self, log: &LogId) -> u64 {
        self.0.get(log).copied().unwrap_or(0)
    }

    /// Keyed by log directory (`day=2026-11-30/bucket=3`), as in the summary and the
    /// tiering status.
    pub fn by_log_name(&self) -> BTreeMap<String, u64> {
        self.0.iter().map(|(k, v)| (k.dir_name(), *v)).collect()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.by_log_name()).unwrap_or_default()
    }

    pub fn parse(json: &str) -> Result<Self> {
        let map: BTreeMap<String, u64> = serde_json::from_str(json)
            .map_err(|e| TieringError::Internal(format!("bad {OFFSETS_PROP}: {e}")))?;
        let mut out = BTreeMap::new();
        for (k, v) in map {
            out.insert(parse_log_name(&k, OFFSETS_PROP)?, v);
        }
        Ok(Self(out))
    }

    /// As a map, for the hot store's scan requests and retention.
    pub fn to_map(&self) -> HashMap<LogId, u64> {
        self.0.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The offsets of `snapshot`: its own, or those of its nearest ancestor that has
    /// them (a snapshot another engine committed carries none). Empty when none has.
    ///
    /// An error when the walk reaches an expired ancestor first: the offsets are then
    /// unknown, and guessing "nothing tiered" would tier every row a second time.
    pub fn of_snapshot(metadata: &TableMetadata, snapshot: Option<&SnapshotRef>) -> Result<Self> {
        match bookkeeping_snapshot(metadata, snapshot)? {
            Some(s) => Self::parse(&s.summary().additional_properties[OFFSETS_PROP]),
            None => Ok(Self::default()),
        }
    }

    /// The offsets of the table's current snapshot.
    pub fn current(metadata: &TableMetadata) -> Result<Self> {
        Self::of_snapshot(metadata, metadata.current_snapshot())
    }
}

/// The snapshot whose summary holds hotgate's bookkeeping for `snapshot`: itself or its
/// nearest ancestor with `hotgate.offsets` (hotgate writes its properties together).
/// `None` when no ancestor has them; an error when the walk reaches an expired one.
pub(crate) fn bookkeeping_snapshot(
    metadata: &TableMetadata,
    snapshot: Option<&SnapshotRef>,
) -> Result<Option<SnapshotRef>> {
    let mut current = snapshot.cloned();
    while let Some(s) = current {
        if s.summary().additional_properties.contains_key(OFFSETS_PROP) {
            return Ok(Some(s));
        }
        current = match s.parent_snapshot_id() {
            None => None,
            Some(id) => Some(metadata.snapshot_by_id(id).cloned().ok_or_else(|| {
                TieringError::Invalid(format!(
                    "the tiered offsets are unknown: snapshot {} carries no {OFFSETS_PROP} and its parent {id} was expired; another writer's commits replaced hotgate's history",
                    s.snapshot_id()
                ))
            })?),
        };
    }
    Ok(None)
}

/// hotgate's bookkeeping properties of the current snapshot (`hotgate.offsets` and the
/// source positions), which a commit that moves no hot rows (maintenance, retention,
/// a deletion's rewrite) carries into its own snapshot unchanged.
pub(crate) fn carried_properties(metadata: &TableMetadata) -> Result<Vec<(String, String)>> {
    Ok(bookkeeping_snapshot(metadata, metadata.current_snapshot())?
        .map(|s| {
            s.summary()
                .additional_properties
                .iter()
                .filter(|(k, _)| k.starts_with("hotgate."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default())
}

/// A log directory name (`day=2026-11-30/bucket=3`) in a bookkeeping property.
pub(crate) fn parse_log_name(name: &str, prop: &str) -> Result<LogId> {
    name.split_once('/')
        .and_then(|(day, bucket)| LogId::parse_dirs(day, bucket))
        .ok_or_else(|| TieringError::Internal(format!("bad log {name:?} in {prop}")))
}
