//! Tunables of one resource's cache. Defaults cite where their values come from.

use std::time::Duration;

/// Configuration of a [`Cache`](crate::Cache). Immutable once the cache is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Queue length of a watcher routed by a trigger. Upstream uses 10; a full queue here parks the
    /// watcher instead of closing it, so a small queue costs nothing but a catch-up.
    pub routed_buffer: usize,
    /// Bounds of an unrouted watcher's queue, which is sized from the event rate when it is created
    /// (history capacity per second of window), as upstream (10..=1000).
    pub unrouted_buffer: (usize, usize),
    /// Period of bookmarks for watchers that ask for them (upstream: 1 minute).
    pub bookmark_interval: Duration,
    /// How long a read waits for the cache to reach a requested revision before
    /// 504 Too large resource version (upstream: 3 s).
    pub too_large_wait: Duration,
    /// While a consistent read waits, how often the upstream is asked for a progress notification
    /// (upstream: 100 ms).
    pub progress_interval: Duration,
    /// Reads served by the upstream itself (consistent reads on an etcd whose progress
    /// notifications cannot be trusted) that may run at once; more are answered 429 with a
    /// Retry-After, so that a burst of them cannot exhaust memory or etcd.
    pub max_upstream_reads: usize,
    /// Period of the consistency check of a followed cache against its upstream (upstream:
    /// 5 minutes, `DetectCacheInconsistency`); each wait is drawn in `[period, 1.5 × period]`.
    /// Zero: no checks. Only caches fed by a follower (etcd, an API server) are checked.
    pub consistency_check_period: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            routed_buffer: 16,
            unrouted_buffer: (100, 1024),
            bookmark_interval: Duration::from_secs(60),
            too_large_wait: Duration::from_secs(3),
            progress_interval: Duration::from_millis(100),
            max_upstream_reads: 32,
            consistency_check_period: Duration::from_secs(300),
        }
    }
}

impl CacheConfig {
    /// Sets how many reads served by the upstream may run at once.
    #[must_use]
    pub fn max_upstream_reads(mut self, n: usize) -> Self {
        self.max_upstream_reads = n.max(1);
        self
    }

    /// Sets the consistency check's period (zero: no checks).
    #[must_use]
    pub fn consistency_check_period(mut self, d: Duration) -> Self {
        self.consistency_check_period = d;
        self
    }

    /// Sets the routed watcher queue length.
    #[must_use]
    pub fn routed_buffer(mut self, n: usize) -> Self {
        self.routed_buffer = n.max(1);
        self
    }

    /// Sets the bounds of unrouted watcher queues.
    #[must_use]
    pub fn unrouted_buffer(mut self, min: usize, max: usize) -> Self {
        self.unrouted_buffer = (min.max(1), max.max(min.max(1)));
        self
    }

    /// Sets the bookmark period.
    #[must_use]
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Sets the wait before 504 Too large resource version.
    #[must_use]
    pub fn too_large_wait(mut self, d: Duration) -> Self {
        self.too_large_wait = d;
        self
    }
}
