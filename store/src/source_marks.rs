//! Source marks: where the rows of a log came from, when an outside source (a Kafka
//! topic) wrote them. For each source and source partition, a log knows the highest
//! source offset among its durable rows.
//!
//! The marks travel inside the frames they describe, so a row and the record of its
//! source offset are durable together or not at all: a frame written for a source ends
//! its payload with a trailer of the log's marks after that frame (cumulative, so the
//! last marked frame of a log holds them all), and header byte 23 says it is there.
//!
//! ```text
//! payload: meta_len | IPC message | pad | IPC body | marks JSON | pad to 8 | len u32 | MAGIC u32
//! ```
//!
//! A source appends each partition's records in offset order and waits for one append
//! to be durable before the next, so a log's durable rows from a partition are exactly
//! those at or below its mark: a replay skips a record whose offset is at or below the
//! mark of the log it routes to, and nothing is written twice or lost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Ends a marks trailer: `HGSM`, little-endian.
const MAGIC: u32 = u32::from_le_bytes(*b"HGSM");
/// Header byte 23 (the high byte of `column_count`): bit 0 says a marks trailer ends
/// the payload.
pub(crate) const FLAG_SOURCE_MARKS: u8 = 1;
/// A trailer larger than this is treated as corruption.
const MAX_TRAILER: usize = 1 << 20;

/// Per source and source partition, the highest source offset a log's rows came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceMarks(BTreeMap<String, BTreeMap<i32, i64>>);

impl SourceMarks {
    /// The highest offset of `partition` of `source` among the log's rows, if any.
    pub fn get(&self, source: &str, partition: i32) -> Option<i64> {
        self.0.get(source)?.get(&partition).copied()
    }

    /// Every partition's mark for `source`.
    pub fn of(&self, source: &str) -> BTreeMap<i32, i64> {
        self.0.get(source).cloned().unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Raises the marks of `delta.source` to `delta`'s where those are higher.
    pub(crate) fn merge(&mut self, delta: &SourceDelta) {
        let marks = self.0.entry(delta.source.clone()).or_default();
        for (partition, offset) in &delta.max {
            let mark = marks.entry(*partition).or_insert(*offset);
            *mark = (*mark).max(*offset);
        }
    }

    /// The highest marks of both.
    pub fn union(&mut self, other: &SourceMarks) {
        for (source, max) in &other.0 {
            self.merge(&SourceDelta {
                source: source.clone(),
                max: max.clone(),
            });
        }
    }

    /// The trailer that ends a marked frame's payload; a multiple of 8 bytes.
    pub(crate) fn encode_trailer(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("marks serialize");
        let mut out = json.clone();
        out.resize(json.len().div_ceil(8) * 8, 0);
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out
    }

    /// The length of the trailer whose last 8 bytes are `last8` (the end of a marked
    /// payload), checked for the magic and a sane size.
    pub(crate) fn trailer_len(last8: [u8; 8]) -> std::result::Result<usize, String> {
        let json_len = u32::from_le_bytes([last8[0], last8[1], last8[2], last8[3]]) as usize;
        if u32::from_le_bytes([last8[4], last8[5], last8[6], last8[7]]) != MAGIC {
            return Err("the source marks trailer has no magic".into());
        }
        if json_len > MAX_TRAILER {
            return Err(format!("the source marks trailer claims {json_len} bytes"));
        }
        Ok(json_len.div_ceil(8) * 8 + 8)
    }

    /// The marks of a whole trailer (as [`SourceMarks::trailer_len`] measured it).
    pub(crate) fn decode_trailer(trailer: &[u8]) -> std::result::Result<Self, String> {
        let n = trailer.len();
        let last8: [u8; 8] = trailer
            .get(n.saturating_sub(8)..)
            .and_then(|t| t.try_into().ok())
            .ok_or("the source marks trailer is cut short")?;
        if Self::trailer_len(last8)? != n {
            return Err("the source marks trailer has a bad length".into());
        }
        let json_len = u32::from_le_bytes([last8[0], last8[1], last8[2], last8[3]]) as usize;
        serde_json::from_slice(&trailer[..json_len])
            .map_err(|e| format!("the source marks trailer is not valid: {e}"))
    }
}

/// What one frame adds to its log's marks: the highest offset per partition among the
/// frame's rows from `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceDelta {
    pub source: String,
    pub max: BTreeMap<i32, i64>,
}

/// The source position of each row of a batch written for a source: `positions[i]` is
/// the (partition, offset) that row `i` came from.
#[derive(Debug, Clone, Copy)]
pub struct SourceRows<'a> {
    pub source: &'a str,
    pub positions: &'a [(i32, i64)],
}

impl SourceRows<'_> {
    /// The rows of `rows` (indices into the batch) that `marks` does not already hold,
    /// and what writing them adds to the marks.
    pub(crate) fn unwritten(
        &self,
        rows: &[u32],
        marks: Option<&SourceMarks>,
    ) -> (Vec<u32>, SourceDelta) {
        let mut delta = SourceDelta {
            source: self.source.to_owned(),
            max: BTreeMap::new(),
        };
        let kept = rows
            .iter()
            .copied()
            .filter(|r| {
                let (partition, offset) = self.positions[*r as usize];
                let written = marks
                    .and_then(|m| m.get(self.source, partition))
                    .is_some_and(|mark| offset <= mark);
                if !written {
                    let max = delta.max.entry(partition).or_insert(offset);
                    *max = (*max).max(offset);
                }
                !written
            })
            .collect();
        (kept, delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_round_trip_and_refuse_damage() {
        let mut marks = SourceMarks::default();
        marks.merge(&SourceDelta {
            source: "orders".into(),
            max: [(0, 41), (3, 7)].into(),
        });
        marks.merge(&SourceDelta {
            source: "orders".into(),
            max: [(0, 12), (1, 2)].into(),
        });
        assert_eq!(
            marks.get("orders", 0),
            Some(41),
            "a lower offset never lowers a mark"
        );
        assert_eq!(marks.get("orders", 1), Some(2));
        assert_eq!(marks.get("other", 0), None);
        let trailer = marks.encode_trailer();
        assert_eq!(trailer.len() % 8, 0);
        let last8: [u8; 8] = trailer[trailer.len() - 8..].try_into().unwrap();
        assert_eq!(SourceMarks::trailer_len(last8), Ok(trailer.len()));
        assert_eq!(SourceMarks::decode_trailer(&trailer), Ok(marks.clone()));
        let mut damaged = trailer.clone();
        *damaged.last_mut().unwrap() ^= 1;
        assert!(SourceMarks::decode_trailer(&damaged).is_err());
        assert!(SourceMarks::decode_trailer(&trailer[1..]).is_err());
    }

    #[test]
    fn rows_at_or_below_a_mark_are_written_already() {
        let positions = [(0, 5), (0, 6), (1, 1), (0, 7)];
        let rows = SourceRows {
            source: "s",
            positions: &positions,
        };
        let mut marks = SourceMarks::default();
        marks.merge(&SourceDelta {
            source: "s".into(),
            max: [(0, 6)].into(),
        });
        let (kept, delta) = rows.unwritten(&[0, 1, 2, 3], Some(&marks));
        assert_eq!(kept, vec![2, 3]);
        assert_eq!(delta.max, [(0, 7), (1, 1)].into());
        let (kept, _) = rows.unwritten(&[0, 1, 2, 3], None);
        assert_eq!(kept, vec![0, 1, 2, 3]);
    }
}
