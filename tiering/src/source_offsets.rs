//! `hotgate.source_marks` and `hotgate.source_offsets`: which records of outside
//! sources (Kafka topics) a snapshot holds, so that a lost hot tier is rebuilt from the
//! cold tier plus the topic, with no record lost or written twice.
//!
//! - `hotgate.source_marks`, per log: the source marks of the log's tiered rows (per
//!   source and partition, the highest source offset among them). A rebuilt hot tier
//!   skips a replayed record whose offset is at or below the mark of the log it routes
//!   to ([`hotgate_store::LogFloor`]).
//! - `hotgate.source_offsets`, per source and partition: an offset at or below which
//!   every record is in the cold tier or was dropped on purpose (a bad record, an
//!   erased subject). A rebuilt source goes on after it.
//!
//! Both are needed because the records of one partition spread over logs (bucket and
//! day), each tiered on its own cadence: no single log's mark is a safe place to go on
//! from. When a cycle commits, `source_offsets` of partition p of source s becomes the
//! higher of its old value and the lowest of:
//! - the source's own position, read before the cycle reads the logs' ends, minus one:
//!   every record below that position was durable in some log (or dropped) by then;
//! - the cold mark of every log that still holds untiered rows of p: its rows of p at
//!   or below that mark are cold, those above are not.
//!
//! A log with untiered rows of p but no cold mark for p leaves the value where it was:
//! the lowest of those rows is not known. The old value stays valid because the cold
//! tier only grows (a deletion removes rows on purpose, and ingest drops them again).

use std::collections::BTreeMap;

use hotgate_store::{LogId, SourceMarks, TableName};
use iceberg::spec::TableMetadata;

use crate::commit::CommitRequest;
use crate::error::{Result, TieringError};
use crate::offsets::{bookkeeping_snapshot, parse_log_name};

/// The snapshot summary key of the per-log source marks.
pub const SOURCE_MARKS_PROP: &str = "hotgate.source_marks";
/// The snapshot summary key of the per-partition complete offsets.
pub const SOURCE_OFFSETS_PROP: &str = "hotgate.source_offsets";

/// Per source, per partition, an offset.
pub type SourcePartitions = BTreeMap<String, BTreeMap<i32, i64>>;

/// Where each source writing a table has got to: per source and partition, the offset
/// below which every record is durable in the table or was dropped. The gateway's
/// sources give it; a cycle reads it before it reads the logs' ends.
pub trait SourceProgress: Send + Sync + std::fmt::Debug {
    fn consumed(&self, table: &TableName) -> SourcePartitions;
}

/// What a snapshot holds of the records of outside sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColdSources {
    /// Per log, the source marks of its tiered rows.
    pub marks: BTreeMap<LogId, SourceMarks>,
    /// Per source and partition, the offset at or below which every record is cold.
    pub complete: SourcePartitions,
}

