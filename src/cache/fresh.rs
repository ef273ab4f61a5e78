//! What a consistent read waits for, shared by every read that waits at once.
//!
//! A consistent read (resourceVersion unset) must see every write acknowledged before it started.
//! The cache proves that with one read of its upstream that starts after the request arrived:
//! - when the upstream's progress notifications are reliable, a linearizable read of its current
//!   revision R, after which the request waits for the cache to reach R (progress requests move
//!   the cache when nothing of the resource changed);
//! - when they are not (etcd before 3.4.31 / 3.5.13: a notification may run ahead of events not yet
//!   delivered), a keys-only range read of the keys the request can match, at R: the cache is fresh
//!   for those keys at its revision C once every key etcd holds was written at or before C and
//!   every key the cache holds is still in etcd. Then the state the cache holds at C is etcd's state
//!   at R for those keys (what changed in between, if anything, was created and deleted again), so
//!   the request is served from the cache at C. While the check fails the cache is behind (its watch
//!   has events of those keys still to deliver); the check is repeated each time the cache moves,
//!   up to [`CacheConfig::too_large_wait`](crate::CacheConfig::too_large_wait).
//! - when the upstream has no progress requests that answer at once (an API server: its
//!   bookmarks come about once a minute, and a short watch gets one after a second or two), a
//!   consistent read of the key and revision of every object the request's selectors select
//!   (`Upstream::selected`), at R: the cache is fresh for the request at its revision C once the
//!   objects the same selectors select in the cache are exactly those, at those revisions. Each
//!   object is one write, named by its revision, so the cache's answer at C is the upstream's
//!   answer at R; the read is served at exactly C (`Shared::page` at C, `Shared::get_at`, a
//!   watch's snapshot at C: `From::SnapshotAt`), never at a later revision of the cache, whose
//!   state between C and R may hold an object created and deleted again before the request began. While the sets differ the cache is behind: the
//!   check is repeated each time it moves, with progress requests meanwhile, and a cache that
//!   reaches R is fresh as in the first case. When the upstream cannot select as asked (a field
//!   label it does not know), the read falls back to the first case.
//!
//! [`Coalescer`] shares these reads: a request joins the next read of its key, which starts after
//! it joined (at once, or as soon as the read in flight ends). So every request is answered by a
//! read that started after it arrived, and a burst of N requests costs about two reads per key
//! instead of N, without refusing any: requests wait for a shared read instead of taking a place
//! of their own. At most [`CacheConfig::max_upstream_reads`](crate::CacheConfig::max_upstream_reads)
//! reads run at once per resource; further keys wait for a place.
//!
//! Invariant: a slot's `next` sender is only ever taken by its runner, and a slot exists exactly
//! while a runner for its key is alive. Lock order: the slots' mutex is never held across an
//! await, nor while the cache's state lock is taken.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Semaphore, watch};

use crate::cache::upstream::KeyRange;
use crate::error::{Error, Result};

/// What a shared read reads, and so which requests may share it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ReadKey {
    /// The upstream's current revision: one read serves every request.
    Revision,
    /// The keys of a range (an upstream whose progress notifications cannot be trusted).
    Keys(KeyRange),
    /// The objects a selection selects, by its wire form (an upstream that proves freshness by
    /// selection: an API server).
    Selection(String),
}

/// The answer of one shared read: the cache revision a consistent read may be served at.
type Answer = Option<Result<u64>>;

/// Reads shared by the requests that wait for them, one runner per key in flight.
pub(crate) struct Coalescer<K> {
    slots: parking_lot::Mutex<HashMap<K, Slot>>,
    permits: Arc<Semaphore>,
    /// Reads started, for metrics and tests.
    reads: AtomicU64,
}

#[derive(Default)]
struct Slot {
    /// The read the next joiners wait for; it starts when the runner takes it.
    next: Option<watch::Sender<Answer>>,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Coalescer<K> {
    /// At most `max_reads` reads at once.
    pub(crate) fn new(max_reads: usize) -> Coalescer<K> {
        Coalescer {
            slots: parking_lot::Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(max_reads.max(1))),
            reads: AtomicU64::new(0),
        }
    }

