//! How the lab's statistics are plotted: [`firmtime_plot`]'s
//! [`Latencies`](firmtime_plot::Latencies) for [`LatencyHistogram`] and
//! [`Levels`](firmtime_plot::Levels) for [`Summary`]. The plots themselves
//! are firmtime-plot's (`firmtime_plot::histogram_png`, …).

use crate::stats::{LatencyHistogram, Summary};

impl firmtime_plot::Latencies for LatencyHistogram {
    fn count(&self) -> u64 {
        self.len()
    }
    fn min_ns(&self) -> Option<i64> {
        self.min()
    }
    fn max_ns(&self) -> Option<i64> {
        self.max()
    }
    fn latency_buckets(&self) -> Vec<firmtime_plot::Bucket> {
        self.buckets()
            .map(|b| firmtime_plot::Bucket {
                low_ns: b.low_ns,
                high_ns: b.high_ns,
                count: b.count,
            })
            .collect()
    }
}

impl firmtime_plot::Levels for Summary {
    fn p50_ns(&self) -> Option<i64> {
        self.p50_ns
    }
    fn p99_ns(&self) -> Option<i64> {
        self.p99_ns
    }
    fn p99_9_ns(&self) -> Option<i64> {
        self.p99_9_ns
    }
    fn max_ns(&self) -> Option<i64> {
        self.max_ns
    }
}