impl ColdSources {
    /// Those of the table's current snapshot (or its nearest ancestor hotgate wrote).
    pub fn current(metadata: &TableMetadata) -> Result<Self> {
        let Some(snapshot) = bookkeeping_snapshot(metadata, metadata.current_snapshot())? else {
            return Ok(Self::default());
        };
        let props = &snapshot.summary().additional_properties;
        let mut out = Self::default();
        if let Some(json) = props.get(SOURCE_MARKS_PROP) {
            let by_name: BTreeMap<String, SourceMarks> = serde_json::from_str(json)
                .map_err(|e| TieringError::Internal(format!("bad {SOURCE_MARKS_PROP}: {e}")))?;
            for (name, marks) in by_name {
                out.marks
                    .insert(parse_log_name(&name, SOURCE_MARKS_PROP)?, marks);
            }
        }
        if let Some(json) = props.get(SOURCE_OFFSETS_PROP) {
            out.complete = serde_json::from_str(json)
                .map_err(|e| TieringError::Internal(format!("bad {SOURCE_OFFSETS_PROP}: {e}")))?;
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.marks.is_empty() && self.complete.is_empty()
    }

    /// After a cycle: `tiered` holds each log the cycle tiered, with the source marks
    /// of its rows below the new tiered offset (`None`: no segment held has marks);
    /// `hot` every hot log's current marks, read after the cycle read the logs' ends;
    /// `consumed` each source's position, read before that (every record below it was
    /// durable or dropped).
    pub fn advance(
        &self,
        tiered: impl IntoIterator<Item = (LogId, Option<SourceMarks>)>,
        hot: &[(LogId, SourceMarks)],
        consumed: &SourcePartitions,
    ) -> Self {
        let mut marks = self.marks.clone();
        for (log, below) in tiered {
            if let Some(below) = below {
                // Marks only rise; a frame's marks are the log's after it.
                marks.entry(log).or_default().union(&below);
            }
        }
        let mut complete = self.complete.clone();
        for (source, partitions) in consumed {
            for (partition, next) in partitions {
                let Some(bound) = complete_up_to(&marks, hot, source, *partition, *next) else {
                    continue;
                };
                let slot = complete
                    .entry(source.clone())
                    .or_default()
                    .entry(*partition)
                    .or_insert(bound);
                *slot = (*slot).max(bound);
            }
        }
        Self { marks, complete }
    }

    /// Adds both properties to a cycle's commit.
    pub(crate) fn add_to(&self, request: CommitRequest) -> CommitRequest {
        if self.is_empty() {
            return request;
        }
        let by_name: BTreeMap<String, &SourceMarks> =
            self.marks.iter().map(|(k, v)| (k.dir_name(), v)).collect();
        request
            .with_property(
                SOURCE_MARKS_PROP,
                serde_json::to_string(&by_name).unwrap_or_default(),
            )
            .with_property(
                SOURCE_OFFSETS_PROP,
                serde_json::to_string(&self.complete).unwrap_or_default(),
            )
    }
}

/// The offset of `partition` at or below which every record is cold, as the module doc
/// derives it; `None` when nothing new is known.
fn complete_up_to(
    cold: &BTreeMap<LogId, SourceMarks>,
    hot: &[(LogId, SourceMarks)],
    source: &str,
    partition: i32,
    consumed_next: i64,
) -> Option<i64> {
    let mut bound = consumed_next - 1;
    for (log, marks) in hot {
        let Some(hot_mark) = marks.get(source, partition) else {
            continue;
        };
        match cold.get(log).and_then(|m| m.get(source, partition)) {
            Some(cold_mark) if cold_mark >= hot_mark => {}
            Some(cold_mark) => bound = bound.min(cold_mark),
            None => return None,
        }
    }
    (bound >= 0).then_some(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(source: &str, of: &[(i32, i64)]) -> SourceMarks {
        serde_json::from_value(serde_json::json!({
            source: of.iter().map(|(p, o)| (p.to_string(), *o)).collect::<BTreeMap<_, _>>()
        }))
        .unwrap()
    }

    fn log(bucket: u32) -> LogId {
        LogId { day: None, bucket }
    }

    #[test]
    fn the_complete_offset_waits_for_every_log_with_untiered_rows() {
        let consumed: SourcePartitions = [("s".to_owned(), [(0, 100)].into())].into();
        // Log 0 is tiered to its end (mark 99); log 1 only to mark 40, and holds hot
        // rows of partition 0 up to 98.
        let hot = [
            (log(0), marks("s", &[(0, 99)])),
            (log(1), marks("s", &[(0, 98)])),
        ];
        let first = ColdSources::default().advance(
            [
                (log(0), Some(marks("s", &[(0, 99)]))),
                (log(1), Some(marks("s", &[(0, 40)]))),
            ],
            &hot,
            &consumed,
        );
        assert_eq!(
            first.complete["s"][&0], 40,
            "log 1's rows above 40 are hot only"
        );
        assert_eq!(first.marks[&log(1)].get("s", 0), Some(40));

        // Log 1 tiered to its end: everything below the source's position is cold.
        let second = first.advance([(log(1), Some(marks("s", &[(0, 98)])))], &hot, &consumed);
        assert_eq!(second.complete["s"][&0], 99);

        // A new log with rows of partition 0 and no cold mark: nothing new is known,
        // and the old value stands.
        let hot = [
            (log(0), marks("s", &[(0, 99)])),
            (log(1), marks("s", &[(0, 98)])),
            (log(2), marks("s", &[(0, 150)])),
        ];
        let consumed: SourcePartitions = [("s".to_owned(), [(0, 151)].into())].into();
        let third = second.advance([], &hot, &consumed);
        assert_eq!(third.complete["s"][&0], 99);
        // A cycle without marks for a log (retention took its marked segments) keeps
        // the marks it had.
        let fourth = third.advance([(log(1), None)], &hot, &consumed);
        assert_eq!(fourth.marks[&log(1)].get("s", 0), Some(98));
    }

    #[test]
    fn nothing_is_complete_before_the_first_record() {
        let consumed: SourcePartitions = [("s".to_owned(), [(0, 0)].into())].into();
        let out = ColdSources::default().advance([], &[], &consumed);
        assert!(out.complete.is_empty(), "{out:?}");
    }
}
