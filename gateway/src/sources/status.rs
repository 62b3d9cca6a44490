//! What `GET /v1/sources/{name}` and `/metrics` show of a source.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::config::SourceConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Connecting, or waiting to retry the brokers or the topic.
    Waiting,
    Running,
    /// Stopped with hotgate.
    Stopped,
    /// Halted: `on_error = "stop"` met a bad record, or a partition task failed.
    Failed,
    /// Paused through the API; kept across restarts until resumed.
    Paused,
}

/// Where a source was declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `[[sources]]` in the config file: changed there, not through the API.
    Config,
    /// `POST /v1/sources`.
    Api,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    pub name: String,
    pub topic: String,
    pub table: String,
    pub origin: Origin,
    pub state: SourceState,
    pub last_error: Option<String>,
    pub partitions: Vec<PartitionStatus>,
}

impl SourceStatus {
    pub fn new(config: &SourceConfig, origin: Origin) -> Self {
        Self {
            name: config.name.clone(),
            topic: config.topic.clone(),
            table: config.table.clone(),
            origin,
            state: SourceState::Waiting,
            last_error: None,
            partitions: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    pub partition: i32,
    /// The next offset hotgate fetches.
    pub next_offset: Option<i64>,
    /// The broker's end of the partition at the last fetch.
    pub high_watermark: Option<i64>,
    /// Records the broker has that hotgate has not taken yet.
    pub lag: Option<i64>,
    /// Records taken since start, rows written from them, and bad records.
    pub records: u64,
    /// Records taken per second over the last ten seconds, as of when it is shown.
    #[serde(rename = "records_per_second", serialize_with = "rate_now")]
    pub rate: RateWindow,
    pub rows: u64,
    pub rejected: u64,
    /// Rows of a replay that the table held already (after a restart or a retry).
    pub duplicates_skipped: u64,
    /// Rows dropped on the way in because a deletion request erased them.
    pub erased: u64,
    /// Offsets the broker deleted before hotgate read them.
    pub lost_offsets: u64,
    /// How long the last commit group took to be durable (ms).
    pub last_commit_ms: Option<f64>,
    pub last_error: Option<String>,
}

impl PartitionStatus {
    pub fn new(partition: i32) -> Self {
        Self {
            partition,
            next_offset: None,
            high_watermark: None,
            lag: None,
            records: 0,
            rate: RateWindow::starting(Instant::now()),
            rows: 0,
            rejected: 0,
            duplicates_skipped: 0,
            erased: 0,
            lost_offsets: 0,
            last_commit_ms: None,
            last_error: None,
        }
    }

    /// Counts `taken` more records, now.
    pub fn took(&mut self, taken: u64) {
        self.records += taken;
        self.rate.record(Instant::now(), self.records);
    }

    /// Records taken per second over the last ten seconds.
    pub fn records_per_second(&self) -> f64 {
        self.rate.per_second(Instant::now())
    }
}

fn rate_now<S: serde::Serializer>(rate: &RateWindow, out: S) -> Result<S::Ok, S::Error> {
    out.serialize_f64(rate.per_second(Instant::now()))
}

/// The span [`RateWindow`] measures over.
const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Samples closer together than this share one.
const RATE_RESOLUTION: Duration = Duration::from_millis(250);

/// A running total's samples over the last ten seconds, for a rate that falls to 0
/// when nothing comes in (a rate since the last record would not).
#[derive(Debug, Clone)]
pub struct RateWindow {
    /// (when, total then), oldest first; the first may be older than the window, as the
    /// baseline.
    samples: VecDeque<(Instant, u64)>,
}

impl RateWindow {
    /// A total of 0 at `at`.
    pub fn starting(at: Instant) -> Self {
        Self {
            samples: VecDeque::from([(at, 0)]),
        }
    }

    pub fn record(&mut self, now: Instant, total: u64) {
        let merge = self.samples.len() > 1;
        match self.samples.back_mut() {
            // Never into the first sample: it is the baseline.
            Some(last) if merge && now.duration_since(last.0) < RATE_RESOLUTION => {
                last.1 = total;
            }
            _ => self.samples.push_back((now, total)),
        }
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) >= RATE_WINDOW {
            self.samples.pop_front();
        }
    }

    /// The total's growth per second over the window ending `now` (or since the first
    /// sample, when that is younger).
    pub fn per_second(&self, now: Instant) -> f64 {
        let Some(&(_, total)) = self.samples.back() else {
            return 0.0;
        };
        let start = now.checked_sub(RATE_WINDOW);
        // The total at the window's start: that of the last sample at or before it.
        let (at, base) = match start {
            Some(start) => self
                .samples
                .iter()
                .rev()
                .find(|(t, _)| *t <= start)
                .map_or(self.samples[0], |(_, b)| (start, *b)),
            None => self.samples[0],
        };
        let secs = now.duration_since(at).as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        (total - base) as f64 / secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_covers_the_last_ten_seconds_and_falls_to_zero() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut rate = RateWindow::starting(t0);
        // 100 records a second for 20 s, one commit every 500 ms.
        for i in 1..=40 {
            rate.record(at(i * 500), i * 50);
        }
        let r = rate.per_second(at(20_000));
        assert!((r - 100.0).abs() < 1e-9, "{r}");
        // 2 s in: the rate since the start.
        let mut young = RateWindow::starting(t0);
        young.record(at(1_000), 300);
        young.record(at(2_000), 600);
        assert!((young.per_second(at(2_000)) - 300.0).abs() < 1e-9);
        // Nothing for 5 s: half the window had records.
        assert!((rate.per_second(at(25_000)) - 50.0).abs() < 1e-9);
        // Nothing for 10 s: 0.
        assert_eq!(rate.per_second(at(30_000)), 0.0);
        // Samples stay bounded however long it runs.
        for i in 41..=10_000 {
            rate.record(at(i * 500), i * 50);
        }
        assert!(rate.samples.len() <= 22, "{}", rate.samples.len());
    }
}
