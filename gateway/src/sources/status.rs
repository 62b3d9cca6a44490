//! What `GET /v1/sources/{name}` and `/metrics` show of a source.

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
            rows: 0,
            rejected: 0,
            duplicates_skipped: 0,
            erased: 0,
            lost_offsets: 0,
            last_commit_ms: None,
            last_error: None,
        }
    }
}