    /// How many reads have started.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Waits for the next read of `key` to start and finish, and returns its answer. `read` is
    /// what a read of `key` does; when a runner for `key` is already alive, its own `read` (the
    /// same work) is used.
    pub(crate) async fn join<F, Fut>(self: &Arc<Self>, key: K, read: F) -> Result<u64>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<u64>> + Send + 'static,
    {
        // The runner is a task of its own, so that a read goes on for its other waiters when the
        // request that started it is dropped. Without a tokio runtime (a cache driven by another
        // executor) nothing is shared: the read is the caller's own.
        if tokio::runtime::Handle::try_current().is_err() {
            return read().await;
        }
        let mut rx = {
            let mut slots = self.slots.lock();
            let alive = slots.contains_key(&key);
            let slot = slots.entry(key.clone()).or_default();
            let rx = match &slot.next {
                Some(tx) => tx.subscribe(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    slot.next = Some(tx);
                    rx
                }
            };
            if !alive {
                tokio::spawn(Arc::clone(self).run(key, read));
            }
            rx
        };
        match rx.wait_for(Option::is_some).await {
            Ok(answer) => answer
                .clone()
                .unwrap_or_else(|| Err(Error::upstream("a shared read ended without answer"))),
            Err(_) => Err(Error::upstream("a shared read of the upstream was dropped")),
        }
    }

    /// Runs reads of `key` while anyone waits for one.
    async fn run<F, Fut>(self: Arc<Self>, key: K, read: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<u64>> + Send + 'static,
    {
        loop {
            let tx = {
                let mut slots = self.slots.lock();
                match slots.get_mut(&key).and_then(|s| s.next.take()) {
                    Some(tx) => tx,
                    None => {
                        slots.remove(&key);
                        return;
                    }
                }
            };
            // Taken after `next`: joiners from here on wait for the read after this one.
            let Ok(_permit) = self.permits.acquire().await else {
                return;
            };
            self.reads.fetch_add(1, Ordering::Relaxed);
            let answer = read().await;
            // Nobody waiting (every joiner gave up) is fine: the answer is dropped.
            let _ = tx.send(Some(answer));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A read that takes 20 ms and answers how many reads started before it.
    fn slow_read(
        started: Arc<AtomicUsize>,
    ) -> impl Fn() -> futures_util::future::BoxFuture<'static, Result<u64>> + Send + Sync + 'static
    {
        move || {
            let n = started.fetch_add(1, Ordering::SeqCst) as u64;
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(n)
            })
        }
    }

    #[tokio::test]
    async fn a_burst_shares_two_reads_and_each_answer_started_after_its_request() {
        let c: Arc<Coalescer<&'static str>> = Arc::new(Coalescer::new(4));
        let started = Arc::new(AtomicUsize::new(0));
        // The first request starts a read at once.
        let first = {
            let c = Arc::clone(&c);
            let read = slow_read(Arc::clone(&started));
            tokio::spawn(async move { c.join("all", read).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(started.load(Ordering::SeqCst), 1);
        // 1 000 more arrive while it is in flight: they must not be answered by it (it started
        // before them), and they all share the next one.
        let burst: Vec<_> = (0..1000)
            .map(|_| {
                let c = Arc::clone(&c);
                let read = slow_read(Arc::clone(&started));
                tokio::spawn(async move { c.join("all", read).await })
            })
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), 0);
        for b in burst {
            assert_eq!(
                b.await.unwrap().unwrap(),
                1,
                "answered by the read after theirs began"
            );
        }
        assert_eq!(c.reads(), 2);
        // The runner is gone once nobody waits; a later request starts a new read.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(c.slots.lock().is_empty());
        let read = slow_read(Arc::clone(&started));
        assert_eq!(c.join("all", read).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn keys_do_not_share_and_reads_beyond_the_limit_wait_instead_of_failing() {
        let c: Arc<Coalescer<u32>> = Arc::new(Coalescer::new(2));
        let started = Arc::new(AtomicUsize::new(0));
        let all: Vec<_> = (0..10u32)
            .map(|k| {
                let c = Arc::clone(&c);
                let read = slow_read(Arc::clone(&started));
                tokio::spawn(async move { c.join(k, read).await })
            })
            .collect();
        for a in all {
            assert!(a.await.unwrap().is_ok());
        }
        assert_eq!(c.reads(), 10);
    }

    #[tokio::test]
    async fn an_error_reaches_every_waiter_of_its_read() {
        let c: Arc<Coalescer<()>> = Arc::new(Coalescer::new(1));
        let fail = || async { Err(Error::upstream("etcd is down")) };
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let c = Arc::clone(&c);
                tokio::spawn(async move { c.join((), fail).await })
            })
            .collect();
        for w in waiters {
            assert_eq!(
                w.await.unwrap().unwrap_err(),
                Error::upstream("etcd is down")
            );
        }
    }
}
