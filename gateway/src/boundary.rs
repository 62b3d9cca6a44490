//! Tier-boundary counters: per table, how many reads the hot tier answered alone, the
//! cold tier alone, or both, and which time ranges readers ask for. Operators size hot
//! retention from these (`GET /v1/tables/{id}/boundary`): if most reads look back less
//! than the hot window, the cold tier is rarely on the read path.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

use hotgate_store::TableName;
use serde::Serialize;

use crate::tiers::Tiers;

/// Upper bounds of the time-range classes, in seconds, with their labels.
const CLASSES: [(i64, &str); 7] = [
    (60, "<=1m"),
    (600, "<=10m"),
    (3_600, "<=1h"),
    (6 * 3_600, "<=6h"),
    (86_400, "<=1d"),
    (7 * 86_400, "<=7d"),
    (i64::MAX, ">7d"),
];
/// The class of a read without a lower time bound.
const UNBOUNDED: &str = "unbounded";

/// One table's counts.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct BoundaryCounts {
    pub hot_only: u64,
    pub cold_only: u64,
    pub spanning: u64,
    /// Reads by the length of the requested range, `until` (or now) minus `since`.
    pub range_length: BTreeMap<&'static str, u64>,
    /// Reads by how far back they start: now minus `since`.
    pub lookback: BTreeMap<&'static str, u64>,
}

impl BoundaryCounts {
    /// The shortest hot window that would have answered at least 95% of the reads with
    /// a lower time bound from the hot tier alone: the upper bound of the lookback class
    /// where the cumulative count reaches 95%. `None` without such reads, or when the
    /// answer is more than 7 days.
    pub fn suggested_hot_window(&self) -> Option<&'static str> {
        let bounded: u64 = CLASSES
            .iter()
            .map(|(_, l)| self.lookback.get(l).copied().unwrap_or(0))
            .sum();
        if bounded == 0 {
            return None;
        }
        let mut seen = 0;
        for (_, label) in CLASSES {
            seen += self.lookback.get(label).copied().unwrap_or(0);
            if seen * 100 >= bounded * 95 {
                return label.strip_prefix("<=");
            }
        }
        None
    }

    fn empty() -> Self {
        let classes = || {
            CLASSES
                .iter()
                .map(|(_, l)| (*l, 0))
                .chain([(UNBOUNDED, 0)])
                .collect::<BTreeMap<_, _>>()
        };
        Self {
            range_length: classes(),
            lookback: classes(),
            ..Self::default()
        }
    }
}

fn class(micros: i64) -> &'static str {
    let secs = micros.max(0) / 1_000_000;
    CLASSES
        .iter()
        .find(|(bound, _)| secs <= *bound)
        .map_or(">7d", |(_, l)| *l)
}

/// The counters of every table read since start (not persisted: they describe the
/// current workload).
#[derive(Debug, Default)]
pub struct TierBoundary {
    tables: Mutex<HashMap<TableName, BoundaryCounts>>,
}

impl TierBoundary {
    /// Counts one read of `table` over `[since, until)` that touched `tiers`.
    pub fn record(
        &self,
        table: &TableName,
        tiers: Tiers,
        since: Option<i64>,
        until: Option<i64>,
        now_micros: i64,
    ) {
        let mut tables = self.tables.lock();
        let counts = tables
            .entry(table.clone())
            .or_insert_with(BoundaryCounts::empty);
        match tiers {
            Tiers::Hot => counts.hot_only += 1,
            Tiers::Cold => counts.cold_only += 1,
            Tiers::HotAndCold => counts.spanning += 1,
        }
        let (length, lookback) = match since {
            None => (UNBOUNDED, UNBOUNDED),
            Some(s) => (
                class(until.unwrap_or(now_micros).min(now_micros.max(s)) - s),
                class(now_micros - s),
            ),
        };
        *counts.range_length.entry(length).or_default() += 1;
        *counts.lookback.entry(lookback).or_default() += 1;
    }

    /// The counts of `table`; all zero when it was not read yet.
    pub fn counts(&self, table: &TableName) -> BoundaryCounts {
        self.tables
            .lock()
            .get(table)
            .cloned()
            .unwrap_or_else(BoundaryCounts::empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;

    #[test]
    fn reads_are_counted_by_tier_and_range() {
        let b = TierBoundary::default();
        let t = TableName::new("app", "events").unwrap();
        let now = 1_000_000 * MIN;
        b.record(&t, Tiers::Hot, Some(now - 5 * MIN), None, now);
        b.record(
            &t,
            Tiers::HotAndCold,
            Some(now - 120 * MIN),
            Some(now - 100 * MIN),
            now,
        );
        b.record(&t, Tiers::Cold, None, Some(now - 100 * MIN), now);
        let c = b.counts(&t);
        assert_eq!((c.hot_only, c.cold_only, c.spanning), (1, 1, 1));
        assert_eq!(c.range_length["<=10m"], 1);
        assert_eq!(c.range_length["<=1h"], 1);
        assert_eq!(c.range_length[UNBOUNDED], 1);
        assert_eq!(c.lookback["<=10m"], 1);
        assert_eq!(c.lookback["<=6h"], 1);
        assert_eq!(c.lookback[UNBOUNDED], 1);
        // Of the two bounded reads, one looked back 5 minutes and one 2 hours: a 6-hour
        // window answers both from the hot tier.
        assert_eq!(c.suggested_hot_window(), Some("6h"));
        for _ in 0..40 {
            b.record(&t, Tiers::Hot, Some(now - MIN), None, now);
        }
        // 40 of 42 bounded reads (over 95%) look back at most a minute.
        assert_eq!(b.counts(&t).suggested_hot_window(), Some("1m"));
        let other = b.counts(&TableName::new("app", "other").unwrap());
        assert_eq!(other.suggested_hot_window(), None);
        assert_eq!(other.hot_only + other.cold_only + other.spanning, 0);
        assert_eq!(other.range_length.len(), CLASSES.len() + 1);
    }
}
