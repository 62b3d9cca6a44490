//! Prometheus metrics: the gateway's own counters and histograms, plus the store's
//! counters, exported at `/metrics`.

use parking_lot::Mutex;

use hotgate_store::{MetricsSnapshot, Store};
use hotgate_tiering::Catalog;

use crate::deletion::{DeletionState, Deletions};
use prometheus::core::Collector;
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
    /// Hot frames a scan sent as stored, and those it decoded ([`crate::flight`]'s
    /// zero-copy scans).
    pub scan_frames: IntCounterVec,
    store_appends: IntCounter,
    store_rows: IntCounter,
    store_bytes: IntCounter,
    store_fsyncs: IntCounter,
    store_rejected: IntCounter,
    group_commit_frames: Histogram,
    deletions: IntGaugeVec,
    deletions_overdue: IntGauge,
    state_cache_bytes: IntGauge,
    catalog_commits: IntCounterVec,
    source_lag: IntGaugeVec,
    source_rate: prometheus::GaugeVec,
    source_records: IntCounterVec,
    /// The store snapshot last exported, so counters advance by the difference.
    last: Mutex<MetricsSnapshot>,
}

/// `metric`, registered with `registry`. The metrics are fixed at compile time, so a
/// failure here is a programming error.
fn registered<C: Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<C>,
) -> C {
    let metric = metric.unwrap_or_else(|e| panic!("metric: {e}"));
    registry
        .register(Box::new(metric.clone()))
        .unwrap_or_else(|e| panic!("metric: {e}"));
    metric
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    registered(registry, IntCounter::new(name, help))
}

impl GatewayMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = registered(
            &registry,
            IntCounterVec::new(
                Opts::new("hotgate_requests_total", "Flight calls by method"),
                &["method"],
            ),
        );
        let errors = registered(
            &registry,
            IntCounterVec::new(
                Opts::new("hotgate_errors_total", "Failed calls by status code"),
                &["code"],
            ),
        );
        let read_seconds = registered(
            &registry,
            HistogramVec::new(
                HistogramOpts::new("hotgate_read_seconds", "Duration of read streams by kind")
                    .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).unwrap_or_default()),
                &["kind"],
            ),
        );
        let group_commit_frames = registered(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "hotgate_group_commit_frames",
                    "Frames per fsync, averaged over each scrape interval",
                )
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]),
            ),
        );
        let deletions = registered(
            &registry,
            IntGaugeVec::new(
                Opts::new("hotgate_deletion_requests", "Deletion requests by state"),
                &["state"],
            ),
        );
        let deletions_overdue = registered(
            &registry,
            IntGauge::new(
                "hotgate_deletion_requests_overdue",
                "Deletion requests past their time bound and not verified",
            ),
        );
        let state_cache_bytes = registered(
            &registry,
            IntGauge::new(
                "hotgate_state_cache_bytes",
                "Memory held by the cached current rows of primary-key tables",
            ),
        );
        let catalog_commits = registered(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "hotgate_catalog_commits_total",
                    "Commits to the Iceberg catalog by table and outcome (committed, conflict, failed)",
                ),
                &["table", "outcome"],
            ),
        );
        let source_lag = registered(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "hotgate_source_lag",
                    "Records a source partition has in Kafka that hotgate has not taken",
                ),
                &["source", "partition"],
            ),
        );
        let source_rate = registered(
            &registry,
            prometheus::GaugeVec::new(
                Opts::new(
                    "hotgate_source_records_per_second",
                    "Records a source partition took per second over the last ten seconds",
                ),
                &["source", "partition"],
            ),
        );
        let source_records = registered(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "hotgate_source_records_total",
                    "Records taken from Kafka by source and outcome (rows, rejected, duplicate, erased)",
                ),
                &["source", "outcome"],
            ),
        );
        Self {
            scan_frames: registered(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "hotgate_scan_frames_total",
                        "Hot frames of zero-copy scans, by how they were sent: stored (as \
                         written) or decoded (rows that needed work)",
                    ),
                    &["sent"],
                ),
            ),
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
            catalog_commits,
            source_lag,
            source_rate,
            source_records,
            last: Mutex::new(MetricsSnapshot::default()),
        }
    }

    /// The Prometheus text exposition, with the store's counters and the deletion
    /// gauges brought up to date.
    pub fn render(
        &self,
        store: &Store,
        deletions: &Deletions,
        catalog: &Catalog,
        sources: &[crate::sources::SourceStatus],
    ) -> String {
        for source in sources {
            let mut totals = [0u64; 4];
            for p in &source.partitions {
                self.source_lag
                    .with_label_values(&[source.name.as_str(), &p.partition.to_string()])
                    .set(p.lag.unwrap_or(0));
                self.source_rate
                    .with_label_values(&[source.name.as_str(), &p.partition.to_string()])
                    .set(p.records_per_second());
                totals[0] += p.rows;
                totals[1] += p.rejected;
                totals[2] += p.duplicates_skipped;
                totals[3] += p.erased;
            }
            let outcomes = ["rows", "rejected", "duplicate", "erased"];
            for (outcome, count) in outcomes.into_iter().zip(totals) {
                let counter = self
                    .source_records
                    .with_label_values(&[source.name.as_str(), outcome]);
                counter.inc_by(count.saturating_sub(counter.get()));
            }
        }
        for (table, stats) in catalog.all_commit_stats() {
            let table = table.to_string();
            for (outcome, count) in [
                ("committed", stats.commits),
                ("conflict", stats.conflicts),
                ("failed", stats.failures),
            ] {
                let counter = self.catalog_commits.with_label_values(&[&table, outcome]);
                counter.inc_by(count.saturating_sub(counter.get()));
            }
        }
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
