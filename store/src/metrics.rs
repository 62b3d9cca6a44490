//! Counters the store keeps for the gateway's `/metrics`. Plain atomics: the store has no
//! opinion about the exposition format.

use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative counters since the store was opened.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    appends: AtomicU64,
    rows: AtomicU64,
    bytes: AtomicU64,
    fsyncs: AtomicU64,
    rejected: AtomicU64,
}

/// A point-in-time copy of [`StoreMetrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetricsSnapshot {
    /// Frames acknowledged (one per log touched by an append).
    pub appends: u64,
    pub rows: u64,
    /// Bytes written to segments, headers included.
    pub bytes: u64,
    /// Group commits, each one `fdatasync`; `appends / fsyncs` is the mean group size.
    pub fsyncs: u64,
    /// Batches refused by validation.
    pub rejected: u64,
}

impl StoreMetrics {
    pub(crate) fn record_group_commit(&self, frames: u64, rows: u64, bytes: u64) {
        self.appends.fetch_add(frames, Ordering::Relaxed);
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            appends: self.appends.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}
