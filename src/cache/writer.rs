//! [`CacheWriter`]: the one handle that changes a cache. It is made with the cache
//! ([`Cache::new`]) and is not `Clone`, so "one feeder per cache" is a property of the types, not
//! of prose: whoever holds it is the only one who can apply, resync, report progress or move the
//! cache's readiness. A [`Resync`] borrows it mutably, so nothing is applied while a relist is
//! being read.
//!
//! Dropping the writer leaves the cache as it is (readers keep reading); a cache that was not ready
//! then never becomes ready, and [`Cache::wait_ready`] says so instead of waiting forever.

use crate::cache::resync::Resync;
use crate::cache::state::{Change, OutOfOrder};
use crate::cache::{Cache, Upstream};
use std::sync::Arc;
use std::task::Waker;

/// The writer of one [`Cache`]: the feeder's handle (see the module docs). Not `Clone`.
pub struct CacheWriter {
    cache: Cache,
    /// The wakers of watchers that an apply queued events for, woken once the state lock is
    /// released (not under it, where a woken consumer would only wait). Kept to reuse its
    /// allocation.
    wakes: Vec<Waker>,
}

impl std::fmt::Debug for CacheWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWriter")
            .field("resource", &self.cache.definition().plural)
            .finish()
    }
}

impl Drop for CacheWriter {
    fn drop(&mut self) {
        self.wake();
        self.cache.shared.abandon();
    }
}

impl CacheWriter {
    pub(crate) fn new(cache: Cache) -> CacheWriter {
        CacheWriter {
            cache,
            wakes: Vec::new(),
        }
    }

    fn wake(&mut self) {
        self.wakes.drain(..).for_each(Waker::wake);
    }

    /// The cache this writer feeds, as its readers see it (decoding, revision, reads).
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Sets the upstream the cache's consistent reads consult (see [`Cache::set_upstream`]).
    pub fn set_upstream(&self, upstream: Arc<dyn Upstream>) {
        self.cache.set_upstream(upstream);
    }

    /// Applies the changes of one revision: store, indexes, history, and fan-out to watchers.
    /// A deletion of an unknown key is ignored.
    ///
    /// # Errors
    /// [`OutOfOrder`] when `rv` is not above the cache's revision; nothing is applied.
    pub fn apply(
        &mut self,
        rv: u64,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<(), OutOfOrder> {
        let applied = self.cache.shared.apply(rv, changes, &mut self.wakes);
        self.wake();
        applied
    }

    /// Records that the upstream has no changes up to `rv` (etcd progress notification): readers
    /// waiting for `rv` proceed and bookmarks may carry it.
    pub fn progress(&mut self, rv: u64) {
        self.cache.shared.progress(rv);
    }

    /// Starts a resync to the upstream's full state at revision `rv`: the initial sync, or a relist
    /// after a compaction or an unrecoverable watch break. Feed it page by page, then
    /// [`finish`](Resync::finish) it.
    pub fn resync(&mut self, rv: u64) -> Resync<'_> {
        Resync::new(&self.cache.shared, rv)
    }

    /// Counts one failure of the upstream that the feeder retries (see
    /// [`CacheStats::upstream_failures`](crate::CacheStats::upstream_failures)).
    pub fn count_upstream_failure(&mut self) {
        let m = self.cache.shared.metrics();
        crate::cache::state::Metrics::add(&m.upstream_failures, 1);
    }

    /// Marks the cache not ready (reads answer 429 with a Retry-After that grows with the downtime),
    /// e.g. while its upstream is unavailable. A finished [`Resync`] or
    /// [`set_ready`](CacheWriter::set_ready) makes it ready again. Has no effect unless the cache
    /// is ready (before the initial sync finished, say); returns whether it had one.
    pub fn set_not_ready(&mut self, why: impl Into<String>) -> bool {
        self.cache.shared.set_not_ready(why.into())
    }

    /// Marks the cache ready again, after [`set_not_ready`](CacheWriter::set_not_ready), when the
    /// upstream recovered without a relist. Returns whether it had an effect.
    pub fn set_ready(&mut self) -> bool {
        self.cache.shared.set_ready()
    }

    /// The upstream does not serve this resource (it answered its collection with 404: a custom
    /// resource whose CRD is not installed). The cache is not ready, but a server does not wait
    /// for it (`/readyz` leaves it out, proxy mode forwards its requests); the next finished
    /// [`resync`](CacheWriter::resync) makes it ready. Returns whether it was not absent before.
    pub fn set_absent(&mut self) -> bool {
        self.cache.shared.set_absent()
    }

    /// The upstream's history was replaced: its revision went backwards (etcd wiped, or restored
    /// from a backup, on the same URL). Positions no longer mean anything, so every watcher ends
    /// with 410 Expired (clients relist), the store and history are emptied, and the cache is not
    /// ready until the next [`resync`](CacheWriter::resync) finishes, which loads the upstream's
    /// state at its own, possibly lower, revision.
    pub fn reset(&mut self, why: impl Into<String>) {
        self.cache.shared.reset(why.into());
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake};

    use futures_util::Stream;

    use super::*;
    use crate::cache::testing::{Fixture, on_node};
    use crate::cache::{CacheConfig, WatchOptions};
    use crate::model::{ResourceDef, ResourceVersion};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn put(name: &str, node: &str, rv: u64) -> Change {
        Change::Put(Fixture::new().pod(name, node, rv))
    }

    #[tokio::test]
    async fn an_apply_wakes_the_watchers_it_queued_for_and_no_others() {
        let (cache, mut writer) = Cache::new(
            ResourceDef::builtin("pods").unwrap(),
            CacheConfig::default(),
        );
        writer.resync(1).finish();
        let mut s = cache
            .watch(WatchOptions::new(on_node("n1"), ResourceVersion::At(1)))
            .await
            .unwrap();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut poll = |s: &mut crate::cache::WatchStream| match Pin::new(s).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(ev))) => Some(ev.resource_version()),
            Poll::Pending => None,
            other => panic!(
                "{:?}",
                other.map(|o| o.map(|r| r.map(|e| e.resource_version())))
            ),
        };
        assert_eq!(poll(&mut s), None);
        writer.apply(2, [put("a", "n2", 2)]).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "another node's pod");
        writer.apply(3, [put("b", "n1", 3)]).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        writer.apply(4, [put("c", "n1", 4)]).unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "not polled since: its waker was used"
        );
        let got: Vec<_> = std::iter::from_fn(|| poll(&mut s)).collect();
        assert_eq!(got, [3, 4]);
        writer.apply(5, [put("d", "n1", 5)]).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}
