//! Summaries of repeated measurements: medians of runs, and latency percentiles from an
//! HDR histogram (microsecond resolution, three significant digits).

use std::time::Duration;

use hdrhistogram::Histogram;

/// The median of `runs` (the upper one of an even count).
pub(crate) fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// Latencies of one kind of call.
#[derive(Debug)]
pub(crate) struct Latencies {
    histogram: Histogram<u64>,
    total: Duration,
}

impl Latencies {
    pub(crate) fn new() -> Self {
        Self {
            histogram: Histogram::new(3).expect("three significant digits are valid"),
            total: Duration::ZERO,
        }
    }

    pub(crate) fn record(&mut self, latency: Duration) {
        self.total += latency;
        // At least 1 µs: a histogram of zeros has no percentiles worth printing.
        let us = (latency.as_micros() as u64).max(1);
        self.histogram
            .record(us)
            .expect("a growing histogram takes any value");
    }

    pub(crate) fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The total of every latency recorded.
    pub(crate) fn total(&self) -> Duration {
        self.total
    }

    /// The `q` quantile (0.5 is the median) in milliseconds.
    pub(crate) fn quantile_ms(&self, q: f64) -> f64 {
        self.histogram.value_at_quantile(q) as f64 / 1e3
    }

    /// The slowest latency in milliseconds.
    pub(crate) fn max_ms(&self) -> f64 {
        self.histogram.max() as f64 / 1e3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_values() {
        let mut l = Latencies::new();
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        assert_eq!(l.count(), 100);
        assert!(
            (l.quantile_ms(0.5) - 50.0).abs() < 0.1,
            "{}",
            l.quantile_ms(0.5)
        );
        assert!((l.quantile_ms(0.99) - 99.0).abs() < 0.1);
        assert!((l.max_ms() - 100.0).abs() < 0.1);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    }
}
