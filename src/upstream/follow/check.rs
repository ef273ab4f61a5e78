//! The periodic consistency check of a followed cache against its upstream (upstream's
//! `DetectCacheInconsistency`, kube-apiserver 1.34+): every period (drawn in `[period,
//! 1.5 × period]`, as upstream's jitter, the first one waited too), the cache's (key, revision)
//! pairs at its revision N are compared with the upstream's at exactly N ([`Truth`]: an etcd
//! range read at N, an API server's LIST with `resourceVersionMatch=Exact`), both paged.
//!
//! A mismatch is counted (`failure`), logged with the first differing keys, and answered by a
//! relist the follower does (`Break::Relist`): it goes through the cache's `Resync`, so the
//! difference reaches watchers as ordinary events, in order, once. The checker then waits for
//! that relist to finish, so the next check sees its result.
//!
//! ## Invariants
//! - The checker never writes the cache: it holds a reader's [`Cache`] and asks the follower,
//!   which owns the one writer, to relist.
//! - No false mismatch: N is a revision the cache has reached; when N leaves the cache's window or
//!   the upstream's (compaction), the check starts over at the cache's new revision
//!   ([`ATTEMPTS`] times, then it is an `error`, never a `failure`); an upstream value the cache
//!   would skip when following (it does not decode) is no difference.
//! - No lock is held across an await: the cache's side is read page by page (`Cache::entries_at`).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::cache::consistency::{Comparison, Seen};
use crate::cache::{Cache, CheckStatus, Compared};

/// Checks started over at a newer revision before one counts as an error.
pub(crate) const ATTEMPTS: usize = 3;

/// Upstream objects the cache lacks whose values are read to see whether they decode (etcd's
/// side is read without values). Past it, lacking objects are differences unread.
pub(crate) const VERIFY_MAX: usize = 64;

/// One upstream object at the checked revision.
#[derive(Debug, Clone)]
pub(crate) struct TruthEntry {
    /// Its key, as the cache keys it.
    pub key: String,
    /// The revision it was written at (etcd's mod revision, the object's resourceVersion).
    pub rv: u64,
    /// Its stored value, when the read carried it.
    pub value: Option<Bytes>,
}

/// One page of the upstream's objects.
#[derive(Debug, Clone, Default)]
pub(crate) struct TruthPage {
    /// Objects in key order.
    pub entries: Vec<TruthEntry>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
}

/// Why an upstream read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TruthError {
    /// The revision is gone upstream (compacted, 410): check again at a newer one.
    Expired(String),
    /// Any other failure.
    Failed(String),
}

/// The upstream's side of the check: its objects at exactly one revision.
pub(crate) trait Truth: Send + 'static {
    /// One page of the objects at revision `n`, from `cursor` (`None`: the first page).
    fn page(
        &mut self,
        n: u64,
        cursor: Option<String>,
    ) -> impl Future<Output = Result<TruthPage, TruthError>> + Send;

    /// The stored value of `key` at revision `n` (`None`: no such key), for an entry read
    /// without its value.
    fn value_at(
        &mut self,
        n: u64,
        key: &str,
    ) -> impl Future<Output = Result<Option<Bytes>, TruthError>> + Send;
}

/// Asks the follower to relist, and learns when it did.
pub(crate) struct Relists {
    /// Requests: each is one more than the last.
    pub ask: watch::Sender<u64>,
    /// The last request a finished sync answered.
    pub done: watch::Receiver<u64>,
}

/// Why one check did not compare.
#[derive(Debug)]
enum NotChecked {
    /// N left a window ([`ATTEMPTS`] times).
    Moved(String),
    /// The upstream failed, or the cache is not ready.
    Failed(String),
}

/// Checks `cache` against `truth` every `period` until shutdown.
pub(crate) async fn run<T: Truth>(
    cache: Cache,
    mut truth: T,
    period: Duration,
    relists: Relists,
    mut shutdown: watch::Receiver<bool>,
) {
    let plural = cache.definition().plural.clone();
    let group = cache.definition().group.clone();
    loop {
        let wait = period + period.mul_f64(fastrand::f64() * 0.5);
        tokio::select! {
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if cache.is_absent() {
            continue;
        }
        let outcome = tokio::select! {
            _ = shutdown.changed() => return,
            o = check(&cache, &mut truth) => o,
        };
        match outcome {
            Ok((n, c)) if c.consistent() => {
                cache.record_check(CheckStatus::Success);
                debug!(resource = %plural, %group, rv = n, objects = c.cached, skipped = c.skipped, "consistency check passed");
            }
            Ok((n, c)) => {
                cache.record_check(CheckStatus::Failure);
                let first: Vec<String> = c.samples.iter().map(ToString::to_string).collect();
                warn!(resource = %plural, %group, rv = n, cached = c.cached, upstream = c.upstream, missing = c.missing, stale = c.stale, ghosts = c.ghosts, first = ?first, "consistency check failed: the cache differs from the upstream; relisting");
                relists.ask.send_modify(|g| *g += 1);
                let want = *relists.ask.borrow();
                let mut done = relists.done.clone();
                tokio::select! {
                    _ = shutdown.changed() => return,
                    r = done.wait_for(|d| *d >= want) => {
                        if r.is_err() {
                            return;
                        }
                        info!(resource = %plural, %group, "relisted after a failed consistency check");
                    }
                }
            }
            Err(NotChecked::Moved(why) | NotChecked::Failed(why)) => {
                cache.record_check(CheckStatus::Error);
                warn!(resource = %plural, %group, error = %why, "consistency check not made");
            }
        }
    }
}

/// One check: the cache at its revision N against the upstream at N, started over at a newer N
/// when N leaves either window.
async fn check<T: Truth>(cache: &Cache, truth: &mut T) -> Result<(u64, Compared), NotChecked> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        cache
            .check_ready()
            .map_err(|e| NotChecked::Failed(e.to_string()))?;
        let n = cache.resource_version();
        let cached = match cache.entries_at(n).await {
            Ok(c) => c,
            Err(e) => {
                last = format!("the cache's revision {n} left its window ({e:?})");
                continue;
            }
        };
        match compare(cache, truth, n, Comparison::new(cached)).await {
            Ok(c) => return Ok((n, c)),
            Err(TruthError::Expired(e)) => last = format!("revision {n} upstream: {e}"),
            Err(TruthError::Failed(e)) => return Err(NotChecked::Failed(e)),
        }
    }
    Err(NotChecked::Moved(last))
}

/// Feeds the upstream's pages at `n` into the comparison.
async fn compare<T: Truth>(
    cache: &Cache,
    truth: &mut T,
    n: u64,
    mut cmp: Comparison,
) -> Result<Compared, TruthError> {
    let mut cursor = None;
    let mut verified = 0;
    loop {
        let page = truth.page(n, cursor).await?;
        for e in page.entries {
            if cmp.upstream(&e.key, e.rv) != Seen::Absent {
                continue;
            }
            if verified >= VERIFY_MAX {
                cmp.missing(&e.key, e.rv);
                continue;
            }
            verified += 1;
            let value = match e.value {
                Some(v) => Some(v),
                None => truth.value_at(n, &e.key).await?,
            };
            // What the follower would do with it: an undecodable value is skipped there too.
            let decodes = value.is_some_and(|v| cache.decode_stored(&e.key, &v, e.rv).is_ok());
            if decodes {
                cmp.missing(&e.key, e.rv);
            } else {
                cmp.skipped();
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(cmp.finish()),
        }
    }
}
