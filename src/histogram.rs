//! Histograms of atomics with fixed buckets: observed on hot paths (every delivery, every read)
//! without a lock, read whole at scrape time. A leaf every layer may use: the cache records its
//! dispatch and read waits here without depending on a metrics library, and the server encodes
//! them in the Prometheus text format.
//!
//! Values are integers in the unit the buckets are given in (nanoseconds for durations, bytes for
//! sizes). Relaxed: they are statistics, and order nothing; a scrape racing an observation may
//! see the bucket before the sum, which Prometheus tolerates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One histogram.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// One count per bound (values `<=` it), and one past the last bound.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// A histogram as read at one time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistogramSnapshot {
    /// The buckets' upper bounds (inclusive), ascending.
    pub bounds: &'static [u64],
    /// Observations per bucket (not cumulative), one more than `bounds` (above the last).
    pub counts: Vec<u64>,
    /// The sum of every observed value.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// How many values were observed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Latency buckets, in nanoseconds: 50 µs to 10 s.
pub const LATENCY_NANOS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Lock-hold buckets, in nanoseconds: 250 ns to 10 ms.
pub const HOLD_NANOS: &[u64] = &[
    250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000, 10_000_000,
];

/// kube-apiserver's buckets of `apiserver_watch_cache_read_wait_seconds`, in nanoseconds.
pub const READ_WAIT_NANOS: &[u64] = &[
    5_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    300_000_000,
    400_000_000,
    500_000_000,
    600_000_000,
    700_000_000,
    800_000_000,
    900_000_000,
    1_000_000_000,
    1_250_000_000,
    1_500_000_000,
    2_000_000_000,
    3_000_000_000,
];

/// kube-apiserver's buckets of `apiserver_watch_events_sizes`, in bytes: 1 KiB doubling to
/// 128 KiB.
pub const EVENT_SIZE_BYTES: &[u64] = &[1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072];

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [u64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|b| *b < v);
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Records one duration, in nanoseconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The histogram now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new(&[10, 100]);
        for v in [0, 10, 11, 100, 101, 5000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2]);
        assert_eq!(s.count(), 6);
        assert_eq!(s.sum, 5222);
        h.observe_duration(Duration::from_nanos(7));
        assert_eq!(h.snapshot().counts, vec![3, 2, 2]);
    }
}
