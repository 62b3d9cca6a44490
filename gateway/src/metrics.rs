//! Prometheus metrics: the gateway's own counters and histograms, plus the store's
//! counters, exported at `/metrics`.

use parking_lot::Mutex;

use hotgate_store::{MetricsSnapshot, Store};

use crate::deletion::{DeletionState, Deletions};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

#[derive(Debug)]
pub struct GatewayMetrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub errors: IntCounterVec,
    pub read_seconds: HistogramVec,
    pub put_rows: IntCounter,
    store_appends: IntCounter,
    store_rows: IntCounter,
    store_bytes: IntCounter,
    store_fsyncs: IntCounter,
    store_rejected: IntCounter,
    group_commit_frames: Histogram,
    deletions: IntGaugeVec,
    deletions_overdue: IntGauge,
    state_cache_bytes: IntGauge,
    /// The store snapshot last exported, so counters advance by the difference.
    last: Mutex<MetricsSnapshot>,
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    registry
        .register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    c
}

impl GatewayMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("hotgate_requests_total", "Flight calls by method"),
            &["method"],
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        let errors = IntCounterVec::new(
            Opts::new("hotgate_errors_total", "Failed calls by status code"),
            &["code"],
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        let read_seconds = HistogramVec::new(
            HistogramOpts::new("hotgate_read_seconds", "Duration of read streams by kind")
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).unwrap_or_default()),
            &["kind"],
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        let group_commit_frames = Histogram::with_opts(
            HistogramOpts::new(
                "hotgate_group_commit_frames",
                "Frames per fsync, averaged over each scrape interval",
            )
            .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]),
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        for c in [&requests, &errors] {
            registry
                .register(Box::new(c.clone()))
                .unwrap_or_else(|e| panic!("metric: {e}"));
        }
        registry
            .register(Box::new(read_seconds.clone()))
            .unwrap_or_else(|e| panic!("metric: {e}"));
        registry
            .register(Box::new(group_commit_frames.clone()))
            .unwrap_or_else(|e| panic!("metric: {e}"));
        let deletions = IntGaugeVec::new(
            Opts::new("hotgate_deletion_requests", "Deletion requests by state"),
            &["state"],
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        let deletions_overdue = IntGauge::new(
            "hotgate_deletion_requests_overdue",
            "Deletion requests past their time bound and not verified",
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        let state_cache_bytes = IntGauge::new(
            "hotgate_state_cache_bytes",
            "Memory held by the cached current rows of primary-key tables",
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        registry
            .register(Box::new(state_cache_bytes.clone()))
            .unwrap_or_else(|e| panic!("metric: {e}"));
        registry
            .register(Box::new(deletions.clone()))
            .unwrap_or_else(|e| panic!("metric: {e}"));
        registry
            .register(Box::new(deletions_overdue.clone()))
            .unwrap_or_else(|e| panic!("metric: {e}"));
        Self {
            put_rows: counter(
                &registry,
                "hotgate_put_rows_total",
                "Rows acknowledged to DoPut callers",
            ),
            store_appends: counter(
                &registry,
                "hotgate_store_appends_total",
                "Frames made durable",
            ),
            store_rows: counter(&registry, "hotgate_store_rows_total", "Rows made durable"),
            store_bytes: counter(
                &registry,
                "hotgate_store_bytes_total",
                "Bytes written to segments",
            ),
            store_fsyncs: counter(
                &registry,
                "hotgate_store_fsyncs_total",
                "Group commits (one fdatasync each)",
            ),
            store_rejected: counter(
                &registry,
                "hotgate_store_rejected_total",
                "Batches refused by validation",
            ),
            registry,
            requests,
            errors,
            read_seconds,
            group_commit_frames,
            deletions,
            deletions_overdue,
            state_cache_bytes,
            last: Mutex::new(MetricsSnapshot::default()),
        }
    }

    /// The Prometheus text exposition, with the store's counters and the deletion
    /// gauges brought up to date.
    pub fn render(&self, store: &Store, deletions: &Deletions) -> String {
        let (by_state, overdue) = deletions.counts();
        for state in DeletionState::ALL {
            self.deletions
                .with_label_values(&[state.as_str()])
                .set(by_state.get(&state).copied().unwrap_or(0) as i64);
        }
        self.deletions_overdue.set(overdue as i64);
        self.state_cache_bytes
            .set(i64::try_from(store.state_cache_bytes()).unwrap_or(i64::MAX));
        let now = store.metrics().snapshot();
        {
            let mut last = self.last.lock();
            let fsyncs = now.fsyncs - last.fsyncs;
            if fsyncs > 0 {
                self.group_commit_frames
                    .observe((now.appends - last.appends) as f64 / fsyncs as f64);
            }
            self.store_appends.inc_by(now.appends - last.appends);
            self.store_rows.inc_by(now.rows - last.rows);
            self.store_bytes.inc_by(now.bytes - last.bytes);
            self.store_fsyncs.inc_by(fsyncs);
            self.store_rejected.inc_by(now.rejected - last.rejected);
            *last = now;
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!("cannot encode metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self::new()
    }
}
